// CATP sessions of the reference server (protocol/README.md, section CATP). A DHTTP GET over UDP with
// `Catp-Mode: catp` (HTML as out-of-order index + data frames) or `Catp-Mode: inorder` (raw bytes cut into
// datagrams) is answered with frames paced and repaired by a protocol/catp RepairSender per request; the
// client's loss reports (`ID | otherPort | flags | 0xCA …`) reach the session by (client address, ID).
//
// Everything here is bounded: the session table (`maxSessions`), the encoded-page cache (bytes), the list of
// recently completed requests (so late duplicates of a finished transfer are not served twice), the
// socket's send queue. Block reuse (`Catp-Reuse: hold`): the index goes at once, the data frames wait (at most
// `reuseHoldMs`) for the client's exhaustive report, and frames it holds are never sent (reuse-gate.ts).
// One timer drives all sessions: an indexed min-heap keyed by each sender's
// `nextTimerAt()`, so a wake-up costs O(log n) per due session whatever the table size.
import type * as dgram from 'dgram';

import { datagramOverhead, type AmplificationBudget } from '../protocol/dhttp/address-validation';

import { FRAME_KIND, RepairSender, type SenderOptions } from '../protocol/catp';
import { encodeForMode, errorCode, type CatpMode, type Encoded, type StreamCoding } from './catp-encode';
import { CatpEncoder, type EncoderCounters } from './catp-encoder';

export { encodeForMode, type CatpMode, type Encoded } from './catp-encode';

export interface CatpOptions {
  /**
   * How senders set their rate (default 'discover': each finds its path's rate, protocol/catp/rate-control.ts;
   * a request's Catp-Rate only bounds it). 'fixed' paces at Catp-Rate, or rateBytesPerSec without one, with
   * wave 1's loss-proportional decrease and no window: only for the lab's oracle-rate ablation, never on a
   * server that faces the Internet (any client could then ask for 100 Mbit/s towards any address).
   */
  pacing?: 'discover' | 'fixed';
  /** 'fixed': pacing rate when the request has no Catp-Rate header (bytes/s, default 1,250,000 = 10 Mbit/s). */
  rateBytesPerSec?: number;
  /** Catp-Rate is clamped to [1000, this]; 'discover' never exceeds it (default 12,500,000 = 100 Mbit/s; raised to rateBytesPerSec if lower). */
  maxRateBytesPerSec?: number;
  /** Simultaneous sessions; a CATP request beyond this gets the normal DHTTP answer (default 256). */
  maxSessions?: number;
  /**
   * Simultaneous sessions (running or being encoded) per client address (default 16): one address cannot hold the
   * table another needs. Beyond it the request is answered "resend over TCP" (DHTTP paper VI-B3): a small answer,
   * and the connection, if any, is the client's own.
   */
  maxSessionsPerAddress?: number;
  /** Answer Catp-Mode requests with frames at all (default true). */
  enabled?: boolean;
  /** Bytes of encoded frames kept in the per-file cache (default 64 MiB; 0 disables it). */
  cacheBytes?: number;
  /** Completed (address, ID) pairs remembered so late repeats / reports are not mistaken for new ones (default 4096). */
  completedMemory?: number;
  /** Datagrams waiting in the UDP socket's send queue beyond which a frame is dropped as lost (default 4096). */
  maxSendQueue?: number;
  /** Honour `Catp-Reuse: hold` (block reuse) at all (default true); off: the header is ignored. */
  reuse?: boolean;
  /** Longest wait for a reuse client's exhaustive report before the data frames go anyway (ms, default 1000). */
  reuseHoldMs?: number;
  /**
   * Where CATP blocks end (default 'content': content-defined, so an edited page keeps most block digests and a
   * client reuses them; 'packed': full frames, half as many, but an edit changes every later block).
   */
  blockCut?: 'content' | 'packed';
  /**
   * Worker threads that encode pages (default 1; 0: on the server's thread). A page's first request is
   * encoded at a fast setting and answered from that; the best-quality copy replaces it in the cache later.
   */
  encodeWorkers?: number;
  /**
   * How a page's first request is encoded (default 'fast': brotli 5, served at once, the best copy replaces it
   * in the cache later; 'best': brotli 11 at once, so every load sees the same frames, as the lab wants).
   */
  coldEncode?: 'fast' | 'best';
  /** Page bytes waiting to be encoded beyond which a CATP request is answered normally (default 32 MiB). */
  maxEncodeQueueBytes?: number;
  /**
   * A request from an address it has not proven (address validation) gets its session's first flight: as many
   * frames as the address's budget allows (what it sent), then nothing until the token request proves the address, for at
   * most this long (ms, default 3000; then the session ends). What a first load gains is the round trip QUIC's
   * first flight also saves: the top of the page paints while the proof travels.
   */
  unprovenTimeoutMs?: number;
  /**
   * An unproven session's proof is overdue this long after its token answer last went (ms, default 1000, a third of
   * the session's time): the token goes again with the next report, whether or not the address's budget holds the
   * session up (then at most once a smoothed RTT). A client that keeps the budget full (its reports, requests padded
   * to a full datagram) never holds the session up, and one whose token answer was lost would otherwise never be
   * asked again before the session ends unproven (traced: dropbox-blog at 10,000 B/s, 10%, seed 7216: the session
   * ended unproven with frames still to repair, and the load stalled).
   */
  proofOverdueMs?: number;
  /** Sessions waiting for proof at once, in all (default 64) and per address (default 2); beyond them: the token answer alone. */
  maxUnprovenSessions?: number;
  maxUnprovenPerAddress?: number;
  /** Passed to every RepairSender (rate options above take precedence). */
  sender?: Omit<SenderOptions, 'requestId' | 'rateBytesPerSec' | 'rateFramesPerSec' | 'reuse' | 'pacing'>;
}

