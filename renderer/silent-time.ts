// Silent-time arithmetic (DESIGN.md "Silent time"): pure functions over epoch-ms timestamps, no DOM, so the
// host-side tests can check them too. The paint clock that produces the timestamps is in meter.ts.
import type { LoadRecord, VisibleUpdate, WireFrame } from '../protocol/browser/api';
import { longestGap as gapOf, type Gap } from '../protocol/silent-time';

export type { Gap };

/** Longest gap in `times`, the first gap starting at `start` (protocol/silent-time.ts); no time: a 0 ms gap at `start`. */
export function longestGap(start: number, times: readonly number[]): Gap {
  return gapOf(start, times) ?? { ms: 0, from: start, to: start };
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

