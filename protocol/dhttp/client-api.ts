// What the DHTTP client (client.ts) takes and gives: its options, a request's init, the actions it asks the IO
// layer for, the events it reports, and its counters.
import type { BlockInfo } from '../catp/index-piece';
import type { Sha256 } from '../catp/encoder';
import type { FrameCodec } from '../catp/payload-codec';
import type { FrameRecord, StreamEvent, StreamMode, StreamSummary } from '../catp/stream-load';
import type { DhttpError } from './errors';
import type { HttpHeaders, HttpResponse } from './http1';

export interface DhttpClientOptions {
  /** Our UDP port (announced in requests sent over TCP). */
  udpPort: number;
  /** Our TCP port (announced in requests sent over UDP; servers connect to it). */
  tcpPort: number;
  /** CSPRNG; default globalThis.crypto.getRandomValues. */
  randomBytes?: (n: number) => Uint8Array;
  /** Wait for the first UDP answer. Default 1000 ms. */
  initialTimeoutMs?: number;
  /** Each resend waits this many times longer than the one before. Default 2. */
  backoffFactor?: number;
  /** Cap on one wait. Default 8000 ms. */
  maxTimeoutMs?: number;
  /** Resends of one request (UDP timeouts and TCP reconnects) before DHTTP_ERR_TIMEOUT. Default 4. */
  maxResends?: number;
  /** An origin never heard from falls back to plain HTTP after this many unanswered resends. Default 1. */
  fallbackAfterResends?: number;
  /** Deadline for a request that travels over TCP (DHTTP over TCP, plain HTTP) or whose answer is arriving
   *  over a server-opened connection (refreshed while bytes arrive). Default 30000 ms. */
  tcpTimeoutMs?: number;
  /** Largest response body accepted. Default 64 MiB. */
  maxBodyBytes?: number;
  /** How many completed request IDs are remembered to recognise late duplicates. Default 4096. */
  completedMemory?: number;
  /**
   * Connections servers opened to us, at most this many at once (default 64): beyond, the one idle longest is
   * closed for the newcomer, or the newcomer when all are busy. A server cannot hold our sockets by the hundred.
   */
  maxInboundConnections?: number;
  /** A connection a server opened to us that brings no byte for this long is closed (default 30000 ms). */
  inboundIdleMs?: number;
  /** What stream loads (RequestInit.stream) need: hashing and decompression are injected, as everywhere in protocol/. */
  catp?: { sha256: Sha256; codec?: FrameCodec };
}

/** A streamed load the client runs for a request (RequestInit.stream). */
export interface StreamInit {
  /** 'catp': out-of-order CATP frames; 'inorder': the page's raw bytes in datagrams, usable up to the first gap. */
  mode: StreamMode;
  /** CLOCK_REALTIME ns when the request left (the clock of `rxNs`), to put kernel receive times on the load's clock. */
  sentRealtimeNs?: bigint;
}

export interface RequestInit {
  url: string;
  method?: string;
  headers?: HttpHeaders;
  body?: Uint8Array;
  /**
   * The answer may come as a stream of datagrams that are not HTTP responses (CATP or in-order frames), which
   * the client loads itself (protocol/catp/stream-load.ts; needs `DhttpClientOptions.catp`). The first such
   * datagram stops the request's resend timer; from then on the stream's repair drives it: its reports go out
   * as 'send-datagram' actions, its timers are in `nextTimerAt()`, and every frame comes out as a
   * 'stream-frame' event, then 'stream-complete' or 'stream-failed'. The request ID is released a tail after
   * completion (repeating the final report), at once on failure, or by `endStream`. An ordinary HTTP answer
   * still completes the request as usual.
   */
  stream?: StreamInit;
  /**
   * DTD (protocol/README.md, section DTD): the request carries a DTD-Mode field. An answer with a
   * DTD-Announce field is then an announcement ('dtd-announce' event), not the final answer; the
   * application answers it with `dtdDecide` (PROCEED / DON'T-BOTHER on the same request ID).
   */
  dtd?: boolean;
}

