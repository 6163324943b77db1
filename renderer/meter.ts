// The silent-time meter's clock: a visible update is stamped in the first task after the frame that painted it
// (requestAnimationFrame, then a user-blocking postTask, or a MessageChannel post where there is no postTask), on
// the same clock as the host's kernel receive timestamps (epoch ms: performance.timeOrigin + performance.now() vs
// CLOCK_REALTIME).
import type { VisibleUpdate } from '../protocol/browser/api';

export { buildRecord, longestGap, networkFloor, round, silentTime, type Gap } from './silent-time';

export function epochNow(): number {
  return performance.timeOrigin + performance.now();
}

/** The Prioritized Task Scheduling API's postTask (Chromium 94+), where there is one. */
type PostTask = (callback: () => void, options: { priority: 'user-blocking' }) => Promise<unknown>;
const postTask: PostTask | null = (() => {
  const s = (globalThis as { scheduler?: { postTask?: PostTask } }).scheduler;
  return s !== undefined && typeof s.postTask === 'function' ? s.postTask.bind(s) : null;
})();

/**
 * Stamps visible updates. `dirty()` after a DOM change; the update is recorded when the frame that shows it
 * has been produced. Changes before the same frame are one update.
 *
 * Which frame shows a change is decided in that frame's animation callback, the point before which the frame takes
 * what the document holds: a change made after it, in a task that ran between the frame and the stamp (a slice of
 * DOM operations queued before the frame and run after it), is the next frame's. Merged into the pending update
 * until the stamp, such a change was stamped as painted a frame before it was (bench:render: a 1.3 kB index frame
 * applied after the frame's callback, stamped with that frame, painted ~25 ms later with the next).
 */
export class PaintClock {
  readonly updates: VisibleUpdate[] = [];
  /** Changes no frame has taken yet, and who waits for them. */
  private pending: { what: string; count: number } | null = null;
  private waiters: (() => void)[] = [];
  /** Frames that took changes and are not stamped yet, oldest first (their stamps come in this order). */
  private readonly framed: Array<{ change: { what: string; count: number }; waiters: (() => void)[] }> = [];
  private readonly channel = new MessageChannel();

  constructor(private readonly onUpdate: (u: VisibleUpdate) => void = () => {}) {
    this.channel.port1.onmessage = () => this.stamp();
  }

  dirty(what: string, count = 1): void {
    if (this.pending) {
      this.pending.count += count;
      if (this.pending.what !== what) this.pending.what = `${this.pending.what}+${what}`.slice(0, 40);
      return;
    }
    this.pending = { what, count };
    requestAnimationFrame(() => this.take());
  }

  /** Resolves once every change made so far has been painted and stamped. */
  settled(): Promise<void> {
    if (this.pending) return new Promise((ok) => this.waiters.push(ok));
    const last = this.framed.at(-1);
    if (last === undefined) return Promise.resolve();
    return new Promise((ok) => last.waiters.push(ok));
  }

  reset(): void {
    this.updates.length = 0;
  }

  /** In the frame's animation callbacks: what is pending now is what this frame shows; the stamp follows it. */
  private take(): void {
    const change = this.pending;
    if (change === null) return;
    this.framed.push({ change, waiters: this.waiters });
    this.pending = null;
    this.waiters = [];
    // The stamp is the first task after the frame, not one behind the tasks queued before it: a slice of DOM
    // operations posted before the frame ran first and made the stamp late by its length (up to 50 ms).
    if (postTask !== null) void postTask(() => this.stamp(), { priority: 'user-blocking' });
    else this.channel.port2.postMessage(0);
  }

  private stamp(): void {
    const f = this.framed.shift();
    if (f === undefined) return;
    const u: VisibleUpdate = { atEpochMs: epochNow(), what: f.change.what, count: f.change.count };
    this.updates.push(u);
    this.onUpdate(u);
    for (const ok of f.waiters) ok();
  }
}
