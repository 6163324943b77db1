// What the payload store saved on a load (LoadSavings): CATP blocks reused, DTD hits, and how the time saved
// was estimated.
import type { LoadSavings } from '../../protocol/browser/api';
import type { ReuseOutcome } from '../block-reuse';
import type { FetchResult } from '../host-api';

/** Figures to add to a load's savings; blocks and blocksReused replace the old figures (they are totals). */
export type SavingsUpdate = Partial<LoadSavings>;

const NOTHING_SAVED = 'nothing saved yet';

/** A load's savings before the store saved anything. */
export function noSavings(): LoadSavings {
  return { blocks: 0, blocksReused: 0, dtdHits: 0, bytesSaved: 0, savedMs: 0, estimate: NOTHING_SAVED };
}

/** Adds `add` to `s` in place; estimates are joined, the first replaces NOTHING_SAVED. */
export function addSavings(s: LoadSavings, add: SavingsUpdate): void {
  s.blocks = add.blocks ?? s.blocks;
  s.blocksReused = add.blocksReused ?? s.blocksReused;
  s.dtdHits += add.dtdHits ?? 0;
  s.bytesSaved += add.bytesSaved ?? 0;
  s.savedMs += add.savedMs ?? 0;
  if (add.estimate !== undefined) s.estimate = s.estimate === NOTHING_SAVED ? add.estimate : `${s.estimate}; ${add.estimate}`;
}

/** A fetch's DTD hit (the page itself, or a sub-resource of it) as savings; null when DTD saved nothing. */
export function dtdSavings(result: FetchResult): SavingsUpdate | null {
  const d = result.dtd;
  if (!d || d.decision !== 'hit' || d.savedBytes <= 0) return null;
  return {
    dtdHits: 1,
    bytesSaved: d.savedBytes,
    savedMs: d.savedMs,
    estimate: `DTD ${d.savedBytes} B / the DTD agent's measured bandwidth`,
  };
}

/** A CATP load's reuse figures as savings (its blocks, how many came from the store, bytes, time). */
export function reuseSavings(r: ReuseOutcome): SavingsUpdate & { estimate: string } {
  const rate = r.rateBytesPerSec >= 1e6 ? `${(r.rateBytesPerSec / 1e6).toFixed(2)} MB/s` : `${(r.rateBytesPerSec / 1e3).toFixed(1)} kB/s`;
  const from = { measured: "measured from this origin's CATP frames", paced: 'the pacing rate asked for', assumed: 'assumed (no measurement yet)' }[r.rateSource];
  return {
    blocks: r.blocks,
    blocksReused: r.reused,
    bytesSaved: r.bytesSaved,
    savedMs: r.savedMs,
    estimate: r.acked || r.reused === 0
      ? `CATP ${r.bytesSaved} B / ${rate} ${from}`
      : `CATP: ${r.reused} blocks painted from the store, but the server sent them anyway (it did not acknowledge reuse)`,
  };
}
