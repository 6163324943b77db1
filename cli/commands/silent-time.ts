// `catp silent-time`: silent time of page loads through the emulated link, per transport and loss
// (lab/silent-time/). The measurement lives in lab/silent-time; this is its command line.
import * as fs from 'node:fs';

import { writeChart } from '../../lab/silent-time/chart';
import { generatedPages, pagesFromPaths, parseSize, type PageSpec } from '../../lab/silent-time/pages';
import { formatCsv, formatJson, formatTable, summarize } from '../../lab/silent-time/report';
import { LoadLogError, openLoadLog, readLoadLog, type LoadLog } from '../../lab/silent-time/load-log';
import { formatPaired, formatVersus, paired, versus, type PairedRow } from '../../lab/silent-time/versus';
import { runSilentTime, type LoadResult, type Progress } from '../../lab/silent-time/run';
import { transportByName, TRANSPORTS } from '../../lab/silent-time/transports';
import { CAPTURE_MODES, DEFAULT_CAPTURE, isCaptureMode, UNRECORDED_CAPTURE } from '../../lab/silent-time/updates';
import { labSupport } from '../../lab/link';
import { parse, UsageError, type Io } from '../args';
import { LabError } from '../../lab/errors';

const HELP = `usage: catp silent-time [PAGE|DIR ...] [--sizes 10k,50k] [options]

Loads each page through the emulated link (lab/, real kernel packets, real loss) once per transport,
loss rate and repetition, and measures the user's silent time: the longest gap between visible updates
(frames that differ from the previous one in any pixel, taken from the browser's compositor), the first
gap starting when the request left. Beside it: the network floor (longest gap between arrivals of useful
packets, from the emulator's per-packet log) and D/(1-p) (CATP paper section 2).

pages:
  PAGE|DIR             HTML files, or directories (every .html under them: demo/site, a corpus)
  --sizes LIST         generated pages of these sizes, e.g. 10k,50k (text only, fits the viewport)
link:
  --loss LIST          loss rates, both directions (default 0,0.05,0.1,0.2)
  --delay MS           one-way propagation delay (default 10)
  --rate B/S           bottleneck rate in IP bytes/s (default 10000, as in the paper)
  --burst LEN          bursty loss: Gilbert-Elliott with mean burst LEN packets at the same mean loss
  --queue BYTES        bottleneck queue (default the emulator's: max(15000, 200 ms at the rate))
  --oracle-rate        ablation: tell our UDP senders the link's rate (0.95 × --rate) and have the server
                       pace at it, as wave 1 did; every table says so. Default: they find the rate, like TCP
  --seed N             base seed (default 1); load (page i, loss j, rep r) uses seed + (i*losses + j)*reps + r,
                       the same for every transport, so all transports meet the same drop pattern
measurement:
  --transports LIST    ${TRANSPORTS.join(',')} (default chromium); catp, inorder and tcp run
                       'catp browse --headless --record FILE --transport X URL' in the client namespace;
                       h3 is stock Chromium over HTTP/3 to Caddy on the same port (npm run lab:caddy),
                       a load that came over another protocol is an error
  --reps N             loads per (page, transport, loss) (default 5)
  --server KIND        origin server on the server side: catp (the reference server, default) or nginx
  --viewport WxH       browser viewport (default 1280x800); only what is in it counts as on screen
  --timeout S          give up on one load after S seconds (default 120)
  --settle MS          keep capturing after the load event (default 1000)
  --capture MODE       how compositor frames are taken: damage (default: only frames where something changed)
                       or vsync (a heartbeat makes the compositor draw, and the screencast take, a frame every
                       vsync: a tighter ±sample, but the capture takes cores from the browser it measures;
                       the method of the tables before session 43). In both, a time's error bound (±sample)
                       is the gap between captured frames: with damage, as long as the screen was still
output:
  --log FILE           append every load to FILE (JSON lines) as it finishes; if FILE exists (same
                       settings), the loads in it are kept and not measured again: an interrupted run resumes
  --from FILE[,FILE]   no measuring: the table, --json, --csv and --chart from --log files (several: e.g.
                       one run per page size, drawn as one chart with a panel per page)
  --baseline FILE[,FILE]
                       beside the report, this run against an earlier one (its --log files) load for
                       load: loads with the same page, transport, loss, repetition and seed met the same
                       drop pattern; per transport and loss the geometric mean of silent time, first paint
                       and completion over the baseline's, and in how many pairs silent time is lower.
                       (Without it the report still sets catp against each other transport, page by page.)
  --json FILE          every load and the summary (with the catp-against-others and --baseline tables)
  --csv FILE           the summary table
  --chart FILE         silent time vs loss, one line per transport, floor dashed (.svg, or .png via Chromium)
  --trace DIR          one JSON file per load measured: every packet the emulator saw (arrive, depart, drop,
                       both directions, ms from the request) beside the load's visible updates (each with
                       the pixels it changed and their bounding box: where on screen it happened); for our
                       browser also its own account: frames as the host received them, and each DOM update's
                       host → renderer → applied → painted times
  -q, --quiet          no progress on stderr
  -h, --help           show this help

Needs root or unprivileged user namespaces (see lab/README.md), Chromium, python3 (packet capture).
example:
  catp silent-time --sizes 10k,50k --loss 0,0.05,0.1,0.2 --reps 20 --transports chromium --chart fig7.svg
`;