export const DEFAULT_CATP_OPTIONS = Object.freeze({
  pacing: 'discover' as 'discover' | 'fixed',
  rateBytesPerSec: 1_250_000,
  maxRateBytesPerSec: 12_500_000,
  maxSessions: 256,
  maxSessionsPerAddress: 16,
  enabled: true,
  cacheBytes: 64 * 1024 * 1024,
  completedMemory: 4096,
  maxSendQueue: 4096,
  reuse: true,
  reuseHoldMs: 1000,
  blockCut: 'content' as 'content' | 'packed',
  encodeWorkers: 1,
  coldEncode: 'fast' as 'fast' | 'best',
  maxEncodeQueueBytes: 32 * 1024 * 1024,
  unprovenTimeoutMs: 3000,
  proofOverdueMs: 1000,
  maxUnprovenSessions: 64,
  maxUnprovenPerAddress: 2,
});

export const MIN_CATP_RATE = 1000;

/** How long an ended session's round trip stands for its address (`CatpSessions.pathRttMs`): a page's late requests. */
const ENDED_RTT_MEMORY_MS = 10_000;

export interface CatpCounters extends EncoderCounters {
  /** Sessions started. */
  catpSessions: number;
  /** Sessions started by mode. */
  catpModes: Record<CatpMode, number>;
  /** Sessions running now. */
  catpActive: number;
  /** Timers the CATP scheduler has armed (0 or 1: one timer drives every session). */
  catpTimers: number;
  /** Sessions ended by the client's `complete` report. */
  catpCompleted: number;
  /** Sessions ended by the sender giving up (deadline, idle, resend limit). */
  catpGaveUp: number;
  /** CATP requests answered normally because the session table was full. */
  catpRefused: number;
  /** CATP requests over the per-address session limit (answered "resend over TCP"). */
  catpRefusedPerAddress: number;
  /** CATP requests answered normally because their frames would pass the address's share of the memory budget. */
  catpOverMemory: number;
  /** Frames the senders released (first sends and resends; those lost to send errors included). */
  catpFramesSent: number;
  /** Of those, resends (copies included). */
  catpFramesResent: number;
  /** Of the resends, copies of a tail's resends (RepairSender `repeatTailRepairs`). */
  catpFramesCopied: number;
  /** Of catpFramesSent: index frames and data (or raw) frames, and their bytes (CATP header included). */
  catpIndexFramesSent: number;
  catpIndexBytesSent: number;
  catpDataFramesSent: number;
  catpDataBytesSent: number;
  /** Sessions that asked for block reuse (`Catp-Reuse: hold`) and got it. */
  catpReuseSessions: number;
  /** Data frames of completed reuse sessions never sent because the client held them. */
  catpReuseFramesSaved: number;
  /** Reuse sessions whose hold ended by its deadline, not by an exhaustive report. */
  catpReuseHoldExpired: number;
  /** Frames dropped because the send failed (EAGAIN, ENOBUFS...) or the send queue was full: lost frames. */
  catpSendErrors: number;
  /** Report datagrams routed to a session (accepted or not). */
  catpReports: number;
  /** Reports a session refused (malformed, stale, wrong page...), by reason. */
  catpBadReports: Record<string, number>;
  /** Reports naming no session (unknown ID, or an ID from another address). */
  catpUnknownReports: number;
  /** Reports for a transfer that completed recently (the client's repeated `complete` reports). */
  catpLateReports: number;
  /** Requests repeating a running (or just completed) session's (address, ID): ignored. */
  catpIgnoredRepeats: number;
  /** Sessions started for an unproven address (its first flight only, until proven). */
  catpUnprovenStarts: number;
  /** Of those, proven by the client's token request, and ended unproven (no proof in time). */
  catpProven: number;
  catpUnprovenExpired: number;
  /** Proofs whose round trip (token answer out, proof back) became the sender's first RTT sample. */
  catpHandshakeRtts: number;
  /** First contacts whose request and padding datagram arrived far enough apart to pace the initial window by. */
  catpDispersionHints: number;
  /** Pages that could not be encoded (e.g. CATP_ERR_UNENCODABLE): answered normally. */
  catpEncodeErrors: number;
  /** Encoded-page cache hits / misses. */
  catpCacheHits: number;
  catpCacheMisses: number;
}

