// Aggregation and output: per (page, transport, loss) the mean and p95 of the per-load silent time,
// completion and first paint, with the network floor and D / (1 - p) beside them; text table, CSV, JSON.
import { type LoadResult } from './load-result';
import { mean, p95 } from './stats';
import type { PairedRow, VersusRow } from './versus';

export interface SummaryRow {
  page: string;
  pageBytes: number;
  transport: string;
  loss: number;
  loads: number;
  failed: number;
  errors: string[];
  silentMean: number;
  silentP95: number;
  completionMean: number;
  completionP95: number;
  firstPaintMean: number;
  firstPaintP95: number;
  floorMean: number;
  floorP95: number;
  /** mean over loads of D / (1 - p) */
  expectedMean: number;
  /** mean over loads of D */
  meanGapMean: number;
  /** largest sampling interval of any load in the group: the error bound of the times */
  samplingMax: number;
  /** silent − floor, mean over loads */
  excessMean: number;
  /** largest distance of any load in the group from a compositor update to the nearest renderer paint marker (NaN: no markers) */
  crossCheckMax: number;
  /** mean over loads of the silent time the renderer's paint markers alone give (our browser; NaN for chromium) */
  markerSilentMean: number;
}

const nums = (xs: Array<number | null | undefined>): number[] => xs.filter((x): x is number => typeof x === 'number' && Number.isFinite(x));

export function summarize(results: readonly LoadResult[]): SummaryRow[] {
  const groups = new Map<string, LoadResult[]>();
  for (const r of results) {
    const k = JSON.stringify([r.page, r.transport, r.loss]);
    let g = groups.get(k);
    if (!g) groups.set(k, (g = []));
    g.push(r);
  }
  const rows: SummaryRow[] = [];
  for (const g of groups.values()) {
    const ok = g.filter((r) => r.ok);
    const f = g[0]!;
    const col = (pick: (r: LoadResult) => number | null | undefined) => nums(ok.map(pick));
    const silent = col((r) => r.silentMs);
    const completion = col((r) => r.completionMs);
    const fp = col((r) => r.firstPaintMs);
    const floor = col((r) => r.floorMs);
    const sampling = col((r) => r.samplingMaxMs);
    const cross = col((r) => r.crossCheckMs);
    rows.push({
      page: f.page, pageBytes: f.pageBytes, transport: f.transport, loss: f.loss,
      loads: ok.length, failed: g.length - ok.length,
      errors: [...new Set(g.filter((r) => !r.ok).map((r) => r.error ?? 'failed'))],
      silentMean: mean(silent), silentP95: p95(silent),
      completionMean: mean(completion), completionP95: p95(completion),
      firstPaintMean: mean(fp), firstPaintP95: p95(fp),
      floorMean: mean(floor), floorP95: p95(floor),
      expectedMean: mean(col((r) => r.expectedMs)), meanGapMean: mean(col((r) => r.meanGapMs)),
      samplingMax: sampling.length ? Math.max(...sampling) : NaN,
      excessMean: mean(nums(ok.map((r) => (r.silentMs !== null && r.floorMs !== null ? r.silentMs - r.floorMs : null)))),
      crossCheckMax: cross.length ? Math.max(...cross) : NaN,
      markerSilentMean: mean(col((r) => r.markerSilentMs)),
    });
  }
  return rows;
}

/** A figure for a text table: `digits` decimals, '-' for none. */
export const fmt = (x: number, digits = 0): string => (Number.isFinite(x) ? x.toFixed(digits) : '-');

/** A loss rate for a text table: 0.1 → '10%', 0.025 → '2.5%'. */
export const lossPct = (loss: number): string => `${fmt(loss * 100, (loss * 100) % 1 ? 1 : 0)}%`;

/** A fixed-width table's lines: a head, a rule, the body; the first `leftColumns` columns flush left, the rest right. */
export function textTable(head: readonly string[], body: readonly string[][], leftColumns: number): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i < leftColumns ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)];
}

/** A fixed-width text table (ms). */
export function formatTable(rows: readonly SummaryRow[]): string {
  const head = ['page', 'transport', 'loss', 'n', 'silent mean', 'silent p95', 'floor mean', 'floor p95', 'D/(1-p)', 'complete mean', 'complete p95', 'first paint mean', 'first paint p95', '±sample', 'Δmarker', 'silent (markers)'];
  const body = rows.map((r) => [
    r.page, r.transport, lossPct(r.loss), r.failed ? `${r.loads}(+${r.failed} failed)` : String(r.loads),
    fmt(r.silentMean), fmt(r.silentP95), fmt(r.floorMean), fmt(r.floorP95), fmt(r.expectedMean), fmt(r.completionMean), fmt(r.completionP95),
    fmt(r.firstPaintMean), fmt(r.firstPaintP95), fmt(r.samplingMax), fmt(r.crossCheckMax), fmt(r.markerSilentMean),
  ]);
  const out = textTable(head, body, 3);
  const errs = rows.filter((r) => r.errors.length).map((r) => `  ${r.page} ${r.transport} ${r.loss}: ${r.errors.join('; ')}`);
  if (errs.length) out.push('', 'failed loads:', ...errs);
  out.push('', 'times in ms after the request; silent = longest gap between visible updates (the first from the request);',
    'floor = longest gap between useful packet arrivals; D/(1-p) with D the mean gap between useful arrivals;',
    '±sample = the longest gap between captured frames in the group (error bound of every time; with --capture damage as long as the screen was still);',
    'Δmarker = cross-check of our browser: the largest distance from a compositor update to the nearest paint marker of the renderer;',
    'silent (markers) = mean silent time from the renderer\'s paint markers alone (our browser), beside the compositor\'s.');
  return out.join('\n') + '\n';
}

function csvCell(v: unknown): string {
  const s = typeof v === 'number' ? (Number.isFinite(v) ? String(Math.round(v * 1000) / 1000) : '') : String(v ?? '');
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export const CSV_COLUMNS: Array<keyof SummaryRow> = [
  'page', 'pageBytes', 'transport', 'loss', 'loads', 'failed', 'silentMean', 'silentP95', 'floorMean', 'floorP95', 'expectedMean',
  'meanGapMean', 'completionMean', 'completionP95', 'firstPaintMean', 'firstPaintP95', 'samplingMax', 'excessMean', 'crossCheckMax', 'markerSilentMean',
];

export function formatCsv(rows: readonly SummaryRow[]): string {
  return [CSV_COLUMNS.join(','), ...rows.map((r) => CSV_COLUMNS.map((c) => csvCell(r[c])).join(','))].join('\n') + '\n';
}

export interface JsonReport {
  version: 1;
  tool: 'catp silent-time';
  command?: string;
  settings: Record<string, unknown>;
  startedAt: string | null;
  wallMs: number | null;
  summary: SummaryRow[];
  /** CATP against each other transport of the run (versus.ts) */
  versus?: VersusRow[];
  /** with --baseline: this run against those logs, load for load */
  paired?: { baseline: string[]; rows: PairedRow[] };
  loads: LoadResult[];
}

export function formatJson(r: JsonReport): string {
  return JSON.stringify(r, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n';
}
