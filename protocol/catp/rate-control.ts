/**
 * Rate discovery for the CATP and in-order senders: a delivery-rate controller in the manner of BBR (Cardwell
 * et al., "BBR: Congestion-Based Congestion Control", 2016), sans-IO. Nothing tells it the path's rate; it
 * paces at an estimate of the bottleneck bandwidth, caps the data in flight at a multiple of the estimated
 * bandwidth-delay product, probes for more now and then, and backs off when a queue stands or delivery stalls.
 * Random loss is not a congestion signal here (see `drain samples` below), because CATP exists for lossy paths.
 *
 * Units: bytes (or frames, when the sender paces by frames) and milliseconds. Every send gets an index
 * 0, 1, 2 …; the receiver's report echoes the last frame it received, which the sender maps to the send index
 * of that frame's latest send (`onAck`).
 *
 * Samples. When send B is acknowledged, everything sent before B has left the network: delivered, or lost
 * (RACK's reasoning, RFC 8985). Against the snapshot taken when B was sent (the latest acknowledged send then,
 * and when its ack came), two rates are sampled over max(ack interval, send interval), as BBR does:
 *  - the *drain* rate: bytes of all sends up to B, delivered or lost;
 *  - the *delivery* rate: bytes the receiver reports it received (its count of frames × the mean frame size).
 * When B's RTT is *quiet* — near the minimum and in the lower half of the recent RTT range — no queue stood, so
 * a loss cannot have been a queue overflowing: it is random, and the drain rate is what the path takes from us.
 * Pacing at it keeps the bottleneck full through random loss (before the bottleneck a lost packet costs no
 * bandwidth, after it the sender could not have known). Otherwise losses may be tail drops and only the delivery
 * rate counts. The bandwidth estimate is the maximum sample over the last `bwWindowRounds` round trips.
 *
 * States (BBR's): STARTUP paces at 2.885× the estimate until it stops growing by 25% for 3 rounds, or until three
 * acks in a row meet a queue of ours (`startupQueue`: on a slow link BBR's three rounds are the queue), DRAIN paces at
 * 1/2.885 until the data in flight is down to one BDP, then PROBE_BW cycles pacing gains 1.25, 0.75, 1 ×6, one
 * min-RTT each; when the min RTT is 10 s old, PROBE_RTT holds `minWindowFrames` in flight for 200 ms once our
 * queue has drained, and takes the least RTT meanwhile. In flight ≤ 2 × estimate × (min RTT + the longest recent
 * ack gap, ≤ 40 ms), at least `minWindowFrames`; before the first sample, `initialWindowFrames` (like TCP's
 * initial window, RFC 6928), paced over the assumed initial RTT, or a handshake's, and no faster than a dispersion
 * rate (`seedRate`) when the server read one from the client's first two datagrams; after a first flight, startup
 * keeps at least that window and pacing (the dispersion rate's bound included) while the RTTs stay at the
 * handshake's (`firstFlightFloor`), and meanwhile grows the window by every byte delivered and paces at no less than
 * twice it over the min RTT, as TCP's slow start (`slowStartWindow`).
 *
 * Backing off. Congestion: a round with data to send that lost more than the random baseline (quiet samples'
 * loss, outside startup) plus max(`congestionLoss`, 3 standard deviations), with a queue in sight (the round's
 * largest RTT above 1.25 × the least, or in the upper half of a recent RTT span, by more than 2 ms + one largest
 * frame's serialization at the estimate), two rounds running, sets the estimate to 0.85 × the round's delivery
 * rate — a competing flow is filling the queue, or we are. A standing queue (two
 * rounds whose least RTT stood well above the minimum while we sent at the estimate) sets it to what the round
 * drained: the bottleneck's rate now. A stall (nothing acknowledged for a retransmission timeout, at least
 * 200 ms, while data is in flight) shrinks the window to `minWindowFrames` and halves the rate, backing off
 * exponentially like TCP's RTO (RFC 6298 §5.5). protocol/README.md says why each rule is there.
 */

export interface RateControlOptions {
  /** Typical frame size in bytes (turns the receiver's frame count into bytes; 1 when pacing by frames). */
  frameBytes: number;
  /** Frames allowed in flight before the first sample (default 10). */
  initialWindowFrames?: number;
  /** The window never shrinks below this many frames (default 4). */
  minWindowFrames?: number;
  /** RTT assumed before the first sample, for the first pacing rate (default 100 ms). */
  initialRttMs?: number;
  /** Upper bound on the pacing rate, bytes per ms (a client's `Catp-Rate`; default none). */
  maxRate?: number;
  /** Lower bound on the pacing rate, bytes per ms (default 1 = 1,000 B/s). */
  minRate?: number;
  /** Round trips the bandwidth estimate remembers (default 10). */
  bwWindowRounds?: number;
  /** Loss above the random baseline, in a queue-standing round, that caps the estimate (default 0.02). */
  congestionLoss?: number;
}

