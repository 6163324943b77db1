// Render benchmark: how long a CATP frame waits between its kernel receive timestamp and the paint that
// shows it, and how fast the renderer fills blocks, for a ~1 MB corpus page loaded at full speed (no loss,
// loopback) in the real renderer (`catp browse --headless --record`).
//
// Latency per frame: the k-th useful frame (index or data; each one the host turns into one `dom` event of DOM
// operations) is shown by the paint the renderer records for the k-th dom event (record.domPaintedAtEpochMs:
// the update stamped after the slice that finished its operations); latency = that paint time (rAF +
// MessageChannel, epoch ms) - the frame's kernel receive time (CLOCK_REALTIME, epoch ms). Both clocks are
// the wall clock, read in two processes: the figures carry that (sub-millisecond) uncertainty.
// Fill throughput: blocks painted / (last block paint - first block paint).
// Beside it, the same page in stock Chromium over HTTP/1.1: last byte to painted page, the floor any renderer
// meets for building this page on this machine (when a whole page arrives at once, its last frame cannot be
// painted sooner than the page can be built).
//
//   npm run build && npm run bench:render -- --page wikipedia-2.html --runs 5
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { LoadRecord } from '../../protocol/browser/api';
import { CHROMIUM_PATH, chromiumFlags } from '../../app/browser/chromium';
import { startServer } from '../../server';

interface Options { page: string; runs: number; corpus: string; rate: number }

