// The host's fetches and page loads over DHTTP: resolves names, picks a lane (app/dhttp-lane.ts: the native
// endpoint and the sans-IO client for one bind address), and turns the client's events into answers, stream
// loads, DTD decisions and block reuse. Calls go down to the lanes; everything comes back up as client events.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { performance } from 'node:perf_hooks';

import { realtimeNs, type Endpoint, type EndpointCounters } from '../native';
import {
  type ClientCounters,
  type ClientEvent,
  type DhttpClientOptions,
  type HttpResponse,
  type StreamInit,
  DEFAULT_MAX_BODY_BYTES,
  hostLiteral,
  parseTarget,
} from '../protocol/dhttp';
import { HostError } from './errors';
import { TypedChannel } from './typed-channel';
import { ACCEPT_ENCODING, decodeContent } from './content-coding';
import { httpStream, type HttpStreamHead } from './browser/http-stream';
import { DtdAgent, type DtdOutcome, type DtdTrack } from './dtd';
import type { PayloadStore } from './payload-store';
import type { DtdPolicyOptions } from '../protocol/dtd';
import { BlockReuse, type BlockReuseOptions, type LocalFill, type ReuseOutcome } from './block-reuse';
import type { BlockInfo, FrameRecord, StreamEvent, StreamMode, StreamSummary } from '../protocol/catp';
import { Lane } from './dhttp-lane';
import { bindAddressFor } from './bind-address';
import { addressSpaceOf, mayReach, type AddressSpace } from './address-space';

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
  /** 'catp': out-of-order CATP frames; 'inorder': the page's raw bytes in datagrams, usable up to the first gap. */
  mode: StreamMode;
  /** Ask the server to pace its frames at this many bytes per second. */
  rateBytesPerSec?: number;
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

interface Pending {
  url: string;
  resolve: (r: FetchResult) => void;
  reject: (e: Error) => void;
  startedAtMs: number;
  fellBack: boolean;
  timer: NodeJS.Timeout | undefined;
  dtd?: DtdTrack;
  /** DTD: the same request again without DTD (once, when the answer does not match its digest). */
  refetch?: () => Promise<FetchResult>;
}

interface Load {
  requestId: string;
  lane: Lane;
  options: LoadOptions;
  url: string;
  /** performance.now() when the request left. */
  startedAtMs: number;
  resolve: (r: LoadResult) => void;
  reject: (e: Error) => void;
  settled: boolean;
  /** Block reuse state (null: this load does not reuse). */
  reuse: { asked: boolean; filling: boolean; fillMs: number; crossSiteMisses: number; corrupt: number } | null;
}

export interface HostCounters {
  lanes: { bind: string; udpPort: number; tcpPort: number; endpoint: EndpointCounters; client: ClientCounters }[];
  sendErrors: number;
  /** DTD: requests by mode, hits, misses, bytes and time saved, the store's counters. */
  dtd?: ReturnType<DtdAgent['counters']>;
  /** CATP block reuse: loads, blocks reused, bytes and time saved. */
  reuse?: ReturnType<BlockReuse['counters']>;
}

/**
 * Fetches dhttp://, dhttpt:// and http:// URLs. One host serves many concurrent fetches; close() frees the
 * sockets.
 */
export class DhttpHost {
  private readonly lanes = new Map<string, Lane>();
  private readonly pending = new Map<string, Pending>();
  private readonly loads = new Map<string, Load>();
  private readonly addresses = new Map<string, string>();
  private closed = false;
  /** DTD (with a store). */
  readonly dtd: DtdAgent | null;
  /** CATP block reuse (with a store). */
  readonly reuse: BlockReuse | null;

  constructor(private readonly options: DhttpHostOptions = {}) {
    this.dtd = options.store ? new DtdAgent(options.store, options.dtd) : null;
    this.reuse = options.store && options.reuse !== false ? new BlockReuse(options.store, options.reuse) : null;
  }

  /** The endpoint ports used for a bind address (opening the endpoint if needed), for tools and tests. */
  laneFor(bind: string): { udpPort: number; tcpPort: number; endpoint: Endpoint } {
    const lane = this.lane(bind);
    return { udpPort: lane.endpoint.udpPort, tcpPort: lane.endpoint.tcpPort, endpoint: lane.endpoint };
  }

  async fetch(url: string, options: FetchOptions = {}): Promise<FetchResult> {
    if (parseTarget(url).scheme === 'https') return this.fetchTls(url, options);
    return (await this.begin(url, options, null)).answer;
  }