export type RateState = 'startup' | 'drain' | 'probe_bw' | 'probe_rtt';

const STARTUP_GAIN = 2.885; // 2/ln 2: doubles the delivery rate per round, as BBR
/** Acks in a row that met a queue of ours before startup ends (`startupQueue`). */
const STARTUP_QUEUED_ACKS = 3;
const CWND_GAIN = 2;
const PROBE_GAINS = [1.25, 0.75, 1, 1, 1, 1, 1, 1];
const MIN_RTT_WINDOW_MS = 10_000;
/** How long probe_rtt holds the least window once our queue has drained (BBR's 200 ms). */
const PROBE_RTT_MS = 200;
const MIN_STALL_RTO_MS = 200;
const CONGESTION_BETA = 0.85;
/** Most ack aggregation (ms of the estimate) the window allows for beyond 2 BDP. */
const MAX_ACK_ALLOWANCE_MS = 40;

interface AckPoint {
  /** when the receiver got the acknowledged send (sender's clock, less the report's echo delay) */
  ackAt: number;
  /** bytes of all sends up to and including the acknowledged one */
  drained: number;
  /** bytes the receiver had received over the network */
  delivered: number;
  /** when the acknowledged send went out */
  sentAt: number;
}

export interface RateSnapshot {
  state: RateState;
  /** bandwidth estimate, bytes per ms */
  btlBw: number;
  minRttMs: number;
  pacingRate: number;
  cwnd: number;
  rounds: number;
  congestionCaps: number;
  queueCaps: number;
  stalls: number;
  probeRtts: number;
  /** 1 when startup ended on its own queue (`startupQueue`), not after three flat rounds. */
  startupQueueExits: number;
}

export class RateController {
  private readonly frameBytes: number;
  private readonly initialWindow: number;
  private readonly minWindow: number;
  private readonly initialRtt: number;
  private readonly maxRate: number;
  private readonly minRate: number;
  private readonly bwWindow: number;
  private readonly congestionLoss: number;

  state: RateState = 'startup';
  /** per-round maxima, newest last (at most bwWindow) */
  private bwRounds: number[] = [];
  private roundMax = 0;
  private minRtt = Infinity;
  /** Size of the send whose RTT is the min RTT (its serialization is in it; a larger frame's would be longer). */
  private minRttBytes = 0;
  private probeRttMinBytes = 0;
  /** per-round largest RTT sample, newest last (at most bwWindow): how full the queue gets */
  private rttRounds: number[] = [];
  private roundMaxRtt = 0;
  /** per-round longest gap between acks, newest last (at most bwWindow) */
  private ackGapRounds: number[] = [];
  private roundMaxAckGap = 0;
  private minRttAt = -Infinity;
  /** probe_rtt: when it may end (null until the data in flight is down to the least window), its least RTT */
  private probeRttDoneAt: number | null = null;
  private probeRttMin = Infinity;
  /** times the min RTT expired and probe_rtt measured it again */
  probeRtts = 0;
  private rounds = 0;
  private roundEndIdx = 0;
  /** first send of the round that just ended */
  private roundStartIdx = 0;
  private fullBw = 0;
  private fullBwRounds = 0;
  private cycleIdx = 2;
  private cycleAt = 0;
  /** sends: time, cumulative bytes, snapshot (index into acks) at send time */
  private sendAt: number[] = [];
  private sendCum: number[] = [];
  private sendSnap: number[] = [];
  private appLimitedUntil = -1;
  private acks: AckPoint[] = [];
  private latestAcked = -1;
  private lastProgressAt: number | null = null;
  /** round accounting for the congestion rule */
  private roundMinRtt = Infinity;
  private roundStart: AckPoint | null = null;
  private quietLoss = 0;
  private quietLossSeen = false;
  /** standing-queue rounds in a row with loss above the baseline */
  private lossyRounds = 0;
  /**
   * When probe_bw began after startup and drain. The random-loss baseline learns only from samples whose interval
   * began after it: the first quiet sample after drain reached back into startup, and startup's overshoot into a
   * queue a TCP flow had filled first lost most of what it sent (simulated: 64%), which then stood as "random" loss
   * and hid every later congestion round (the flow kept 86% of the link, TCP 14%).
   */
  private probeSince = Infinity;
  /** rounds in a row with a standing queue while we sent at the estimate or more */
  private standingRounds = 0;
  congestionCaps = 0;
  /** rounds a standing queue set the estimate to what the round delivered */
  queueCaps = 0;
  stalls = 0;
  private capUntilRound = -1;