export interface Address {
  address: string;
  port: number;
}

export type Channel = 'udp' | 'tcp' | 'http';

export type ClientAction =
  | { type: 'expect-id'; id: Uint8Array }
  | { type: 'forget-id'; id: Uint8Array }
  | { type: 'send-datagram'; to: { host: string; port: number }; data: Uint8Array }
  | { type: 'connect'; conn: number; to: { host: string; port: number } }
  | { type: 'send-tcp'; conn: number; data: Uint8Array }
  | { type: 'close-tcp'; conn: number };

export type FallbackReason = 'icmp-unreachable' | 'timeout' | 'http-answer';

export type ClientEvent =
  | {
      type: 'response';
      requestId: string;
      response: HttpResponse;
      channel: Channel;
      resends: number;
      sentAtMs: number;
      receivedAtMs: number;
      /** Kernel receive time (CLOCK_REALTIME ns) of the answer's last packet, when the IO layer passed one. */
      rxNs?: bigint;
    }
  | { type: 'resend'; requestId: string; attempt: number; overTcp: boolean }
  | { type: 'fallback'; requestId: string; reason: FallbackReason }
  | { type: 'retry-over-tcp'; requestId: string }
  | { type: 'request-failed'; requestId: string; error: DhttpError }
  | { type: 'dropped'; channel: Channel; reason: string; requestId?: string }
  /** A datagram of a streamed load arrived: what it did (its record) and the assembler's events, in order. */
  | { type: 'stream-frame'; requestId: string; record: FrameRecord; events: StreamEvent[] }
  /** The stream's index is complete (CATP): every block and its digest (block reuse looks them up now). */
  | { type: 'stream-blocks-known'; requestId: string; blocks: BlockInfo[] }
  /** Blocks the application filled from its own store (`fillLocal`): the assembler's events. */
  | { type: 'stream-local-fill'; requestId: string; events: StreamEvent[] }
  /** The page is complete and verified (the final report is out; the ID stays a tail to repeat it). */
  | { type: 'stream-complete'; requestId: string; atMs: number; summary: StreamSummary }
  /** The page cannot be loaded (corrupt, stalled): the request is over. */
  | { type: 'stream-failed'; requestId: string; code: string; message: string }
  | {
      /** DTD: the server announced the answer (headers + digest, empty body); `held`: it waits for dtdDecide. */
      type: 'dtd-announce';
      requestId: string;
      response: HttpResponse;
      held: boolean;
      length: number;
      channel: Channel;
      sentAtMs: number;
      receivedAtMs: number;
      rxNs?: bigint;
    }
  | { type: 'dtd-decision-resend'; requestId: string; attempt: number };

export interface ClientCounters {
  requests: number;
  responses: { udp: number; tcp: number; http: number };
  resends: number;
  fallbacks: number;
  retriesOverTcp: number;
  /** Requests sent again with the server's address token (`Dhttp-Retry: token`: the answer was too large for an unproven address). */
  retriesWithToken: number;
  /**
   * A stream's proof of our address sent again unasked, when the stream next acted (the server had sent no more than
   * we had: it may still be waiting for the proof, which would otherwise wait for its next `421`).
   */
  proofRepeats: number;
  /**
   * A stream's proof sent when the origin's token came in another answer (a sub-resource's): the stream's own token
   * answer was lost, and a server whose budget lets it send need never ask again before the unproven session ends.
   */
  proofsOnToken: number;
  failed: number;
  cancelled: number;
  dropped: { unknownId: number; duplicate: number; malformed: number; total: number };
  connections: {
    opened: number;
    inbound: number;
    closedByUs: number;
    /** Inbound connections closed: idle past inboundIdleMs; over maxInboundConnections (the newcomer, or the longest idle). */
    inboundIdle: number;
    inboundOverLimit: number;
  };
  /** DTD: announcements received, decisions sent, transfers cut short, malformed announcements dropped. */
  dtd: { announcements: number; proceeds: number; dontBothers: number; aborts: number; decisionResends: number; badAnnouncements: number };
}
