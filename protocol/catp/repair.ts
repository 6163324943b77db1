/**
 * Loss repair, shared by CATP and the in-order (raw) mode. Sans-IO: time comes in as `nowMs`,
 * datagrams and reports go out as return values, timers as deadlines (`nextTimerAt()`).
 *
 * Receiver: reports missing frames as ranges. A report is due
 *  - as soon as a gap is evident (a frame arrives past the highest one seen + 1), coalesced to at most one
 *    per `minReportGapMs`; it lists what is missing below the highest frame seen (later frames may simply
 *    not have been sent yet);
 *  - on a timer, `reportIntervalMs` after the last report or new frame, listing everything missing up to
 *    the end (this catches tail loss and lost reports);
 *  - once when the transfer completes (flag `complete`, so the sender stops), and again (bounded) if
 *    frames keep coming or, backing off, on a timer (the last report may be what was lost).
 * It gives up (CATP_ERR_STALLED) after `maxSilentReports` timer reports in a row with no new frame (default
 * 300: 15 s at the default 50 ms. It was 40 = 2 s: in the silent-time lab, one drop pattern of 20 at 20% loss
 * on 10 kB/s made both catp and in-order give up while frames were lost again and again; TCP sat 7.9 s silent
 * on the same pattern and finished).
 *
 * Sender: paces datagrams (bytes/s, or frames/s) within a window, first pass in frame order (index first);
 * reported losses are queued for resend — index frames ahead of everything, then missing data frames
 * interleaved 1:1 with frames not yet sent; once every frame has gone once (a tail), each resend goes twice
 * (`repeatTailRepairs`). A frame the report lists as missing counts as lost (RACK,
 * RFC 8985) when a frame sent after it has been delivered (by more than a reorder window of ¼ smoothed
 * RTT), when three frames sent after it have been delivered (`PACKET_THRESHOLD`, RFC 9002's; a burst's frames are
 * never ¼ RTT apart), or when it was sent longer ago than the retransmission timeout (RFC 6298: srtt + 4·rttvar, at
 * least 1.25 × srtt). Otherwise it is still in flight: on a slow link a full frame spends a whole
 * serialization time (150 ms at 10 kB/s) on the wire, and the receiver's timer reports list it as missing
 * all that while; counting it lost caused spurious resends and rate decreases on a loss-free link.
 * The RTT comes from the report's echo of the last frame received. With block reuse (option `reuse`,
 * reuse-gate.ts) data frames wait for the client's exhaustive report, and frames it holds are never sent.
 *
 * Rate: by default ('discover') the sender finds the path's rate with rate-control.ts (a delivery-rate
 * controller after BBR; the receiver's reports every 2 frames or 10 ms clock it), and a configured rate only
 * bounds it. 'fixed' keeps wave 1's rule for the lab's ablation: pace at the configured rate, and once per epoch
 * (max(smoothed RTT, minEpochMs)) with reported losses, rate ← rate × max(½, 1 − lossFraction/2), never below
 * `minRateFraction` of it; a loss-free epoch adds 1/16 back.
 *
 * Bounds: each frame is sent at most `maxSendsPerFrame` times, the transfer gives up when no report has
 * shown a frame newly received for `giveUpAfterMs` (from the first datagram on) or when it has taken longer than
 * the page at `GIVE_UP_FLOOR_BYTES_PER_SEC` (never sooner than `giveUpAfterMs`), and an idle sender (nothing to
 * send, no report for `idleTimeoutMs`) stops — all with CATP_ERR_GAVE_UP. (The deadline was `giveUpAfterMs` after
 * the first datagram, whatever the progress: a 1 MB page sharing a 100 kB/s link with a TCP download, or any page
 * of more than 600 kB on a 10 kB/s link, could never finish — `bench:congestion`'s in-order load failed so.)
 */
import { CATP_ERR, CatpError, REJECT, Reject } from './errors';
import { RateController, type RateSnapshot } from './rate-control';
import { ReuseGate, type ReuseOptions } from './reuse-gate';
import { bytesEqual, decodeReport, encodeReport, FRAME_FLAG_REUSE, FRAME_KIND, ID_BYTES, MAX_FRAMES, NO_ECHO, PAGE_ID_BYTES } from './wire';

export interface ReceiverOptions {
  /** Request ID for the report datagrams (default: taken from the first frame). */
  requestId?: Uint8Array;
  /** The client's other-channel port for the DHTTP request prefix (default 0). */
  otherPort?: number;
  /** Timer report period while incomplete (default 50 ms). */
  reportIntervalMs?: number;
  /** At most one gap-triggered report per this many ms (default 5). */
  minReportGapMs?: number;
  /** Timer reports in a row without a new frame before giving up (default 300, i.e. 15 s at 50 ms). */
  maxSilentReports?: number;
  /** `complete` reports sent at most (default 4). */
  maxCompleteReports?: number;
  /** An acknowledging report is due once this many new frames came since the last report (default 2, like TCP). */
  ackEveryFrames?: number;
  /** … or this long after a new frame that no report has acknowledged yet (default 10 ms). */
  ackDelayMs?: number;
}

/** Ranges one report lists at most (the datagram holds ~140 anyway; encodeReport flags the cut). */
const MAX_REPORT_RANGES = 400;
/**
 * A reported-missing frame is lost once this many frames sent after it have been delivered (QUIC's
 * kPacketThreshold, RFC 9002 §6.1.1; TCP's three duplicate acks). The time rule alone missed losses inside a burst:
 * frames sent a few ms apart (an initial window on a 10 kB/s link) are never ¼ RTT apart in send time, so a frame
 * lost in one waited for a frame sent a whole queue later to arrive.
 */
const PACKET_THRESHOLD = 3;

/**
 * RFC 9002 §6.1.2's time threshold: a reported-missing frame that a later send overtook (delivered) is lost once 9/8
 * of the larger of srtt and the latest RTT sample has passed since it was sent, plus RACK's reordering window (RFC
 * 8985: ¼ of the least RTT; on a short path an eighth of an RTT is less than a jittery link reorders by). Neither
 * other rule covers a send overtaken by only the send right after it (a resend near the end of a page, a frame lost
 * at the end of an initial window): the time rule compares send times (¼ srtt apart), the packet rule needs three.
 * On a 10 kB/s link whose queue still held an initial window, such a loss waited for the RTO: over a second.
 */
const TIME_THRESHOLD = 9 / 8;