  constructor(opts: RateControlOptions) {
    this.frameBytes = opts.frameBytes;
    this.initialWindow = (opts.initialWindowFrames ?? 10) * opts.frameBytes;
    this.minWindow = (opts.minWindowFrames ?? 4) * opts.frameBytes;
    this.initialRtt = opts.initialRttMs ?? 100;
    this.startRtt = this.initialRtt;
    this.slowStartWindow = this.initialWindow;
    this.maxRate = opts.maxRate ?? Infinity;
    this.minRate = Math.min(opts.minRate ?? 1, this.maxRate);
    this.bwWindow = opts.bwWindowRounds ?? 10;
    this.congestionLoss = opts.congestionLoss ?? 0.02;
  }

  /** Bandwidth estimate (bytes per ms); 0 before the first sample. */
  get btlBw(): number {
    let m = this.roundMax;
    for (const v of this.bwRounds) if (v > m) m = v;
    return m;
  }

  get minRttMs(): number {
    return Number.isFinite(this.minRtt) ? this.minRtt : this.initialRtt;
  }

  /** Longest gap between acks of the last bwWindow rounds (the current one included). */
  private ackGapRecent(): number {
    let m = this.roundMaxAckGap;
    for (const v of this.ackGapRounds) if (v > m) m = v;
    return m;
  }

  /** Largest RTT sample of the last bwWindow rounds (the current one included). */
  private maxRttRecent(): number {
    let m = this.roundMaxRtt;
    for (const v of this.rttRounds) if (v > m) m = v;
    return m > 0 ? m : this.minRttMs;
  }

  private gain(): number {
    if (this.state === 'startup') return STARTUP_GAIN;
    if (this.state === 'drain') return 1 / STARTUP_GAIN;
    if (this.state === 'probe_rtt') return 1;
    return PROBE_GAINS[this.cycleIdx];
  }

  /** Pacing rate in bytes per ms at `nowMs`. */
  pacingRate(nowMs: number): number {
    const bw = this.btlBw;
    let r: number;
    // before a sample: the initial window over one RTT (the handshake's, when the sender was given it)
    if (bw === 0) r = this.initialPacing(Number.isFinite(this.minRtt) ? this.minRtt : this.startRtt);
    else {
      r = this.gain() * bw;
      if (this.firstFlightFloor()) r = Math.max(r, this.initialPacing(this.startRtt), this.slowStartPacing());
    }
    const stalls = this.stallCount(nowMs);
    if (stalls > 0) r /= 2 ** stalls;
    return Math.max(this.minRate, Math.min(this.maxRate, r));
  }

  /**
   * Slow start's window over the least RTT, twice (Linux paces TCP in slow start at 2 × cwnd / srtt), no faster
   * than the dispersion hint: the estimate lags the rate sent at by a round trip or more, and pacing at 2.885 × the
   * estimate alone held the first rounds of a fast path below what the window allowed.
   */
  private slowStartPacing(): number {
    return Math.min((2 * this.slowStartWindow) / this.minRttMs, this.startRate);
  }

  /** The initial window over `rttMs` at the current gain, no faster than the dispersion hint (`seedRate`). */
  private initialPacing(rttMs: number): number {
    return Math.min(this.gain() * (this.initialWindow / rttMs), this.startRate);
  }

  /** Most bytes that may be in flight. */
  cwnd(nowMs: number): number {
    if (this.stallCount(nowMs) > 0) return this.minWindow;
    const bw = this.btlBw;
    if (bw === 0) return this.initialWindow;
    if (this.state === 'probe_rtt') return this.minWindow;
    const gain = this.state === 'startup' ? STARTUP_GAIN : CWND_GAIN;
    // acks come in batches (every 2 frames or 10 ms, one report per 5 ms at most, a busy client's event loop):
    // the window also covers the longest recent gap between acks, or a path whose RTT is below it (loopback, a
    // LAN, a client busy painting) never fills — BBR's extra_acked, measured more simply
    const w = Math.max(this.minWindow, gain * bw * (this.minRttMs + Math.min(MAX_ACK_ALLOWANCE_MS, this.ackGapRecent())));
    return this.firstFlightFloor() ? Math.max(w, this.slowStartWindow) : w;
  }

  /**
   * After a first flight (address validation: a few frames, as many as the unproven address's budget allowed,
   * then a pause until the proof), the first samples measure that budget, not the path: three frames per round
   * trip, where a TCP sender's first sample is its initial window's ten. On a fast path that put the estimate
   * at a tenth of what the initial window had paced at, and startup spent three extra rounds climbing back. So
   * while startup's frames come back as fast as the handshake's two small datagrams did (RTT ≤ 1.25 × the
   * handshake's + 2 ms: no serialization or queue in sight, the path is faster than anything we sent), the
   * window and the pacing stay at least at the initial window's — as BBR's startup never lowers either. On a
   * slow path a frame's RTT shows its serialization at once (10 kB/s: ~140 ms against the handshake's ~50) and
   * the samples rule from the first report, as before.
   */
  private firstFlightFloor(): boolean {
    return this.state === 'startup' && this.seeded && !this.pathShownSlow;
  }

