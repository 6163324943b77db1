// Render benchmark: how long a CATP frame waits between its kernel receive timestamp and the paint that
// shows it, and how fast the renderer fills blocks, for a ~1 MB corpus page loaded with no loss over loopback at
// several sender ceilings (default: the lab's 50,000 B/s, 1,000,000 B/s, and 50,000,000 B/s, which loopback
// takes as fast as the sender ramps up) in the real renderer (`catp browse --headless --record`: no DevTools client
// attached, as a window). Over loopback the ceiling paces every frame, the first flight's too (until session 62 the
// first flight landed in one millisecond whatever the ceiling); through the lab's emulated link (--link, default the
// lab's 50,000 B/s / 40 ms one way, where the lab can run: root or user namespaces) the frames come as that link
// delivers them, the sender told nothing, as a user on that link meets them.
//
// Latency per frame: the k-th useful frame (index or data; each one the host turns into one `dom` event of DOM
// operations) is shown by the paint the renderer records for the k-th dom event (record.domPaintedAtEpochMs:
// the update stamped after the slice that finished its operations); latency = that paint time (rAF +
// MessageChannel, epoch ms) - the frame's kernel receive time (CLOCK_REALTIME, epoch ms). Both clocks are
// the wall clock, read in two processes: the figures carry that (sub-millisecond) uncertainty.
// The frames are also split at the load's first paint: those that arrived before it (the first flight, which a fast link
// lands at once and which waits for the page's first pieces to be built) and those after it (the page streaming in).
// Fill throughput: blocks painted / (last block paint - first block paint).
// Beside it, the same page in stock Chromium over HTTP/1.1: last byte to painted page, the floor any renderer
// meets for building this page on this machine (when a whole page arrives at once, its last frame cannot be
// painted sooner than the page can be built); and Blink's own cost of a rendering update on the finished page
// (blink-floor.ts), what a frame's receive-to-paint time is read against.
//
//   npm run build && npm run bench:render -- --page wikipedia-2.html --runs 5 --rate 50000,1000000,50000000 --link 50000/40
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { LoadRecord } from '../../protocol/browser/api';
import { CHROMIUM_PATH, chromiumFlags } from '../../app/browser/chromium';
import { startServer } from '../../server';
import { BenchError, failureStatus, failureText } from '../errors';
import { labSupport, startLink } from '../../lab/link';
import { startOrigin } from '../../lab/silent-time/origin';
import { blinkUpdateFloor, type BlinkFloor } from './blink-floor';
import { gitCommit } from '../commit';

interface LinkSpec { rate: number; delayMs: number }
interface Options { page: string; runs: number; corpus: string; rates: number[]; links: LinkSpec[] }

const HELP = `usage: node dist/bench/render/run.js [options]      (npm run bench:render -- [options])

How long a CATP frame waits between its kernel receive timestamp and the paint that shows it, and how fast the
renderer fills blocks: a corpus page loaded with no loss over loopback, at several sender ceilings, in the real
renderer (catp browse --headless --record); and through the lab's emulated link, the sender told nothing. Per rate
and link: receive-to-paint p50/p95/max over the useful frames, where it goes (host, ipc, apply, paint), split at the
load's first paint (the first flight, the rest), and blocks painted a second. Beside it, the same page in stock
Chromium over HTTP/1.1: last byte to painted page, and Blink's own cost of a rendering update on the finished page
(one text change a frame, traced).
Prints tables and writes bench/results/render.json.

options:
  --page NAME             a page of the corpus's real-pages/ (default wikipedia-2.html, ~1 MB)
  --runs N                timed loads a rate and link, after one warm-up (default 5)
  --corpus DIR            the corpus, with real-pages/ in it (default $CATP_CORPUS, else ../shared/corpus)
  --rate B/S[,B/S...]     the sender's ceilings over loopback, B/s (default 50000,1000000,50000000)
  --link B/S/MS[,...]     through the lab's emulated link at B/S bytes a second and MS ms one way, no loss, the
                          sender finding the rate (default 50000/40, the lab's; 'none' for none). Needs root or
                          unprivileged user namespaces (lab/README.md); skipped, with the reason, where the lab
                          cannot run
  -h, --help              show this help

environment:
  CATP_CORPUS=DIR         the default of --corpus`;