export function newCatpCounters(): CatpCounters {
  return {
    catpSessions: 0,
    catpModes: { catp: 0, inorder: 0 },
    catpActive: 0,
    catpTimers: 0,
    catpCompleted: 0,
    catpGaveUp: 0,
    catpRefused: 0,
    catpRefusedPerAddress: 0,
    catpOverMemory: 0,
    catpFramesSent: 0,
    catpFramesResent: 0,
    catpFramesCopied: 0,
    catpIndexFramesSent: 0,
    catpIndexBytesSent: 0,
    catpDataFramesSent: 0,
    catpDataBytesSent: 0,
    catpReuseSessions: 0,
    catpReuseFramesSaved: 0,
    catpReuseHoldExpired: 0,
    catpSendErrors: 0,
    catpReports: 0,
    catpBadReports: {},
    catpUnknownReports: 0,
    catpLateReports: 0,
    catpIgnoredRepeats: 0,
    catpUnprovenStarts: 0,
    catpProven: 0,
    catpHandshakeRtts: 0,
    catpDispersionHints: 0,
    catpUnprovenExpired: 0,
    catpEncodeErrors: 0,
    catpCacheHits: 0,
    catpCacheMisses: 0,
    catpEncodesFast: 0,
    catpEncodesBest: 0,
    catpEncodeQueueFull: 0,
    catpEncoderCrashes: 0,
  };
}

/** The value of a `Catp-Mode` header, or null when absent / not one we serve. */
export function parseCatpMode(value: string | null): CatpMode | null {
  if (value === null) return null;
  const v = value.trim().toLowerCase();
  return v === 'catp' || v === 'inorder' ? v : null;
}

/** True when a `Catp-Reuse` header asks for block reuse (`hold`, case-insensitive); anything else is ignored. */
export function parseCatpReuse(value: string | null): boolean {
  return value !== null && value.trim().toLowerCase() === 'hold';
}

/** `Catp-Rate` (decimal integer, bytes/s) clamped to [MIN_CATP_RATE, max], else the default: the bound ('discover') or the rate ('fixed'). */
export function pickRate(header: string | null, defaultRate: number, maxRate: number): number {
  if (header !== null) {
    const v = header.trim();
    if (/^[0-9]{1,15}$/.test(v)) return Math.min(maxRate, Math.max(MIN_CATP_RATE, Number(v)));
  }
  return defaultRate;
}

type CacheEntry = Encoded | { failed: string; bytes: number };

/** LRU of encoded pages, bounded by frame bytes. Failed encodings are remembered too (cheaply). */
export class EncodedPageCache {
  private readonly map = new Map<string, CacheEntry>();
  private size = 0;

  constructor(private readonly maxBytes: number) {}

  get bytes(): number {
    return this.size;
  }

  get entries(): number {
    return this.map.size;
  }

  get(key: string): CacheEntry | undefined {
    const e = this.map.get(key);
    if (e !== undefined) {
      this.map.delete(key);
      this.map.set(key, e);
    }
    return e;
  }

  set(key: string, e: CacheEntry): void {
    const old = this.map.get(key);
    if (old !== undefined) {
      this.map.delete(key);
      this.size -= old.bytes;
    }
    if (e.bytes > this.maxBytes) return;
    this.map.set(key, e);
    this.size += e.bytes;
    for (const [k, v] of this.map) {
      if (this.size <= this.maxBytes) break;
      this.map.delete(k);
      this.size -= v.bytes;
    }
  }
}

interface Session {
  key: string;
  mode: CatpMode;
  sender: RepairSender;
  address: string;
  port: number;
  /** Data frames sent at least once (reuse sessions only: what the client's store did not cover). */
  dataSent: Uint8Array | null;
  indexFrames: number;
  /** Unproven address: the session ends at this time unless proven first (null: proven). */
  unprovenUntil: number | null;
  /** Unproven: the address's budget (every frame is charged to it), and when its token last went. */
  budget: AmplificationBudget | null;
  tokenAt: number;
  tokenResent: boolean;
  /** Deadline for the scheduler (ms, performance.now clock), and the session's heap position (-1 = none). */
  at: number;
  heapIndex: number;
  /** Gives the session's frame bytes back to the memory budget (StartRequest.memory), once. */
  release: (() => void) | null;
  /** When its request came, and its first contact's padding datagram (null: none yet, or not a first contact). */
  arrival: Arrival;
}

/**
 * When a stream request came (`at`), and when and how large its padding came after it (`paired`: as the client
 * sent them, so their spacing is the uplink's dispersion; not when a copy came before its request).
 */
interface Arrival {
  at: number;
  padding: { at: number; bytes: number; paired: boolean } | null;
}

/**
 * Least spacing between a first contact's request and its padding datagram that is taken as their dispersion on
 * the client's uplink (below it the server's event loop is the measurement; the copy's 393 bytes on the wire take
 * that long at ~200 kB/s, so faster uplinks give no hint and start as any sender does).
 */
const MIN_DISPERSION_MS = 2;

/** Indexed binary min-heap of sessions by `at`. */
class SessionHeap {
  private readonly a: Session[] = [];

  get size(): number {
    return this.a.length;
  }

  peek(): Session | undefined {
    return this.a[0];
  }

  /** Insert or move `s` to its current `at`. */
  update(s: Session): void {
    if (s.heapIndex < 0) {
      s.heapIndex = this.a.length;
      this.a.push(s);
    }
    this.up(s.heapIndex);
    this.down(s.heapIndex);
  }

