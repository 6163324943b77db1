/**
 * Congestion benchmark: how the CATP / in-order UDP sender behaves at a real bottleneck, with real kernel packets
 * through the lab's emulated link (lab/link.ts: two network namespaces, a user-space bottleneck with rate, FIFO
 * tail-drop queue, delay and Bernoulli loss). The reference server (`catp serve`) and, for the bulk TCP flow,
 * Debian's nginx run on the server side; every client (`catp get`, curl) runs on the client side.
 *
 *  1. completion  the CATP paper's Figure 7 settings: 10,000 B/s, 10 ms one-way, the default queue (15,000 B),
 *                 Bernoulli loss 0/5/10/20% in both directions; generated 10 KB and 50 KB HTML pages; transports
 *                 catp (`catp get --catp`), inorder (`--inorder`: DHTTP in-order UDP, the same sender) and tcp
 *                 (`catp get http://` to the same server's HTTP/1.1 side, Accept-Encoding: br as our browser's
 *                 tcp transport asks). Completion = request sent to last byte, as the client measures it
 *                 (its startedAtMs → completedAtMs). Mean and median per point, catp/tcp ratio of the means.
 *  2. fairness    100,000 B/s, 20 ms one-way, default queue (20,000 B = 200 ms), no loss: a bulk TCP download
 *                 (curl, 16 MB from nginx), and 1 s later a 1 MB page by catp (then, in a second run, by inorder).
 *                 From the link's per-packet log: each flow's throughput (IP bytes leaving the bottleneck) while
 *                 both were sending, its share of an even split of the link (fair: ½ to 2×), and the time
 *                 packets waited in the bottleneck queue (median / p95), beside the same for TCP alone.
 *  3. fastpath    10,000,000 B/s, 5 ms one-way, no loss: a 1 MB page by catp and by tcp; mean completion and the
 *                 ratio catp/tcp (target ≤ 1.2).
 *
 * No oracle: the UDP sender is not told the link's rate (no --rate, no Catp-Rate header; the server runs with its
 * default `--pacing discover`); it must find it. With --oracle-rate (an ablation, as `catp silent-time
 * --oracle-rate`) the server runs with `--pacing fixed` and every catp / inorder load asks for 0.95 × the link's
 * rate (Catp-Rate); every row then says "oracle rate (ablation)".
 *
 * Every catp and inorder load (completion, fast path) meets a server started for it (`Bench.freshCatp`): a first
 * contact, its first flight paid for by its own padding under address validation, as a browser's first load from a
 * server is (until session 35 the server stayed up across a point's loads, and what the earlier ones sent paid for
 * the later ones' first flights). TCP's loads each open a connection, as before.
 *
 * Completion points (one link per loss rate; loads interleaved by transport, rotated per
 * repetition) run --parallel at a time (default 2; at 10,000 B/s the measured time is the network's, not the
 * CPU's). Fairness and fast path run alone. Needs root or user namespaces (labSupport()), nginx for fairness.
 * Prints tables on stdout, progress on stderr, writes bench/results/congestion.json.
 *
 *   npm run build && npm run bench:congestion -- --loads 5
 *   node dist/bench/congestion/run.js --only fastpath --loads 3 --oracle-rate
 */
import { type ChildProcess } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';

import { labSupport, startLink, type Link, type LinkOptions, type LogEvent } from '../../lab/link';
import { NGINX } from '../../lab/nginx';
import { catpCommand, repoRoot, startOrigin, type Origin } from '../../lab/silent-time/origin';
import { gitCommit } from '../commit';
import { generatePage } from '../../lab/silent-time/pages';
import {
  analyseFairness, mean, median, parseGetOutput, quantile, table, windowStats,
  type FairnessAnalysis, type GetOutcome, type QueueDelay, type WindowStats,
} from './analysis';

const EXPERIMENTS = ['completion', 'fairness', 'fastpath'] as const;
type Experiment = (typeof EXPERIMENTS)[number];
type TransportName = 'catp' | 'inorder' | 'tcp';

const HELP = `usage: node dist/bench/congestion/run.js [options]      (npm run bench:congestion -- [options])

Measures the CATP / in-order UDP sender's congestion behaviour through the lab's emulated link (real packets):
  completion  10,000 B/s, 10 ms, loss 0/5/10/20% (Bernoulli, both directions), 10 KB and 50 KB pages:
              completion time (request to last byte) of catp, inorder and tcp; ratio catp/tcp
  fairness    100,000 B/s, 20 ms: a bulk TCP download, then a 1 MB page by catp (and again by inorder):
              each flow's throughput while both ran, its share, the bottleneck's queueing delay
  fastpath    10,000,000 B/s, 5 ms: a 1 MB page by catp and by tcp; ratio catp/tcp (target <= 1.2)

The UDP sender is not told the link's rate unless --oracle-rate is given.

options:
  --loads N          loads per transport and point (completion, fastpath; default 5)
  --only LIST        run only these experiments (comma-separated: completion,fairness,fastpath)
  --oracle-rate      ablation: the server runs with --pacing fixed and catp / inorder loads ask it to pace
                     at 0.95 x the link's rate (the old oracle); every row is labelled so
  --parallel N       completion: loss points run at once, each on its own link (default 2; 1 = one by one)
  --fairness-runs N  fairness: runs per UDP transport (default 1; one run is noisy, see the JSON)
  --seed N           base seed of the link's loss draws (default 1)
  --out FILE         the JSON results (default bench/results/congestion.json)
  -h, --help         show this help

Needs the built project (npm run build), root or unprivileged user namespaces with /dev/net/tun, and nginx
(nginx-light) plus curl for the fairness experiment. Progress goes to stderr, tables to stdout.
`;