  /** `seedRtt` took a handshake's RTT (it only takes one shorter than the assumed `initialRttMs`). */
  private get seeded(): boolean {
    return this.startRtt < this.initialRtt;
  }
  /** An RTT sample came back well above the handshake's: the path's serialization or a queue is in sight. */
  private pathShownSlow = false;

  /**
   * Bytes in flight: sent after the latest acknowledged send, and not older than the retransmission timeout
   * (`rtoMs`, the sender's; such a send is lost or its ack is: either way the window must not wait for it).
   */
  inflight(nowMs: number, rtoMs: number): number {
    const n = this.sendAt.length;
    if (n === 0) return 0;
    const after = this.firstInFlight(nowMs, rtoMs * 2 ** this.stallCount(nowMs));
    if (after >= n) return 0;
    return this.sendCum[n - 1] - (after > 0 ? this.sendCum[after - 1] : 0);
  }

  /** May a send of `bytes` go now (the window permits it)? */
  canSend(nowMs: number, rtoMs: number): boolean {
    return this.inflight(nowMs, rtoMs) < this.cwnd(nowMs);
  }

  /** When a closed window opens by itself (enough of its oldest sends in flight pass the timeout), or null when open. */
  windowOpensAt(nowMs: number, rtoMs: number): number | null {
    if (this.canSend(nowMs, rtoMs)) return null;
    const n = this.sendAt.length;
    const wait = rtoMs * 2 ** this.stallCount(nowMs);
    const cwnd = this.cwnd(nowMs);
    // the first send j whose successors alone fit the window: it opens once sends up to j have aged out
    let j = this.firstInFlight(nowMs, wait);
    while (j < n && this.sendCum[n - 1] - this.sendCum[j] >= cwnd) j++;
    return j < n ? this.sendAt[j] + wait + 1e-3 : null;
  }

  /**
   * When the ack of send `sendIdx` is due by the delivery clock: the latest ack's time plus the bytes sent between
   * that send and this one at the estimated rate — a FIFO path delivers them in order at its rate. Null before an
   * estimate, or for a send not after the latest acknowledged one.
   */
  ackDueAt(sendIdx: number): number | null {
    const bw = this.btlBw;
    if (bw <= 0 || this.latestAcked < 0 || sendIdx <= this.latestAcked || sendIdx >= this.sendAt.length || this.acks.length === 0) return null;
    return this.acks[this.acks.length - 1].ackAt + (this.sendCum[sendIdx] - this.sendCum[this.latestAcked]) / bw;
  }

  /** The largest frame sent so far at the estimated rate, ms (0 before an estimate). */
  get largestFrameMs(): number {
    const bw = this.btlBw;
    return bw > 0 ? this.largestSend / bw : 0;
  }

  /** Typical frame size, bytes (the unit of the receiver's counts). */
  get frameSize(): number {
    return this.frameBytes;
  }

  /** The oldest send still in flight: after the latest acknowledged one, and sent within `waitMs`. */
  private firstInFlight(nowMs: number, waitMs: number): number {
    return Math.max(this.latestAcked + 1, this.firstSendAfter(nowMs - waitMs));
  }