  remove(s: Session): void {
    const i = s.heapIndex;
    if (i < 0) return;
    const last = this.a.pop() as Session;
    s.heapIndex = -1;
    if (last !== s) {
      this.a[i] = last;
      last.heapIndex = i;
      this.up(i);
      this.down(last.heapIndex);
    }
  }

  clear(): void {
    for (const s of this.a) s.heapIndex = -1;
    this.a.length = 0;
  }

  private swap(i: number, j: number): void {
    const t = this.a[i];
    this.a[i] = this.a[j];
    this.a[j] = t;
    this.a[i].heapIndex = i;
    this.a[j].heapIndex = j;
  }

  private up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (this.a[p].at <= this.a[i].at) break;
      this.swap(i, p);
      i = p;
    }
  }

  private down(i: number): void {
    const n = this.a.length;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < n && this.a[l].at < this.a[m].at) m = l;
      if (r < n && this.a[r].at < this.a[m].at) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
  }
}

/** A bounded set of strings with FIFO eviction. */
class RecentSet {
  private readonly set = new Set<string>();
  constructor(private readonly cap: number) {}
  add(k: string): void {
    if (this.cap <= 0) return;
    this.set.delete(k);
    this.set.add(k);
    while (this.set.size > this.cap) this.set.delete(this.set.values().next().value as string);
  }
  has(k: string): boolean {
    return this.set.has(k);
  }
}

export interface StartRequest {
  mode: CatpMode;
  /** Request ID (8 bytes) — stamped into every frame. */
  id: Uint8Array;
  idHex: string;
  address: string;
  port: number;
  /** Catp-Rate header value, or null. */
  rateHeader: string | null;
  /** The request carried `Catp-Reuse: hold` (honoured for mode 'catp' when reuse is enabled). */
  reuse?: boolean;
  /** Cache key for the body (path + size + mtime); null = do not cache. */
  cacheKey: string | null;
  body: Uint8Array;
  /** How the body's bytes decode (a WHATWG encoding name, protocol/html-encoding.ts; default UTF-8). */
  encoding?: string;
  /** In-order mode: the request offered `Accept-Encoding: br`, so the stream goes compressed (raw.ts). */
  coding?: StreamCoding;
  /**
   * The address is unproven: the session sends what `budget` allows for `address` (charging it), and
   * `sendToken` (the server's "ask again with this token" answer) goes before the first frame.
   */
  unproven?: { budget: AmplificationBudget; sendToken: () => void };
  /**
   * The session's frames count against its client's share of the server's memory for answers (body-budget.ts)
   * while it runs: `take` false → not started (answered normally); `give` when it ends.
   */
  memory?: CatpMemory;
}

export interface CatpMemory {
  take: (bytes: number) => boolean;
  give: (bytes: number) => void;
}

type ResolvedCatpOptions = Required<Omit<CatpOptions, 'sender'>> & { sender: CatpOptions['sender'] };

export function resolveCatpOptions(o: CatpOptions | undefined): ResolvedCatpOptions {
  const d = DEFAULT_CATP_OPTIONS;
  const pos = (v: number | undefined, dflt: number, name: string, min = 0): number => {
    if (v === undefined) return dflt;
    if (!(typeof v === 'number' && Number.isFinite(v) && v >= min)) throw new RangeError(`catp.${name} must be a number >= ${min}`);
    return v;
  };
  const rate = pos(o?.rateBytesPerSec, d.rateBytesPerSec, 'rateBytesPerSec', MIN_CATP_RATE);
  const maxRate = Math.max(rate, pos(o?.maxRateBytesPerSec, d.maxRateBytesPerSec, 'maxRateBytesPerSec', MIN_CATP_RATE));
  const pacing = o?.pacing ?? d.pacing;
  if (pacing !== 'discover' && pacing !== 'fixed') throw new RangeError('catp.pacing must be discover or fixed');
  return {
    pacing,
    rateBytesPerSec: rate,
    maxRateBytesPerSec: maxRate,
    maxSessions: Math.floor(pos(o?.maxSessions, d.maxSessions, 'maxSessions')),
    maxSessionsPerAddress: Math.floor(pos(o?.maxSessionsPerAddress, d.maxSessionsPerAddress, 'maxSessionsPerAddress', 1)),
    enabled: o?.enabled ?? d.enabled,
    cacheBytes: pos(o?.cacheBytes, d.cacheBytes, 'cacheBytes'),
    completedMemory: Math.floor(pos(o?.completedMemory, d.completedMemory, 'completedMemory')),
    maxSendQueue: Math.floor(pos(o?.maxSendQueue, d.maxSendQueue, 'maxSendQueue', 1)),
    reuse: o?.reuse ?? d.reuse,
    reuseHoldMs: pos(o?.reuseHoldMs, d.reuseHoldMs, 'reuseHoldMs'),
    blockCut: o?.blockCut === 'packed' ? 'packed' : d.blockCut,
    encodeWorkers: Math.floor(pos(o?.encodeWorkers, d.encodeWorkers, 'encodeWorkers')),
    coldEncode: o?.coldEncode === 'best' ? 'best' : d.coldEncode,
    maxEncodeQueueBytes: pos(o?.maxEncodeQueueBytes, d.maxEncodeQueueBytes, 'maxEncodeQueueBytes'),
    unprovenTimeoutMs: pos(o?.unprovenTimeoutMs, d.unprovenTimeoutMs, 'unprovenTimeoutMs'),
    proofOverdueMs: pos(o?.proofOverdueMs, d.proofOverdueMs, 'proofOverdueMs'),
    maxUnprovenSessions: Math.floor(pos(o?.maxUnprovenSessions, d.maxUnprovenSessions, 'maxUnprovenSessions')),
    maxUnprovenPerAddress: Math.floor(pos(o?.maxUnprovenPerAddress, d.maxUnprovenPerAddress, 'maxUnprovenPerAddress')),
    sender: o?.sender,
  };
}

