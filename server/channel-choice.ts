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
//              races a slow TCP answer is exactly the congestion signal the paper wants to see).
//   A ring of the last 10,000 (client address, request ID) pairs answered over TCP: a resend naming one of
//   them is ignored, TCP already delivers that answer reliably.
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
}

export const DEFAULT_CHANNEL_OPTIONS: Readonly<ChannelOptions> = Object.freeze({
  sizeThreshold: 1460,
  lossThreshold: 0.01,
  highLossTcpFraction: 0.99,
  ringSize: 10_000,
  decayIntervalMs: 10_000,
});

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
  ignoredResends: number;
  highLossMode: boolean;
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
  private fresh = 0;
  private resent = 0;
  private freshTotal = 0;
  private resentTotal = 0;
  private ignored = 0;
  private lastDecay: number;
  private readonly ring: RecentKeyRing;

  constructor(options: Partial<ChannelOptions> | undefined, private readonly deps: ChannelDeps) {
    const o: ChannelOptions = { ...DEFAULT_CHANNEL_OPTIONS };
    for (const [k, v] of Object.entries(options ?? {}) as [keyof ChannelOptions, number | undefined][]) {
      if (v !== undefined) o[k] = v;
    }
    if (!(o.sizeThreshold >= 0)) throw new RangeError('sizeThreshold must be >= 0');
    if (!(o.lossThreshold >= 0)) throw new RangeError('lossThreshold must be >= 0');
    if (!(o.highLossTcpFraction >= 0 && o.highLossTcpFraction <= 1)) throw new RangeError('highLossTcpFraction must be in [0, 1]');
    if (!(o.decayIntervalMs >= 0)) throw new RangeError('decayIntervalMs must be >= 0');
    this.options = Object.freeze(o);
    this.ring = new RecentKeyRing(o.ringSize);
    this.lastDecay = deps.now();
  }

  /**
   * First step for every DHTTP request received over UDP. Counts resends; returns 'ignore' for a resend
   * whose (client, ID) was already answered over TCP, 'process' otherwise.
   */
  admit(clientAddress: string, idHex: string, resend: boolean): 'process' | 'ignore' {
    if (!resend) return 'process';
    this.decay();
    this.resent += 1;
    this.resentTotal += 1;
    if (this.ring.has(globalRequestKey(clientAddress, idHex))) {
      this.ignored += 1;
      return 'ignore';
    }
    return 'process';
  }

  /** Chooses the channel for a response whose encoded size (ID + HTTP bytes) is `encodedSize`. */
  choose(encodedSize: number, resend: boolean): ChannelDecision {
    if (encodedSize > this.options.sizeThreshold) return { channel: 'tcp', reason: 'size' };
    if (resend) return { channel: 'tcp', reason: 'resend' };
    if (!this.highLossMode) return { channel: 'udp', reason: 'low-loss' };
    return this.deps.rng() < this.options.highLossTcpFraction
      ? { channel: 'tcp', reason: 'high-loss-tcp' }
      : { channel: 'udp', reason: 'high-loss-monitor' };
  }

  /** Records a response that was actually sent over UDP. */
  sentUdp(resend: boolean): void {
    if (resend) return;
    this.decay();
    this.fresh += 1;
    this.freshTotal += 1;
  }

  /** Records a response that was actually written to a TCP connection for a UDP request. */
  sentTcp(clientAddress: string, idHex: string): void {
    this.ring.add(globalRequestKey(clientAddress, idHex));
  }

  /** True when the ring holds this (client, ID) pair. */
  answeredOverTcp(clientAddress: string, idHex: string): boolean {
    return this.ring.has(globalRequestKey(clientAddress, idHex));
  }

  get highLossMode(): boolean {
    this.decay();
    return this.resent > 0 && this.resent > this.options.lossThreshold * this.fresh;
  }

  counters(): ChannelCounters {
    const highLossMode = this.highLossMode;
    return {
      fresh: this.fresh,
      resent: this.resent,
      freshTotal: this.freshTotal,
      resentTotal: this.resentTotal,
      ignoredResends: this.ignored,
      highLossMode,
      ringEntries: this.ring.size,
    };
  }

  private decay(): void {
    const interval = this.options.decayIntervalMs;
    if (!(interval > 0) || !Number.isFinite(interval)) return;
    const now = this.deps.now();
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
}

function snap(v: number): number {
  return v < 1 / 1024 ? 0 : v;
}

/** Small deterministic PRNG for tests and reproducible runs (shared: protocol/random.ts). */
