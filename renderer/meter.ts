// The silent-time meter's clock: a visible update is stamped in the task after the frame that painted it
// (requestAnimationFrame, then a MessageChannel post), on the same clock as the host's kernel receive
// timestamps (epoch ms: performance.timeOrigin + performance.now() vs CLOCK_REALTIME).
import type { VisibleUpdate } from '../protocol/browser/api';

export { buildRecord, longestGap, networkFloor, round, silentTime, type Gap } from './silent-time';

export function epochNow(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Stamps visible updates. `dirty()` after a DOM change; the update is recorded when the frame that shows it
 * has been produced. Changes before the same frame are one update.
 */
export class PaintClock {
  readonly updates: VisibleUpdate[] = [];
  private pending: { what: string; count: number } | null = null;
  private waiters: (() => void)[] = [];
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
    requestAnimationFrame(() => this.channel.port2.postMessage(0));
  }

  /** Resolves once every change made so far has been painted and stamped. */
  settled(): Promise<void> {
    if (!this.pending) return Promise.resolve();
    return new Promise((ok) => this.waiters.push(ok));
  }

  reset(): void {
    this.updates.length = 0;
  }

  private stamp(): void {
    const p = this.pending;
    this.pending = null;
    if (p) {
      const u: VisibleUpdate = { atEpochMs: epochNow(), what: p.what, count: p.count };
      this.updates.push(u);
      this.onUpdate(u);
    }
    const w = this.waiters;
    this.waiters = [];
    for (const ok of w) ok();
  }
}