/** All CATP sessions of one server: start, route reports, drive the senders with one timer, stop. */
export class CatpSessions {
  readonly opts: ResolvedCatpOptions;
  private readonly c = newCatpCounters();
  private readonly sessions = new Map<string, Session>();
  /**
   * Keys whose file is being read: a repeat arriving meanwhile is ignored too. With when the request came, and its
   * first contact's padding datagram if that came meanwhile (for the session's dispersion sample).
   */
  private readonly pending = new Map<string, Arrival>();
  /** Pending keys whose token request came while the page was being read: they start proven. */
  private readonly provenPending = new Set<string>();
  /** Sessions waiting for proof now. */
  private unprovenCount = 0;
  private readonly completed: RecentSet;
  /** The round trip each address's latest ended session measured, and when it ended (Map order: oldest first). */
  private readonly endedRtt = new Map<string, { rttMs: number; at: number }>();
  private readonly cache: EncodedPageCache;
  private readonly encoder: CatpEncoder;
  private onceSeq = 0;
  private readonly heap = new SessionHeap();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private closed = false;

  constructor(
    private readonly udp: dgram.Socket,
    opts: CatpOptions | undefined,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.opts = resolveCatpOptions(opts);
    this.completed = new RecentSet(this.opts.completedMemory);
    this.cache = new EncodedPageCache(this.opts.cacheBytes);
    this.encoder = new CatpEncoder({ workers: this.opts.encodeWorkers, maxQueuedBytes: this.opts.maxEncodeQueueBytes });
  }

  static key(address: string, idHex: string): string {
    return `${address}|${idHex}`;
  }

  /** What an encoded page's cache entry depends on besides the page: the mode, and an in-order stream's coding. */
  static variant(req: Pick<StartRequest, 'mode' | 'coding'>): string {
    return req.mode === 'inorder' && (req.coding ?? null) !== null ? `${req.mode}+${req.coding}` : req.mode;
  }

  get enabled(): boolean {
    return this.opts.enabled && !this.closed;
  }

  counters(): CatpCounters {
    return { ...this.c, ...this.encoder.c, catpModes: { ...this.c.catpModes }, catpBadReports: { ...this.c.catpBadReports }, catpActive: this.sessions.size, catpTimers: this.timer === null ? 0 : 1 };
  }

  /** Cache occupancy (for tests and diagnostics). */
  cacheStats(): { entries: number; bytes: number } {
    return { entries: this.cache.entries, bytes: this.cache.bytes };
  }

  /**
   * A CATP request arrived for `key` from `address`. 'repeat' (counted) when it repeats a running, pending or
   * just-completed transfer; 'over-limit' (counted) when the address already has its share of sessions, running
   * or pending; otherwise 'ok', and the request is pending until `start` or `abandon`.
   */
  admit(key: string, address: string): 'ok' | 'repeat' | 'over-limit' {
    if (this.sessions.has(key) || this.pending.has(key) || this.completed.has(key)) {
      this.c.catpIgnoredRepeats++;
      return 'repeat';
    }
    let n = 0;
    const prefix = `${address}|`;
    for (const s of this.sessions.values()) if (s.address === address) n++;
    for (const k of this.pending.keys()) if (k.startsWith(prefix)) n++;
    if (n >= this.opts.maxSessionsPerAddress) {
      this.c.catpRefusedPerAddress++;
      return 'over-limit';
    }
    this.pending.set(key, { at: this.now(), padding: null });
    return 'ok';
  }

  /** The pending request will get a normal answer (not eligible, or not started). */
  abandon(key: string): void {
    this.pending.delete(key);
    this.provenPending.delete(key);
  }

  /** May a session for an unproven `address` start (its first flight), within the caps on such sessions? */
  canStartUnproven(address: string): boolean {
    if (!this.enabled || this.unprovenCount >= this.opts.maxUnprovenSessions) return false;
    let n = 0;
    for (const s of this.sessions.values()) if (s.unprovenUntil !== null && s.address === address) n++;
    return n < this.opts.maxUnprovenPerAddress;
  }

  /** True when `key`'s session is running and waits for its address to be proven. */
  isUnproven(key: string): boolean {
    const s = this.sessions.get(key);
    return s !== undefined && s.unprovenUntil !== null;
  }