  /**
   * An https:// GET over TLS (app/browser/http-stream.ts: the system's CA store, SNI; a certificate that does not
   * check out is an error that says why). Never DHTTP: what TLS promises (privacy, the origin's identity), DHTTP
   * cannot, so an https:// URL and everything fetched for it stay on TLS. No DTD: a body arrives as it is.
   */
  private fetchTls(url: string, options: FetchOptions): Promise<FetchResult> {
    if (this.closed) return Promise.reject(new HostError('HOST_ERR_CLOSED', 'the host is closed'));
    if ((options.method ?? 'GET').toUpperCase() !== 'GET') {
      return Promise.reject(new HostError('HOST_ERR_UNSUPPORTED', `https:// supports GET only (asked: ${options.method})`));
    }
    const startedAtMs = performance.now();
    const reachFrom = options.reachFrom;
    return new Promise<FetchResult>((resolve, reject) => {
      let head: HttpStreamHead | null = null;
      const chunks: Uint8Array[] = [];
      let lastRxNs: bigint | null = null;
      httpStream(url, {
        onHead: (h) => (head = h),
        onData: (bytes, rxNs) => {
          chunks.push(bytes);
          lastRxNs = rxNs;
        },
        onEnd: () => {
          const h = head as HttpStreamHead | null;
          if (h === null) return reject(new HostError('HTTP_ERR_TRUNCATED', `no answer from ${url}`));
          const body = Buffer.concat(chunks);
          // the stream undid any content coding: the head says what the body is now
          const headers = h.headers.filter(([n]) => !/^(content-encoding|content-length|transfer-encoding)$/i.test(n));
          headers.push(['Content-Length', String(body.length)]);
          resolve({
            url, requestId: '', response: { status: h.status, reason: h.reason, headers, body: new Uint8Array(body.buffer, body.byteOffset, body.length) },
            channel: 'https', resends: 0, fellBack: false, startedAtMs, completedAtMs: performance.now(), lastRxNs,
          });
        },
        onError: (err) => reject(new HostError(err.code, err.message)),
      }, {
        timeoutMs: options.timeoutMs ?? 30_000,
        ...(reachFrom !== undefined ? { checkAddress: (address: string) => refuseLessPublic(url, reachFrom, address) } : {}),
        maxBodyBytes: this.options.client?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES }).catch((e: Error & { code?: string }) => reject(new HostError(e.code ?? 'HOST_ERR_TLS', e.message)));
    });
  }

  /**
   * Loads a page as a stream of CATP frames (or, in 'inorder' mode, raw datagrams), reporting every frame.
   * Resolves when the page is complete and verified, or with the server's ordinary answer when it sent one.
   */
  async load(url: string, options: LoadOptions): Promise<LoadResult> {
    const headers: [string, string][] = [['Catp-Mode', options.mode]];
    if (options.rateBytesPerSec !== undefined) headers.push(['Catp-Rate', String(Math.round(options.rateBytesPerSec))]);
    // Block reuse: only when someone applies the local fills, and the server is asked to hold its data frames
    // only when the store has blocks of this site (in scope) — otherwise the hold could only cost time.
    const reusing = this.reuse !== null && options.mode === 'catp' && options.onLocalFill !== undefined && options.reuse !== false;
    const asked = reusing && (this.reuse as BlockReuse).wantsHold(url);
    if (asked) headers.push(['Catp-Reuse', 'hold']);
    // the clock of the kernel receive times, read before the request leaves (the frame records' kernelAtMs)
    const sentRealtimeNs = realtimeNs();
    const { lane, requestId, startedAtMs, answer } = await this.begin(url, { headers }, { mode: options.mode, sentRealtimeNs });
    return new Promise<LoadResult>((resolve, reject) => {
      const load: Load = {
        requestId, lane, options, url, startedAtMs, resolve, reject, settled: false,
        reuse: asked ? { asked, filling: false, fillMs: 0, crossSiteMisses: 0, corrupt: 0 } : null,
      };
      this.loads.set(requestId, load);
      answer.then(
        (result) => this.settle(load, null, { kind: 'response', url, requestId, result }),
        (err: Error) => this.settle(load, err, null),
      );
      if (options.signal) {
        const stop = () => this.settle(load, new HostError('HOST_ERR_STOPPED', `${url}: stopped`), null);
        if (options.signal.aborted) stop();
        else options.signal.addEventListener('abort', stop, { once: true });
      }
      // (a load stopped before this point, its signal aborted while the request was being set up, arms no timer:
      // nothing would clear it, and it would keep the process alive for timeoutMs)
      if (options.timeoutMs !== undefined && !load.settled) {
        const timer = setTimeout(() => {
          this.settle(load, new HostError('HOST_ERR_TIMEOUT', `${url} did not complete within ${options.timeoutMs} ms`), null);
        }, options.timeoutMs);
        const clear = () => clearTimeout(timer);
        answer.then(clear, clear);
        this.loadTimers.set(requestId, timer);
      }
    });
  }