export class RepairReceiver {
  requestId: Uint8Array | null;
  readonly otherPort: number;
  private readonly reportIntervalMs: number;
  private readonly minReportGapMs: number;
  private readonly maxSilentReports: number;
  private readonly maxCompleteReports: number;
  private readonly ackEvery: number;
  private readonly ackDelayMs: number;
  /** new frames since the last report, and when the first of them came */
  private unacked = 0;
  private unackedSince = Infinity;
  private got: Uint8Array | null = null;
  total = 0;
  pageId: Uint8Array = new Uint8Array(PAGE_ID_BYTES);
  received = 0;
  private highest = -1;
  private reportNo = 0;
  private lastReportAt = -Infinity;
  private startedAt: number | null = null;
  private lastNewAt = -Infinity;
  private gapDue = false;
  private echoSeq = NO_ECHO;
  private echoAt = 0;
  private silentReports = 0;
  private newSinceReport = false;
  private completeDue = false;
  private completeSent = 0;
  /** Frames filled from the client's own store (block reuse): held, but not received over the network. */
  localHeld = 0;
  /** Full reports carry REPORT_FLAG_EXHAUSTIVE (the sender acknowledged reuse and the local fill is done). */
  private exhaustive = false;
  /** A full report is due at once (the local fill just finished). */
  private fullDue = false;
  error: CatpError | null = null;
  reportsSent = 0;

  constructor(opts: ReceiverOptions = {}) {
    this.requestId = opts.requestId ? opts.requestId.slice(0, ID_BYTES) : null;
    this.otherPort = opts.otherPort ?? 0;
    this.reportIntervalMs = opts.reportIntervalMs ?? 50;
    this.minReportGapMs = opts.minReportGapMs ?? 5;
    this.maxSilentReports = opts.maxSilentReports ?? 300;
    this.maxCompleteReports = opts.maxCompleteReports ?? 4;
    this.ackEvery = Math.max(1, opts.ackEveryFrames ?? 2);
    this.ackDelayMs = opts.ackDelayMs ?? 10;
  }

  /** The request went out at `nowMs`: if nothing arrives, a report (asking for the index) follows. */
  start(nowMs: number): void {
    if (this.startedAt === null) this.startedAt = nowMs;
  }

  get complete(): boolean {
    return this.total > 0 && this.received === this.total;
  }

  has(seq: number): boolean {
    return this.got !== null && seq < this.total && this.got[seq] === 1;
  }

  /**
   * A frame (already validated by the caller) arrived. `total` and `pageId` must be consistent across
   * calls (the assembler checks that). `arrivedAtMs` (≤ `nowMs`): when it reached the host, where the echo
   * delay starts. Returns true when the frame is new.
   */
  onFrame(seq: number, total: number, pageId: Uint8Array, nowMs: number, id?: Uint8Array, arrivedAtMs: number = nowMs): boolean {
    if (this.startedAt === null) this.startedAt = nowMs;
    if (this.got === null) {
      if (!(total > 0 && total <= MAX_FRAMES)) return false;
      this.total = total;
      this.got = new Uint8Array(total);
      this.pageId = pageId.slice(0, PAGE_ID_BYTES);
      if (this.requestId === null && id) this.requestId = id.slice(0, ID_BYTES);
    }
    if (seq >= this.total) return false;
    this.echoSeq = seq;
    this.echoAt = Math.min(nowMs, arrivedAtMs);
    if (this.got[seq] === 1) {
      if (this.complete && this.completeSent < this.maxCompleteReports) this.completeDue = true;
      return false;
    }
    this.got[seq] = 1;
    this.received++;
    this.lastNewAt = nowMs;
    this.newSinceReport = true;
    if (this.unacked++ === 0) this.unackedSince = nowMs;
    this.silentReports = 0;
    if (seq > this.highest + 1) this.gapDue = true;
    if (seq > this.highest) this.highest = seq;
    if (this.complete) this.completeDue = true;
    return true;
  }

  /**
   * Block reuse: frame `seq` was filled from the client's own store. Held like a received frame (never asked
   * for), but no arrival: it moves neither the echo, nor the highest frame seen, nor the stall counter.
   */
  holdLocal(seq: number): boolean {
    if (this.got === null || seq >= this.total || this.got[seq] === 1) return false;
    this.got[seq] = 1;
    this.received++;
    this.localHeld++;
    if (this.complete) this.completeDue = true;
    return true;
  }

  /**
   * Block reuse: from now on every full report (listing all that is missing up to the total) is exhaustive —
   * what it does not list, the client holds — and one is due at once. Call it when the local fill is done,
   * and only towards a sender that set FRAME_FLAG_REUSE (an old one refuses the flag).
   */
  reportExhaustive(): void {
    if (this.got === null) return;
    this.exhaustive = true;
    this.fullDue = true;
  }

  /** A frame taken earlier turned out bad (digest): forget it so it is asked for again. */
  unmark(seq: number): void {
    if (this.got !== null && seq < this.total && this.got[seq] === 1) {
      this.got[seq] = 0;
      this.received--;
      this.gapDue = true;
      this.completeDue = false;
    }
  }

  /** Missing frames in [0, end) as ascending [start, end) ranges (at most `maxRanges`). */
  missing(end = this.total, maxRanges = 1 << 20): Array<[number, number]> {
    const out: Array<[number, number]> = [];
    if (this.got === null) return out;
    const got = this.got;
    let i = 0;
    while (i < end && out.length < maxRanges) {
      if (got[i] === 1) {
        i++;
        continue;
      }
      const s = i;
      while (i < end && got[i] === 0) i++;
      out.push([s, i]);
    }
    return out;
  }

  private timerDue(): number {
    const base = Math.max(this.lastReportAt, this.lastNewAt, this.startedAt ?? Infinity);
    return base + this.reportIntervalMs;
  }

  /**
   * A lost "complete" report is repeated when more frames come, but if it was the last thing lost the sender
   * has nothing left to send and nothing would come: so it is also repeated on a timer, backing off
   * (reportIntervalMs, x2, x4 ...), up to maxCompleteReports in all.
   */
  private completeRepeatAt(): number {
    return this.lastReportAt + this.reportIntervalMs * 2 ** Math.max(0, this.completeSent - 1);
  }

  nextTimerAt(): number | null {
    if (this.error !== null || this.startedAt === null) return null;
    if (this.complete) {
      if (this.completeDue) return this.completeSent === 0 ? this.echoAt : Math.max(this.lastReportAt + this.minReportGapMs, this.echoAt);
      return this.completeSent < this.maxCompleteReports ? this.completeRepeatAt() : null;
    }
    let t = this.timerDue();
    if (this.gapDue || this.fullDue) t = Math.min(t, this.lastReportAt + this.minReportGapMs);
    if (this.unacked > 0) t = Math.min(t, Math.max(this.lastReportAt + this.minReportGapMs, this.unacked >= this.ackEvery ? 0 : this.unackedSince + this.ackDelayMs));
    return t;
  }

  /**
   * Nothing to do here: what is due at a deadline (reports, and the stall limit) is decided by `nextReport`.
   * Kept so the receiver has the same handleTimer / next* shape as every other sans-IO machine of ours.
   */
  handleTimer(_nowMs: number): void {}

