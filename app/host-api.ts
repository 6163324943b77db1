// The host's public surface besides DhttpHost itself: what a fetch and a page load take and give back, the
// host's options and counters, and the diagnostics channels it publishes on (the measurement tools subscribe
// instead of reaching in).
import type { EndpointCounters } from '../native';
import type { ClientCounters, ClientEvent, DhttpClientOptions, HttpResponse } from '../protocol/dhttp';
import type { DtdPolicyOptions } from '../protocol/dtd';
import type { FrameRecord, StreamEvent, StreamMode } from '../protocol/catp';
import { TypedChannel } from './typed-channel';
import type { DtdAgent, DtdOutcome } from './dtd';
import type { PayloadStore } from './payload-store';
import type { BlockReuse, BlockReuseOptions, ReuseOutcome } from './block-reuse';
import type { AddressSpace } from './address-space';

/** diagnostics_channel names the host publishes on (the measurement tools subscribe instead of reaching in). */
export const channels = {
  request: new TypedChannel<{ url: string; requestId: string; atMs: number }>('dhttp:request'),
  response: new TypedChannel<FetchResult>('dhttp:response'),
  /** Resends, and the client's other retries (over TCP, a DTD decision sent again). */
  resend: new TypedChannel<Extract<ClientEvent, { type: 'resend' | 'retry-over-tcp' | 'dtd-decision-resend' }>>('dhttp:resend'),
  fallback: new TypedChannel<Extract<ClientEvent, { type: 'fallback' }>>('dhttp:fallback'),
  dropped: new TypedChannel<Extract<ClientEvent, { type: 'dropped' }>>('dhttp:dropped'),
  frame: new TypedChannel<{ requestId: string; record: FrameRecord }>('catp:frame'),
  /** One message per DTD-tracked fetch: its DtdOutcome (mode, decision, why, bytes saved). */
  dtd: new TypedChannel<DtdOutcome>('dtd:decision'),
  /** One message per completed CATP load of a host with a store: its ReuseOutcome (blocks reused, bytes saved). */
  reuse: new TypedChannel<ReuseOutcome>('catp:reuse'),
} as const;

export interface FetchOptions {
  method?: string;
  headers?: [string, string][];
  body?: Uint8Array;
  /** Overall deadline; the client's own resend budget usually ends a request first. */
  timeoutMs?: number;
  /** DTD for this fetch (default: on when the host has a store; only GETs without a body take part). */
  dtd?: boolean;
  /**
   * The address space of the page this fetch is for: an origin that resolves to a less public address is refused
   * (HOST_ERR_PRIVATE_NETWORK) before anything is sent, checked on the address the fetch connects to.
   */
  reachFrom?: AddressSpace;
}

export interface LoadOptions {
  /** 'catp': out-of-order CATP frames; 'inorder': the page's bytes in datagrams (brotli-coded when the server codes them), usable up to the first gap. */
  mode: StreamMode;
  /** Ask the server to pace its frames at this many bytes per second. */
  rateBytesPerSec?: number;
  /**
   * Give up when no frame has arrived for this long (HOST_ERR_TIMEOUT): a deadline on silence, not on the whole
   * load, so a large page on a slow or shared link keeps loading while its frames come.
   */
  timeoutMs?: number;
  /** Called after every arriving frame with what it made displayable (the load's timeline). */
  onFrame?: (record: FrameRecord, events: StreamEvent[]) => void;
  /** Stops the load: it rejects with HOST_ERR_STOPPED and its request ID is released (later frames are dropped). */
  signal?: AbortSignal;
  /**
   * Block reuse (CATP, a host with a store): the events of blocks filled from the store (`block-filled` with
   * `local: true`, maybe `page-complete`). Without this callback the load does not reuse blocks (nobody
   * would apply them); its blocks are still stored for later loads.
   */
  onLocalFill?: (events: StreamEvent[]) => void;
  /** Block reuse for this load (default true when possible). */
  reuse?: boolean;
}

export type LoadResult =
  | {
      kind: 'stream';
      url: string;
      requestId: string;
      mode: StreamMode;
      frames: number;
      startedAtMs: number;
      firstFrameAtMs: number | null;
      completedAtMs: number;
      /** The assembler's counters: frames accepted, duplicates, refusals by reason. */
      counters: Record<string, number>;
      /** Block reuse (CATP, a host with a store). */
      reuse?: ReuseOutcome;
    }
  /** The server answered with an ordinary HTTP response (not HTML, an error status, or no CATP support). */
  | { kind: 'response'; url: string; requestId: string; result: FetchResult };

export interface FetchResult {
  url: string;
  requestId: string;
  response: HttpResponse;
  /** Which channel carried the answer: 'udp', 'tcp' (DHTTP over TCP), 'http' (plain HTTP/1.1) or 'https' (over TLS). */
  channel: 'udp' | 'tcp' | 'http' | 'https';
  resends: number;
  fellBack: boolean;
  /** Monotonic milliseconds (performance.now) when the request left and the answer was complete. */
  startedAtMs: number;
  completedAtMs: number;
  /** Kernel receive timestamp (CLOCK_REALTIME ns) of the last packet of the answer, when the endpoint saw one. */
  lastRxNs: bigint | null;
  /** What DTD did (present when the host has a store and the fetch took part). */
  dtd?: DtdOutcome;
}

export interface DhttpHostOptions {
  /**
   * Address the endpoint listens on. 'auto' (default): bind-address.ts's rule for DHTTP (the loopback address of
   * the server's family for loopback servers, the wildcard '::' otherwise: a DHTTP server must reach us back).
   */
  bind?: string;
  client?: Partial<Omit<DhttpClientOptions, 'udpPort' | 'tcpPort' | 'catp'>>;
  acceptDeadlineMs?: number;
  /** DTD payload store: with one, GETs announce-and-decide against it and every payload received goes in. */
  store?: PayloadStore;
  /** DTD policy (mode choice, link estimates, per-origin memory); used only with a store. */
  dtd?: DtdPolicyOptions;
  /** CATP block reuse against the store (default on with a store; false: off). */
  reuse?: BlockReuseOptions | false;
}

/**
 * How long a browser waits for an origin it has never heard from over DHTTP before it falls back to HTTP/1.1:
 * the request and three resends, 300, 600 and 1,200 ms apart, then 2,400 ms more (the client doubles each
 * wait): 4.5 s for a silent server (one that answers ICMP port unreachable is left at once). A first contact so
 * survives a lost request and a lost answer or two on a lossy path (20% each way loses one try in three)
 * without the page going over TCP. The browser and `catp get` use it alike, so what the lab measures with
 * `catp get` (bench:congestion) is the browser's first contact.
 */
export const FIRST_CONTACT: NonNullable<DhttpHostOptions['client']> = { initialTimeoutMs: 300, fallbackAfterResends: 3 };

export interface HostCounters {
  lanes: { bind: string; udpPort: number; tcpPort: number; endpoint: EndpointCounters; client: ClientCounters }[];
  sendErrors: number;
  /** DTD: requests by mode, hits, misses, bytes and time saved, the store's counters. */
  dtd?: ReturnType<DtdAgent['counters']>;
  /** CATP block reuse: loads, blocks reused, bytes and time saved. */
  reuse?: ReturnType<BlockReuse['counters']>;
}