export function parseArgs(argv: string[]): Options | 'help' {
  const root = path.join(__dirname, '..', '..', '..');
  const opts: Options = {
    page: 'wikipedia-2.html',
    runs: 5,
    corpus: process.env.CATP_CORPUS ?? path.join(root, '..', 'shared', 'corpus'),
    // the lab's link, a modest broadband one (8 Mbit/s) and as fast as loopback goes
    rates: [50_000, 1_000_000, 50_000_000],
    links: [{ rate: 50_000, delayMs: 40 }],
  };
  const usage = (msg: string) => new BenchError('BENCH_ERR_USAGE', `${msg} (--help for the options)`);
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-h' || argv[i] === '--help') return 'help';
    const m = /^--(page|runs|corpus|rate|link)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw usage(`unknown argument ${argv[i]}`);
    const v = m[2] ?? argv[++i];
    if (v === undefined) throw usage(`--${m[1]} needs a value`);
    if (m[1] === 'page' || m[1] === 'corpus') opts[m[1]] = v;
    else if (m[1] === 'link') {
      opts.links = v === 'none' ? [] : v.split(',').map((spec) => {
        const l = /^(\d+)\/(\d+(?:\.\d+)?)$/.exec(spec);
        if (!l || Number(l[1]) <= 0) throw usage(`--link needs B/S/MS (bytes a second / ms one way, e.g. 50000/40) or none, got ${spec}`);
        return { rate: Number(l[1]), delayMs: Number(l[2]) };
      });
    } else {
      const ns = v.split(',').map(Number);
      if (ns.length === 0 || !ns.every((n) => Number.isInteger(n) && n > 0)) throw usage(`--${m[1]} needs positive integers`);
      if (m[1] === 'runs') opts.runs = ns[0]!;
      else opts.rates = ns;
    }
  }
  return opts;
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/** Where a frame's receive-to-paint time goes: host (kernel receive to the host sending its `dom` event), IPC (to
 * the renderer receiving it), apply (waiting in the renderer's queue and being applied), paint (to the paint that
 * shows it). Present when the record has the renderer's stamps. */
export interface Stages { host: number[]; ipc: number[]; apply: number[]; paint: number[] }

/**
 * Per-frame receive-to-paint latencies and the fill rate of one load record: the k-th useful frame (index or data,
 * in arrival order) is shown by the paint the renderer recorded for the k-th `dom` event. Beside all of them, split
 * at the load's first paint: the frames that arrived before it (the sender's first flight, which lands at once on a
 * fast link and waits while the renderer builds the page's first pieces) and the frames after it (the page as it
 * streams in).
 */
export function analyse(record: LoadRecord): {
  latencies: number[]; beforeFirstPaint: number[]; afterFirstPaint: number[]; blocks: number; fillPerSec: number; stages: Stages;
} {
  const frames = record.arrivals.filter((f) => f.useful && (f.kind === 'data' || f.kind === 'index'));
  const painted = record.domPaintedAtEpochMs ?? [];
  const n = Math.min(frames.length, painted.length);
  const stages: Stages = { host: [], ipc: [], apply: [], paint: [] };
  const latencies: number[] = [];
  const beforeFirstPaint: number[] = [];
  const afterFirstPaint: number[] = [];
  const firstPaint = Math.min(...painted.slice(0, n).filter(Number.isFinite));
  let last = -Infinity;
  for (let k = 0; k < n; k++) {
    const p = painted[k]!;
    if (!Number.isFinite(p)) continue;
    latencies.push(p - frames[k]!.atEpochMs);
    (frames[k]!.atEpochMs < firstPaint ? beforeFirstPaint : afterFirstPaint).push(p - frames[k]!.atEpochMs);
    last = Math.max(last, p);
    const [sent, got, applied] = [record.domSentAtEpochMs?.[k], record.domReceivedAtEpochMs?.[k], record.domAppliedAtEpochMs?.[k]];
    if (sent === undefined || got === undefined || applied === undefined || ![sent, got, applied].every(Number.isFinite)) continue;
    stages.host.push(sent - frames[k]!.atEpochMs);
    stages.ipc.push(got - sent);
    stages.apply.push(applied - got);
    stages.paint.push(p - applied);
  }
  for (const v of [latencies, beforeFirstPaint, afterFirstPaint, ...Object.values(stages)] as number[][]) v.sort((a, b) => a - b);
  const span = latencies.length > 1 ? (last - firstPaint) / 1000 : 0;
  return { latencies, beforeFirstPaint, afterFirstPaint, blocks: latencies.length, fillPerSec: span > 0 ? latencies.length / span : NaN, stages };
}