  /** The next report datagram due at `nowMs`, or null. Call until null after every event and timer. */
  nextReport(nowMs: number): Uint8Array | null {
    if (this.error !== null || this.startedAt === null) return null;
    if (this.complete) {
      // the first "complete" goes at once, never coalesced behind an acknowledgement just sent: a client that
      // finished from its own store may close right after it, and without it the sender holds its data frames
      // until the hold runs out, then sends them
      const prompted = this.completeDue && (this.completeSent === 0 || nowMs >= this.lastReportAt + this.minReportGapMs);
      const repeat = this.completeSent > 0 && this.completeSent < this.maxCompleteReports && nowMs >= this.completeRepeatAt();
      if (!prompted && !repeat) return null;
      this.completeDue = false;
      this.completeSent++;
      return this.build(nowMs, true, []);
    }
    const timer = nowMs >= this.timerDue();
    const gap = this.gapDue && nowMs >= this.lastReportAt + this.minReportGapMs;
    const full = this.fullDue && nowMs >= this.lastReportAt + this.minReportGapMs;
    // acknowledgements clock the sender's rate discovery (rate-control.ts): every ackEvery frames, or ackDelayMs
    const ack = this.unacked > 0 && nowMs >= this.lastReportAt + this.minReportGapMs && (this.unacked >= this.ackEvery || nowMs >= this.unackedSince + this.ackDelayMs);
    if (!timer && !gap && !full && !ack) return null;
    if (timer) {
      if (!this.newSinceReport) {
        if (++this.silentReports > this.maxSilentReports) {
          this.error = new CatpError(CATP_ERR.STALLED, `no new frame over ${this.maxSilentReports} reports`);
          return null;
        }
      }
    }
    this.gapDue = false;
    this.newSinceReport = false;
    if (this.got === null) return this.build(nowMs, false, [[0, 1]]); // nothing known yet: ask for frame 0 (the whole index)
    const toTotal = timer || full;
    this.fullDue = false;
    const ranges = this.missing(toTotal ? this.total : this.highest + 1, MAX_REPORT_RANGES + 1);
    // An exhaustive report must say when its list was cut: the sender then trusts it only up to the last range.
    const cut = ranges.length > MAX_REPORT_RANGES;
    if (cut) ranges.length = MAX_REPORT_RANGES;
    return this.build(nowMs, false, ranges, toTotal && this.exhaustive, cut);
  }

  private build(nowMs: number, complete: boolean, missing: Array<[number, number]>, exhaustive = false, truncated = false): Uint8Array {
    this.lastReportAt = nowMs;
    this.unacked = 0;
    this.unackedSince = Infinity;
    this.reportsSent++;
    return encodeReport({
      id: this.requestId ?? new Uint8Array(ID_BYTES),
      otherPort: this.otherPort,
      complete,
      truncated,
      exhaustive,
      pageId: this.pageId,
      reportNo: ++this.reportNo,
      total: this.total,
      // frames that came over the network (the sender's pacing counts deliveries; local fills are not)
      received: this.received - this.localHeld,
      echoSeq: this.echoSeq,
      echoDelayMs: this.echoSeq === NO_ECHO ? 0 : nowMs - this.echoAt,
      missing,
    });
  }
}

// ---------------------------------------------------------------------------------------------

export interface SenderOptions {
  /** The DHTTP request ID stamped into every frame (8 bytes). */
  requestId: Uint8Array;
  /**
   * How the sending rate is set (default 'discover'): 'discover' finds the path's rate (rate-control.ts), the
   * rate options below only bound it from above; 'fixed' paces at the configured rate with the loss-proportional
   * decrease of wave 1 and no window — an oracle when the rate is the link's, kept as the lab's ablation.
   */
  pacing?: 'discover' | 'fixed';
  /** Pacing rate in bytes per second: the bound ('discover', default none) or the rate ('fixed', default 1,250,000). */
  rateBytesPerSec?: number;
  /** The same in frames per second; when given, pacing counts frames instead of bytes. */
  rateFramesPerSec?: number;
  /** 'fixed': the rate never drops below this fraction of the configured rate (default 1/8). */
  minRateFraction?: number;
  /** 'discover': frames in flight before the first report (default 10, like TCP's initial window). */
  initialWindowFrames?: number;
  /** RTT assumed before the first sample (default 100 ms). */
  initialRttMs?: number;
  /** Shortest loss epoch (default 20 ms). */
  minEpochMs?: number;
  /** Sends of one frame before giving up (default 32). */
  maxSendsPerFrame?: number;
  /** Give up when no frame was newly received for this long (default 60 s; see GIVE_UP_FLOOR_BYTES_PER_SEC). */
  giveUpAfterMs?: number;
  /** Stop when there is nothing to send and no report came for this long (default 10 s). */
  idleTimeoutMs?: number;
  /**
   * Pacing may run this far ahead of the clock (default 1 ms): one wake-up sends up to burstMs × rate,
   * so an event loop with millisecond timers still reaches high rates.
   */
  burstMs?: number;
  /**
   * Block reuse (the request carried `Catp-Reuse: hold`; see reuse-gate.ts): every frame carries
   * FRAME_FLAG_REUSE, data frames wait up to `holdMs` for the first exhaustive report, held frames never go.
   */
  reuse?: ReuseOptions;
  /**
   * Once every frame has gone once, each resend goes twice, the copy one send later or at once when nothing else
   * waits (default true; false: once, as before). See `copies`.
   */
  repeatTailRepairs?: boolean;
}

/** 'discover' never paces below this (bytes/s): a frame a second and a bit. */
const MIN_DISCOVER_RATE = 1000;

/**
 * However slowly a page comes, the sender keeps at it while reports show progress, up to the page at this rate
 * (1 MB: ~17 min): a bound for a peer that acknowledges a frame now and then to hold a stream, not a speed limit.
 */
export const GIVE_UP_FLOOR_BYTES_PER_SEC = 1000;

class SeqQueue {
  private a: number[] = [];
  private h = 0;
  push(v: number): void {
    this.a.push(v);
  }
  peek(): number | undefined {
    return this.h < this.a.length ? this.a[this.h] : undefined;
  }
  shift(): number | undefined {
    if (this.h >= this.a.length) return undefined;
    const v = this.a[this.h++];
    if (this.h > 1024 && this.h * 2 > this.a.length) {
      this.a = this.a.slice(this.h);
      this.h = 0;
    }
    return v;
  }
  get size(): number {
    return this.a.length - this.h;
  }
}

export interface SenderStats {
  sent: number;
  /** sends of a frame sent before (copies included) */
  resent: number;
  /** of those, the copies of tail resends (`repeatTailRepairs`) */
  copies: number;
  reports: number;
  badReports: Record<string, number>;
  /** current pacing rate, bytes (or frames) per second */
  rate: number;
  srttMs: number;
  /** 'fixed': loss epochs that cut the rate */
  rateDecreases: number;
  /** 'discover': the controller's state */
  control: RateSnapshot | null;
  /** 'discover': times a send waited for the window (data in flight at the limit) */
  windowWaits: number;
}

