// What the DHTTP client (client.ts) takes and gives: its options, a request's init, the actions it asks the IO
// layer for, the events it reports, and its counters.
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
}

export interface RequestInit {
  url: string;
  method?: string;
  headers?: HttpHeaders;
  body?: Uint8Array;
  /**
   * The answer may come as a stream of datagrams that are not HTTP responses (CATP frames). The first such
   * datagram stops the request's resend timer; each is handed over as a 'stream-datagram' event and the
   * request stays outstanding until `endStream`. An ordinary HTTP answer still completes it as usual.
   */
  streamed?: boolean;
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
    }
  | { type: 'resend'; requestId: string; attempt: number; overTcp: boolean }
  | { type: 'fallback'; requestId: string; reason: FallbackReason }
  | { type: 'retry-over-tcp'; requestId: string }
  | { type: 'request-failed'; requestId: string; error: DhttpError }
  | { type: 'dropped'; channel: Channel; reason: string; requestId?: string }
  | { type: 'stream-datagram'; requestId: string; data: Uint8Array; receivedAtMs: number; first: boolean }
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
