// What the DHTTP client (client.ts) keeps per origin, per request and per connection, and the rules over them that
// need nothing else: the request datagram with its token or its padding, the token an answer hands out, keep-alive,
// what a 421 asks for. Sans-IO like the client.
import { LocalProtocolError, ProtocolError } from '../errors';
import type { ClientCounters } from './client-api';
import { getHeader, serializeRequest, type HttpHeaders, type HttpResponse, type ResponseParser } from './http1';
import { MIN_UNPROVEN_REQUEST_BYTES, PAD_HEADER, TOKEN_ANSWER_BYTES, TOKEN_HEADER } from './address-validation';
import type { Phase } from './request-phase';
import type { DhttpResponseStream } from './stream';
import type { Target } from './url';
import { MAX_DATAGRAM_PAYLOAD } from './wire';
import type { StreamLoad } from '../catp/stream-load';

/** RFC 9110 9.2.2: safe to repeat, so they may travel over UDP (and be resent). */
export const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

export type Knowledge = 'unknown' | 'dhttp' | 'plain';

export interface Origin {
  key: string;
  host: string;
  port: number;
  knowledge: Knowledge;
  /** Our DHTTP-over-TCP connection to the server. */
  dhttpConn: number | null;
  /** Our plain HTTP/1.1 keep-alive connection. */
  httpConn: number | null;
  /** Plain HTTP requests waiting for the connection (served one at a time, in order). */
  httpQueue: Req[];
  httpInFlight: Req | null;
  /** The server's address token for us (address-validation.ts), echoed in UDP requests; null: none yet. */
  token: string | null;
}

export interface Req {
  idHex: string;
  id: Uint8Array;
  target: Target;
  origin: Origin;
  method: string;
  http: Uint8Array;
  /** What `http` was made of: UDP sends rebuild it with the origin's token, or padded (address-validation.ts). */
  parts: { path: string; headers: HttpHeaders; body: Uint8Array };
  /** Times sent again with a token after `Dhttp-Retry: token` (once; a stream's request up to MAX_STREAM_TOKEN_RETRIES). */
  tokenRetries: number;
  /**
   * A stream over UDP: the bytes its datagrams carried each way on the wire (with their IP and UDP headers, `overhead`
   * a datagram, worked out once), and when the first datagram of its answer came (ms after the request's latest
   * send: a round trip and a little more).
   */
  wire: { sent: number; received: number; overhead: number; replyMs: number | null };
  /** A stream the server started unproven: when we last sent our proof (the request with its token), and how often again. */
  proof: { atMs: number; repeats: number } | null;
  /** Its latest UDP send went without a token: a stream the server started unproven waits for our proof. */
  tokenless: boolean;
  phase: Phase;
  /** Its ID is registered with the IO layer (`expect-id`): it travels over DHTTP. */
  registered: boolean;
  resends: number;
  sentAtMs: number;
  lastSendMs: number;
  deadline: number | null;
  /** The connection of ours it travels on: DHTTP over TCP (`tcp…` phases) or plain HTTP (`http-sent`). */
  conn: number | null;
  /** A connection the server opened that is delivering its answer (or its announced body; a DON'T-BOTHER closes it). */
  inbound: number | null;
  /** Plain HTTP: connection byte count when sent (to tell "closed before any response byte"). */
  httpBytesAtSend: number;
  /** Plain HTTP: sent again once already after its connection closed before any byte of the answer. */
  httpRetried: boolean;
  /** The load of a streamed answer (RequestInit.stream), or null. */
  load: StreamLoad | null;
  /** DTD: asked with RequestInit.dtd. */
  dtd: boolean;
  hostHeader: string;
}

export type ConnKind = 'dhttp-out' | 'http' | 'inbound';

export interface Conn {
  key: number;
  kind: ConnKind;
  origin: Origin | null;
  open: boolean;
  pending: Uint8Array[];
  dhttp: DhttpResponseStream | null;
  http: ResponseParser | null;
  received: number;
  firstBytes: string;
  /** inbound: id of the message being received now. */
  current: string | null;
  /** When a byte last arrived (or the connection was accepted): inbound idle timeout. */
  lastRxMs: number;
  /** Kernel receive time of the last bytes, when the IO layer passed one. */
  lastRxNs: bigint | null;
}

export function defaultRandom(n: number): Uint8Array {
  const c = (globalThis as { crypto?: { getRandomValues<T extends Uint8Array>(a: T): T } }).crypto;
  if (c === undefined) throw new LocalProtocolError('DHTTP_ERR_RANDOM', 'no globalThis.crypto; pass options.randomBytes');
  return c.getRandomValues(new Uint8Array(n));
}

export function isIpLiteral(host: string): boolean {
  return host.startsWith('[') || /^[0-9.]+$/.test(host);
}

/**
 * The request as a datagram carries it: with the origin's address token (padded to TOKEN_ANSWER_BYTES if shorter: a
 * token the server no longer takes, after a restart or two buckets, is answered with a new one, and the request
 * pays for that answer), or, without one, padded so that its datagram is `padTo` bytes (MIN_UNPROVEN_REQUEST_BYTES,
 * a full datagram: the server may answer with one datagram, no more than it received).
 */
export function requestDatagramHttp(req: Req, padTo = MIN_UNPROVEN_REQUEST_BYTES): Uint8Array {
  const { path, headers, body } = req.parts;
  const token = req.origin.token;
  // `plain` is the request with headers `hs`, serialized: padded with one more header when shorter than `to`
  const padded = (plain: Uint8Array, hs: [string, string][], to: number): Uint8Array => {
    const pad = to - (11 + plain.length + PAD_HEADER.length + 4); // "Catp-Pad: " + value + CRLF
    return pad <= 0 ? plain : serializeRequest({ method: req.method, target: path, headers: [...hs, [PAD_HEADER, 'x'.repeat(pad)]], body });
  };
  if (token !== null) {
    const hs: [string, string][] = [...headers, [TOKEN_HEADER, token]];
    const withToken = padded(serializeRequest({ method: req.method, target: path, headers: hs, body }), hs, TOKEN_ANSWER_BYTES);
    return 11 + withToken.length <= MAX_DATAGRAM_PAYLOAD ? withToken : req.http;
  }
  return padded(req.http, [...headers], padTo);
}

/** Remembers the address token a server handed out (any answer may carry one). */
export function learnToken(origin: Origin, response: HttpResponse): void {
  const t = getHeader(response.headers, TOKEN_HEADER);
  if (t !== null && t.length <= 64) origin.token = t.trim();
}

/** Whether a plain HTTP/1.1 answer leaves its connection open for the next request. */
export function keepsAlive(res: HttpResponse): boolean {
  const tokens = (getHeader(res.headers, 'connection') ?? '').toLowerCase().split(',').map((t) => t.trim());
  if (tokens.includes('close')) return false;
  return res.version !== 'HTTP/1.0' || tokens.includes('keep-alive');
}

/** What a `421`'s `Dhttp-Retry` asks for (`tcp`, `token`), or null for any other answer. */
export function retryAsked(response: HttpResponse): string | null {
  if (response.status !== 421) return null;
  const v = (getHeader(response.headers, 'dhttp-retry') ?? '').trim().toLowerCase();
  return v === '' ? null : v;
}

export function codeOf(e: unknown): string {
  return e instanceof ProtocolError ? e.code : 'DHTTP_ERR_INTERNAL';
}

export function structuredCloneCounters(c: ClientCounters): ClientCounters {
  return { ...c, responses: { ...c.responses }, dropped: { ...c.dropped }, connections: { ...c.connections }, dtd: { ...c.dtd } };
}