const options = {
  sizes: { type: 'string' },
  loss: { type: 'string' },
  delay: { type: 'string' },
  rate: { type: 'string' },
  'oracle-rate': { type: 'boolean' },
  burst: { type: 'string' },
  queue: { type: 'string' },
  seed: { type: 'string' },
  transports: { type: 'string' },
  reps: { type: 'string' },
  server: { type: 'string' },
  viewport: { type: 'string' },
  timeout: { type: 'string' },
  settle: { type: 'string' },
  capture: { type: 'string' },
  log: { type: 'string' },
  from: { type: 'string' },
  baseline: { type: 'string' },
  json: { type: 'string' },
  csv: { type: 'string' },
  chart: { type: 'string' },
  trace: { type: 'string' },
  quiet: { type: 'boolean', short: 'q' },
  help: { type: 'boolean', short: 'h' },
} as const;

function num(v: string | undefined, name: string, min: number, max: number, dflt: number, integer = false): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    throw new UsageError(`--${name} must be ${integer ? 'a whole number' : 'a number'} from ${min} to ${max}, got '${v}'`);
  }
  return n;
}

function list(v: string | undefined): string[] | undefined {
  return v?.split(',').map((s) => s.trim()).filter(Boolean);
}

function fmtDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m` : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

/** Progress on stderr: a bar with an ETA on a terminal, one plain line per finished load otherwise. */
export function progressReporter(stream: NodeJS.WritableStream, tty: boolean, start = Date.now()): (p: Progress) => void {
  return (p) => {
    const elapsed = Date.now() - start;
    const measured = p.done - p.reused;
    const eta = measured > 0 ? (elapsed / measured) * (p.total - p.done) : NaN;
    const what = `${p.page} ${p.transport} loss ${p.loss} rep ${p.rep + 1}`;
    if (tty) {
      const width = 24;
      const fill = Math.round((p.done / p.total) * width);
      const bar = `[${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${p.done}/${p.total} ${Math.floor((100 * p.done) / p.total)}% ETA ${Number.isNaN(eta) ? '?' : fmtDuration(eta)}`;
      stream.write(`\r\x1b[K${bar}  ${p.finished ? '' : what}`);
      if (p.finished && p.done === p.total) stream.write('\r\x1b[K');
    } else if (p.finished) {
      const r = p.result;
      const res = r?.ok ? `silent ${r.silentMs?.toFixed(0)} ms, floor ${r.floorMs?.toFixed(0) ?? '-'} ms, complete ${r.completionMs?.toFixed(0)} ms` : `failed: ${r?.error ?? '?'}`;
      stream.write(`silent-time: ${p.done}/${p.total} ${what}: ${res} (elapsed ${fmtDuration(elapsed)}, ETA ${Number.isNaN(eta) ? '?' : fmtDuration(eta)})\n`);
    }
  };
}

export async function silentTime(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, options);
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  const baseline = values.baseline !== undefined ? readLogs(values.baseline, 'baseline') : undefined;
  if (values.from !== undefined) return fromLog(values.from, values, io, baseline);
  const losses = (list(values.loss) ?? ['0', '0.05', '0.1', '0.2']).map((s) => num(s, 'loss', 0, 0.99, 0));
  const sizes = (list(values.sizes) ?? []).map((s) => {
    try {
      return parseSize(s);
    } catch (err) {
      throw new UsageError(`--sizes: ${(err as Error).message}`);
    }
  });
  const transportNames = list(values.transports) ?? ['chromium'];
  const transports = transportNames.map((t) => {
    try {
      return transportByName(t);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
  });
  const server = values.server ?? 'catp';
  if (server !== 'catp' && server !== 'nginx') throw new UsageError(`--server must be catp or nginx, got '${server}'`);
  if (server === 'nginx' && transports.some((t) => t.name !== 'chromium' && t.origin === undefined)) {
    throw new UsageError('--server nginx speaks HTTP only: it serves the chromium transport alone (h3 brings its own server)');
  }
  let viewport = { width: 1280, height: 800 };
  if (values.viewport !== undefined) {
    const m = /^(\d+)x(\d+)$/.exec(values.viewport);
    if (!m || Number(m[1]) < 100 || Number(m[2]) < 100 || Number(m[1]) > 4000 || Number(m[2]) > 4000) throw new UsageError(`--viewport takes WxH (100 to 4000), got '${values.viewport}'`);
    viewport = { width: Number(m[1]), height: Number(m[2]) };
  }
  const burstLen = values.burst !== undefined ? num(values.burst, 'burst', 1, 1000, 1) : undefined;
  const reps = num(values.reps, 'reps', 1, 100000, 5, true);
  const seed = num(values.seed, 'seed', 0, 2 ** 48, 1, true);
  const delayMs = num(values.delay, 'delay', 0, 60000, 10);
  const rate = num(values.rate, 'rate', 0, 1e11, 10000, true);
  const queueBytes = values.queue !== undefined ? num(values.queue, 'queue', 1, 2 ** 32, 0, true) : undefined;
  const timeoutMs = num(values.timeout, 'timeout', 1, 3600, 120) * 1000;
  const settleMs = num(values.settle, 'settle', 0, 60000, 1000, true);
  const capture = values.capture ?? DEFAULT_CAPTURE;
  if (!isCaptureMode(capture)) throw new UsageError(`--capture must be ${CAPTURE_MODES.join(' or ')}, got '${capture}'`);

  let pages: PageSpec[] = [];
  try {
    pages = pagesFromPaths(positionals);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (pages.length === 0 && sizes.length === 0) throw new UsageError('no pages: give PAGE/DIR arguments or --sizes');
  const support = labSupport();
  if (!support.ok) throw new LabError('LAB_ERR_UNSUPPORTED', `the lab cannot run here: ${support.reason}`);

  const gen = sizes.length ? generatedPages(sizes) : undefined;
  if (gen) pages = [...gen.pages, ...pages];
  const oracleRate = values['oracle-rate'] === true;
  const settings = { losses, delayMs, rate, oracleRate, burst: burstLen ?? null, queueBytes: queueBytes ?? null, seed, reps, server, viewport, timeoutMs, settleMs, capture, transports: transportNames, pages: pages.map((p) => ({ name: p.name, bytes: p.bytes, urlPath: p.urlPath })) };
  // said before an hour of measuring, not after
  if (baseline !== undefined) warnIfOther(io, baseline.logs, settings, 'this run');
  let log: LoadLog | undefined;
  try {
    if (values.log !== undefined) {
      try {
        log = openLoadLog(values.log, settings);
      } catch (err) {
        if (err instanceof LoadLogError) throw new UsageError(err.message);
        throw err;
      }
      if (log.previous.size > 0 && !values.quiet) io.stderr.write(`silent-time: resuming from ${values.log}: ${log.previous.size} loads already measured${log.tornLines ? ` (${log.tornLines} torn lines skipped)` : ''}\n`);
    }
    const started = new Date();
    const t0 = Date.now();
    const tty = !values.quiet && (io.stderr as { isTTY?: boolean }).isTTY === true;
    const onProgress = values.quiet ? undefined : progressReporter(io.stderr, tty, t0);
    const results = await runSilentTime({
      pages, losses, transports, reps, seed, delayMs, rate, oracleRate, burst: burstLen, queueBytes, server, viewport, timeoutMs, settleMs, capture, onProgress,
      previous: log?.previous, onResult: log ? (r) => log!.append(r) : undefined,
      ...(values.trace !== undefined ? { traceDir: values.trace } : {}),
    });
    const wallMs = Date.now() - t0;
    const measured = results.length - (log?.previous.size ?? 0);
    const footer = `${results.length} loads (${measured} measured in ${fmtDuration(wallMs)}${measured < results.length ? `, ${results.length - measured} from ${values.log}` : ''}); link: delay ${delayMs} ms, rate ${rate} B/s, ${burstLen ? `bursts of ${burstLen} packets` : 'Bernoulli loss'}, seed ${seed}; ${pacingLabel(oracleRate)}; ${captureLabel(capture)}`;
    await writeOutputs(values, io, results, { command: `catp silent-time ${argv.join(' ')}`, settings, startedAt: started.toISOString(), wallMs }, footer, rate, delayMs, oracleRate, baseline);
    return results.some((r) => r.ok) ? 0 : 1;
  } finally {
    log?.close();
    gen?.cleanup();
  }
}

interface OutputValues {
  json?: string;
  csv?: string;
  chart?: string;
}

/** Load logs read for --from or --baseline. */
interface Logs {
  names: string[];
  logs: Array<{ file: string; settings: unknown; loads: LoadResult[]; tornLines: number }>;
}

function readLogs(files: string, flag: string): Logs {
  const names = files.split(',').map((f) => f.trim()).filter(Boolean);
  if (names.length === 0) throw new UsageError(`--${flag} needs a load log file`);
  const logs = names.map((file) => {
    try {
      return { file, ...readLoadLog(file) };
    } catch (err) {
      if (err instanceof LoadLogError) throw new UsageError(err.message);
      throw err;
    }
  });
  return { names, logs };
}

/** What a log's settings say of the link; logs written before rate discovery have no oracleRate: their senders were told the rate. */
function linkOf(st: unknown): { rate: number; delayMs: number; burst: unknown; oracleRate: boolean } {
  const o = (st ?? {}) as { rate?: unknown; delayMs?: unknown; burst?: unknown; oracleRate?: unknown };
  return { rate: typeof o.rate === 'number' ? o.rate : NaN, delayMs: typeof o.delayMs === 'number' ? o.delayMs : NaN, burst: o.burst ?? null, oracleRate: o.oracleRate !== false };
}

/** How a log's frames were captured; logs written before session 43 record no capture unless it was damage. */
function captureOf(st: unknown): unknown {
  return ((st ?? {}) as { capture?: unknown }).capture ?? UNRECORDED_CAPTURE;
}

/** A warning on stderr for each log measured on another link, or captured otherwise, than `settings` (named `what`). */
function warnIfOther(io: Io, logs: Logs['logs'], settings: unknown, what: string): void {
  for (const l of logs) {
    if (JSON.stringify(linkOf(l.settings)) !== JSON.stringify(linkOf(settings))) io.stderr.write(`silent-time: warning: ${l.file} was measured on another link than ${what}\n`);
    if (captureOf(l.settings) !== captureOf(settings)) io.stderr.write(`silent-time: warning: ${l.file} was captured otherwise (--capture ${String(captureOf(l.settings))}) than ${what} (${String(captureOf(settings))})\n`);
  }
}

async function writeOutputs(values: OutputValues, io: Io, results: LoadResult[], meta: { command: string; settings: Record<string, unknown>; startedAt: string | null; wallMs: number | null }, footer: string, rate: number, delayMs: number, oracleRate: boolean, baseline?: Logs): Promise<void> {
  const rows = summarize(results);
  io.stdout.write(formatTable(rows));
  const vs = versus(rows);
  if (vs.length) io.stdout.write(`\n${formatVersus(vs)}`);
  let pairs: PairedRow[] | undefined;
  if (baseline !== undefined) {
    pairs = paired(results, baseline.logs.flatMap((l) => l.loads));
    io.stdout.write(`\n${formatPaired(pairs, baseline.names.join(', '))}`);
  }
  io.stdout.write(`\n${footer}\n`);
  if (values.json) fs.writeFileSync(values.json, formatJson({ version: 1, tool: 'catp silent-time', ...meta, summary: rows, versus: vs, ...(pairs ? { paired: { baseline: baseline!.names, rows: pairs } } : {}), loads: results }));
  if (values.csv) fs.writeFileSync(values.csv, formatCsv(rows));
  if (values.chart) await writeChart(values.chart, rows, `Silent time vs loss (${rate} B/s, ${delayMs} ms delay${oracleRate ? '; oracle rate, ablation' : ''})`);
}

/** The report footer's word on how frames were captured (updates.ts). */
function captureLabel(capture: unknown): string {
  return capture === 'damage' ? 'frames captured on change (--capture damage)' : 'frames captured every vsync (--capture vsync)';
}

/** How our UDP senders got their rate, for every table's footer. */
function pacingLabel(oracleRate: boolean): string {
  return oracleRate ? 'catp/inorder: ORACLE RATE (ablation: told 0.95 × the link rate)' : 'catp/inorder: rate found by the sender (no oracle)';
}

/** `--from FILE[,FILE...]`: the report of one or more load logs (e.g. one per page size), without measuring. */
async function fromLog(files: string, values: OutputValues, io: Io, baseline?: Logs): Promise<number> {
  const { names, logs } = readLogs(files, 'from');
  const first = linkOf(logs[0]!.settings);
  const capture = captureOf(logs[0]!.settings);
  warnIfOther(io, logs.slice(1), logs[0]!.settings, logs[0]!.file);
  if (baseline !== undefined) warnIfOther(io, baseline.logs, logs[0]!.settings, 'this run');
  const loads = logs.flatMap((l) => l.loads);
  const torn = logs.reduce((n, l) => n + l.tornLines, 0);
  const footer = `${loads.length} loads from ${names.join(', ')}${torn ? ` (${torn} torn lines skipped)` : ''}; ${pacingLabel(first.oracleRate)}; ${captureLabel(capture)}`;
  const settings = logs.length === 1 ? ((logs[0]!.settings ?? {}) as Record<string, unknown>) : { logs: logs.map((l) => ({ file: l.file, settings: l.settings })) };
  await writeOutputs(values, io, loads, { command: `catp silent-time --from ${files}`, settings, startedAt: null, wallMs: null }, footer, first.rate, first.delayMs, first.oracleRate, baseline);
  return loads.some((r) => r.ok) ? 0 : 1;
}
