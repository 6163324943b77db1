// Silent time, the project's headline metric (DESIGN.md "Silent time"): the longest gap between visible updates,
// the first gap starting at the request. One definition for every place that computes it: the renderer's HUD and
// load record (renderer/silent-time.ts) and the lab's measurement (lab/silent-time/), so the two cannot disagree.
// Pure: numbers in, numbers out (any unit, as long as start and times share it).

export interface Gap {
  /** Length of the gap (to − from). */
  ms: number;
  from: number;
  to: number;
}

/**
 * The longest gap in `times`, the first one starting at `start`; null when there is no time. Times are expected
 * in ascending order; one that goes backwards (clocks of two processes, a late stamp) counts from the latest time
 * before it, so it can never lengthen a gap, and a time before `start` ends no gap.
 */
export function longestGap(start: number, times: readonly number[]): Gap | null {
  if (times.length === 0) return null;
  let best: Gap = { ms: 0, from: start, to: start };
  let prev = start;
  for (const t of times) {
    const g = t - prev;
    if (g > best.ms) best = { ms: g, from: prev, to: t };
    if (t > prev) prev = t;
  }
  return best;
}
