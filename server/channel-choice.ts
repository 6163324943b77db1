// Channel choice for DHTTP responses (DHTTP paper, section III-C). Pure logic: no sockets, no clock reads,
// no Math.random — time and randomness come in through `ChannelDeps`, so tests replay any sequence exactly.
//
// Algorithm (paper III-C):
//   1. TCP for every response whose encoded form (8-byte ID + HTTP bytes) exceeds the size threshold
//      (1460 B = one datagram's payload), and for every answer to a resent request.
//   2. ratio = resent / fresh; above the loss threshold (1%) the server is in "high-loss" mode.
//   3. Low-loss: small responses go over UDP.
//   4. High-loss: a fraction (99%) of small responses go over TCP, the rest over UDP so the server keeps
//      measuring loss (TCP hides its own losses).
//   "fresh"  = responses sent by UDP to requests without the resend flag.
//   "resent" = resent requests received (including the ones ignored through the ring below: a resend that
//              races a slow TCP answer is exactly the congestion signal the paper wants to see), except a resend
//              of a request the server has not answered yet (our addition: see `admit`).
//   A ring of the last 10,000 (client address, request ID) pairs answered over TCP: a resend naming one of
//   them is ignored, TCP already delivers that answer reliably.
//
// Early resends (our addition): a resend that reaches the server sooner after its UDP answer left than the path's
// round trip to that client (as the server last measured it: a CATP stream's reports) was sent before the answer
// could have arrived. It says the client's timer is shorter than the path's queue, not that the answer was lost: it
// is not counted in `resent`, and is answered as a request without the resend flag (over UDP, in low-loss mode),
// in case it was lost after all. On a slow link a page's own stream queues its small answers past the client's
// fixed resend timer; counted, each such resend put the client's prefix in high-loss mode, and every small answer
// after it went over a connection the server opens, a handshake through that same queue (docs: session 66).
//
// Per client prefix (our addition; the paper keeps one pair of counters for the whole server): the mode is
// decided from the counters of the requester's prefix (IPv4 /24, IPv6 /48), kept for the most recent
// `maxPeers` prefixes. One client's resend flags (a lossy path, or an attacker sending nothing but resends)
// move only its own neighbourhood into high-loss mode, never every client of the server. The global counters
// stay, for statistics.
//
// Counter decay (our addition; the paper keeps the counters forever): both counters are halved every
// `decayIntervalMs` (default 10 s) of elapsed time, lazily, whenever the chooser is consulted. Halving both
// keeps the ratio, but lets fresh evidence outweigh old evidence: after a loss burst ends, the 1% monitoring
// UDP responses grow `fresh` while the old `resent` count fades geometrically, so the server leaves
// high-loss mode within about a minute instead of never. Values that decay below 1/1024 snap to 0.

export type Channel = 'udp' | 'tcp';

export interface ChannelOptions {
  /** Largest encoded response (ID + HTTP bytes) that may go over UDP. */
  sizeThreshold: number;
  /** resent/fresh ratio above which the server is in high-loss mode. */
  lossThreshold: number;
  /** Fraction of small responses sent over TCP in high-loss mode. */
  highLossTcpFraction: number;
  /** Capacity of the ring of (client, ID) pairs answered over TCP. */
  ringSize: number;
  /** Halve both counters every this many ms; 0 or Infinity disables decay. */
  decayIntervalMs: number;
  /** Client prefixes whose counters are kept (least recently seen forgotten first). */
  maxPeers: number;
}

export const DEFAULT_CHANNEL_OPTIONS: Readonly<ChannelOptions> = Object.freeze({
  sizeThreshold: 1460,
  lossThreshold: 0.01,
  highLossTcpFraction: 0.99,
  ringSize: 10_000,
  decayIntervalMs: 10_000,
  maxPeers: 65_536,
});

/** The prefix a client's loss counters are kept under: IPv4 /24, IPv6 /48 (an IPv4-mapped IPv6 address as IPv4). */
export function lossPrefix(address: string): string {
  const a = address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(a)) return `${a.slice(0, a.lastIndexOf('.'))}.0/24`;
  if (!a.includes(':')) return a;
  // expand '::' enough to take the first three groups
  const [head = '', tail] = a.split('::', 2);
  const groups = head === '' ? [] : head.split(':');
  if (tail !== undefined) while (groups.length < 3) groups.push('0');
  return `${groups.slice(0, 3).map((g) => g.toLowerCase().replace(/^0+(?=.)/, '')).join(':')}::/48`;
}

/** Decayed fresh / resent counters, for the whole server or for one client prefix. */
class LossCounters {
  fresh = 0;
  resent = 0;
  constructor(public lastDecay: number) {}

  decay(now: number, interval: number): void {
    if (!(interval > 0) || !Number.isFinite(interval)) return;
    const elapsed = now - this.lastDecay;
    if (!(elapsed >= interval)) {
      if (elapsed < 0) this.lastDecay = now; // clock went backwards: restart the period
      return;
    }
    const steps = Math.floor(elapsed / interval);
    this.lastDecay += steps * interval;
    const factor = steps >= 64 ? 0 : Math.pow(2, -steps);
    this.fresh = snap(this.fresh * factor);
    this.resent = snap(this.resent * factor);
  }

