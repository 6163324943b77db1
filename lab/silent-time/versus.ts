// Two comparisons the per-point table leaves to the reader: how one transport (CATP) stands against each other
// transport of a run, page by page, and how a run stands against an earlier one, load for load. The second pairs
// loads that share page, transport, loss, repetition and seed: the emulator drops the same packets for both
// (run.ts), so what differs is the code and the machine, not the drop pattern.
import { loadKey } from './load-log';
import { type LoadResult } from './load-result';
import { fmt, lossPct, textTable, type SummaryRow } from './report';
import { mean } from './stats';

export interface VersusRow {
  loss: number;
  /** the transport the reference is set against */
  other: string;
  /** pages where both have a mean silent time at this loss */
  pages: number;
  /** mean over those pages of the reference's per-page mean silent time, and of the other's */
  referenceMean: number;
  otherMean: number;
  /** pages where the reference's mean is at or below the other's, and at or below half of it */
  atOrBelow: number;
  atOrBelowHalf: number;
}

/** Per loss rate and other transport: the reference's per-page means against the other's (`rows` from summarize). */
export function versus(rows: readonly SummaryRow[], reference = 'catp'): VersusRow[] {
  const byKey = new Map<string, number>();
  for (const r of rows) if (r.loads > 0 && Number.isFinite(r.silentMean)) byKey.set(JSON.stringify([r.page, r.transport, r.loss]), r.silentMean);
  const pages = [...new Set(rows.map((r) => r.page))];
  const losses = [...new Set(rows.map((r) => r.loss))].sort((a, b) => a - b);
  const others = [...new Set(rows.map((r) => r.transport))].filter((t) => t !== reference);
  const out: VersusRow[] = [];
  for (const loss of losses) {
    for (const other of others) {
      const pairs: Array<[number, number]> = [];
      for (const page of pages) {
        const a = byKey.get(JSON.stringify([page, reference, loss]));
        const b = byKey.get(JSON.stringify([page, other, loss]));
        if (a !== undefined && b !== undefined) pairs.push([a, b]);
      }
      if (pairs.length === 0) continue;
      out.push({
        loss, other, pages: pairs.length,
        referenceMean: mean(pairs.map((p) => p[0])), otherMean: mean(pairs.map((p) => p[1])),
        atOrBelow: pairs.filter(([a, b]) => a <= b).length,
        atOrBelowHalf: pairs.filter(([a, b]) => a <= b / 2).length,
      });
    }
  }
  return out;
}

/** The text block for `versus` rows: one line per loss and other transport, then each other transport over all losses. */
export function formatVersus(v: readonly VersusRow[], reference = 'catp'): string {
  if (v.length === 0) return '';
  const body = v.map((r) => [
    lossPct(r.loss), r.other, String(r.pages), fmt(r.referenceMean), fmt(r.otherMean), fmt(r.referenceMean / r.otherMean, 2),
    `${r.atOrBelow} of ${r.pages}`, `${r.atOrBelowHalf} of ${r.pages}`,
  ]);
  for (const other of [...new Set(v.map((r) => r.other))]) {
    const rs = v.filter((r) => r.other === other);
    const n = rs.reduce((s, r) => s + r.pages, 0);
    body.push(['all', other, String(n), '', '', '', `${rs.reduce((s, r) => s + r.atOrBelow, 0)} of ${n}`, `${rs.reduce((s, r) => s + r.atOrBelowHalf, 0)} of ${n}`]);
  }
  const head = ['loss', 'against', 'pages', `${reference} mean`, 'its mean', 'ratio', `${reference} at or below`, 'at or below half'];
  return [
    `${reference} against each other transport, page by page (a page's figure: the mean silent time of its loads; means over the pages):`,
    ...textTable(head, body, 2),
  ].join('\n') + '\n';
}