function parseArgs(argv: string[]): Options {
  const root = path.join(__dirname, '..', '..', '..');
  const opts: Options = {
    page: 'wikipedia-2.html',
    runs: 5,
    corpus: process.env.CATP_CORPUS ?? path.join(root, '..', 'shared', 'corpus'),
    rate: 50_000_000,
  };
  for (let i = 0; i < argv.length; i++) {
    const m = /^--(page|runs|corpus|rate)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new Error(`unknown argument ${argv[i]} (use --page NAME --runs N --corpus DIR --rate B/S)`);
    const v = m[2] ?? argv[++i];
    if (m[1] === 'page' || m[1] === 'corpus') opts[m[1]] = v;
    else {
      const n = Number(v);
      if (!Number.isInteger(n) || n <= 0) throw new Error(`--${m[1]} needs a positive integer`);
      opts[m[1] as 'runs' | 'rate'] = n;
    }
  }
  return opts;
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/**
 * Per-frame receive-to-paint latencies and the fill rate of one load record: the k-th useful frame (index or data,
 * in arrival order) is shown by the paint the renderer recorded for the k-th `dom` event.
 */
export function analyse(record: LoadRecord): { latencies: number[]; blocks: number; fillPerSec: number } {
  const frames = record.arrivals.filter((f) => f.useful && (f.kind === 'data' || f.kind === 'index'));
  const paints = (record.domPaintedAtEpochMs ?? []).filter((t) => Number.isFinite(t));
  const n = Math.min(frames.length, paints.length);
  const latencies = Array.from({ length: n }, (_, k) => paints[k] - frames[k].atEpochMs).sort((a, b) => a - b);
  const span = n > 1 ? (paints[n - 1] - paints[0]) / 1000 : 0;
  return { latencies, blocks: n, fillPerSec: span > 0 ? n / span : NaN };
}

function browse(url: string, record: string): Promise<void> {
  const entry = path.join(__dirname, '..', '..', '..', 'bin', 'catp.js');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [entry, 'browse', '--headless', '--record', record, url], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`catp browse exited ${code}: ${err}`))));
  });
}

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

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const file = path.join(opts.corpus, 'real-pages', opts.page);
  if (!fs.existsSync(file)) throw new Error(`${file} not found (set --corpus or CATP_CORPUS)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-bench-render-'));
  fs.copyFileSync(file, path.join(dir, opts.page));
  const server = await startServer({ root: dir, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: opts.rate, maxRateBytesPerSec: opts.rate, coldEncode: 'best' } });
  const all: number[] = [];
  const rows: { run: number; blocks: number; p50: number; p95: number; max: number; fillPerSec: number; silentTimeMs: number; completeMs: number | null }[] = [];
  const nativeServer = await startServer({ root: dir, port: 0, host: '127.0.0.1' });
  let native: number[] = [];
  const size = fs.statSync(file).size;
  console.log(`render bench: ${opts.page} (${(size / 1e6).toFixed(2)} MB), ${opts.runs} loads, CATP at up to ${opts.rate.toLocaleString('en-US')} B/s, loopback, no loss`);
  console.log('run  blocks  p50 ms  p95 ms  max ms  blocks/s  silent ms  complete ms');
  try {
    // The server encodes a page on its first request and caches it (as a busy origin's cache is warm): a first,
    // uncounted load warms it. Reported, because a cold page costs its first visitor the encode.
    const warm = path.join(dir, 'record-warm-up.json');
    await browse(`dhttp://127.0.0.1:${server.port}/${opts.page}`, warm);
    const w = JSON.parse(fs.readFileSync(warm, 'utf8')) as LoadRecord;
    console.log(`warm-up (server encodes the page, not counted): ${analyse(w).blocks} frames painted, complete ${(w.completeMs ?? NaN).toFixed(1)} ms`);
    for (let run = 1; run <= opts.runs; run++) {
      const rec = path.join(dir, `record-${run}.json`);
      await browse(`dhttp://127.0.0.1:${server.port}/${opts.page}`, rec);
      const record = JSON.parse(fs.readFileSync(rec, 'utf8')) as LoadRecord;
      const a = analyse(record);
      all.push(...a.latencies);
      const row = {
        run, blocks: a.blocks, p50: quantile(a.latencies, 0.5), p95: quantile(a.latencies, 0.95),
        max: a.latencies.at(-1) ?? NaN, fillPerSec: a.fillPerSec, silentTimeMs: record.silentTimeMs, completeMs: record.completeMs,
      };
      rows.push(row);
      console.log(`${String(run).padStart(3)}  ${String(row.blocks).padStart(6)}  ${row.p50.toFixed(1).padStart(6)}  ${row.p95.toFixed(1).padStart(6)}` +
        `  ${row.max.toFixed(1).padStart(6)}  ${Math.round(row.fillPerSec).toLocaleString('en-US').padStart(8)}` +
        `  ${row.silentTimeMs.toFixed(1).padStart(9)}  ${(row.completeMs ?? NaN).toFixed(1).padStart(11)}`);
    }
    native = (await nativeLastByteToPaint(`http://127.0.0.1:${nativeServer.port}/${opts.page}`, opts.runs)).sort((a, b) => a - b);
  } finally {
    await server.close();
    await nativeServer.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  all.sort((a, b) => a - b);
  const fills = rows.map((r) => r.fillPerSec).sort((a, b) => a - b);
  console.log(`stock Chromium, same page over HTTP/1.1 (loopback): last byte to painted page p50 ${quantile(native, 0.5).toFixed(1)} ms, ` +
    `max ${(native.at(-1) ?? NaN).toFixed(1)} ms over ${native.length} loads (the floor for building this page at all on this machine)`);
  const summary = {
    blocks: all.length,
    latencyMs: { p50: quantile(all, 0.5), p95: quantile(all, 0.95), max: all.at(-1) ?? NaN },
    fillBlocksPerSec: { median: quantile(fills, 0.5) },
    nativeLastByteToPaintMs: { p50: quantile(native, 0.5), max: native.at(-1) ?? NaN },
  };
  console.log(`\nall runs: receive-to-paint p50 ${summary.latencyMs.p50.toFixed(1)} ms, p95 ${summary.latencyMs.p95.toFixed(1)} ms, ` +
    `max ${summary.latencyMs.max.toFixed(1)} ms over ${summary.blocks} blocks; fill ${Math.round(summary.fillBlocksPerSec.median).toLocaleString('en-US')} blocks/s (median run)`);
  const out = path.join(__dirname, '..', '..', '..', 'bench', 'results', 'render.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), options: opts, pageBytes: size, summary, runs: rows }, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
