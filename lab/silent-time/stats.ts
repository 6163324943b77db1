// Summary statistics for the silent-time report.

/** Arithmetic mean; NaN for no values. */
export function mean(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  let s = 0;
  for (const x of xs) s += x;
  return s / xs.length;
}

/**
 * The p-quantile by the nearest-rank method: the smallest value with at least p of the values at or below
 * it (p95 of 20 values = the 19th smallest; of 1 value = that value). NaN for no values.
 */
export function quantile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  if (!(p >= 0 && p <= 1)) throw new RangeError(`quantile: p must be from 0 to 1, got ${p}`);
  const s = [...xs].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil(p * s.length));
  return s[rank - 1]!;
}

export const p95 = (xs: readonly number[]): number => quantile(xs, 0.95);

/** Silent time's longest gap: one definition, shared with the renderer (protocol/silent-time.ts). */
export { longestGap } from '../../protocol/silent-time';