  private readonly loadTimers = new Map<string, NodeJS.Timeout>();

  /** Ends a load once: resolves or rejects it and, on failure, releases its request ID at once. */
  private settle(load: Load, error: Error | null, result: LoadResult | null): void {
    if (load.settled) return;
    load.settled = true;
    const id = load.requestId;
    this.loads.delete(id);
    const timer = this.loadTimers.get(id);
    if (timer) clearTimeout(timer);
    this.loadTimers.delete(id);
    if (error || result?.kind === 'response') {
      load.lane.endStream(id);
      this.pending.delete(id);
    }
    if (error) load.reject(error);
    else load.resolve(result as LoadResult);
  }

  /** A streamed load's page is complete and verified (its final report is already out). */
  private streamComplete(event: Extract<ClientEvent, { type: 'stream-complete' }>): void {
    const load = this.loads.get(event.requestId);
    if (!load) return;
    this.pending.delete(event.requestId);
    const summary = event.summary;
    const reuse = this.finishReuse(load, summary);
    this.settle(load, null, {
      kind: 'stream',
      url: load.url,
      requestId: load.requestId,
      mode: load.options.mode,
      frames: summary.frames,
      startedAtMs: load.startedAtMs,
      firstFrameAtMs: summary.firstFrameAtMs,
      completedAtMs: event.atMs,
      counters: summary.counters,
      ...(reuse ? { reuse } : {}),
    });
  }

  /**
   * Block reuse, once the page's index is verified: looks its blocks up in the store, reads the hits, fills them
   * through the assembler and tells the server what is held. Runs beside the frames still arriving.
   */
  private async fillFromStore(load: Load, blocks: readonly BlockInfo[]): Promise<void> {
    const state = load.reuse;
    const reuse = this.reuse;
    if (state === null || reuse === null || state.filling) return;
    state.filling = true;
    const t0 = performance.now();
    let fill: LocalFill;
    try {
      fill = await reuse.fill(load.url, blocks);
    } catch {
      fill = { payloads: new Map(), crossSiteMisses: 0, corrupt: 0 };
    }
    if (load.settled || this.closed) return;
    state.fillMs = performance.now() - t0;
    state.crossSiteMisses = fill.crossSiteMisses;
    state.corrupt = fill.corrupt;
    // the fill's events come back as 'stream-local-fill' (then 'stream-complete' if it finished the page)
    load.lane.fillLocal(load.requestId, fill.payloads);
  }

  /** A completed CATP load: its blocks go into the store, and what reuse saved is counted and published. */
  private finishReuse(load: Load, summary: StreamSummary): ReuseOutcome | null {
    const reuse = this.reuse;
    const blocks = summary.blocks;
    if (reuse === null || blocks === null) return null;
    reuse.storeBlocks(load.url, blocks.received);
    const span = summary.arrival;
    reuse.noteArrivals(load.url, span.frames, span.bytes, span.spanMs);
    reuse.noteDataBytes(load.url, blocks.dataBytes.wire, blocks.dataBytes.plain);
    const local = blocks.local;
    const acked = blocks.reuseAcked;
    // Frames the server never sent: reused blocks, unless it sent them anyway (then the network carried them);
    // their payloads are known decompressed, so their wire size is estimated with the origin's compression ratio.
    const savedFrames = acked ? local.reused - local.arrivedAnyway : 0;
    const bytesSaved = acked ? reuse.wireBytes(load.url, savedFrames, local.payloadBytes - local.arrivedAnywayBytes) : 0;
    const { rate, source } = reuse.rateFor(load.url, load.options.rateBytesPerSec);
    // what the reused blocks would have cost on the network, held or not: the hold model's evidence (only from
    // loads that could reuse: a first visit, with nothing of the site in the store, says nothing about it)
    if (load.reuse?.asked === true || local.reused > 0) {
      const firstFrameDelayMs = summary.firstFrameAtMs === null ? null : summary.firstFrameAtMs - load.startedAtMs;
      reuse.noteLoad(load.url, firstFrameDelayMs, (reuse.wireBytes(load.url, local.reused, local.payloadBytes) / rate) * 1000);
    }
    const outcome: ReuseOutcome = {
      url: load.url,
      asked: load.reuse?.asked ?? false,
      acked,
      blocks: blocks.total,
      reused: local.reused,
      crossSiteMisses: load.reuse?.crossSiteMisses ?? 0,
      corrupt: load.reuse?.corrupt ?? 0,
      arrivedAnyway: local.arrivedAnyway,
      bytesSaved,
      savedMs: (bytesSaved / rate) * 1000,
      rateBytesPerSec: rate,
      rateSource: source,
      fillMs: load.reuse?.fillMs ?? 0,
    };
    reuse.record(outcome);
    if (channels.reuse.hasSubscribers) channels.reuse.publish(outcome);
    return outcome;
  }