  /**
   * A request with a valid token repeats `key`: its session (or the page being read for it) may now send in
   * full. True when that changed something; false when there is no such unproven session or pending request.
   */
  prove(key: string): boolean {
    const s = this.sessions.get(key);
    if (s === undefined) {
      if (!this.pending.has(key)) return false;
      this.provenPending.add(key);
      return true;
    }
    if (s.unprovenUntil === null) return false;
    const now = this.now();
    this.setProven(s);
    this.c.catpProven++;
    // token answer out, proof back: the path's first RTT sample (not after a resent token: which one was answered?)
    if (!s.tokenResent && s.sender.onHandshakeRtt(now, now - s.tokenAt)) this.c.catpHandshakeRtts++;
    this.service(s, now);
    this.arm();
    return true;
  }

  private setProven(s: Session): void {
    s.unprovenUntil = null;
    s.budget = null;
    s.sender.setSendBudget(null);
    this.unprovenCount--;
  }

  /** Start a session; false (counted) when the table is full or the page cannot be encoded → answer normally. */
  start(req: StartRequest, encoded?: Encoded): boolean {
    const key = CatpSessions.key(req.address, req.idHex);
    const arrival = this.pending.get(key) ?? { at: this.now(), padding: null };
    this.pending.delete(key);
    // a token request that came while the page was read proved the address
    const unproven = this.provenPending.delete(key) ? undefined : req.unproven;
    // the caps are checked again: other unproven sessions may have started while this page was read
    if (unproven !== undefined && !this.canStartUnproven(req.address)) return false;
    if (!this.enabled) return false;
    if (this.sessions.size >= this.opts.maxSessions) {
      this.c.catpRefused++;
      return false;
    }
    const enc = encoded ?? this.encoded(req);
    if (enc === null) return false;
    // Reuse only means something with blocks (CATP), and only towards a client that asked (it sets a flag
    // bit in every frame, which an old client would refuse).
    const reuse = req.reuse === true && req.mode === 'catp' && this.opts.reuse;
    const memory = req.memory;
    if (memory !== undefined && !memory.take(enc.bytes)) {
      this.c.catpOverMemory++;
      return false;
    }
    const release = memory === undefined ? null : () => memory.give(enc.bytes);
    let sender: RepairSender;
    try {
      sender = new RepairSender(enc.frames, enc.indexFrames, {
        ...(this.opts.sender ?? {}),
        requestId: req.id,
        pacing: this.opts.pacing,
        rateBytesPerSec: pickRate(req.rateHeader, this.opts.pacing === 'fixed' ? this.opts.rateBytesPerSec : this.opts.maxRateBytesPerSec, this.opts.maxRateBytesPerSec),
        ...(reuse ? { reuse: { holdMs: this.opts.reuseHoldMs } } : {}),
      });
    } catch {
      release?.();
      this.c.catpEncodeErrors++;
      return false;
    }
    const s: Session = {
      key, mode: req.mode, sender, address: req.address, port: req.port,
      dataSent: reuse ? new Uint8Array(enc.frames.length) : null, indexFrames: enc.indexFrames,
      unprovenUntil: unproven === undefined ? null : this.now() + this.opts.unprovenTimeoutMs,
      budget: unproven?.budget ?? null, tokenAt: this.now(), tokenResent: false, at: 0, heapIndex: -1, release, arrival,
    };
    this.sessions.set(key, s);
    this.c.catpSessions++;
    this.c.catpModes[req.mode]++;
    if (reuse) this.c.catpReuseSessions++;
    if (unproven !== undefined) {
      this.unprovenCount++;
      this.c.catpUnprovenStarts++;
      unproven.sendToken(); // before the first frame: the client's token request is what lets the rest go
      this.takeDispersion(s);
    }
    this.service(s, this.now());
    this.arm();
    return true;
  }

  /**
   * Like `start`, but a page not in the cache is encoded off this thread (catp-encoder.ts) first, at the fast
   * setting; the request stays pending meanwhile (its repeats are ignored). Resolves false → answer normally.
   */
  async startAsync(req: StartRequest): Promise<boolean> {
    const key = CatpSessions.key(req.address, req.idHex);
    if (!this.enabled) return false;
    if (this.sessions.size >= this.opts.maxSessions) {
      this.abandon(key);
      this.c.catpRefused++;
      return false;
    }
    const enc = await this.encodedAsync(req);
    if (enc === null) {
      this.abandon(key);
      return false;
    }
    return this.start(req, enc);
  }

  private async encodedAsync(req: StartRequest): Promise<Encoded | null> {
    // In-order framing as it is is a cut and a digest: no worker needed (compressing the stream is not).
    if (req.mode !== 'catp' && (req.coding ?? null) === null) return this.encoded(req);
    // No validator (cacheKey null): encoded for this request only, under a key of its own.
    const key = req.cacheKey === null ? null : `${CatpSessions.variant(req)}\0${req.cacheKey}`;
    const hit = key === null ? undefined : this.cache.get(key);
    if (hit !== undefined) {
      this.c.catpCacheHits++;
      if ('failed' in hit) {
        this.c.catpEncodeErrors++;
        return null;
      }
      return hit;
    }
    this.c.catpCacheMisses++;
    const job = this.encoder.encode(key ?? `once\0${this.onceSeq++}`, req.mode, req.body, this.opts.blockCut, this.opts.coldEncode, req.encoding, req.coding ?? null);
    if (job === null) return null;
    const r = await job;
    if (this.closed) return null;
    if ('failed' in r) {
      if (key !== null && !r.failed.startsWith('CATP_ERR_ENCODER_')) this.cache.set(key, { failed: r.failed, bytes: 128 });
      this.c.catpEncodeErrors++;
      return null;
    }
    if (key === null) return r;
    const now = this.cache.get(key);
    if (now === undefined || 'failed' in now) {
      this.cache.set(key, r);
      if (r.quality === 'fast') this.upgrade(key, req);
    }
    return r;
  }