export class RepairSender {
  readonly requestId: Uint8Array;
  private readonly n: number;
  private readonly maxRate: number;
  private readonly byFrames: boolean;
  /** 'discover' mode's controller (null: 'fixed') */
  readonly control: RateController | null;
  /** send index (controller) of each frame's latest send */
  private readonly sendIdx: Int32Array;
  /** First sends so far, and what the first k of them cost together (bytes, or frames when paced by frames) */
  private firstSends = 0;
  private readonly firstSentCum: Float64Array;
  /** 'discover': the window is closed; it opens by itself at `windowOpensAt` (or when a report comes) */
  private windowBlocked = false;
  private windowOpensAt = Infinity;
  rate: number;
  private readonly floor: number;
  private srtt: number | null = null;
  private rttvar = 0;
  /** The latest RTT sample (RFC 9002's latest_rtt) and the least, ms. */
  private latestRtt = 0;
  private minRtt = Infinity;
  /** Send time of the latest-sent frame known delivered (only frames sent once: a resent frame's echo is ambiguous). */
  private deliveredSentAt = -Infinity;
  /** Every send's ordinal (0, 1, 2 … in send order, resends included), each frame's latest, and the latest known delivered. */
  private sends = 0;
  private readonly sendOrd: Int32Array;
  private deliveredOrd = -1;
  /** 'discover': when a report last acknowledged a newer send (frames are still arriving), and that send's time */
  private progressAt = -Infinity;
  private progressSentAt = -Infinity;
  private readonly initialRtt: number;
  private readonly minEpochMs: number;
  private readonly maxSends: number;
  private readonly giveUpAfterMs: number;
  private readonly idleTimeoutMs: number;
  private readonly burstMs: number;
  private nextNew = 0;
  /** Frame kinds (1 = index: resent before anything else) and the index frames in send order. */
  private readonly isIndex: Uint8Array;
  private readonly indexSeqs: number[];
  /** While a reuse hold lasts, the first pass sends index frames only: the next one to look at. */
  private nextIdx = 0;
  private readonly idxQ = new SeqQueue();
  private readonly dataQ = new SeqQueue();
  private readonly queued: Uint8Array;
  private readonly sendCount: Uint16Array;
  private readonly lastSentAt: Float64Array;
  private turnResend = true;
  private nextSendAt = -Infinity;
  /**
   * The last call to nextDatagram sent a frame or waited for pacing alone: a wake-up late for that schedule may
   * catch up on it. False after a wait for the window, the budget or data: sending then restarts from the clock.
   */
  private pacing = false;
  private startedAt: number | null = null;
  /** When a report last showed a frame newly received (or the first datagram went). */
  private lastProgressAt = 0;
  /** The whole transfer's deadline after the first datagram: the page at GIVE_UP_FLOOR_BYTES_PER_SEC. */
  private readonly maxTransferMs: number;
  private lastActivityAt = 0;
  /** 'discover': a sender that hears no report for idleTimeoutMs stops, window open or not */
  private lastReportAt = 0;
  private lastReportNo = 0;
  /**
   * A tail (nothing else to send): the frames the latest report listed as missing, and when the first of them is
   * due on the delivery clock (plus its margin). The sender looks again then, not at the next report, which the
   * receiver's timer sends up to `reportIntervalMs` later.
   */
  private tailMissing: ReadonlyArray<readonly [number, number]> = [];
  private tailCheckAt = Infinity;
  private lastReceived = 0;
  private epochStart: number | null = null;
  private epochLost = 0;
  private epochRecv = 0;
  /**
   * Bytes this sender may still send (null: no limit), each frame counted with `budgetOverhead` more (its datagram's
   * IP and UDP headers). A server sets it while the client's address is unproven (address validation: no more than
   * the address sent); a frame that does not fit waits in `parked` until the budget grows or is lifted, and meanwhile
   * the sender asks for no send timer.
   */
  private sendBudget: number | null = null;
  private budgetOverhead = 0;
  private parked: number | undefined = undefined;
  private readonly repeatTailRepairs: boolean;
  /**
   * Resends to send again, oldest first, each once a send after it went out (after its `sendOrd`) or at once when
   * nothing else waits. Only in a tail (every frame sent once): no new frame is there to show a loss sooner, a resend lost again
   * costs a round trip or more of a still screen (a lost index frame holds back every block of its piece), and the
   * copy takes the place of no frame the page still needs (bench:sim at 20% loss and 50,000 B/s: longest gap 0.88–0.89 ×
   * for 9% more sends; protocol/README.md).
   */
  private readonly copies = new SeqQueue();
  /** Block reuse (null unless asked for). */
  readonly reuse: ReuseGate | null;
  done = false;
  error: CatpError | null = null;
  readonly stats: SenderStats;