  private async begin(url: string, options: FetchOptions, stream: StreamInit | null) {
    if (this.closed) throw new HostError('HOST_ERR_CLOSED', 'the host is closed');
    const target = parseTarget(url);
    const address = await this.resolve(target.host);
    if (options.reachFrom !== undefined) refuseLessPublic(url, options.reachFrom, address);
    const bind = this.options.bind && this.options.bind !== 'auto'
      ? this.options.bind
      : bindAddressFor(address, 'dhttp');
    const lane = this.lane(bind);
    const method = (options.method ?? 'GET').toUpperCase();
    const dtd = this.dtd !== null && stream === null && options.dtd !== false
      ? this.dtd.prepare(url, method, options.body !== undefined && options.body.length > 0)
      : null;
    const startedAtMs = performance.now();
    // Plain HTTP/1.1 answers come compressed when we ask, as real servers send them (decoded in onEvent) — unless
    // the request wants a digest (DTD, Want-Digest): a server sends none with a coded body (ours), or one over the
    // coded bytes (RFC 9530), and DTD digests and stores the identity body.
    const named = new Set((options.headers ?? []).map(([n]) => n.toLowerCase()));
    const wantsDigest = dtd !== null || named.has('want-repr-digest') || named.has('want-digest');
    const coding: [string, string][] = target.scheme === 'http' && !named.has('accept-encoding') && !wantsDigest ? [['Accept-Encoding', ACCEPT_ENCODING]] : [];
    const requestId = lane.request(
      {
        url,
        method: options.method ?? 'GET',
        headers: [...(options.headers ?? []), ...coding, ...(dtd?.headers ?? [])],
        ...(options.body ? { body: options.body } : {}),
        ...(stream !== null ? { stream } : {}),
        ...(dtd !== null && dtd.track.choice.mode !== 'plain' ? { dtd: true } : {}),
      },
      address,
      startedAtMs,
    );
    const answer = new Promise<FetchResult>((resolve, reject) => {
      const entry: Pending = {
        url, resolve, reject, startedAtMs, fellBack: false, timer: undefined,
        ...(dtd ? { dtd: dtd.track, refetch: () => this.fetch(url, { ...options, dtd: false }) } : {}),
      };
      if (options.timeoutMs !== undefined) {
        entry.timer = setTimeout(() => {
          lane.cancel(requestId);
          this.pending.delete(requestId);
          reject(new HostError('HOST_ERR_TIMEOUT', `no answer for ${url} within ${options.timeoutMs} ms`));
        }, options.timeoutMs);
      }
      this.pending.set(requestId, entry);
    });
    channels.request.publish({ url, requestId, atMs: startedAtMs });
    return { lane, requestId, startedAtMs, answer };
  }