export interface PairedRow {
  transport: string;
  loss: number;
  /** loads measured in both runs with the same page, transport, loss, repetition and seed, ok in both */
  pairs: number;
  /** geometric mean over the pairs of this run's silent time over the baseline's; and of first paint and completion */
  silentRatio: number;
  firstPaintRatio: number;
  completionRatio: number;
  /** pairs where this run's silent time is lower */
  lower: number;
  /** mean of this run's silent time minus the baseline's (ms), and its standard error */
  silentDiffMean: number;
  silentDiffSe: number;
}

const positive = (x: number | null): x is number => x !== null && Number.isFinite(x) && x > 0;

function geoMean(pairs: ReadonlyArray<[number, number]>): number {
  if (pairs.length === 0) return NaN;
  return Math.exp(pairs.reduce((s, [a, b]) => s + Math.log(a / b), 0) / pairs.length);
}

/** This run's loads against a baseline run's, load for load, per transport and loss rate (first seen order). */
export function paired(current: readonly LoadResult[], baseline: readonly LoadResult[]): PairedRow[] {
  const base = new Map<string, LoadResult>();
  for (const b of baseline) if (b.ok) base.set(loadKey(b), b);
  const groups = new Map<string, Array<[LoadResult, LoadResult]>>();
  for (const c of current) {
    const b = base.get(loadKey(c));
    if (!c.ok || b === undefined || !positive(c.silentMs) || !positive(b.silentMs)) continue;
    const k = JSON.stringify([c.transport, c.loss]);
    let g = groups.get(k);
    if (!g) groups.set(k, (g = []));
    g.push([c, b]);
  }
  const out: PairedRow[] = [];
  for (const g of groups.values()) {
    const of = (pick: (r: LoadResult) => number | null): Array<[number, number]> =>
      g.flatMap(([c, b]) => {
        const x = pick(c);
        const y = pick(b);
        return positive(x) && positive(y) ? [[x, y] as [number, number]] : [];
      });
    const silent = of((r) => r.silentMs);
    const diffs = silent.map(([a, b]) => a - b);
    const m = mean(diffs);
    const sd = diffs.length > 1 ? Math.sqrt(diffs.reduce((s, d) => s + (d - m) ** 2, 0) / (diffs.length - 1)) : NaN;
    out.push({
      transport: g[0]![0].transport, loss: g[0]![0].loss, pairs: silent.length,
      silentRatio: geoMean(silent), firstPaintRatio: geoMean(of((r) => r.firstPaintMs)), completionRatio: geoMean(of((r) => r.completionMs)),
      lower: silent.filter(([a, b]) => a < b).length,
      silentDiffMean: m, silentDiffSe: sd / Math.sqrt(diffs.length),
    });
  }
  const order = [...new Set(out.map((r) => r.transport))];
  return out.sort((a, b) => order.indexOf(a.transport) - order.indexOf(b.transport) || a.loss - b.loss);
}

/** The text block for `paired` rows; `what` names the baseline (its files). */
export function formatPaired(p: readonly PairedRow[], what: string): string {
  if (p.length === 0) return `against ${what}: no load pairs up (the same page, transport, loss, repetition and seed, ok in both)\n`;
  const body = p.map((r) => [
    r.transport, lossPct(r.loss), String(r.pairs), fmt(r.silentRatio, 3), `${r.lower} of ${r.pairs}`,
    `${r.silentDiffMean >= 0 ? '+' : '−'}${fmt(Math.abs(r.silentDiffMean))} ± ${fmt(r.silentDiffSe)}`, fmt(r.firstPaintRatio, 3), fmt(r.completionRatio, 3),
  ]);
  const head = ['transport', 'loss', 'pairs', 'silent', 'lower in', 'silent Δ (ms)', 'first paint', 'completion'];
  return [
    `against ${what}, load for load (the same page, transport, loss, repetition and seed: the same drop pattern);`,
    'geometric mean of this run\'s over the baseline\'s; silent Δ: mean difference ± its standard error:',
    ...textTable(head, body, 2),
  ].join('\n') + '\n';
}