  /**
   * @param frames the page's frames (from encodePage / encodeRaw), with any request ID; each is copied
   *   and stamped with `opts.requestId` when sent.
   * @param _indexFrames how many of them are index frames: not needed (each frame's kind byte says which),
   *   kept for the callers' sake.
   */
  constructor(
    private readonly frames: readonly Uint8Array[],
    _indexFrames: number,
    opts: SenderOptions,
  ) {
    if (!(opts.requestId instanceof Uint8Array) || opts.requestId.length !== ID_BYTES) {
      throw new CatpError(CATP_ERR.BAD_OPTIONS, 'requestId must be 8 bytes');
    }
    this.requestId = opts.requestId.slice();
    this.n = frames.length;
    this.byFrames = opts.rateFramesPerSec !== undefined;
    const fixed = opts.pacing === 'fixed';
    if (opts.pacing !== undefined && opts.pacing !== 'fixed' && opts.pacing !== 'discover') throw new CatpError(CATP_ERR.BAD_OPTIONS, 'pacing must be discover or fixed');
    const r = this.byFrames ? (opts.rateFramesPerSec as number) : (opts.rateBytesPerSec ?? (fixed ? 1_250_000 : Infinity));
    if (!(r > 0)) throw new CatpError(CATP_ERR.BAD_OPTIONS, 'rate must be > 0');
    this.maxRate = r / 1000; // per ms
    this.rate = this.maxRate;
    this.floor = this.maxRate * (opts.minRateFraction ?? 1 / 8);
    this.initialRtt = opts.initialRttMs ?? 100;
    this.minEpochMs = opts.minEpochMs ?? 20;
    this.maxSends = opts.maxSendsPerFrame ?? 32;
    this.giveUpAfterMs = opts.giveUpAfterMs ?? 60_000;
    this.maxTransferMs = Math.max(this.giveUpAfterMs, (frames.reduce((t, f) => t + f.length, 0) / GIVE_UP_FLOOR_BYTES_PER_SEC) * 1000);
    this.idleTimeoutMs = opts.idleTimeoutMs ?? 10_000;
    this.burstMs = opts.burstMs ?? 1;
    this.repeatTailRepairs = opts.repeatTailRepairs ?? true;
    this.queued = new Uint8Array(this.n);
    this.sendCount = new Uint16Array(this.n);
    this.lastSentAt = new Float64Array(this.n);
    this.sendIdx = new Int32Array(this.n).fill(-1);
    this.sendOrd = new Int32Array(this.n).fill(-1);
    this.firstSentCum = new Float64Array(this.n + 1);
    if (fixed) this.control = null;
    else {
      const frameBytes = this.byFrames ? 1 : Math.max(1, frames.reduce((a, f) => a + f.length, 0) / Math.max(1, this.n));
      this.control = new RateController({
        frameBytes,
        initialRttMs: this.initialRtt,
        maxRate: this.maxRate,
        minRate: this.byFrames ? Math.min(this.maxRate, 1 / 1000) : MIN_DISCOVER_RATE / 1000,
        ...(opts.initialWindowFrames !== undefined ? { initialWindowFrames: opts.initialWindowFrames } : {}),
      });
      this.rate = this.control.pacingRate(0);
    }
    this.stats = {
      sent: 0, resent: 0, copies: 0, reports: 0, badReports: {}, rate: this.rate * 1000, srttMs: this.initialRtt, rateDecreases: 0,
      control: this.control?.snapshot(0) ?? null, windowWaits: 0,
    };
    this.reuse = opts.reuse ? new ReuseGate(this.n, opts.reuse) : null;
    this.isIndex = Uint8Array.from(frames, (f) => (f.length > 10 && f[10] === FRAME_KIND.INDEX ? 1 : 0));
    this.indexSeqs = [];
    this.isIndex.forEach((v, i) => {
      if (v === 1) this.indexSeqs.push(i);
    });
  }

  get finished(): boolean {
    return this.done || this.error !== null;
  }

  /** The path's round trip as last measured (the larger of the smoothed and the latest sample), ms; null before any. */
  get pathRttMs(): number | null {
    return this.srtt === null ? null : Math.max(this.srtt, this.latestRtt);
  }

  /**
   * A round trip measured before the first report (a server's address validation: its token answer out, the
   * client's proof back, `rttMs` apart). Startup paces the initial window over it (RateController.seedRtt);
   * without it, over the assumed `initialRttMs`, which on a fast path (10 MB/s, 5 ms) spread the initial window
   * over ten round trips. The retransmission timeout keeps waiting for a frame's own RTT: two small datagrams'
   * round trip is shorter than a frame's on a slow link. False (ignored) in 'fixed' pacing, and whenever the
   * controller does not take it (RateController.seedRtt).
   */
  onHandshakeRtt(nowMs: number, rttMs: number): boolean {
    if (this.control === null || !this.control.seedRtt(rttMs)) return false;
    this.rate = this.control.pacingRate(nowMs);
    this.stats.rate = this.rate * 1000;
    return true;
  }

  /**
   * The client→server rate measured from two datagrams it sent back to back (RateController.seedRate): the initial
   * window is paced no faster until the first report. False (ignored) in 'fixed' pacing and when not taken.
   */
  onPathRateHint(nowMs: number, bytesPerMs: number): boolean {
    if (this.control === null || !this.control.seedRate(bytesPerMs)) return false;
    this.rate = this.control.pacingRate(nowMs);
    this.stats.rate = this.rate * 1000;
    return true;
  }

  /** Limit what this sender may still send to `bytes`, each frame costing its length and `perFrame` (null: no limit); see `sendBudget`. */
  setSendBudget(bytes: number | null, perFrame = 0): void {
    this.sendBudget = bytes === null ? null : Math.max(0, Math.floor(bytes));
    this.budgetOverhead = Math.max(0, perFrame);
  }

  /** What is left of the send budget (null: no limit). */
  get sendBudgetLeft(): number | null {
    return this.sendBudget;
  }

  /** True when the next frame waits for send budget (not for pacing, the window or a report). */
  get budgetBlocked(): boolean {
    return this.sendBudget !== null && this.parked !== undefined && this.frames[this.parked].length + this.budgetOverhead > this.sendBudget;
  }

  private hasWork(): boolean {
    return this.copies.size > 0 || this.hasOtherWork();
  }

  /** Work other than the copies of resends. */
  private hasOtherWork(): boolean {
    return this.parked !== undefined || this.idxQ.size > 0 || this.dataQ.size > 0 || (this.reuse?.holding ? this.heldIndexLeft() : this.newLeft());
  }

  /** First-pass frames not sent yet (frames sent during a reuse hold are passed over). */
  private newLeft(): boolean {
    while (this.nextNew < this.n && this.sendCount[this.nextNew] > 0) this.nextNew++;
    return this.nextNew < this.n;
  }

  /** Index frames not sent yet (the first pass while a reuse hold lasts). */
  private heldIndexLeft(): boolean {
    while (this.nextIdx < this.indexSeqs.length && this.sendCount[this.indexSeqs[this.nextIdx]] > 0) this.nextIdx++;
    return this.nextIdx < this.indexSeqs.length;
  }

  private fail(msg: string): void {
    if (this.error === null && !this.done) this.error = new CatpError(CATP_ERR.GAVE_UP, msg);
  }

  /** Check the give-up and idle deadlines. */
  handleTimer(nowMs: number): void {
    if (this.finished || this.startedAt === null) return;
    this.reuse?.tick(nowMs);
    if (nowMs >= this.tailCheckAt) this.checkTail(nowMs);
    if (nowMs >= this.startedAt + this.maxTransferMs) this.fail(`not complete after ${Math.round(this.maxTransferMs)} ms`);
    else if (nowMs >= this.lastProgressAt + this.giveUpAfterMs) this.fail(`no frame newly received for ${this.giveUpAfterMs} ms`);
    else if (this.control !== null && !this.reuse?.holding && nowMs >= this.lastReportAt + this.idleTimeoutMs) this.fail(`no report for ${this.idleTimeoutMs} ms`);
    else if (!this.hasWork() && !this.reuse?.holding && nowMs >= this.lastActivityAt + this.idleTimeoutMs) this.fail(`no report for ${this.idleTimeoutMs} ms`);
  }