  /** The best-quality copy of a page served from a fast encoding: encoded in the background, then cached. */
  private upgrade(key: string, req: StartRequest): void {
    const job = this.encoder.encode(key, req.mode, req.body, this.opts.blockCut, 'best', req.encoding, req.coding ?? null);
    if (job === null) return;
    void job.then((r) => {
      if (this.closed || 'failed' in r) return;
      const cur = this.cache.get(key);
      if (cur !== undefined && !('failed' in cur) && cur.quality === 'fast') this.cache.set(key, r);
    });
  }

  private encoded(req: StartRequest): Encoded | null {
    const key = req.cacheKey === null ? null : `${CatpSessions.variant(req)}\0${req.cacheKey}`;
    let e = key === null ? undefined : this.cache.get(key);
    if (e !== undefined) this.c.catpCacheHits++;
    else {
      this.c.catpCacheMisses++;
      try {
        e = encodeForMode(req.mode, req.body, this.opts.blockCut, 'best', req.encoding, req.coding ?? null);
      } catch (err) {
        e = { failed: errorCode(err), bytes: 128 };
      }
      if (key !== null) this.cache.set(key, e);
    }
    if ('failed' in e) {
      this.c.catpEncodeErrors++;
      return null;
    }
    return e;
  }

  /**
   * A datagram whose byte 11 is the CATP magic: a report. Never throws. True when the session is unproven and its
   * proof is wanted (held up by the address's budget, or overdue: its token answer may have been lost): the caller
   * sends the token again (at most once per round trip).
   */
  onReport(bytes: Uint8Array, address: string, idHex: string): boolean {
    const key = CatpSessions.key(address, idHex);
    const s = this.sessions.get(key);
    if (s === undefined) {
      if (this.completed.has(key)) this.c.catpLateReports++;
      else this.c.catpUnknownReports++;
      return false;
    }
    this.c.catpReports++;
    const now = this.now();
    const r = s.sender.receiveReport(bytes, now);
    if (!r.accepted) {
      const code = r.code ?? 'UNKNOWN';
      this.c.catpBadReports[code] = (this.c.catpBadReports[code] ?? 0) + 1;
    }
    this.service(s, now);
    this.arm();
    // Held up by the address's budget, the proof has had a round trip; or it is overdue, whatever the budget
    // (`proofOverdueMs`).
    const since = now - s.tokenAt;
    const overdue = since >= this.opts.proofOverdueMs;
    if (s.unprovenUntil === null || (!s.sender.budgetBlocked && !overdue) || since < Math.max(50, s.sender.stats.srttMs)) return false;
    s.tokenAt = now;
    s.tokenResent = true;
    return true;
  }

  /**
   * A first contact's padding came from `address` (a padding datagram, or the second of its request and copy; its
   * bytes are in the address's budget already): the unproven session it pads for sends what the budget now allows
   * of its first flight, and, when `paired` (the pair came in the order it was sent), its sender takes the time
   * since the request as the pair's dispersion (`takeDispersion`; noted for a request whose page is still read).
   */
  onPadding(address: string, idHex: string, bytes: number, paired: boolean): void {
    const key = CatpSessions.key(address, idHex);
    const now = this.now();
    const padding = { at: now, bytes, paired };
    const waiting = this.pending.get(key);
    if (waiting !== undefined && waiting.padding === null) waiting.padding = padding;
    const s = this.sessions.get(key);
    if (s === undefined || s.unprovenUntil === null) return;
    if (s.arrival.padding === null) {
      s.arrival.padding = padding;
      this.takeDispersion(s);
    }
    this.service(s, now);
    this.arm();
  }

  /**
   * The client sent its request and the padding datagram back to back: the padding's bytes on the wire over the time
   * between their arrivals is its uplink's rate, which paces the initial window until the first report
   * (RepairSender.onPathRateHint; counted in `catpDispersionHints`). Too close together to tell: nothing.
   */
  private takeDispersion(s: Session): void {
    const p = s.arrival.padding;
    if (p === null || !p.paired) return;
    const gap = p.at - s.arrival.at;
    // what crossed the uplink in that time: the datagram with its IP and UDP headers
    const wire = p.bytes + datagramOverhead(s.address);
    if (gap >= MIN_DISPERSION_MS && s.sender.onPathRateHint(this.now(), wire / gap)) this.c.catpDispersionHints++;
  }