class UsageError extends Error {}

interface Options {
  loads: number;
  only: Experiment[];
  oracleRate: boolean;
  parallel: number;
  fairnessRuns: number;
  seed: number;
  out: string;
}

function intArg(v: string | undefined, name: string, lo: number, hi: number, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < lo || n > hi) throw new UsageError(`--${name} must be a whole number from ${lo} to ${hi}, got '${v}'`);
  return n;
}

function parseOptions(argv: string[]): Options | 'help' {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        loads: { type: 'string' }, only: { type: 'string' }, 'oracle-rate': { type: 'boolean' }, parallel: { type: 'string' }, 'fairness-runs': { type: 'string' },
        seed: { type: 'string' }, out: { type: 'string' }, help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.help) return 'help';
  let only: Experiment[] = [...EXPERIMENTS];
  if (values.only !== undefined) {
    const names = values.only.split(',').map((s) => s.trim()).filter((s) => s !== '');
    for (const n of names) if (!(EXPERIMENTS as readonly string[]).includes(n)) throw new UsageError(`--only: unknown experiment '${n}' (one of ${EXPERIMENTS.join(', ')})`);
    if (names.length === 0) throw new UsageError('--only needs at least one experiment');
    only = EXPERIMENTS.filter((e) => names.includes(e));
  }
  return {
    loads: intArg(values.loads, 'loads', 1, 1000, 5),
    only,
    oracleRate: values['oracle-rate'] === true,
    parallel: intArg(values.parallel, 'parallel', 1, 4, 2),
    fairnessRuns: intArg(values['fairness-runs'], 'fairness-runs', 1, 100, 1),
    seed: intArg(values.seed, 'seed', 0, 2 ** 31, 1),
    out: path.resolve(values.out ?? path.join(repoRoot(), 'bench', 'results', 'congestion.json')),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Settings

const CATP_PORT = 8080;
const NGINX_PORT = 8081;

const COMPLETION = { rate: 10_000, delayMs: 10, losses: [0, 0.05, 0.1, 0.2], sizes: [10_000, 50_000], transports: ['catp', 'inorder', 'tcp'] as TransportName[] };
const FAIRNESS = { rate: 100_000, delayMs: 20, pageBytes: 1_000_000, bulkBytes: 16_000_000, udpStartAfterMs: 1000, transports: ['catp', 'inorder'] as TransportName[] };
const FASTPATH = { rate: 10_000_000, delayMs: 5, pageBytes: 1_000_000, transports: ['catp', 'tcp'] as TransportName[], target: 1.2 };

const pageFile = (bytes: number) => `/gen-${bytes >= 1_000_000 ? `${bytes / 1_000_000}m` : `${bytes / 1000}k`}.html`;
const label = (bytes: number) => pageFile(bytes).slice(5, -5);
const oracle = (linkRate: number) => Math.max(1000, Math.floor(linkRate * 0.95));
/** A load's time limit: 20× its transfer time at the link's rate, at least 30 s, at most 180 s. */
const loadTimeout = (bytes: number, rate: number) => Math.min(180_000, Math.max(30_000, Math.ceil((20 * bytes * 1000) / rate)));

const now = () => process.hrtime.bigint();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const progress = (msg: string) => process.stderr.write(`[congestion ${((Date.now() - t0) / 1000).toFixed(0).padStart(4)} s] ${msg}\n`);
/** Things that went wrong but did not stop the run: printed at the end and kept in the JSON. */
const warnings: string[] = [];
const warn = (msg: string) => {
  warnings.push(msg);
  progress(`warning: ${msg}`);
};

// Everything to undo on the way out (links, servers, temp dirs), also on Ctrl-C.
const cleanups = new Set<() => Promise<void>>();
async function cleanupAll(): Promise<void> {
  for (const c of [...cleanups].reverse()) {
    cleanups.delete(c);
    await c().catch(() => undefined);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Processes in the namespaces

function waitClose(child: ChildProcess, timeoutMs: number): Promise<{ code: number | null; stderr: string; timedOut: boolean }> {
  return new Promise((resolve, reject) => {
    let stderr = '';
    let timedOut = false;
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      if (stderr.length < 65_536) stderr += d;
    });
    child.stdout?.resume();
    const t = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    child.once('close', (code) => {
      clearTimeout(t);
      resolve({ code, stderr, timedOut });
    });
  });
}

/** `catp get` arguments for a transport: mode flags, the oracle's --rate, the URL. */
function getArgs(t: TransportName, host: string, urlPath: string, oracleRate: number | null): string[] {
  if (t === 'tcp') return ['-H', 'Accept-Encoding: br', `http://${host}:${CATP_PORT}${urlPath}`];
  return [`--${t}`, ...(oracleRate !== null ? ['--rate', String(oracleRate)] : []), `dhttp://${host}:${CATP_PORT}${urlPath}`];
}

interface GetResult {
  ok: boolean;
  outcome: GetOutcome | null;
  error?: string;
  /** CLOCK_MONOTONIC ns just before the client was started and when it had exited */
  startNs: bigint;
  endNs: bigint;
}

/** One load by `catp get -v` in the client namespace; never throws. */
async function load(link: Link, t: TransportName, urlPath: string, timeoutMs: number, oracleRate: number | null): Promise<GetResult> {
  const { cmd, args } = catpCommand();
  const startNs = now();
  try {
    const child = link.spawnIn('client', cmd, [...args, 'get', '--no-store', '-v', '-o', '/dev/null', '--timeout', String(timeoutMs), ...getArgs(t, link.serverAddress, urlPath, oracleRate)], { stdio: ['ignore', 'ignore', 'pipe'] });
    const r = await waitClose(child, timeoutMs + 15_000);
    const endNs = now();
    const outcome = parseGetOutput(r.stderr);
    const lastLine = r.stderr.trim().split('\n').filter((l) => !l.startsWith('  endpoint')).at(-1) ?? '';
    if (r.timedOut) return { ok: false, outcome, error: `killed after ${timeoutMs + 15_000} ms`, startNs, endNs };
    if (r.code !== 0) return { ok: false, outcome, error: `catp get exited with ${r.code}: ${lastLine.slice(0, 200)}`, startNs, endNs };
    if (!outcome) return { ok: false, outcome, error: `no completion line in catp get's output: ${lastLine.slice(0, 200)}`, startNs, endNs };
    if (t !== 'tcp' && outcome.kind !== 'stream') {
      // The DHTTP client falls back to plain HTTP/1.1 when its request and resend go unanswered (heavy loss).
      const fellBack = /^! falling back to plain HTTP\/1\.1 over TCP \((.*)\)/m.exec(r.stderr);
      const error = fellBack ? `the client fell back to plain HTTP/1.1 (${fellBack[1]})` : `the server did not stream the page (answered via ${outcome.via})`;
      return { ok: false, outcome, error, startNs, endNs };
    }
    if (t === 'tcp' && outcome.via !== 'plain HTTP/1.1 over TCP') return { ok: false, outcome, error: `answered via ${outcome.via}`, startNs, endNs };
    return { ok: true, outcome, startNs, endNs };
  } catch (err) {
    return { ok: false, outcome: null, error: (err as Error).message.split('\n')[0], startNs, endNs: now() };
  }
}

/**
 * Warms the server's caches for a page and transport from inside the server's namespace (local: nothing crosses
 * the link), as lab/silent-time does: CATP frames are encoded (brotli 11 per frame), the in-order stream and the
 * HTTP body brotli-compressed, once per page; without this the first measured load would wait for that.
 */
async function warm(link: Link, t: TransportName, urlPath: string, tag: string): Promise<void> {
  const { cmd, args } = catpCommand();
  // A failed warm-up is not fatal (the page is cached by the attempt's encode all the same); it is said.
  for (let attempt = 1; attempt <= 2; attempt++) {
    const r = await link.runIn('server', cmd, [...args, 'get', '--no-store', '-o', '/dev/null', '--timeout', '60000', ...getArgs(t, link.serverAddress, urlPath, null)], 90_000);
    if (r.code === 0) return;
    const line = r.stderr.trim().split('\n').at(-1) ?? '';
    warn(`${tag}: warm-up load ${attempt} of ${urlPath} by ${t} inside the server's namespace (local, no emulated link) failed (${r.code}): ${line.slice(0, 200)}`);
  }
}

/** Waits until nothing is queued or in flight on the link (at most maxMs), so the next load starts on an empty queue. */
async function drain(link: Link, maxMs = 3000): Promise<void> {
  const until = Date.now() + maxMs;
  let quiet = 0;
  while (Date.now() < until) {
    const c = await link.counters();
    quiet = c.s2c.pending === 0 && c.c2s.pending === 0 ? quiet + 1 : 0;
    if (quiet >= 2) return;
    await sleep(100);
  }
}

/** `catp serve --pacing`: 'discover' (the default: the sender finds the rate) or 'fixed' (the oracle ablation). */
type Pacing = 'discover' | 'fixed';
const pacingOf = (o: Options): Pacing => (o.oracleRate ? 'fixed' : 'discover');

interface Bench {
  link: Link;
  nginx?: Origin;
  /**
   * A new catp server in place of the running one, its caches warmed for `urlPath` and each of `transports` (TCP's
   * loads go to the same server's HTTP/1.1 side, whose brotli copy of a page a new server must make again) from
   * inside the server's namespace: the next DHTTP load is a first contact. The server keeps what each address sent
   * it (address validation's budget, per address and over time), so a second load from the client's address would
   * find its first flight paid for by the first one's reports and skip the first contact's cost, which a browser
   * meets on every new server (as TCP's loads each pay a handshake).
   */
  freshCatp(transports: readonly TransportName[], urlPath: string, tag: string): Promise<void>;
}

/** A link with the catp server (and optionally nginx) on its server side; closed by the returned close(). */
async function setUp(lo: LinkOptions, root: string, pacing: Pacing, withNginx = false): Promise<Bench & { close(): Promise<void> }> {
  const link = await startLink(lo);
  let catp: Origin | undefined;
  let nginx: Origin | undefined;
  const close = async () => {
    cleanups.delete(close);
    if (nginx) await nginx.close().catch(() => undefined);
    if (catp) await catp.close().catch(() => undefined);
    await link.close().catch(() => undefined);
  };
  cleanups.add(close);
  try {
    catp = await startOrigin(link, 'catp', root, CATP_PORT, undefined, pacing);
    if (withNginx) nginx = await startOrigin(link, 'nginx', root, NGINX_PORT);
  } catch (err) {
    await close();
    throw err;
  }
  const freshCatp = async (transports: readonly TransportName[], urlPath: string, tag: string) => {
    if (catp) await catp.close();
    catp = undefined;
    catp = await startOrigin(link, 'catp', root, CATP_PORT, undefined, pacing);
    for (const t of transports) await warm(link, t, urlPath, tag);
  };
  return { link, ...(nginx ? { nginx } : {}), freshCatp, close };
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Completion

interface LoadRow {
  page: string;
  loss: number;
  transport: TransportName;
  rep: number;
  ok: boolean;
  completionMs: number | null;
  firstFrameMs: number | null;
  error?: string;
  /** what crossed the link from this load's start to the next one's */
  link: WindowStats;
}

interface PointSummary {
  page: string;
  loss: number;
  transport: TransportName;
  n: number;
  failed: number;
  meanMs: number;
  medianMs: number;
  minMs: number;
  maxMs: number;
  /** mean of this transport / mean of tcp at the same point (NaN for tcp) */
  vsTcp: number;
  /** mean s2c IP bytes delivered per load, and tail drops at the bottleneck per load */
  wireBytes: number;
  queueDrops: number;
  lossDrops: number;
}

/** Loads of one point's link; windows [start_i, start_{i+1}) of the link's log give each its traffic. */
function attachWindows(events: readonly LogEvent[], starts: bigint[]): WindowStats[] {
  const end = events.length ? events[events.length - 1]!.tNs + 1n : 0n;
  return starts.map((s, i) => windowStats(events, s, i + 1 < starts.length ? starts[i + 1]! : end > s ? end : s + 1n));
}

async function completionPoint(o: Options, root: string, loss: number, seed: number): Promise<LoadRow[]> {
  const tag = `completion ${Math.round(loss * 100)}%`;
  const lo: LinkOptions = { rate: COMPLETION.rate, delayMs: COMPLETION.delayMs, seed, ...(loss > 0 ? { loss } : {}) };
  const b = await setUp(lo, root, pacingOf(o));
  try {
    for (const size of COMPLETION.sizes) for (const t of COMPLETION.transports) await warm(b.link, t, pageFile(size), tag);
    await drain(b.link);
    const pending: Array<Omit<LoadRow, 'link'> & { startNs: bigint }> = [];
    for (let rep = 0; rep < o.loads; rep++) {
      for (const size of COMPLETION.sizes) {
        // transports rotated per repetition, so none always runs first (or right after another's leftovers)
        const order = COMPLETION.transports.map((_, i) => COMPLETION.transports[(i + rep) % COMPLETION.transports.length]!);
        for (const t of order) {
          if (t !== 'tcp') {
            await b.freshCatp(COMPLETION.transports, pageFile(size), tag); // a first contact, as a browser's first load from a server
            await drain(b.link);
          }
          const r = await load(b.link, t, pageFile(size), loadTimeout(size, COMPLETION.rate), o.oracleRate ? oracle(COMPLETION.rate) : null);
          pending.push({
            page: label(size), loss, transport: t, rep, ok: r.ok, startNs: r.startNs,
            completionMs: r.ok ? r.outcome!.completionMs : null, firstFrameMs: r.outcome?.firstFrameMs ?? null,
            ...(r.error ? { error: r.error } : {}),
          });
          progress(`${tag} ${label(size)} rep ${rep + 1}/${o.loads} ${t.padEnd(7)} ${r.ok ? `${r.outcome!.completionMs.toFixed(0)} ms` : `FAILED: ${r.error}`}`);
          await drain(b.link);
        }
      }
    }
    const log = await b.link.log();
    const windows = attachWindows(log.events, pending.map((p) => p.startNs));
    return pending.map(({ startNs: _startNs, ...p }, i) => ({ ...p, link: windows[i]! }));
  } finally {
    await b.close();
  }
}

function summarize(rows: readonly LoadRow[]): PointSummary[] {
  const out: PointSummary[] = [];
  const keys = [...new Set(rows.map((r) => `${r.page}|${r.loss}|${r.transport}`))];
  for (const k of keys) {
    const group = rows.filter((r) => `${r.page}|${r.loss}|${r.transport}` === k);
    const okRows = group.filter((r) => r.ok);
    const ok = okRows.map((r) => r.completionMs!);
    // traffic of the completed loads (a failed one may have gone another way, e.g. fallen back to HTTP)
    const counted = okRows.length ? okRows : group;
    const g = group[0]!;
    out.push({
      page: g.page, loss: g.loss, transport: g.transport, n: ok.length, failed: group.length - ok.length,
      meanMs: mean(ok), medianMs: median(ok), minMs: ok.length ? Math.min(...ok) : NaN, maxMs: ok.length ? Math.max(...ok) : NaN, vsTcp: NaN,
      wireBytes: mean(counted.map((r) => r.link.s2cDeliveredBytes)),
      queueDrops: mean(counted.map((r) => r.link.s2cQueueDrops)),
      lossDrops: mean(counted.map((r) => r.link.s2cLossDrops + r.link.c2sLossDrops)),
    });
  }
  for (const s of out) {
    const tcp = out.find((x) => x.page === s.page && x.loss === s.loss && x.transport === 'tcp');
    if (s.transport !== 'tcp' && tcp) s.vsTcp = s.meanMs / tcp.meanMs;
  }
  const order = (s: PointSummary) => [COMPLETION.sizes.map(label).indexOf(s.page), s.loss, COMPLETION.transports.indexOf(s.transport)];
  return out.sort((a, b) => {
    const x = order(a);
    const y = order(b);
    return x[0]! - y[0]! || x[1]! - y[1]! || x[2]! - y[2]!;
  });
}

function failureNotes(loads: readonly LoadRow[]): void {
  for (const l of loads) {
    if (!l.ok) console.log(`  failed: ${l.page} ${pctStr(l.loss)} ${l.transport} load ${l.rep + 1}: ${l.error ?? 'no reason'}`);
  }
}

async function pool<T, R>(items: readonly T[], width: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  return out;
}

const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '–');
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const pctStr = (x: number) => `${Math.round(x * 100)}%`;

async function runCompletion(o: Options, root: string, rateLabel: string) {
  progress(`completion: ${COMPLETION.losses.length} loss points × ${COMPLETION.sizes.length} pages × ${COMPLETION.transports.length} transports × ${o.loads} loads, ${o.parallel} point(s) at a time`);
  // the lossiest points take longest: they start first, so the pool's points end close together
  const points = COMPLETION.losses.map((loss, i) => ({ loss, seed: o.seed + i })).sort((a, b) => b.loss - a.loss);
  const perPoint = await pool(points, o.parallel, (p) => completionPoint(o, root, p.loss, p.seed));
  const loads = perPoint.flat();
  const summary = summarize(loads);
  const rows: string[][] = [['page', 'loss', 'transport', 'n', 'mean ms', 'median ms', 'min ms', 'max ms', 'vs tcp', 'wire kB', 'queue drops', 'sender rate']];
  for (const s of summary) {
    rows.push([s.page, pctStr(s.loss), s.transport, `${s.n}${s.failed ? ` (+${s.failed} failed)` : ''}`, f0(s.meanMs), f0(s.medianMs), f0(s.minMs), f0(s.maxMs),
      s.transport === 'tcp' ? '' : f2(s.vsTcp), f1(s.wireBytes / 1000), f1(s.queueDrops), rateLabel]);
  }
  console.log(`\n1. Completion time, request to last byte (${COMPLETION.rate.toLocaleString('en-US')} B/s, ${COMPLETION.delayMs} ms one-way, default queue 15,000 B, ` +
    `Bernoulli loss in both directions, ${o.loads} loads a point). vs tcp = mean / tcp's mean; wire kB = server-to-client IP bytes ` +
    'delivered per completed load; queue drops = tail drops at the bottleneck per completed load (the sender overran the link).\n');
  console.log(table(rows, 3));
  failureNotes(loads);
  return {
    settings: { ...COMPLETION, lossDirection: 'both', queueBytes: 15_000, loads: o.loads, parallel: o.parallel, seeds: COMPLETION.losses.map((_, i) => o.seed + i) },
    summary, loads,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// 2. Fairness

interface FairnessRun {
  udpTransport: TransportName;
  /** 1, 2, ... (--fairness-runs) */
  run: number;
  tcpClient: string;
  udpCompletionMs: number | null;
  udpError?: string;
  analysis: FairnessAnalysis | null;
  /** s2c drops over the whole run */
  s2cQueueDrops: number;
  error?: string;
}

function curlAvailable(): boolean {
  return ['/usr/bin/curl', '/bin/curl', '/usr/local/bin/curl'].some((p) => fs.existsSync(p));
}

async function fairnessRun(o: Options, root: string, udp: TransportName, run: number, seed: number): Promise<FairnessRun> {
  const tcpClient = curlAvailable() ? 'curl' : 'catp get http://';
  const b = await setUp({ rate: FAIRNESS.rate, delayMs: FAIRNESS.delayMs, seed }, root, pacingOf(o), true);
  let bulk: ChildProcess | undefined;
  try {
    await warm(b.link, udp, pageFile(FAIRNESS.pageBytes), `fairness ${udp}`);
    await drain(b.link);
    const bulkUrl = `http://${b.link.serverAddress}:${NGINX_PORT}/bulk.bin`;
    const { cmd, args } = catpCommand();
    bulk = tcpClient === 'curl'
      ? b.link.spawnIn('client', 'curl', ['-s', '-o', '/dev/null', '--max-time', '600', bulkUrl], { stdio: ['ignore', 'ignore', 'pipe'] })
      : b.link.spawnIn('client', cmd, [...args, 'get', '--no-store', '-o', '/dev/null', '--timeout', '600000', bulkUrl], { stdio: ['ignore', 'ignore', 'pipe'] });
    const bulkDone = waitClose(bulk, 700_000);
    progress(`fairness ${udp} run ${run}: bulk TCP download (${tcpClient}) started; ${udp} in ${FAIRNESS.udpStartAfterMs} ms`);
    await sleep(FAIRNESS.udpStartAfterMs);
    const r = await load(b.link, udp, pageFile(FAIRNESS.pageBytes), loadTimeout(FAIRNESS.pageBytes, FAIRNESS.rate / 2), o.oracleRate ? oracle(FAIRNESS.rate) : null);
    progress(`fairness ${udp} run ${run}: ${udp} ${r.ok ? `done in ${r.outcome!.completionMs.toFixed(0)} ms` : `FAILED: ${r.error}`}`);
    await sleep(500);
    const bulkExited = bulk.exitCode !== null || bulk.signalCode !== null;
    bulk.kill('SIGTERM');
    await bulkDone;
    bulk = undefined;
    await drain(b.link);
    const log = await b.link.log();
    const analysis = analyseFairness(log.events, { tcpPort: NGINX_PORT, udpPort: CATP_PORT, rate: FAIRNESS.rate, delayNs: BigInt(FAIRNESS.delayMs * 1e6) });
    const s2cQueueDrops = log.events.filter((e) => e.dir === 's2c' && e.ev === 'drop' && e.reason === 'queue').length;
    return {
      udpTransport: udp, run, tcpClient, udpCompletionMs: r.ok ? r.outcome!.completionMs : null, ...(r.error ? { udpError: r.error } : {}),
      analysis, s2cQueueDrops,
      ...(bulkExited ? { error: `the bulk TCP download ended before the ${udp} load did: the overlap is cut short` } : {}),
    };
  } finally {
    if (bulk) bulk.kill('SIGKILL');
    await b.close();
  }
}

const kBps = (x: number) => (Number.isFinite(x) ? (x / 1000).toFixed(1) : '–');
const ratioStr = (x: number) => (x === Infinity ? '∞' : f2(x));
const qd = (q: QueueDelay) => (q.n ? `${f0(q.medianMs)} / ${f0(q.p95Ms)}` : '–');

async function runFairness(o: Options, root: string, rateLabel: string) {
  if (!NGINX) {
    const why = 'nginx not found (apt-get install nginx-light): the fairness experiment needs a stock TCP server';
    console.log(`\n2. Fairness: skipped: ${why}`);
    return { skipped: why };
  }
  fs.writeFileSync(path.join(root, 'bulk.bin'), crypto.randomBytes(FAIRNESS.bulkBytes));
  const runs: FairnessRun[] = [];
  for (let k = 1; k <= o.fairnessRuns; k++) {
    for (const [i, t] of FAIRNESS.transports.entries()) runs.push(await fairnessRun(o, root, t, k, o.seed + 100 + 10 * k + i));
  }
  const name = (r: FairnessRun) => (o.fairnessRuns > 1 ? `${r.udpTransport} #${r.run}` : r.udpTransport);
  const rows: string[][] = [['udp flow', 'overlap s', 'tcp kB/s', 'udp kB/s', 'udp/tcp', 'tcp share', 'udp share', 'fair', 'queue ms med/p95', 'tcp alone kB/s', 'tcp alone queue ms', 'udp tail drops', 'tcp tail drops', 'udp done s', 'sender rate']];
  for (const r of runs) {
    const a = r.analysis;
    if (!a || !a.overlap) {
      rows.push([name(r), '–', '–', '–', '–', '–', '–', 'no overlap', '–', '–', '–', '–', '–', r.udpCompletionMs === null ? 'failed' : f1(r.udpCompletionMs / 1000), rateLabel]);
      continue;
    }
    const fair = [a.tcp.shareOfEven, a.udp.shareOfEven].every((s) => s >= 0.5 && s <= 2);
    rows.push([name(r), f1(a.overlap.ms / 1000), kBps(a.tcp.overlapBytesPerSec), kBps(a.udp.overlapBytesPerSec), ratioStr(a.udpOverTcp),
      f2(a.tcp.shareOfEven), f2(a.udp.shareOfEven), fair ? 'yes' : 'NO', qd(a.queueDelay), kBps(a.tcpAloneBytesPerSec), qd(a.queueDelayTcpAlone),
      String(a.udp.overlapQueueDrops), String(a.tcp.overlapQueueDrops), r.udpCompletionMs === null ? 'failed' : f1(r.udpCompletionMs / 1000), rateLabel]);
  }
  console.log(`\n2. Fairness (${FAIRNESS.rate.toLocaleString('en-US')} B/s, ${FAIRNESS.delayMs} ms one-way, default queue 20,000 B = 200 ms, no loss): ` +
    `a bulk TCP download (${runs[0]?.tcpClient ?? 'curl'} from nginx), then ${FAIRNESS.udpStartAfterMs / 1000} s later a ${FAIRNESS.pageBytes / 1e6} MB page by the UDP flow. ` +
    'Throughput = IP bytes leaving the bottleneck while both sent; share = throughput / half the link (fair: 0.5–2); ' +
    'queue ms = time server-to-client packets waited in the bottleneck queue while both sent, median / p95; ' +
    'tcp alone = the bulk flow before the UDP flow started (its throughput and queue delay: the reference).\n');
  console.log(table(rows, 1));
  for (const r of runs) {
    if (r.error) console.log(`  note (${name(r)}): ${r.error}`);
    if (r.udpError) console.log(`  note (${name(r)}): the UDP load failed: ${r.udpError}`);
  }
  const json = (r: FairnessRun) => {
    const a = r.analysis;
    const t0 = a?.tcp.firstNs ?? 0n;
    const rel = (x: bigint | null) => (x === null ? null : Number(x - t0) / 1e6);
    return {
      ...r,
      analysis: a && {
        overlapMs: a.overlap?.ms ?? null, overlapFromMs: a.overlap ? rel(a.overlap.fromNs) : null, overlapToMs: a.overlap ? rel(a.overlap.toNs) : null,
        udpOverTcp: Number.isFinite(a.udpOverTcp) ? a.udpOverTcp : null, tcpAloneBytesPerSec: a.tcpAloneBytesPerSec, utilization: a.utilization, queueDelay: a.queueDelay, queueDelayTcpAlone: a.queueDelayTcpAlone,
        tcp: { ...a.tcp, firstNs: undefined, lastNs: undefined, firstMs: rel(a.tcp.firstNs), lastMs: rel(a.tcp.lastNs) },
        udp: { ...a.udp, firstNs: undefined, lastNs: undefined, firstMs: rel(a.udp.firstNs), lastMs: rel(a.udp.lastNs) },
      },
    };
  };
  return { settings: { ...FAIRNESS, queueBytes: 20_000, loss: 0, runs: o.fairnessRuns }, runs: runs.map(json) };
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Fast path

async function runFastpath(o: Options, root: string, rateLabel: string) {
  const b = await setUp({ rate: FASTPATH.rate, delayMs: FASTPATH.delayMs, seed: o.seed + 200 }, root, pacingOf(o));
  const urlPath = pageFile(FASTPATH.pageBytes);
  const pending: Array<Omit<LoadRow, 'link'> & { startNs: bigint }> = [];
  let loads: LoadRow[];
  try {
    for (const t of FASTPATH.transports) await warm(b.link, t, urlPath, 'fastpath');
    await drain(b.link);
    for (let rep = 0; rep < o.loads; rep++) {
      const order = rep % 2 === 0 ? FASTPATH.transports : [...FASTPATH.transports].reverse();
      for (const t of order) {
        if (t !== 'tcp') {
          await b.freshCatp(FASTPATH.transports, urlPath, 'fastpath'); // a first contact (Bench.freshCatp)
          await drain(b.link);
        }
        const r = await load(b.link, t, urlPath, loadTimeout(FASTPATH.pageBytes, FASTPATH.rate), o.oracleRate ? oracle(FASTPATH.rate) : null);
        pending.push({
          page: label(FASTPATH.pageBytes), loss: 0, transport: t, rep, ok: r.ok, startNs: r.startNs,
          completionMs: r.ok ? r.outcome!.completionMs : null, firstFrameMs: r.outcome?.firstFrameMs ?? null, ...(r.error ? { error: r.error } : {}),
        });
        progress(`fastpath rep ${rep + 1}/${o.loads} ${t.padEnd(4)} ${r.ok ? `${r.outcome!.completionMs.toFixed(0)} ms` : `FAILED: ${r.error}`}`);
        await drain(b.link);
      }
    }
    const log = await b.link.log();
    const windows = attachWindows(log.events, pending.map((p) => p.startNs));
    loads = pending.map(({ startNs: _startNs, ...p }, i) => ({ ...p, link: windows[i]! }));
  } finally {
    await b.close();
  }
  const summary = summarize(loads);
  const catp = summary.find((s) => s.transport === 'catp');
  const ratio = catp?.vsTcp ?? NaN;
  const rows: string[][] = [['transport', 'n', 'mean ms', 'median ms', 'p95 ms', 'catp/tcp', 'wire kB', 'queue drops', 'sender rate']];
  for (const s of summary) {
    const times = loads.filter((l) => l.transport === s.transport && l.ok).map((l) => l.completionMs!);
    rows.push([s.transport, `${s.n}${s.failed ? ` (+${s.failed} failed)` : ''}`, f0(s.meanMs), f0(s.medianMs), f0(quantile(times, 0.95)),
      s.transport === 'tcp' ? '' : f2(s.vsTcp), f1(s.wireBytes / 1000), f1(s.queueDrops), rateLabel]);
  }
  console.log(`\n3. Fast path (${FASTPATH.rate.toLocaleString('en-US')} B/s, ${FASTPATH.delayMs} ms one-way, no loss, default queue): ` +
    `a ${FASTPATH.pageBytes / 1e6} MB page, ${o.loads} loads each, request to last byte.\n`);
  console.log(table(rows, 1));
  failureNotes(loads);
  console.log(`  catp/tcp (means) = ${f2(ratio)}: target ≤ ${FASTPATH.target} ${Number.isFinite(ratio) ? (ratio <= FASTPATH.target ? 'met' : 'MISSED') : '(not measured)'}`);
  return { settings: { ...FASTPATH, loads: o.loads }, ratio, summary, loads };
}

// ---------------------------------------------------------------------------------------------------------------

export async function main(argv: string[]): Promise<number> {
  let o: Options | 'help';
  try {
    o = parseOptions(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`bench:congestion: ${err.message}\n(--help for usage)\n`);
    return 2;
  }
  if (o === 'help') {
    process.stdout.write(HELP);
    return 0;
  }
  const lab = labSupport();
  if (!lab.ok) {
    process.stderr.write(`bench:congestion: the emulated link cannot run here: ${lab.reason}\n` +
      'It needs Linux, the built emulator (npm install), nsenter, and root or unprivileged user namespaces with a usable /dev/net/tun.\n');
    return 1;
  }
  try {
    catpCommand();
  } catch (err) {
    process.stderr.write(`bench:congestion: ${(err as Error).message}\n`);
    return 1;
  }
  const opts = o;
  const rateLabel = opts.oracleRate ? 'oracle rate (ablation)' : 'no oracle';
  const started = Date.now();
  const commit = gitCommit(); // at the start: what dist/ was built from is closer to HEAD now than at the end
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-congestion-'));
  const removeRoot = async () => {
    cleanups.delete(removeRoot);
    fs.rmSync(root, { recursive: true, force: true });
  };
  cleanups.add(removeRoot);
  const onSignal = (sig: NodeJS.Signals) => {
    progress(`${sig}: cleaning up`);
    void cleanupAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const results: Record<string, unknown> = {};
  const failed: Experiment[] = [];
  try {
    for (const bytes of new Set([...COMPLETION.sizes, FAIRNESS.pageBytes, FASTPATH.pageBytes])) fs.writeFileSync(path.join(root, pageFile(bytes)), generatePage(bytes));
    console.log(`bench:congestion: ${opts.only.join(', ')}; ${opts.loads} loads a point; UDP sender rate: ` +
      (opts.oracleRate ? 'oracle rate (ablation): catp serve --pacing fixed, catp / inorder ask for 0.95 × the link rate'
        : 'not told (no --rate, no Catp-Rate; catp serve --pacing discover): the sender finds it'));
    const run: Record<Experiment, () => Promise<unknown>> = {
      completion: () => runCompletion(opts, root, rateLabel),
      fairness: () => runFairness(opts, root, rateLabel),
      fastpath: () => runFastpath(opts, root, rateLabel),
    };
    // One experiment's failure (a server that would not start, ...) does not stop the others.
    for (const e of opts.only) {
      try {
        results[e] = await run[e]();
      } catch (err) {
        const msg = (err as Error).message.split('\n')[0] ?? String(err);
        console.log(`\n${e}: FAILED: ${msg}`);
        progress(`${e} failed: ${msg}`);
        results[e] = { error: msg };
        failed.push(e);
      }
    }
  } finally {
    await cleanupAll();
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
  }
  const wallS = (Date.now() - started) / 1000;
  if (warnings.length) console.log(`\nwarnings:\n${warnings.map((w) => `  ${w}`).join('\n')}`);
  console.log(`\nwall time ${wallS.toFixed(0)} s`);
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  fs.writeFileSync(opts.out, `${JSON.stringify({
    date: new Date().toISOString(), commit, argv, experiments: opts.only, loads: opts.loads,
    senderRate: rateLabel, serverPacing: pacingOf(opts), oracleRateFactor: opts.oracleRate ? 0.95 : null, wallSeconds: wallS,
    machine: { cpus: os.cpus().length, loadavg: os.loadavg() }, warnings, failedExperiments: failed, ...results,
  }, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), opts.out)}`);
  return failed.length ? 1 : 0;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`bench:congestion: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