  nextTimerAt(): number | null {
    if (this.finished) return null;
    if (this.startedAt === null) return this.hasWork() ? 0 : null;
    const giveUp = this.giveUpAt();
    const holdEnd = this.reuse?.deadline ?? Infinity;
    if (this.budgetBlocked) {
      // nothing to send until the budget grows (a report, a proof): only the deadlines
      return Math.min(giveUp, holdEnd, this.control !== null ? this.lastReportAt + this.idleTimeoutMs : this.lastActivityAt + this.idleTimeoutMs);
    }
    if (this.hasWork()) {
      let at = this.nextSendAt - this.burstMs;
      // window closed: a report opens it (an event), or its oldest frame in flight times out
      if (this.windowBlocked) at = Math.max(at, this.windowOpensAt);
      return Math.min(at, giveUp, holdEnd, this.control !== null ? this.lastReportAt + this.idleTimeoutMs : Infinity);
    }
    return Math.min(giveUp, this.lastActivityAt + this.idleTimeoutMs, holdEnd, this.tailCheckAt);
  }

  private giveUpAt(): number {
    return Math.min(this.lastProgressAt + this.giveUpAfterMs, (this.startedAt ?? Infinity) + this.maxTransferMs);
  }

  /** The next datagram to send at `nowMs` (pacing permitting), or null. */
  nextDatagram(nowMs: number): Uint8Array | null {
    if (this.startedAt === null) {
      this.startedAt = nowMs;
      this.lastActivityAt = nowMs;
      this.lastProgressAt = nowMs;
      this.lastReportAt = nowMs;
      this.reuse?.start(nowMs);
    }
    this.handleTimer(nowMs);
    if (this.finished) return null;
    if (nowMs + this.burstMs < this.nextSendAt) {
      this.pacing = true;
      return null;
    }
    const late = this.pacing;
    this.pacing = false;
    if (this.control !== null) {
      const rto = this.rto();
      this.control.setRto(rto);
      // While the address is unproven its budget bounds the flight (no more than the address sent). The window's stall
      // rule would shrink it to the least window: on a slow uplink the client's reports queue behind its own padding.
      this.windowBlocked = this.sendBudget === null && !this.control.canSend(nowMs, rto);
      if (this.windowBlocked) {
        this.windowOpensAt = this.control.windowOpensAt(nowMs, rto) ?? nowMs + 1;
        if (this.hasWork()) this.stats.windowWaits++;
        return null;
      }
    }
    let seq = this.pick();
    // Frames the client holds (block reuse) are passed over: no send, no pacing cost.
    while (seq !== undefined && this.reuse?.isHeld(seq)) {
      this.queued[seq] = 0;
      this.reuse.noteSkipped(this.sendCount[seq] === 0);
      seq = this.pick();
    }
    if (seq === undefined) return null;
    if (this.sendBudget !== null && this.frames[seq].length + this.budgetOverhead > this.sendBudget) {
      this.parked = seq; // first out once the budget allows it
      return null;
    }
    this.queued[seq] = 0;
    // a copy is not a try of its own: `maxSends` bounds the resends, and each has at most one copy
    const copy = this.copies.peek() === seq;
    if (!copy && this.sendCount[seq] >= this.maxSends) {
      this.fail(`frame ${seq} sent ${this.maxSends} times`);
      return null;
    }
    if (this.sendCount[seq] > 0) this.stats.resent++;
    else {
      this.firstSends++;
      this.firstSentCum[this.firstSends] = this.firstSentCum[this.firstSends - 1] + (this.byFrames ? 1 : this.frames[seq].length);
    }
    if (copy) {
      this.copies.shift();
      this.stats.copies++;
    } else {
      if (this.repeatTailRepairs && this.sendCount[seq] > 0 && !this.newLeft()) this.copies.push(seq);
      this.sendCount[seq]++;
    }
    this.stats.sent++;
    this.lastSentAt[seq] = nowMs;
    this.sendOrd[seq] = this.sends++;
    this.lastActivityAt = Math.max(this.lastActivityAt, nowMs);
    const f = this.frames[seq];
    if (this.sendBudget !== null) this.sendBudget -= f.length + this.budgetOverhead;
    const out = f.slice();
    out.set(this.requestId, 0);
    if (this.reuse) out[11] |= FRAME_FLAG_REUSE;
    const cost = this.byFrames ? 1 : out.length;
    if (this.control !== null) {
      this.sendIdx[seq] = this.control.onSend(nowMs, cost, !this.hasWork());
      this.rate = this.control.pacingRate(nowMs);
    }
    // An unproven address's first flight is bounded by its budget (what the address sent: three frames or so),
    // not by a round trip nobody has measured yet: it goes at once, as a QUIC server's first flight does, instead
    // of spread over the assumed 100 ms (10 MB/s, 5 ms: its third frame came 9 ms late). A bound on the rate (a
    // client's Catp-Rate, the server's ceiling: "at most B bytes a second") holds for it too: at once, a 50,000 B/s
    // client got 9 KB in a millisecond, a burst no path at that rate delivers.
    // A wake-up that came late for the pacing schedule (Node's timers fire 1 ms or more after they are due) keeps up
    // to one burst of what it missed: restarting the schedule at every wake-up dropped the lateness from each cycle,
    // and on a 10 MB/s path cycles of ~1.3 ms paced at ~75% of the rate (bench:congestion's fast path). After a wait
    // for anything else (the window, the address budget, data) the schedule restarts at the clock: no burst for time
    // nobody could send in.
    if (this.sendBudget === null) this.nextSendAt = Math.max(this.nextSendAt, late ? nowMs - this.burstMs : nowMs) + cost / this.rate;
    else if (Number.isFinite(this.maxRate)) this.nextSendAt = Math.max(this.nextSendAt, nowMs) + cost / this.maxRate;
    this.pacing = true;
    return out;
  }

  /**
   * Retransmission timeout (RFC 6298: srtt + 4·rttvar, at least 1.25 × srtt; before a sample, 3 × the assumed RTT).
   * 'discover': at least srtt plus the largest frame's serialization at the estimated rate, as an RTT sampled on a
   * small frame leaves that out (a first frame of ~260 B: 46 ms at 10 kB/s, where a full frame takes 125 ms more, and
   * the first flight's frames timed out in the queue).
   */
  private rto(): number {
    const srtt = this.srtt ?? this.initialRtt;
    const rttvar = this.srtt === null ? this.initialRtt / 2 : this.rttvar;
    const rto = Math.max(1, 1.25 * srtt, srtt + 4 * rttvar);
    return this.control === null ? rto : Math.max(rto, srtt + this.control.largestFrameMs);
  }

