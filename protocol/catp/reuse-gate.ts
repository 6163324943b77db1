/**
 * Block reuse, sender side (protocol/README.md, CATP, "Block reuse"). A client that holds some of a page's
 * blocks in its own store asks with `Catp-Reuse: hold`; the sender then
 *  - sends the index as usual but *holds* the data frames, until the client's first exhaustive report
 *    (REPORT_FLAG_EXHAUSTIVE) says which frames it already holds, or until `holdMs` has passed (so a lost
 *    report costs bounded time: the receiver's timer repeats its report anyway);
 *  - never sends a frame an exhaustive report marked as held (first sends and resends alike).
 * If a later report lists a held frame as missing after all, it is sent (a client may change its mind; a
 * frame is never lost for good because of a claim).
 *
 * Sans-IO like the rest: time comes in as `nowMs`. RepairSender owns one of these when asked to.
 */
import type { Report } from './wire';

export interface ReuseOptions {
  /** Longest wait for the first exhaustive report before data frames go anyway (ms). */
  holdMs: number;
}

export interface ReuseStats {
  /** Frames an exhaustive report marked as held (counted once each). */
  held: number;
  /** Of those, frames that had not been sent yet: never sent at all. */
  skipped: number;
  /** Held frames a later report asked for after all. */
  unheld: number;
  /** The hold ended by its deadline instead of a report. */
  holdExpired: boolean;
  /** ms from the first datagram to the end of the hold (null while holding / never held). */
  holdEndedAfterMs: number | null;
}

export class ReuseGate {
  private readonly held: Uint8Array;
  /** Data frames wait (only index frames go) until the hold ends. */
  holding = true;
  private holdUntil = Infinity;
  private startedAt: number | null = null;
  readonly stats: ReuseStats = { held: 0, skipped: 0, unheld: 0, holdExpired: false, holdEndedAfterMs: null };

  constructor(
    private readonly n: number,
    private readonly opts: ReuseOptions,
  ) {
    this.held = new Uint8Array(n);
  }

  /** The first datagram goes out now: the hold's deadline starts. */
  start(nowMs: number): void {
    if (this.startedAt !== null) return;
    this.startedAt = nowMs;
    this.holdUntil = nowMs + Math.max(0, this.opts.holdMs);
  }

  /** Deadline of the hold, while holding (for nextTimerAt). */
  get deadline(): number | null {
    return this.holding ? this.holdUntil : null;
  }

  /** Ends the hold when its deadline has passed. */
  tick(nowMs: number): void {
    if (this.holding && nowMs >= this.holdUntil) {
      this.stats.holdExpired = true;
      this.end(nowMs);
    }
  }

  private end(nowMs: number): void {
    this.holding = false;
    this.stats.holdEndedAfterMs = this.startedAt === null ? 0 : nowMs - this.startedAt;
  }

  isHeld(seq: number): boolean {
    return this.held[seq] === 1;
  }

  /** A frame was passed over because it is held (it was never sent when `neverSent`). */
  noteSkipped(neverSent: boolean): void {
    if (neverSent) this.stats.skipped++;
  }

  /**
   * An accepted report. Frames it lists as missing are un-held (returned, so the sender can queue the ones it
   * passed over); an exhaustive one marks every other frame of [0, coverEnd) held and ends the hold.
   */
  onReport(r: Report, nowMs: number): number[] {
    const unheld: number[] = [];
    for (const [s, e] of r.missing) {
      for (let q = s; q < Math.min(e, this.n); q++) {
        if (this.held[q] === 1) {
          this.held[q] = 0;
          this.stats.unheld++;
          unheld.push(q);
        }
      }
    }
    if (r.exhaustive !== true) return unheld;
    const coverEnd = Math.min(this.n, r.truncated ? (r.missing.length > 0 ? r.missing[r.missing.length - 1][1] : 0) : r.total);
    let at = 0;
    const mark = (to: number): void => {
      for (; at < to; at++) {
        if (this.held[at] === 0) {
          this.held[at] = 1;
          this.stats.held++;
        }
      }
    };
    for (const [s, e] of r.missing) {
      if (s >= coverEnd) break;
      mark(Math.min(s, coverEnd));
      at = Math.max(at, Math.min(e, coverEnd));
    }
    mark(coverEnd);
    if (this.holding) this.end(nowMs);
    return unheld;
  }
}