/** `catp browse --headless --record` of `url`, as `spawnIt` starts it (here, or in the link's client namespace). */
function browse(url: string, record: string, spawnIt: (cmd: string, args: string[]) => ChildProcess = (cmd, args) => spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] })): Promise<void> {
  const entry = path.join(__dirname, '..', '..', '..', 'bin', 'catp.js');
  return new Promise((resolve, reject) => {
    const child = spawnIt(process.execPath, [entry, 'browse', '--headless', '--record', record, url]);
    let err = '';
    child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new BenchError('BENCH_ERR_BROWSE', `catp browse exited ${code}: ${err}`))));
  });
}

/** Where the loads of one row run: its server, and how a load is made. */
interface Setup {
  /** the row's name in the tables: the sender's ceiling over loopback, or the link */
  label: string;
  /** the heading of its loads */
  title: string;
  load(record: string): Promise<void>;
  close(): Promise<void>;
}

/** Over loopback, the sender's ceiling (and first estimate) `rate`: its own server. */
async function loopbackSetup(dir: string, page: string, rate: number): Promise<Setup> {
  const server = await startServer({ root: dir, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: rate, maxRateBytesPerSec: rate, coldEncode: 'best' } });
  return {
    label: rate.toLocaleString('en-US'),
    title: `CATP at up to ${rate.toLocaleString('en-US')} B/s (loopback)`,
    load: (record) => browse(`dhttp://127.0.0.1:${server.port}/${page}`, record),
    close: () => server.close(),
  };
}

/**
 * Through the lab's emulated link (lab/link.ts: real kernel packets between two network namespaces), no loss: the
 * reference server in the server's namespace, told nothing (it finds the rate, as in the lab), the browser in the
 * client's. Each load is a first contact (a new `catp browse`, no store).
 */
async function linkSetup(dir: string, page: string, spec: LinkSpec): Promise<Setup> {
  const link = await startLink({ rate: spec.rate, delayMs: spec.delayMs, log: false });
  try {
    const origin = await startOrigin(link, 'catp', dir, LINK_PORT);
    return {
      label: `link ${spec.rate.toLocaleString('en-US')}/${spec.delayMs}`,
      title: `CATP through the lab's link, ${spec.rate.toLocaleString('en-US')} B/s, ${spec.delayMs} ms one way (the sender told nothing)`,
      load: (record) => browse(`dhttp://${link.serverAddress}:${LINK_PORT}/${page}`, record, (cmd, args) => link.spawnIn('client', cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] })),
      close: async () => {
        await origin.close();
        await link.close();
      },
    };
  } catch (err) {
    await link.close().catch(() => undefined);
    throw err;
  }
}

const LINK_PORT = 8080;

/**
 * The same page in stock Chromium over HTTP/1.1 from the same server (loopback): how long after its last byte
 * arrived (responseEnd) the fully built page was painted (the first animation frame after DOMContentLoaded; no
 * sub-resources). The floor any renderer meets for this page on this machine: the browser's own parser, style,
 * layout and paint.
 */
async function nativeLastByteToPaint(url: string, runs: number): Promise<number[]> {
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: chromiumFlags() });
  const out: number[] = [];
  try {
    for (let i = 0; i < runs; i++) {
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
      // Only the page itself: sub-resources on other origins would wait for DNS that fails (no internet here),
      // and the figure is about building the page, not fetching its images.
      await page.route((u) => !u.href.startsWith(url), (route) => route.abort());
      await page.goto(url, { waitUntil: 'domcontentloaded' });
      // (a string: this file is compiled without the DOM library)
      const ms = (await page.evaluate(`new Promise((ok) => requestAnimationFrame(() => setTimeout(() => {
        const nav = performance.getEntriesByType('navigation')[0];
        ok(performance.now() - nav.responseEnd);
      }, 0)))`)) as number;
      out.push(ms);
      await page.close();
    }
  } finally {
    await browser.close();
  }
  return out;
}