  /** Which frame goes next: index resends, then missing data interleaved 1:1 with the first pass. */
  private pick(): number | undefined {
    if (this.parked !== undefined) {
      const p = this.parked;
      this.parked = undefined;
      return p;
    }
    for (let c = this.copies.peek(); c !== undefined; c = this.copies.peek()) {
      // reported lost again meanwhile: its place in the resend queues sends it
      if (this.queued[c] === 1) this.copies.shift();
      else if (this.sends > this.sendOrd[c] + 1 || !this.hasOtherWork()) return c;
      else break;
    }
    let seq: number | undefined = this.idxQ.shift();
    if (seq === undefined && this.reuse?.holding) {
      if (this.heldIndexLeft()) seq = this.indexSeqs[this.nextIdx++];
      else if (this.dataQ.size > 0) seq = this.dataQ.shift();
    } else if (seq === undefined) {
      const newLeft = this.newLeft();
      if (this.dataQ.size > 0 && (!newLeft || this.turnResend)) {
        seq = this.dataQ.shift();
        this.turnResend = false;
      } else if (newLeft) {
        seq = this.nextNew++;
        this.turnResend = true;
      }
    }
    return seq;
  }

  /**
   * Queue a reported-missing frame for resend if it is lost: overtaken by a delivered frame (sent ¼ RTT after it,
   * `PACKET_THRESHOLD` delivered sends after it, or sent `lostAgeMs` ago: the time threshold), or older than the RTO.
   * `missingOrds`: the send ordinals of the frames this report lists as missing, ascending. `clockMargin`: how long
   * past its delivery-clock due time a frame is given ({@link clockMargin}).
   */
  private queue(seq: number, nowMs: number, rto: number, lostBefore: number, lostAgeMs: number, clockMargin: number, missingOrds?: Int32Array): boolean {
    if (this.queued[seq] === 1 || this.sendCount[seq] === 0) return false;
    if (missingOrds !== undefined && this.overtakenBy(this.sendOrd[seq], missingOrds) >= PACKET_THRESHOLD) return this.enqueue(seq);
    const sentAt = this.lastSentAt[seq];
    // 'discover': while earlier frames keep arriving, a frame sent after them waits in the queue behind them, not
    // lost (a window's worth can sit in a slow link's queue longer than the RTO): its timeout counts from the last
    // progress. A frame sent before the latest one that arrived (resends included) has no such excuse.
    let timedOut = nowMs - sentAt >= rto && (this.control === null || nowMs - this.progressAt >= rto || sentAt < this.progressSentAt);
    if (!timedOut && this.control !== null) {
      // the delivery clock: the frames ahead of it have had time to arrive at the estimated rate, and it has not
      // (a tail loss, which no later frame can reveal, is found in about one frame time instead of an RTO)
      const due = this.dueAt(seq);
      if (due !== null) timedOut = nowMs >= due + clockMargin;
    }
    if (!timedOut && this.sendOrd[seq] < this.deliveredOrd) timedOut = nowMs - sentAt >= lostAgeMs;
    if (!timedOut && !(sentAt < lostBefore)) return false;
    return this.enqueue(seq);
  }

  /**
   * When the report acknowledging a frame's latest send is due on the delivery clock (the frames sent ahead of it
   * arriving at the estimated rate), and never sooner than its own serialization and a round trip after it went:
   * a resend that leaves an idle link long after the frames ahead of it is not due at their pace. Null before an
   * estimate.
   */
  private dueAt(seq: number): number | null {
    const control = this.control;
    const due = control?.ackDueAt(this.sendIdx[seq]) ?? null;
    if (control === null || due === null || control.btlBw <= 0) return null;
    return Math.max(due, this.lastSentAt[seq] + control.minRttMs + this.frames[seq].length / control.btlBw);
  }

  /**
   * A tail's own look at the frames the latest report listed as missing, when the first of them is past its due time
   * and margin: those still unacknowledged are lost (had one arrived, its acknowledgement would be here by now).
   */
  private checkTail(nowMs: number): void {
    this.tailCheckAt = Infinity;
    const missing = this.tailMissing;
    this.tailMissing = [];
    if (this.hasWork()) return;
    const rto = this.rto();
    const margin = this.clockMargin(rto);
    for (const [s, e] of missing) for (let q = s; q < Math.min(e, this.n); q++) this.queue(q, nowMs, rto, -Infinity, Infinity, margin);
  }

  /** After a report: in a tail, when to look again at the frames it listed as missing (`checkTail`). */
  private armTail(missing: ReadonlyArray<readonly [number, number]>, rto: number): void {
    this.tailMissing = [];
    this.tailCheckAt = Infinity;
    if (this.control === null || this.hasWork() || missing.length === 0) return;
    const clockMargin = this.clockMargin(rto);
    let first = Infinity;
    for (const [s, e] of missing) {
      for (let q = s; q < Math.min(e, this.n); q++) {
        if (this.sendCount[q] === 0 || this.queued[q] === 1) continue;
        const due = this.dueAt(q);
        if (due !== null) first = Math.min(first, due + clockMargin);
      }
    }
    if (!Number.isFinite(first)) return;
    this.tailMissing = missing; // the report's own ranges, decoded for this report alone
    this.tailCheckAt = first;
  }

  /**
   * How long past the delivery clock's due time a reported-missing frame is given before it counts as lost, ms. With
   * frames left to send, max(¼ RTO, two frame times at the estimated rate): a resend then takes the place of a
   * frame not yet sent, so a spurious one costs the page. With nothing else to send (a tail: no later frame can reveal
   * the loss, and the link idles meanwhile), max(RTO/16, half a frame time, 5 ms): a spurious resend then costs
   * bytes only (with the tail's own timer, `armTail`: 3–10% shorter gaps between useful frames at 5–20% loss in a
   * simulated bottleneck, for up to 1.3% more sends and none at 0%; protocol/README.md).
   */
  private clockMargin(rto: number): number {
    if (this.control === null) return Infinity;
    const frameMs = this.control.btlBw > 0 ? this.control.frameSize / this.control.btlBw : 0;
    return !this.hasWork() ? Math.max(rto / 16, frameMs / 2, 5) : Math.max(rto / 4, 2 * frameMs, 5);
  }

  /**
   * How many sends after ordinal `ord` are known delivered: those up to the latest delivered one, less those the
   * report lists as missing. (Every send up to the latest delivered first send is a frame below the highest the
   * receiver has seen, so the report lists it if it did not arrive.)
   */
  private overtakenBy(ord: number, missingOrds: Int32Array): number {
    const d = this.deliveredOrd;
    if (d <= ord) return 0;
    return d - ord - (upperBound(missingOrds, d) - upperBound(missingOrds, ord));
  }

  /** The send ordinals of the frames in `missing` that were sent (ascending). */
  private missingOrds(missing: ReadonlyArray<readonly [number, number]>): Int32Array {
    const ords: number[] = [];
    for (const [s, e] of missing) {
      const end = Math.min(e, this.n);
      for (let q = s; q < end; q++) if (this.sendCount[q] > 0) ords.push(this.sendOrd[q]);
    }
    return Int32Array.from(ords).sort();
  }

  private enqueue(seq: number): boolean {
    this.queued[seq] = 1;
    if (this.isIndex[seq] === 1) this.idxQ.push(seq);
    else this.dataQ.push(seq);
    return true;
  }