  highLoss(threshold: number): boolean {
    return this.resent > 0 && this.resent > threshold * this.fresh;
  }
}

export interface ChannelDeps {
  /** Monotonic milliseconds. */
  now: () => number;
  /** Uniform in [0, 1). */
  rng: () => number;
}

export type ChoiceReason = 'size' | 'resend' | 'low-loss' | 'high-loss-tcp' | 'high-loss-monitor';

export interface ChannelDecision {
  channel: Channel;
  reason: ChoiceReason;
}

export interface ChannelCounters {
  /** Decayed fresh counter (UDP responses to non-resent requests). */
  fresh: number;
  /** Decayed resent counter (resent requests received). */
  resent: number;
  /** Lifetime totals, never decayed. */
  freshTotal: number;
  resentTotal: number;
  /** Resends of requests the server was still answering (not counted in `resent`). */
  resentUnanswered: number;
  /** Resends that came sooner after their UDP answer left than the path's round trip (not counted in `resent`). */
  resentEarly: number;
  ignoredResends: number;
  highLossMode: boolean;
  /** client prefixes in high-loss mode now, and prefixes tracked */
  highLossPeers: number;
  peers: number;
  ringEntries: number;
}

/** Ring buffer of recent keys with O(1) membership; the oldest entry is evicted when full. */
export class RecentKeyRing {
  private readonly slots: (string | undefined)[];
  private readonly counts = new Map<string, number>();
  private next = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('ring capacity must be a positive integer');
    this.slots = new Array<string | undefined>(capacity);
  }

  add(key: string): void {
    const old = this.slots[this.next];
    if (old !== undefined) {
      const c = this.counts.get(old) ?? 0;
      if (c <= 1) this.counts.delete(old);
      else this.counts.set(old, c - 1);
    }
    this.slots[this.next] = key;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    this.next = (this.next + 1) % this.capacity;
  }

  has(key: string): boolean {
    return this.counts.has(key);
  }

  get size(): number {
    return this.counts.size;
  }
}

/** Key for the ring: the paper's "global request ID" (client IP address + request ID). */
export function globalRequestKey(clientAddress: string, idHex: string): string {
  return `${clientAddress}|${idHex}`;
}

export class ChannelChooser {
  readonly options: Readonly<ChannelOptions>;
  private readonly all: LossCounters;
  /** per client prefix; Map order = least recently seen first */
  private readonly peers = new Map<string, LossCounters>();
  private freshTotal = 0;
  private resentTotal = 0;
  private resentUnanswered = 0;
  private resentEarly = 0;
  private ignored = 0;
  private readonly ring: RecentKeyRing;
  /** When the last UDP answer to each recent (client, ID) left; Map order = oldest first, at most `ringSize`. */
  private readonly answeredUdpAt = new Map<string, number>();

  constructor(options: Partial<ChannelOptions> | undefined, private readonly deps: ChannelDeps) {
    const o: ChannelOptions = { ...DEFAULT_CHANNEL_OPTIONS };
    for (const [k, v] of Object.entries(options ?? {}) as [keyof ChannelOptions, number | undefined][]) {
      if (v !== undefined) o[k] = v;
    }
    if (!(o.sizeThreshold >= 0)) throw new RangeError('sizeThreshold must be >= 0');
    if (!(o.lossThreshold >= 0)) throw new RangeError('lossThreshold must be >= 0');
    if (!(o.highLossTcpFraction >= 0 && o.highLossTcpFraction <= 1)) throw new RangeError('highLossTcpFraction must be in [0, 1]');
    if (!(o.decayIntervalMs >= 0)) throw new RangeError('decayIntervalMs must be >= 0');
    if (!(Number.isInteger(o.maxPeers) && o.maxPeers >= 1)) throw new RangeError('maxPeers must be a positive integer');
    this.options = Object.freeze(o);
    this.ring = new RecentKeyRing(o.ringSize);
    this.all = new LossCounters(deps.now());
  }

  /** The counters of a client's prefix (created, and made most recent); the server's when no client is named. */
  private peer(clientAddress: string | undefined): LossCounters {
    if (clientAddress === undefined) return this.all;
    const key = lossPrefix(clientAddress);
    let p = this.peers.get(key);
    if (p !== undefined) this.peers.delete(key);
    else {
      p = new LossCounters(this.deps.now());
      if (this.peers.size >= this.options.maxPeers) this.peers.delete(this.peers.keys().next().value as string);
    }
    this.peers.set(key, p);
    p.decay(this.deps.now(), this.options.decayIntervalMs);
    return p;
  }