interface Row { run: number; blocks: number; p50: number; p95: number; max: number; fillPerSec: number; silentTimeMs: number; completeMs: number | null }

const q = (v: number[]) => ({ p50: quantile(v, 0.5), p95: quantile(v, 0.95), max: v.at(-1) ?? NaN });
const ms = (n: number) => n.toFixed(1).padStart(6);

/** All the loads of one setup: a warm-up, then the runs. */
async function measure(opts: Options, dir: string, setup: Setup) {
  const all: number[] = [];
  const before: number[] = [];
  const after: number[] = [];
  const stages: Stages = { host: [], ipc: [], apply: [], paint: [] };
  const rows: Row[] = [];
  console.log(`\n${setup.title}`);
  console.log('run  blocks  p50 ms  p95 ms  max ms  blocks/s  silent ms  complete ms');
  try {
    // The server encodes a page on its first request and caches it (as a busy origin's cache is warm): a first,
    // uncounted load warms it. Reported, because a cold page costs its first visitor the encode.
    const tag = setup.label.replace(/[^0-9a-z]+/g, '-');
    const warm = path.join(dir, `record-${tag}-warm-up.json`);
    await setup.load(warm);
    const w = JSON.parse(fs.readFileSync(warm, 'utf8')) as LoadRecord;
    console.log(`warm-up (server encodes the page, not counted): ${analyse(w).blocks} frames painted, complete ${(w.completeMs ?? NaN).toFixed(1)} ms`);
    for (let run = 1; run <= opts.runs; run++) {
      const rec = path.join(dir, `record-${tag}-${run}.json`);
      await setup.load(rec);
      const record = JSON.parse(fs.readFileSync(rec, 'utf8')) as LoadRecord;
      const a = analyse(record);
      all.push(...a.latencies);
      before.push(...a.beforeFirstPaint);
      after.push(...a.afterFirstPaint);
      for (const k of Object.keys(stages) as (keyof Stages)[]) stages[k].push(...a.stages[k]);
      const row: Row = {
        run, blocks: a.blocks, ...q(a.latencies), fillPerSec: a.fillPerSec, silentTimeMs: record.silentTimeMs, completeMs: record.completeMs,
      };
      rows.push(row);
      console.log(`${String(run).padStart(3)}  ${String(row.blocks).padStart(6)}  ${ms(row.p50)}  ${ms(row.p95)}  ${ms(row.max)}` +
        `  ${Math.round(row.fillPerSec).toLocaleString('en-US').padStart(8)}  ${row.silentTimeMs.toFixed(1).padStart(9)}  ${(row.completeMs ?? NaN).toFixed(1).padStart(11)}`);
    }
  } finally {
    await setup.close();
  }
  for (const v of [all, before, after, ...Object.values(stages)] as number[][]) v.sort((a, b) => a - b);
  const fills = rows.map((r) => r.fillPerSec).sort((a, b) => a - b);
  const summary = {
    setup: setup.label,
    blocks: all.length,
    latencyMs: q(all),
    /** The frames that arrived before the load's first paint (the first flight), and those after it. */
    beforeFirstPaint: { frames: before.length, latencyMs: q(before) },
    afterFirstPaint: { frames: after.length, latencyMs: q(after) },
    stagesMs: Object.fromEntries(Object.entries(stages).map(([k, v]) => [k, q(v)])) as Record<keyof Stages, ReturnType<typeof q>>,
    fillBlocksPerSec: { median: quantile(fills, 0.5) },
  };
  console.log(`receive-to-paint p50 ${summary.latencyMs.p50.toFixed(1)} ms, p95 ${summary.latencyMs.p95.toFixed(1)} ms, max ${summary.latencyMs.max.toFixed(1)} ms ` +
    `over ${summary.blocks} frames; fill ${Math.round(summary.fillBlocksPerSec.median).toLocaleString('en-US')} blocks/s (median run)`);
  console.log(`  frames that arrived before the first paint (the first flight): ${before.length}, p50 ${summary.beforeFirstPaint.latencyMs.p50.toFixed(1)}, ` +
    `max ${summary.beforeFirstPaint.latencyMs.max.toFixed(1)} ms; after it: ${after.length}, p50 ${summary.afterFirstPaint.latencyMs.p50.toFixed(1)}, ` +
    `p95 ${summary.afterFirstPaint.latencyMs.p95.toFixed(1)}, max ${summary.afterFirstPaint.latencyMs.max.toFixed(1)} ms`);
  console.log(`  where it goes (p50 / p95 ms): ${(Object.keys(stages) as (keyof Stages)[]).map((k) => `${k} ${summary.stagesMs[k].p50.toFixed(1)} / ${summary.stagesMs[k].p95.toFixed(1)}`).join(', ')}`);
  return { summary, runs: rows };
}