  /** Every client event of a lane, in order (the one way anything comes back from a lane). */
  private onEvent(lane: Lane, event: ClientEvent): void {
    switch (event.type) {
      case 'response': {
        const entry = this.take(event.requestId);
        if (!entry) return;
        // a coded answer is decoded before anything reads it (the DTD store keeps, and digests, what was meant)
        let response: HttpResponse;
        try {
          response = decodeContent(event.response, this.options.client?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES);
        } catch (err) {
          entry.reject(err as Error);
          return;
        }
        let dtd: DtdOutcome | undefined;
        if (entry.dtd && this.dtd) {
          try {
            dtd = this.dtd.onResponse(entry.dtd, response, event.sentAtMs, event.receivedAtMs, event.channel);
          } catch (err) {
            if ((err as { code?: unknown }).code === 'DTD_ERR_DIGEST_MISMATCH' && entry.refetch !== undefined) {
              // A body that does not match its digest (a broken cache, a lying server): once more, without DTD,
              // before the load fails.
              const [agent, track] = [this.dtd, entry.dtd];
              entry.refetch().then(
                (again) => {
                  try {
                    const outcome = agent.afterMismatch(track, again.response);
                    channels.dtd.publish(outcome);
                    entry.resolve({ ...again, dtd: outcome });
                  } catch (e) {
                    entry.reject(e as Error);
                  }
                },
                () => entry.reject(err as Error),
              );
              return;
            }
            entry.reject(err as Error);
            return;
          }
          channels.dtd.publish(dtd);
        }
        const result: FetchResult = {
          url: entry.url,
          requestId: event.requestId,
          response,
          channel: event.channel,
          resends: event.resends,
          fellBack: entry.fellBack,
          startedAtMs: entry.startedAtMs,
          completedAtMs: performance.now(),
          lastRxNs: event.rxNs ?? null,
          ...(dtd ? { dtd } : {}),
        };
        channels.response.publish(result);
        entry.resolve(result);
        return;
      }
      case 'dtd-announce': {
        const entry = this.pending.get(event.requestId);
        if (!entry?.dtd || !this.dtd) {
          lane.dtdDecide(event.requestId, 'proceed');
          return;
        }
        const { decision, reason } = this.dtd.onAnnounce(entry.dtd, event);
        const taken = lane.dtdDecide(event.requestId, decision);
        // Not taken: the body arrived right behind its announcement (abort mode on a fast link) and its
        // 'response' event follows; it is used as it is.
        if (!taken) entry.dtd.lateHit = decision === 'dont-bother';
        if (decision === 'dont-bother' && taken) {
          this.take(event.requestId);
          void this.answerFromStore(event, entry, reason);
        }
        return;
      }
      case 'request-failed': {
        const entry = this.take(event.requestId);
        entry?.reject(event.error);
        return;
      }
      case 'resend':
        channels.resend.publish(event);
        return;
      case 'fallback': {
        const entry = this.pending.get(event.requestId);
        if (entry) entry.fellBack = true;
        channels.fallback.publish(event);
        return;
      }
      case 'dropped':
        channels.dropped.publish(event);
        return;
      case 'stream-frame': {
        this.loads.get(event.requestId)?.options.onFrame?.(event.record, event.events);
        // frames of a finished page's tail too (the load is settled; its ID stays to repeat the final report)
        if (channels.frame.hasSubscribers) channels.frame.publish({ requestId: event.requestId, record: event.record });
        return;
      }
      case 'stream-blocks-known': {
        // the index is complete: every block's digest is known
        const load = this.loads.get(event.requestId);
        if (load?.reuse && !load.reuse.filling) void this.fillFromStore(load, event.blocks);
        return;
      }
      case 'stream-local-fill':
        try {
          this.loads.get(event.requestId)?.options.onLocalFill?.(event.events);
        } catch {
          // the consumer's own failure; the load goes on
        }
        return;
      case 'stream-complete':
        this.streamComplete(event);
        return;
      case 'stream-failed': {
        const load = this.loads.get(event.requestId);
        if (load) this.settle(load, new HostError(event.code, `${load.url}: ${event.message}`), null);
        return;
      }
      default:
        channels.resend.publish(event);
    }
  }