  /**
   * First step for every DHTTP request received over UDP. Counts resends; returns 'ignore' for a resend
   * whose (client, ID) was already answered over TCP, 'process' otherwise. `unanswered`: the server is still
   * working on this request (it came, and nothing has been sent for it yet), so the resend says the client's
   * timer ran out before the server answered, not that the path lost anything, and it is not counted: a slow
   * first encode of a large page would otherwise put the client's whole prefix in high-loss mode (traced in
   * the lab, where the warm-up's resend sent every small answer of the next loads over TCP, loss or not).
   * `pathRttMs`: the round trip to this client as the server last measured it (null: not measured); a resend that
   * came sooner than that after its UDP answer left is 'early' (see the top of this file): not counted, and to be
   * answered as a request without the resend flag.
   */
  admit(clientAddress: string, idHex: string, resend: boolean, unanswered = false, pathRttMs: number | null = null): 'process' | 'ignore' | 'early' {
    if (!resend) return 'process';
    const key = globalRequestKey(clientAddress, idHex);
    if (unanswered && !this.ring.has(key)) {
      this.resentUnanswered += 1;
      return 'process';
    }
    const answeredAt = this.answeredUdpAt.get(key);
    if (answeredAt !== undefined && pathRttMs !== null && this.deps.now() - answeredAt < pathRttMs && !this.ring.has(key)) {
      this.resentEarly += 1;
      return 'early';
    }
    this.decay();
    this.all.resent += 1;
    this.peer(clientAddress).resent += 1;
    this.resentTotal += 1;
    if (this.ring.has(key)) {
      this.ignored += 1;
      return 'ignore';
    }
    return 'process';
  }

  /**
   * Chooses the channel for a response whose encoded size (ID + HTTP bytes) is `encodedSize`, to `clientAddress`
   * (its prefix's mode; without it, the server-wide mode).
   */
  choose(encodedSize: number, resend: boolean, clientAddress?: string): ChannelDecision {
    if (encodedSize > this.options.sizeThreshold) return { channel: 'tcp', reason: 'size' };
    if (resend) return { channel: 'tcp', reason: 'resend' };
    if (!this.highLossModeFor(clientAddress)) return { channel: 'udp', reason: 'low-loss' };
    return this.deps.rng() < this.options.highLossTcpFraction
      ? { channel: 'tcp', reason: 'high-loss-tcp' }
      : { channel: 'udp', reason: 'high-loss-monitor' };
  }

  /** Records a response that was actually sent over UDP (to `clientAddress`, when named). */
  sentUdp(resend: boolean, clientAddress?: string): void {
    if (resend) return;
    this.decay();
    this.all.fresh += 1;
    if (clientAddress !== undefined) this.peer(clientAddress).fresh += 1;
    this.freshTotal += 1;
  }

  /**
   * Records when a full answer to (client, ID) left over UDP (an early resend is measured from the latest); the
   * oldest of `ringSize` entries is forgotten first.
   */
  answeredUdp(clientAddress: string, idHex: string): void {
    const key = globalRequestKey(clientAddress, idHex);
    this.answeredUdpAt.delete(key);
    if (this.answeredUdpAt.size >= this.options.ringSize) this.answeredUdpAt.delete(this.answeredUdpAt.keys().next().value as string);
    this.answeredUdpAt.set(key, this.deps.now());
  }

  /** Records a response that was actually written to a TCP connection for a UDP request. */
  sentTcp(clientAddress: string, idHex: string): void {
    this.ring.add(globalRequestKey(clientAddress, idHex));
  }

  /** True when the ring holds this (client, ID) pair. */
  answeredOverTcp(clientAddress: string, idHex: string): boolean {
    return this.ring.has(globalRequestKey(clientAddress, idHex));
  }

  /** The server-wide mode (statistics; responses follow their client prefix's mode). */
  get highLossMode(): boolean {
    this.decay();
    return this.all.highLoss(this.options.lossThreshold);
  }

  /** The mode for responses to this client (its prefix's counters); the server-wide one without a client. */
  highLossModeFor(clientAddress: string | undefined): boolean {
    if (clientAddress === undefined) return this.highLossMode;
    const p = this.peers.get(lossPrefix(clientAddress));
    if (p === undefined) return false;
    p.decay(this.deps.now(), this.options.decayIntervalMs);
    return p.highLoss(this.options.lossThreshold);
  }

  counters(): ChannelCounters {
    const highLossMode = this.highLossMode;
    let highLossPeers = 0;
    for (const p of this.peers.values()) {
      p.decay(this.deps.now(), this.options.decayIntervalMs);
      if (p.highLoss(this.options.lossThreshold)) highLossPeers++;
    }
    return {
      fresh: this.all.fresh,
      resent: this.all.resent,
      freshTotal: this.freshTotal,
      resentTotal: this.resentTotal,
      resentUnanswered: this.resentUnanswered,
      resentEarly: this.resentEarly,
      ignoredResends: this.ignored,
      highLossMode,
      highLossPeers,
      peers: this.peers.size,
      ringEntries: this.ring.size,
    };
  }

  private decay(): void {
    this.all.decay(this.deps.now(), this.options.decayIntervalMs);
  }
}

function snap(v: number): number {
  return v < 1 / 1024 ? 0 : v;
}

/** Small deterministic PRNG for tests and reproducible runs (shared: protocol/random.ts). */
