// Silent-time arithmetic (DESIGN.md "Silent time"): pure functions over epoch-ms timestamps, no DOM, so the
// host-side tests can check them too. The paint clock that produces the timestamps is in meter.ts.
import type { LoadRecord, VisibleUpdate, WireFrame } from '../protocol/browser/api';

export interface Gap {
  ms: number;
  from: number;
  to: number;
}

/** Longest gap in `times` (sorted ascending), the first gap starting at `start`. */
export function longestGap(start: number, times: readonly number[]): Gap {
  let best: Gap = { ms: 0, from: start, to: start };
  let prev = start;
  for (const t of times) {
    const g = t - prev;
    if (g > best.ms) best = { ms: g, from: prev, to: t };
    if (t > prev) prev = t;
  }
  return best;
}

export function silentTime(requestAtEpochMs: number, updates: readonly VisibleUpdate[]): Gap {
  return longestGap(requestAtEpochMs, updates.map((u) => u.atEpochMs));
}

export function networkFloor(requestAtEpochMs: number, arrivals: readonly WireFrame[]): Gap {
  return longestGap(requestAtEpochMs, arrivals.filter((f) => f.useful).map((f) => f.atEpochMs).sort((a, b) => a - b));
}

/** Builds the record of a finished load from what the meter saw. */
export function buildRecord(base: Omit<LoadRecord, 'silentTimeMs' | 'silentGap' | 'networkFloorMs' | 'firstPaintMs' | 'completeMs'>): LoadRecord {
  const s = silentTime(base.requestAtEpochMs, base.updates);
  const floor = networkFloor(base.requestAtEpochMs, base.arrivals);
  const first = base.updates[0];
  const last = base.updates[base.updates.length - 1];
  return {
    ...base,
    silentTimeMs: round(s.ms),
    silentGap: { from: s.from, to: s.to },
    networkFloorMs: round(floor.ms),
    firstPaintMs: first ? round(first.atEpochMs - base.requestAtEpochMs) : null,
    completeMs: last && base.outcome === 'complete' ? round(last.atEpochMs - base.requestAtEpochMs) : null,
  };
}

export function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