  /** Index of the first send after time t (sends are in time order). */
  private firstSendAfter(t: number): number {
    let lo = 0;
    let hi = this.sendAt.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.sendAt[mid] <= t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Consecutive retransmission timeouts without progress while data was in flight. */
  private stallCount(nowMs: number): number {
    if (this.lastProgressAt === null || this.sendAt.length === 0 || this.latestAcked >= this.sendAt.length - 1) return 0;
    const base = Math.max(this.lastProgressAt, this.sendAt[Math.max(0, this.latestAcked + 1)]);
    // at least 200 ms (Linux's minimum RTO): on a path of a millisecond, a client busy painting for a few is no stall
    const rto = Math.max(this.stallRto, MIN_STALL_RTO_MS);
    let k = 0;
    let t = base + rto;
    while (nowMs >= t && k < 6) {
      k++;
      t += rto * 2 ** k;
    }
    return k;
  }

  private stallRto = 1000;

  /**
   * An RTT measured before any send of ours was acknowledged (a server's address-validation round trip: token
   * answer out, proof back). It sets startup's pacing — the initial window over one RTT, instead of over the
   * assumed `initialRttMs` — and nothing else: it is the RTT of two small datagrams, and on a slow link a full
   * frame's takes its serialization longer (at 10 kB/s, 50 against 140 ms), so as the min RTT it would shrink the
   * window below the path's BDP. Ignored once a report has given a sample, and when longer than `initialRttMs`
   * (a proof a busy client sent late must not make the start slower than it is without one). True when taken.
   */
  seedRtt(rttMs: number): boolean {
    if (this.latestAcked >= 0 || !(rttMs > 0) || !Number.isFinite(rttMs) || rttMs >= this.startRtt) return false;
    this.startRtt = rttMs;
    return true;
  }

  /** The RTT the initial window is paced over before the first sample (`initialRttMs`, or a handshake's). */
  private startRtt: number;

  /**
   * A rate measured before any send of ours was acknowledged: the dispersion of two datagrams the client sent back
   * to back (a first contact's request and its padding: the second's bytes over the time between their arrivals),
   * which is the client→server bottleneck's rate. Until the first sample the initial window is paced no faster
   * (a burst of ten frames into a 10 kB/s link stands a second in its queue, and a frame lost in it waits behind
   * that queue for its repair). Only ever slows the start: ignored once a report has given a sample, and when not a
   * positive finite rate. A path whose downlink is faster than its uplink finds the difference in startup, which
   * grows the rate 2.885× a round from its first samples. True when taken.
   */
  seedRate(bytesPerMs: number): boolean {
    if (this.latestAcked >= 0 || !(bytesPerMs > 0) || !Number.isFinite(bytesPerMs)) return false;
    this.startRate = Math.max(this.minRate, bytesPerMs);
    return true;
  }

  /** The most the initial window is paced at before the first sample (`seedRate`; none by default). */
  private startRate = Infinity;

  /** The sender's current retransmission timeout (for stall detection). */
  setRto(rtoMs: number): void {
    this.stallRto = rtoMs;
  }

  /**
   * A send of `bytes` goes out at `nowMs`; `appLimited`: the sender had nothing else to send (its samples may
   * understate the path). Returns the send index.
   */
  onSend(nowMs: number, bytes: number, appLimited: boolean): number {
    const i = this.sendAt.length;
    if (this.lastProgressAt === null) this.lastProgressAt = nowMs;
    this.endDrainIfDrained(nowMs);
    const k = this.stallCount(nowMs);
    if (k > this.stallsSeen) {
      this.stalls += k - this.stallsSeen;
      this.stallsSeen = k;
    }
    this.sendAt.push(nowMs);
    if (bytes > this.largestSend) this.largestSend = bytes;
    this.sendCum.push((i > 0 ? this.sendCum[i - 1] : 0) + bytes);
    this.sendSnap.push(this.acks.length - 1);
    // probe_rtt holds the window at its least on purpose: its samples say nothing about the path (as BBR marks them)
    if (appLimited || this.state === 'probe_rtt') this.appLimitedUntil = i;
    if (this.state === 'probe_bw' && nowMs - this.cycleAt >= this.minRttMs) {
      this.cycleIdx = (this.cycleIdx + 1) % PROBE_GAINS.length;
      this.cycleAt = nowMs;
    }
    return i;
  }

  private stallsSeen = 0;
  /** The largest send so far, bytes. */
  private largestSend = 0;
  /**
   * Startup's window grows by every byte a report says was delivered, from the initial window, as TCP's slow start
   * and Linux's BBR in startup grow theirs: the model's window (gain × estimate × RTT) follows the estimate, which
   * lags the sending rate by a round trip or more, and on a fast path the initial window held the first rounds to
   * it (10 MB/s, 5 ms: ~9 KB per 10 ms for two rounds, where TCP sent 15 and 30).
   */
  private slowStartWindow: number;
  private lastDelivered = 0;

  private inflightNow(): number {
    const n = this.sendAt.length;
    if (n === 0 || this.latestAcked >= n - 1) return 0;
    return this.sendCum[n - 1] - (this.latestAcked >= 0 ? this.sendCum[this.latestAcked] : 0);
  }

  private bdp(): number {
    return this.btlBw * this.minRttMs;
  }

  /**
   * Drain ends when no more than this is in flight: the BDP of a largest frame. The min RTT may come from a small
   * frame (an index frame, a page's last), whose serialization is shorter, and a pipe with no queue still holds a
   * frame being serialized: on a slow link that is most of what is in flight (10 kB/s, 10 ms one way: a 265-byte
   * frame's RTT 47 ms, BDP 470 B, a frame 1,460 B), and waiting for that BDP left the link idle until the last
   * report came back (the lab's 50 KB page, simulated: ~70 ms of 3.4 s).
   */
  private drainTarget(): number {
    return this.bdp() + Math.max(0, this.largestSend - this.minRttBytes);
  }

  private endDrainIfDrained(nowMs: number): void {
    if (this.state === 'drain' && this.inflightNow() <= this.drainTarget()) this.enterProbe(nowMs);
  }

  private enterProbe(nowMs: number): void {
    if (this.state === 'drain') this.probeSince = nowMs; // (not when probe_rtt ends: probe_bw goes on)
    this.state = 'probe_bw';
    this.cycleIdx = 2;
    this.cycleAt = nowMs;
  }

  /**
   * The receiver's report acknowledged send `sendIdx` (the latest send of the frame it echoes), received at
   * `ackAtMs` (report arrival less its echo delay), with `deliveredBytes` received over the network so far (the
   * sender's estimate from the report's frame count). `rttMs` is that send's RTT sample.
   */
  onAck(nowMs: number, sendIdx: number, ackAtMs: number, deliveredBytes: number, rttMs: number): void {
    if (sendIdx <= this.latestAcked || sendIdx >= this.sendAt.length) return; // stale or reordered report
    this.latestAcked = sendIdx;
    this.lastProgressAt = nowMs;
    this.stallsSeen = 0;
    if (this.seeded && rttMs > this.startRtt * 1.25 + 2) this.pathShownSlow = true;
    if (deliveredBytes > this.lastDelivered) {
      if (this.firstFlightFloor()) this.slowStartWindow += deliveredBytes - this.lastDelivered;
      this.lastDelivered = deliveredBytes;
    }
    if (rttMs >= 0) this.takeRtt(nowMs, rttMs, this.sendCum[sendIdx] - (sendIdx > 0 ? this.sendCum[sendIdx - 1] : 0));
    if (rttMs >= 0 && this.state === 'startup') this.startupQueue(nowMs, rttMs, sendIdx);
    if (this.state === 'probe_rtt') this.probeRtt(nowMs);
    const point: AckPoint = { ackAt: ackAtMs, drained: this.sendCum[sendIdx], delivered: deliveredBytes, sentAt: this.sendAt[sendIdx] };
    if (this.acks.length > 0) this.roundMaxAckGap = Math.max(this.roundMaxAckGap, ackAtMs - this.acks[this.acks.length - 1].ackAt);
    const snapIdx = this.sendSnap[sendIdx];
    const snap: AckPoint = snapIdx >= 0 ? this.acks[snapIdx] : { ackAt: this.sendAt[0], drained: 0, delivered: 0, sentAt: this.sendAt[0] };
    this.acks.push(point);
    const interval = Math.max(point.ackAt - snap.ackAt, point.sentAt - snap.sentAt);
    if (this.roundStart === null) this.roundStart = snap;
    if (rttMs >= 0) {
      this.roundMinRtt = Math.min(this.roundMinRtt, rttMs);
      this.roundMaxRtt = Math.max(this.roundMaxRtt, rttMs);
    }
    if (interval > 0) {
      // Quiet: near the least RTT, and in the lower half of the recent RTT range — a queue someone else keeps
      // full (a competing TCP flow that was there first) inflates even the least RTT we ever saw, and drops
      // happen only when it is full, near the top of the range.
      const quiet = rttMs >= 0 && rttMs <= Math.min(this.minRttMs * 1.25 + 2, (this.minRttMs + this.maxRttRecent()) / 2);
      const drainRate = (point.drained - snap.drained) / interval;
      const deliveryRate = Math.max(0, point.delivered - snap.delivered) / interval;
      let sample = quiet ? Math.max(drainRate, deliveryRate) : deliveryRate;
      // (not in startup: its overshoot fills a queue fast enough that drops come while the RTT still looks low)
      if (quiet && this.state === 'probe_bw' && snap.sentAt >= this.probeSince && point.drained > snap.drained) {
        // random loss seen with no queue: the baseline the congestion rule looks past
        const loss = Math.max(0, 1 - (point.delivered - snap.delivered) / (point.drained - snap.drained));
        this.quietLoss = this.quietLossSeen ? 0.875 * this.quietLoss + 0.125 * loss : loss;
        this.quietLossSeen = true;
      }
      if (this.rounds <= this.capUntilRound) sample = Math.min(sample, this.btlBw);
      // a send at or before the latest app-limited one may understate the path (as BBR marks its samples)
      const appLimited = sendIdx <= this.appLimitedUntil;
      if (!appLimited || sample > this.btlBw) this.roundMax = Math.max(this.roundMax, sample);
    }
    if (sendIdx >= this.roundEndIdx) this.endRound(nowMs, point);
    this.endDrainIfDrained(nowMs);
  }

  /**
   * An RTT sample. A new least one is the min RTT. When the min RTT is older than MIN_RTT_WINDOW_MS, BBR's
   * PROBE_RTT measures it again: the window shrinks to `minWindowFrames` until our own queue has drained, then
   * for PROBE_RTT_MS more, and the least sample meanwhile is the min RTT. Taking the sample of the moment instead
   * read our own queue as the path on a link we kept busy (100 kB/s, 20% loss: 32 → 112 ms): the window grew with
   * it past the bottleneck's queue, and tail drops went on for the rest of the transfer. Remembering the least
   * sample of the last 10 s instead was tried (`db8f44b`) and starved us beside a TCP flow: it remembered the dips
   * of TCP's queue, and the standing-queue rule kept capping us. Here a competing flow's queue, which does not
   * drain when we hold back, stays in the measurement, as in BBR. (In startup the sample of the moment is
   * taken: startup has not filled the pipe, and has no queue of ours yet to drain.)
   */
  private takeRtt(nowMs: number, rttMs: number, bytes: number): void {
    if (this.state === 'probe_rtt' && rttMs < this.probeRttMin) {
      this.probeRttMin = rttMs;
      this.probeRttMinBytes = bytes;
    }
    if (rttMs <= this.minRtt) {
      this.minRtt = rttMs;
      this.minRttBytes = bytes;
      this.minRttAt = nowMs;
    } else if (nowMs - this.minRttAt > MIN_RTT_WINDOW_MS) {
      if (this.state === 'probe_bw' || this.state === 'drain') {
        this.state = 'probe_rtt';
        this.probeRtts++;
        this.probeRttDoneAt = null;
        this.probeRttMin = rttMs;
        this.probeRttMinBytes = bytes;
      } else if (this.state === 'startup') {
        this.minRtt = rttMs;
        this.minRttBytes = bytes;
        this.minRttAt = nowMs;
      }
    }
  }

  /** In probe_rtt: once the data in flight is down to the least window, PROBE_RTT_MS (and a round trip) later, done. */
  private probeRtt(nowMs: number): void {
    if (this.probeRttDoneAt === null) {
      if (this.inflightNow() <= this.minWindow) this.probeRttDoneAt = nowMs + Math.max(PROBE_RTT_MS, this.probeRttMin);
      return;
    }
    if (nowMs < this.probeRttDoneAt) return;
    this.minRtt = this.probeRttMin;
    this.minRttBytes = this.probeRttMinBytes;
    this.minRttAt = nowMs;
    this.enterProbe(nowMs);
  }

  /**
   * Startup ends when our own queue stands: `STARTUP_QUEUED_ACKS` acks in a row, of sends that were not app-limited,
   * whose RTT is above 1.25 × the min RTT by more than 2 ms and one largest frame's serialization at the estimate
   * (a frame larger than the one that set the min RTT takes that much longer, queue or none). The bottleneck is
   * full then, so the delivery samples already measure it; BBR's three flat rounds are a round trip each, and on a
   * 10 kB/s link a round trip is the queue startup keeps — five frames, half a second, ahead of every repair
   * (a traced medium-2 load at 5%: frame 7's first repair waited ~470 ms in it and was lost, its second went at
   * 1.95 s; most real pages there end in startup). Drain then empties that queue.
   */
  private startupQueue(nowMs: number, rttMs: number, sendIdx: number): void {
    const bw = this.btlBw;
    if (bw <= 0 || sendIdx <= this.appLimitedUntil) return;
    const queued = rttMs > this.minRttMs * 1.25 + 2 + this.largestSend / bw;
    this.queuedAcks = queued ? this.queuedAcks + 1 : 0;
    if (this.queuedAcks >= STARTUP_QUEUED_ACKS) {
      this.state = 'drain';
      this.startupQueueExits++;
      this.endDrainIfDrained(nowMs);
    }
  }

  private queuedAcks = 0;
  /** Times startup ended on its own queue (`startupQueue`). */
  startupQueueExits = 0;

  private endRound(nowMs: number, point: AckPoint): void {
    this.rounds++;
    this.roundStartIdx = this.roundEndIdx;
    this.roundEndIdx = this.sendAt.length;
    const start = this.roundStart;
    // Even the least-delayed ack of the round met a queue, two rounds running: the bottleneck was busy all that
    // time, so what the round took is the path's rate now, not a lower bound — a link that slowed down is followed
    // in a few rounds instead of the filter's ten. (One such round may be a client that was busy painting for a
    // while, its socket buffer holding our frames: that is not the path.)
    const standing = Number.isFinite(this.roundMinRtt) && this.roundMinRtt > this.minRttMs * 1.5 + 5;
    const interval = start === null ? 0 : Math.max(point.ackAt - start.ackAt, point.sentAt - start.sentAt);
    // ... provided we sent at least at the estimate all round: a round we paced below it (drain, the 0.75 phase,
    // nothing to send) says nothing about the path's rate
    const sendSpan = start === null ? 0 : point.sentAt - start.sentAt;
    const pushing = sendSpan > 0 && (point.drained - (start?.drained ?? 0)) / sendSpan >= 0.95 * this.btlBw;
    this.standingRounds = standing && pushing ? this.standingRounds + 1 : 0;
    // congestion is judged on any round we had data for (a window-limited round counts: a full queue ahead makes
    // us window-limited); a round we had nothing to send says nothing
    const hadData = this.appLimitedUntil < this.roundStartIdx;
    if (start !== null && hadData && point.drained > start.drained && interval > 0) {
      const sent = point.drained - start.drained;
      const delivered = Math.min(sent, Math.max(0, point.delivered - start.delivered));
      const loss = 1 - delivered / sent;
      // Loss beyond the random baseline (the loss seen with no queue) by more than chance would give (3 standard
      // deviations), two rounds in a row, is congestion — a queue overflowing, ours or a competing flow's: the
      // estimate drops below what the round delivered (BBRv2's β for its inflight bound is 0.7; we take 0.85 of
      // the delivery rate), so a TCP flow sharing the queue gets room back.
      const frames = Math.max(1, sent / this.frameBytes);
      const noise = 3 * Math.sqrt(Math.max(this.quietLoss * (1 - this.quietLoss), 0.01) / frames);
      // ... and only with a queue in sight: a round whose every RTT stayed near the least lost its frames at
      // random, whatever the baseline knows yet (in startup it knows nothing: 20% random loss read as congestion
      // there and cut the estimate by ~0.7 a round, to a tenth of the link in a few rounds, from which probing
      // took tens of seconds to climb back)
      // A queue is in sight when the round's largest RTT is well above the least, or, where a competing flow's
      // queue was there before us (it inflates even the least RTT we saw), when the recent RTTs span more than
      // jitter and this round reached the upper half of the span: drops come when that queue is full. (One
      // frame's serialization at the estimate is allowed on top of both: a frame larger than the one that set
      // the least RTT takes that much longer by itself, queue or none.)
      const slack = this.btlBw > 0 ? 2 + this.largestSend / this.btlBw : Infinity;
      const recentMax = this.maxRttRecent();
      const queueSeen = this.roundMaxRtt > this.minRttMs * 1.25 + slack
        || (recentMax - this.minRttMs > slack && this.roundMaxRtt > (this.minRttMs + recentMax) / 2);
      // ... and at least two frames lost: a 10 kB/s link's rounds hold three or four frames, where one random loss
      // is a quarter of the round (3σ at the 1% floor is 15%): at 15% random loss two such rounds running came in
      // about every other load, each cutting the estimate to 0.85 of a round that had lost a quarter (catp
      // silent-time, 50 KB, seed 75: to 39% of the link, and the load took 6.8 s instead of 4.3). (Judging chance at
      // the flow's own loss instead, before a quiet baseline, took that away too, but also the caps that make room
      // for a TCP flow filling the queue: 2 of 6 fairness runs had TCP below half its share.)
      const lossy = queueSeen && loss > this.quietLoss + Math.max(this.congestionLoss, noise) && sent - delivered >= 2 * this.frameBytes;
      const congested = lossy && this.lossyRounds > 0;
      this.lossyRounds = lossy ? this.lossyRounds + 1 : 0;
      // A congested round cuts the estimate to at most half (TCP's multiplicative decrease, RFC 8085): a round that
      // lost most of its frames at random delivered a fraction of the link's rate, not the link's rate shared.
      const cap = congested ? Math.max((CONGESTION_BETA * delivered) / interval, this.btlBw / 2) : this.standingRounds >= 2 && pushing ? sent / interval : Infinity;
      if (cap < this.btlBw) {
        this.bwRounds = [];
        this.roundMax = cap;
        if (congested) this.congestionCaps++;
        else this.queueCaps++;
        this.capUntilRound = this.rounds + 1;
      }
    } else this.lossyRounds = 0;
    // probe_rtt's rounds (a handful of frames each, BBR's 200 ms may be forty rounds on a fast path) do not age the
    // estimate out: it is the path's rate from before, which the pipe refills at when probe_rtt ends
    if (this.state !== 'probe_rtt' || this.roundMax > 0) {
      this.bwRounds.push(this.roundMax);
      if (this.bwRounds.length > this.bwWindow) this.bwRounds.shift();
    }
    this.rttRounds.push(this.roundMaxRtt);
    if (this.rttRounds.length > this.bwWindow) this.rttRounds.shift();
    this.roundMaxRtt = 0;
    this.ackGapRounds.push(this.roundMaxAckGap);
    if (this.ackGapRounds.length > this.bwWindow) this.ackGapRounds.shift();
    this.roundMaxAckGap = 0;
    this.roundMax = 0;
    this.roundMinRtt = Infinity;
    this.roundStart = point;
    if (this.state === 'startup') {
      const bw = this.btlBw;
      const appLimited = this.appLimitedUntil >= this.latestAcked;
      if (bw >= this.fullBw * 1.25) {
        this.fullBw = bw;
        this.fullBwRounds = 0;
      } else if (!appLimited && ++this.fullBwRounds >= 3) {
        this.state = 'drain';
        this.endDrainIfDrained(nowMs);
      }
    }
  }

  snapshot(nowMs: number): RateSnapshot {
    return {
      state: this.state,
      btlBw: this.btlBw,
      minRttMs: this.minRttMs,
      pacingRate: this.pacingRate(nowMs),
      cwnd: this.cwnd(nowMs),
      rounds: this.rounds,
      congestionCaps: this.congestionCaps,
      queueCaps: this.queueCaps,
      stalls: this.stalls,
      probeRtts: this.probeRtts,
      startupQueueExits: this.startupQueueExits,
    };
  }
}