  /** A report datagram from the client. Never throws; returns the reject reason if refused. */
  receiveReport(bytes: Uint8Array, nowMs: number): { accepted: boolean; code?: string } {
    try {
      return this.takeReport(bytes, nowMs);
    } catch (e) {
      const code = e instanceof Reject ? e.code : REJECT.BAD_REPORT;
      this.stats.badReports[code] = (this.stats.badReports[code] ?? 0) + 1;
      return { accepted: false, code };
    }
  }

  private takeReport(bytes: Uint8Array, nowMs: number): { accepted: boolean; code?: string } {
    const r = decodeReport(bytes);
    if (!bytesEqual(r.id, this.requestId)) throw new Reject(REJECT.WRONG_ID);
    const pageKnown = r.pageId.some((b) => b !== 0);
    const myPage = this.frames.length > 0 ? this.frames[0].subarray(12, 12 + PAGE_ID_BYTES) : new Uint8Array(PAGE_ID_BYTES);
    if (pageKnown && !bytesEqual(r.pageId, myPage)) throw new Reject(REJECT.WRONG_PAGE);
    if (r.total !== 0 && r.total !== this.n) throw new Reject(REJECT.INCONSISTENT_HEADER);
    if (r.reportNo <= this.lastReportNo) return { accepted: false, code: 'CATP_STALE_REPORT' };
    if (this.finished) return { accepted: false, code: REJECT.AFTER_END };
    this.lastReportNo = r.reportNo;
    this.stats.reports++;
    this.lastActivityAt = Math.max(this.lastActivityAt, nowMs);
    this.lastReportAt = Math.max(this.lastReportAt, nowMs);
    if (r.echoSeq !== NO_ECHO && r.echoSeq < this.n && this.sendCount[r.echoSeq] > 0) {
      const sample = nowMs - this.lastSentAt[r.echoSeq] - r.echoDelayMs;
      // the echo names the frame, not which of its sends arrived: the latest (a resend's sample may read short)
      // Delivered bytes: the report counts frames; a link delivers in the order we sent, so `received` frames are
      // about the first that many we sent, at their sizes — not at the page's mean size (index frames, sent
      // first, are larger than data frames: at the mean, a loss-free start read as up to ~25% loss, and the
      // controller capped the rate as if congested).
      const delivered = this.firstSentCum[Math.min(r.received, this.firstSends)];
      if (this.control !== null) this.control.onAck(nowMs, this.sendIdx[r.echoSeq], nowMs - r.echoDelayMs, delivered, sample);
      if (sample >= 0) {
        this.latestRtt = sample;
        this.minRtt = Math.min(this.minRtt, sample);
        if (this.srtt === null) {
          this.srtt = sample;
          this.rttvar = sample / 2;
        } else {
          this.rttvar = (3 * this.rttvar + Math.abs(this.srtt - sample)) / 4;
          this.srtt = (7 * this.srtt + sample) / 8;
        }
      }
      if (this.lastSentAt[r.echoSeq] > this.progressSentAt) {
        this.progressAt = nowMs;
        this.progressSentAt = this.lastSentAt[r.echoSeq];
      }
      if (this.sendCount[r.echoSeq] === 1) {
        this.deliveredSentAt = Math.max(this.deliveredSentAt, this.lastSentAt[r.echoSeq]);
        this.deliveredOrd = Math.max(this.deliveredOrd, this.sendOrd[r.echoSeq]);
      }
    }
    const srtt = this.srtt ?? this.initialRtt;
    this.stats.srttMs = srtt;
    if (r.complete) {
      this.done = true;
      return { accepted: true };
    }
    // Block reuse: an exhaustive report marks what the client holds (and ends the hold); a held frame that a
    // report lists as missing after all is sent (queued at once if the first pass already passed it over).
    if (this.reuse) {
      for (const q of this.reuse.onReport(r, nowMs)) {
        if (q < this.nextNew && this.sendCount[q] === 0 && this.queued[q] === 0) {
          this.enqueue(q);
        }
      }
    }
    // Before the first sample, RFC 6298's rttvar = R/2 (RTO = 3 × the assumed RTT): the index frames
    // may still be on a slow wire when the receiver's first timer reports ask for them.
    const rto = this.rto();
    const lostBefore = this.deliveredSentAt - srtt / 4;
    const lostAgeMs = TIME_THRESHOLD * Math.max(srtt, this.latestRtt) + (Number.isFinite(this.minRtt) ? this.minRtt / 4 : 0);
    const clockMargin = this.clockMargin(rto);
    let lost = 0;
    if (r.total === 0) {
      // nothing received yet: the first frame (index frame 0) again
      if (this.n > 0 && this.queue(0, nowMs, rto, lostBefore, lostAgeMs, clockMargin)) lost++;
    }
    const missingOrds = this.missingOrds(r.missing);
    for (const [s, e] of r.missing) {
      const end = Math.min(e, this.n);
      for (let q = s; q < end; q++) if (this.queue(q, nowMs, rto, lostBefore, lostAgeMs, clockMargin, missingOrds)) lost++;
    }
    this.armTail(r.missing, rto);
    const recv = Math.max(0, r.received - this.lastReceived);
    if (recv > 0) this.lastProgressAt = Math.max(this.lastProgressAt, nowMs);
    this.lastReceived = Math.max(this.lastReceived, r.received);
    if (this.control !== null) {
      this.control.setRto(rto);
      this.rate = this.control.pacingRate(nowMs);
      this.stats.rate = this.rate * 1000;
      this.stats.control = this.control.snapshot(nowMs);
      // a report may open the window or raise the rate: the next send is due now, not at the old pace
      this.windowBlocked = false;
      if (this.nextSendAt > nowMs + this.burstMs) this.nextSendAt = Math.min(this.nextSendAt, nowMs + (this.byFrames ? 1 : 1200) / this.rate);
      return { accepted: true };
    }
    if (this.epochStart === null) this.epochStart = nowMs;
    this.epochLost += lost;
    this.epochRecv += recv;
    if (nowMs - this.epochStart >= Math.max(this.minEpochMs, srtt)) {
      if (this.epochLost > 0) {
        const frac = this.epochLost / (this.epochLost + this.epochRecv);
        this.rate = Math.max(this.floor, this.rate * Math.max(0.5, 1 - frac / 2));
        this.stats.rateDecreases++;
      } else if (this.epochRecv > 0) {
        this.rate = Math.min(this.maxRate, this.rate + this.maxRate / 16);
      }
      this.epochStart = nowMs;
      this.epochLost = 0;
      this.epochRecv = 0;
    }
    this.stats.rate = this.rate * 1000;
    return { accepted: true };
  }
}

/** How many of the ascending `xs` are ≤ `v`. */
function upperBound(xs: Int32Array, v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid] <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