  /** A DTD hit: the answer is the announcement's head with the stored body; if the store lost it, refetch. */
  private async answerFromStore(event: Extract<ClientEvent, { type: 'dtd-announce' }>, entry: Pending, reason: string): Promise<void> {
    const agent = this.dtd as DtdAgent;
    const track = entry.dtd as DtdTrack;
    let response: HttpResponse | null = null;
    try {
      response = await agent.fromStore(track);
    } catch {
      response = null;
    }
    if (response === null) {
      // Evicted or corrupt since the lookup (the bad copy is gone now): fetch it again, without DTD.
      agent.refetched(track);
      try {
        const again = await this.fetch(entry.url, { dtd: false });
        const outcome: DtdOutcome = { ...agent.hit(track, reason), decision: 'refetched', decisionReason: 'the stored copy failed verification; fetched again', savedBytes: 0, savedMs: 0 };
        channels.dtd.publish(outcome);
        entry.resolve({ ...again, startedAtMs: entry.startedAtMs, dtd: outcome });
      } catch (err) {
        entry.reject(err as Error);
      }
      return;
    }
    const dtd = agent.hit(track, reason);
    channels.dtd.publish(dtd);
    const result: FetchResult = {
      url: entry.url,
      requestId: event.requestId,
      response,
      channel: event.channel,
      resends: 0,
      fellBack: entry.fellBack,
      startedAtMs: entry.startedAtMs,
      completedAtMs: performance.now(),
      lastRxNs: event.rxNs ?? null,
      dtd,
    };
    channels.response.publish(result);
    entry.resolve(result);
  }

  counters(): HostCounters {
    const lanes = [...this.lanes.values()].map((lane) => lane.counters());
    return {
      lanes: lanes.map(({ sendErrors: _, ...lane }) => lane),
      sendErrors: lanes.reduce((n, lane) => n + lane.sendErrors, 0),
      ...(this.dtd ? { dtd: this.dtd.counters() } : {}),
      ...(this.reuse ? { reuse: this.reuse.counters() } : {}),
    };
  }

  /** Waits for the payload store's pending writes (block reuse stores a page's blocks after it completes). */
  async flushStore(): Promise<void> {
    if (this.reuse) await this.reuse.flush();
    else await this.options.store?.flush();
    await this.dtd?.savePaths();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const lane of this.lanes.values()) lane.close();
    this.lanes.clear();
    for (const [, entry] of this.pending) {
      if (entry.timer) clearTimeout(entry.timer);
      entry.reject(new HostError('HOST_ERR_CLOSED', 'the host was closed before the answer came'));
    }
    this.pending.clear();
    for (const load of [...this.loads.values()]) {
      this.settle(load, new HostError('HOST_ERR_CLOSED', 'the host was closed before the page completed'), null);
    }
  }

  private take(requestId: string): Pending | undefined {
    const entry = this.pending.get(requestId);
    if (!entry) return undefined;
    this.pending.delete(requestId);
    if (entry.timer) clearTimeout(entry.timer);
    return entry;
  }

  private lane(bind: string): Lane {
    let lane = this.lanes.get(bind);
    if (!lane) {
      const { client, acceptDeadlineMs } = this.options;
      const created: Lane = new Lane(
        bind,
        { ...(client !== undefined ? { client } : {}), ...(acceptDeadlineMs !== undefined ? { acceptDeadlineMs } : {}) },
        (event) => this.onEvent(created, event),
      );
      lane = created;
      this.lanes.set(bind, lane);
    }
    return lane;
  }

  /**
   * The dhttp:// URL to fetch an http:// URL as, when its server (the same host and port) has answered this host
   * over DHTTP before; else the URL itself.
   */
  overDhttpIfSpoken(url: string): string {
    const t = parseTarget(url);
    if (t.scheme !== 'http') return url;
    for (const lane of this.lanes.values()) {
      if (lane.speaksDhttp(t.host, t.port)) return `dhttp://${t.host}:${t.port}${t.path}`;
    }
    return url;
  }

  /** The address space `host` resolves to (the address later fetches from it connect to). */
  async addressSpaceOf(host: string): Promise<AddressSpace> {
    return addressSpaceOf(await this.resolve(host));
  }

  private async resolve(host: string): Promise<string> {
    const literal = hostLiteral(host);
    if (isIP(literal)) {
      this.addresses.set(host, literal);
      return literal;
    }
    const cached = this.addresses.get(host);
    if (cached) return cached;
    try {
      const { address } = await lookup(literal);
      this.addresses.set(host, address);
      return address;
    } catch (err) {
      throw new HostError('HOST_ERR_DNS', `cannot resolve ${literal}: ${(err as Error).message}`);
    }
  }
}

/** Private Network Access: a page's fetch never reaches an address less public than the page's own. */
function refuseLessPublic(url: string, from: AddressSpace, address: string): void {
  const to = addressSpaceOf(address);
  if (!mayReach(from, to)) {
    throw new HostError('HOST_ERR_PRIVATE_NETWORK', `${url} is on a ${to} address (${address}); a ${from} page may not reach it`);
  }
}