async function main(): Promise<void> {
  const parsed = parseArgs(process.argv.slice(2));
  if (parsed === 'help') {
    console.log(HELP);
    return;
  }
  const opts = parsed;
  const commit = gitCommit();
  const file = path.join(opts.corpus, 'real-pages', opts.page);
  if (!fs.existsSync(file)) throw new BenchError('BENCH_ERR_NO_PAGE', `${file} not found (set --corpus or CATP_CORPUS)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-bench-render-'));
  fs.copyFileSync(file, path.join(dir, opts.page));
  const size = fs.statSync(file).size;
  console.log(`render bench: ${opts.page} (${(size / 1e6).toFixed(2)} MB), ${opts.runs} loads a rate and link, no loss; ` +
    'receive-to-paint per frame, and where it goes: host (kernel receive to its dom event), ipc, apply (queue + DOM), paint');
  const results: Awaited<ReturnType<typeof measure>>[] = [];
  const skipped: Array<{ link: LinkSpec; reason: string }> = [];
  let native: number[] = [];
  let floor: BlinkFloor | null = null;
  const nativeServer = await startServer({ root: dir, port: 0, host: '127.0.0.1' });
  try {
    for (const rate of opts.rates) results.push(await measure(opts, dir, await loopbackSetup(dir, opts.page, rate)));
    const lab = opts.links.length > 0 ? labSupport() : null;
    for (const spec of opts.links) {
      if (lab !== null && !lab.ok) {
        skipped.push({ link: spec, reason: lab.reason });
        console.log(`\nthrough the lab's link ${spec.rate.toLocaleString('en-US')} B/s / ${spec.delayMs} ms: skipped, ${lab.reason}`);
        continue;
      }
      results.push(await measure(opts, dir, await linkSetup(dir, opts.page, spec)));
    }
    native = (await nativeLastByteToPaint(`http://127.0.0.1:${nativeServer.port}/${opts.page}`, opts.runs)).sort((a, b) => a - b);
    floor = await blinkUpdateFloor(`http://127.0.0.1:${nativeServer.port}/${opts.page}`);
  } finally {
    await nativeServer.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const nativeMs = { p50: quantile(native, 0.5), max: native.at(-1) ?? NaN };
  console.log(`\nstock Chromium, same page over HTTP/1.1 (loopback): last byte to painted page p50 ${nativeMs.p50.toFixed(1)} ms, ` +
    `max ${nativeMs.max.toFixed(1)} ms over ${native.length} loads (the floor for building this page at all on this machine)`);
  if (floor !== null) {
    console.log(`stock Chromium, the finished page, one text change a frame: a rendering update ${floor.meanMs.toFixed(1)} ms mean, ` +
      `p90 ${floor.p90Ms.toFixed(1)} (${floor.updates} updates; Blink's own cost of showing a change on this page on this machine)`);
  }
  console.log('\nrate B/s (loopback),   p50 ms  p95 ms  max ms   first flight: frames  max ms   after it: p95 ms\nor link B/s/ms');
  for (const r of results) {
    const s = r.summary;
    console.log(`${s.setup.padEnd(20)}  ${ms(s.latencyMs.p50)}  ${ms(s.latencyMs.p95)}  ${ms(s.latencyMs.max)}` +
      `   ${String(s.beforeFirstPaint.frames).padStart(20)}  ${ms(s.beforeFirstPaint.latencyMs.max)}   ${ms(s.afterFirstPaint.latencyMs.p95).padStart(16)}`);
  }
  const out = path.join(__dirname, '..', '..', '..', 'bench', 'results', 'render.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), commit, options: opts, pageBytes: size, nativeLastByteToPaintMs: nativeMs, blinkUpdateFloorMs: floor, results, linksSkipped: skipped }, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(failureText(err));
    process.exitCode = failureStatus(err);
  });
}