  /** Send what the sender lets go now, end it if finished, else (re)schedule it. */
  private service(s: Session, now: number): void {
    const sender = s.sender;
    if (s.unprovenUntil !== null && s.budget !== null) {
      if (now >= s.unprovenUntil) {
        this.c.catpUnprovenExpired++;
        this.end(s, false);
        return;
      }
      sender.setSendBudget(s.budget.remaining(s.address), datagramOverhead(s.address));
    }
    sender.handleTimer(now);
    const resentBefore = sender.stats.resent;
    const copiedBefore = sender.stats.copies;
    for (let d = sender.nextDatagram(now); d !== null; d = sender.nextDatagram(now)) this.send(d, s);
    this.c.catpFramesResent += sender.stats.resent - resentBefore;
    this.c.catpFramesCopied += sender.stats.copies - copiedBefore;
    let at = sender.nextTimerAt();
    if (s.unprovenUntil !== null && !sender.finished) at = Math.min(at ?? Infinity, s.unprovenUntil);
    if (sender.finished || at === null) {
      this.end(s);
      return;
    }
    s.at = at;
    this.heap.update(s);
  }

  private send(d: Uint8Array, s: Session): void {
    this.c.catpFramesSent++;
    if (d[10] === FRAME_KIND.INDEX) {
      this.c.catpIndexFramesSent++;
      this.c.catpIndexBytesSent += d.length;
    } else {
      this.c.catpDataFramesSent++;
      this.c.catpDataBytesSent += d.length;
      if (s.dataSent !== null && d.length >= 24) s.dataSent[new DataView(d.buffer, d.byteOffset, d.byteLength).getUint32(20)] = 1;
    }
    if (s.budget !== null) s.budget.sent(s.address, d.length);
    if (this.udp.getSendQueueCount() >= this.opts.maxSendQueue) {
      this.c.catpSendErrors++; // the kernel is not keeping up: a lost frame, repaired like any other
      return;
    }
    try {
      this.udp.send(d, s.port, s.address, (err) => {
        if (err) this.c.catpSendErrors++;
      });
    } catch {
      this.c.catpSendErrors++; // socket closed under us, or an address the kernel refuses
    }
  }

  /**
   * The round trip to `address` as its streams measured it (ms): the largest of its live sessions', else its latest
   * ended session's within `ENDED_RTT_MEMORY_MS`; null when none has measured one. (The channel choice's early resends.)
   */
  pathRttMs(address: string): number | null {
    let rtt: number | null = null;
    for (const s of this.sessions.values()) {
      const r = s.address === address ? s.sender.pathRttMs : null;
      if (r !== null && (rtt === null || r > rtt)) rtt = r;
    }
    if (rtt !== null) return rtt;
    const ended = this.endedRtt.get(address);
    return ended !== undefined && this.now() - ended.at < ENDED_RTT_MEMORY_MS ? ended.rttMs : null;
  }

  /** Remove a session; `count`: as completed or given up (an unproven one that expired is counted apart). */
  private end(s: Session, count = true): void {
    if (this.sessions.get(s.key) !== s) return;
    this.sessions.delete(s.key);
    const rtt = s.sender.pathRttMs;
    if (rtt !== null) {
      this.endedRtt.delete(s.address);
      if (this.endedRtt.size >= this.opts.completedMemory) this.endedRtt.delete(this.endedRtt.keys().next().value as string);
      this.endedRtt.set(s.address, { rttMs: rtt, at: this.now() });
    }
    this.heap.remove(s);
    this.releaseMemory(s);
    if (s.unprovenUntil !== null) this.unprovenCount--;
    const gate = s.sender.reuse;
    if (gate?.stats.holdExpired) this.c.catpReuseHoldExpired++;
    if (s.sender.done) {
      this.c.catpCompleted++;
      this.completed.add(s.key);
      if (s.dataSent !== null) {
        for (let q = s.indexFrames; q < s.dataSent.length; q++) if (s.dataSent[q] === 0) this.c.catpReuseFramesSaved++;
      }
    } else if (count) {
      this.c.catpGaveUp++;
    }
  }

  /** Keep one timer armed for the earliest session deadline. */
  private arm(): void {
    if (this.closed) return;
    const top = this.heap.peek();
    if (top === undefined) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      this.timerAt = Infinity;
      return;
    }
    if (this.timer !== null && this.timerAt <= top.at) return; // fires early enough; it re-arms
    if (this.timer !== null) clearTimeout(this.timer);
    const delay = Math.max(0, Math.ceil(top.at - this.now()));
    this.timerAt = top.at;
    this.timer = setTimeout(() => this.onTimer(), delay);
    this.timer.unref(); // the server's sockets keep the process alive
  }

  private onTimer(): void {
    this.timer = null;
    this.timerAt = Infinity;
    if (this.closed) return;
    const now = this.now();
    // Take every due session first, then serve each once: a sender that is due again at once waits for
    // the next wake-up instead of spinning here.
    const due: Session[] = [];
    for (let top = this.heap.peek(); top !== undefined && top.at <= now; top = this.heap.peek()) {
      this.heap.remove(top);
      due.push(top);
    }
    for (const s of due) {
      try {
        this.service(s, now);
      } catch {
        // Never expected (the sender does not throw): drop the session rather than the server.
        this.end(s);
      }
    }
    this.arm();
  }

  /** Stop every session and the timer (the server is closing). */
  private releaseMemory(s: Session): void {
    const r = s.release;
    s.release = null;
    r?.();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    for (const s of this.sessions.values()) this.releaseMemory(s);
    this.heap.clear();
    this.sessions.clear();
    this.unprovenCount = 0;
    this.pending.clear();
    this.provenPending.clear();
    this.encoder.close();
  }
}
