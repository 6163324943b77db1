// DTD benchmark: payload bytes and total time of a workload with a stated duplicate fraction, with DTD off,
// proceed and auto-proceed, over two emulated links (lab/link.ts: real kernel packets through catp-linkemu
// between two network namespaces; needs root or user namespaces).
//
//   node dist/bench/dtd/run.js            writes bench/results/dtd.json
//   node dist/bench/dtd/run.js --catp     only the CATP reload figure (adds `catpReload` to dtd.json)
//
// CATP reload figure: one page (a corpus page when ../shared/corpus is there, else the demo article) loaded as
// CATP frames with a fresh payload store: first load, unchanged reload, reload after one paragraph changed.
// Bytes are the server's own frame counters (index / data); time is request → page complete and verified.
// In process on loopback: the server paces its frames at the link's rate (Catp-Rate) and an in-process relay
// adds the one-way delay (app/browser/lossy-relay.ts, no loss); median of REPEATS runs per row. Each version of
// the page is loaded once by a store-less client before it is timed, so no row includes the server's parse of
// a new version (parse5 on a 200 KB page: ~100 ms), which would hide what reuse changes.
//
// The server runs in the server namespace (`--server`), the client (DhttpHost + a fresh PayloadStore per
// run) in the client namespace (`--client`); they report over stdout as JSON lines.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';

import { existsSync, readFileSync, utimesSync } from 'node:fs';

import { parse, serialize } from 'parse5';

import { startLink, type LinkOptions } from '../../lab/link';
import { startServer, type DhttpServer } from '../../server';
import { DhttpHost, type StreamEvent } from '../../app';
import { startLossyRelay } from '../../app/browser/lossy-relay';
import { PayloadStore } from '../../app/payload-store';
import { parse5TreeBuilder, type CatpEvent } from '../../protocol/catp';
import { BenchError, failureStatus, failureText } from '../errors';

const PORT = 8080;

/** The workload: 24 fetches, 12 distinct payloads (1.5 – 12 KB) and 12 duplicates (aliases, reloads, rotation). */
function workload(): { files: [string, Buffer][]; fetches: string[]; duplicateFraction: number } {
  const sizes = [1500, 2500, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000, 12000];
  const files: [string, Buffer][] = [];
  const fetches: string[] = [];
  sizes.forEach((n, i) => {
    const body = randomBytes(n);
    files.push([`p${i}.bin`, body]);
    files.push([`alias${i}.bin`, body]);
    fetches.push(`p${i}.bin`);
  });
  // duplicates: aliases of half, reloads of the other half, interleaved
  for (let i = 0; i < 12; i++) fetches.splice(2 * i + 1, 0, i % 2 === 0 ? `alias${i}.bin` : `p${i}.bin`);
  const seen = new Set<string>();
  let dup = 0;
  for (const f of fetches) {
    const key = f.replace('alias', 'p');
    if (seen.has(key)) dup++;
    seen.add(key);
  }
  return { files, fetches, duplicateFraction: dup / fetches.length };
}

async function serverMain(dir: string, host: string): Promise<void> {
  const server = await startServer({ root: dir, port: PORT, host });
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  for await (const _line of createInterface({ input: process.stdin })) {
    const c = server.counters();
    process.stdout.write(`${JSON.stringify({ payloadBytesSent: c.payloadBytesSent, dtdHeld: c.dtdHeld, dtdProceeds: c.dtdProceeds, dtdDontBothers: c.dtdDontBothers })}\n`);
  }
  await server.close();
}

async function clientMain(serverAddr: string, mode: string, fetchesCsv: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'catp-dtd-bench-'));
  const store = mode === 'off' ? null : await PayloadStore.open({ dir });
  const host = new DhttpHost({
    client: { initialTimeoutMs: 3000 },
    ...(store ? { store, dtd: { forcedMode: mode as 'proceed' | 'auto-proceed', forcedAutoBytes: 4096 } } : {}),
  });
  const t0 = performance.now();
  let hits = 0;
  for (const f of fetchesCsv.split(',')) {
    const r = await host.fetch(`dhttp://${serverAddr}:${PORT}/${f}`, { timeoutMs: 120_000 });
    if (r.response.status !== 200) throw new BenchError('BENCH_ERR_FETCH', `${f}: ${r.response.status}`);
    if (r.dtd?.decision === 'hit') hits++;
  }
  const totalMs = performance.now() - t0;
  host.close();
  await store?.flush();
  rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`${JSON.stringify({ totalMs, hits })}\n`);
}

const LINKS: { name: string; options: LinkOptions; note: string }[] = [
  { name: 'modem', options: { delayMs: 50, rate: 7000 }, note: '56 kb/s, 100 ms RTT' },
  { name: 'lan', options: { delayMs: 0.25, rate: 12_500_000 }, note: '100 Mb/s, 0.5 ms RTT' },
];
const MODES = ['off', 'proceed', 'auto-proceed'] as const;

// ---- CATP reload figure -----------------------------------------------------------------------------------

const CATP_LINKS = [
  { name: 'lan', note: '100 Mb/s, 0.5 ms RTT', rateBytesPerSec: 12_500_000, oneWayMs: 0.25 },
  { name: 'dsl', note: '10 Mb/s, 40 ms RTT', rateBytesPerSec: 1_250_000, oneWayMs: 20 },
] as const;
const REPEATS = 3;

/** The page, and the same page with one paragraph (a long one near the middle) rewritten. */
function reloadPage(): { name: string; original: string; changed: string; paragraphBytes: number } {
  const corpus = join(__dirname, '..', '..', '..', '..', 'shared', 'corpus', 'real-pages', 'wikipedia.html');
  const demo = join(__dirname, '..', '..', '..', 'demo', 'site', 'article.html');
  const file = existsSync(corpus) ? corpus : demo;
  const original = readFileSync(file, 'utf8');
  // the first <p> past the middle whose text runs 200+ characters before its first tag
  const re = /<p[^>]*>([^<]{200,})/g;
  re.lastIndex = Math.floor(original.length / 2);
  let m = re.exec(original);
  if (m === null) {
    re.lastIndex = 0;
    m = re.exec(original);
  }
  if (m === null) throw new BenchError('BENCH_ERR_PAGE', `${file}: no paragraph to change`);
  const start = m.index + m[0].length - m[1].length;
  const replacement = 'This paragraph was rewritten between the loads; everything else on the page is as it was.';
  const changed = original.slice(0, start) + replacement + original.slice(start + m[1].length);
  return { name: file.includes('corpus') ? 'wikipedia.html (corpus)' : 'demo article.html', original, changed, paragraphBytes: Buffer.byteLength(m[1]) };
}

interface ReloadRow {
  link: string;
  linkNote: string;
  load: 'first' | 'unchanged reload' | 'reload, new session' | 'one paragraph changed';
  indexBytes: number;
  dataBytes: number;
  dataFrames: number;
  blocks: number;
  blocksReused: number;
  bytesSaved: number;
  estimatedSavedMs: number;
  /** ms from the index being complete to the store's blocks filled and reported (store lookups and reads). */
  fillMs: number;
  totalMs: number;
}

async function catpReload(): Promise<{ page: string; paragraphBytes: number; rows: ReloadRow[] }> {
  const page = reloadPage();
  const root = mkdtempSync(join(tmpdir(), 'catp-reload-bench-'));
  const file = join(root, 'page.html');
  let mtime = 1_700_000_000;
  const serve = (html: string) => {
    writeFileSync(file, html);
    utimesSync(file, ++mtime, mtime); // a new ETag: the server encodes the new version
  };
  const rows: ReloadRow[] = [];
  try {
    for (const link of CATP_LINKS) {
      const server = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: link.rateBytesPerSec, maxRateBytesPerSec: link.rateBytesPerSec, coldEncode: 'best' } });
      const relay = await startLossyRelay(server.port, { loss: 0, delayMs: link.oneWayMs });
      const url = `dhttp://127.0.0.1:${relay.port}/page.html`;
      const runs: Record<ReloadRow['load'], ReloadRow[]> = { first: [], 'unchanged reload': [], 'reload, new session': [], 'one paragraph changed': [] };
      try {
        for (let i = 0; i < REPEATS; i++) {
          const dir = mkdtempSync(join(tmpdir(), 'catp-reload-store-'));
          const open = async () => new DhttpHost({ client: { initialTimeoutMs: 1000 }, store: await PayloadStore.open({ dir }) });
          let host = await open();
          const warm = async () => {
            const cold = new DhttpHost({ client: { initialTimeoutMs: 1000 } });
            try {
              await cold.load(url, { mode: 'catp', rateBytesPerSec: link.rateBytesPerSec, timeoutMs: 120_000 });
            } finally {
              cold.close();
            }
            const until = Date.now() + 5000;
            while (server.counters().catpActive > 0 && Date.now() < until) await new Promise((ok) => setTimeout(ok, 10));
          };
          try {
            serve(page.original);
            await warm();
            runs.first.push(await timedLoad(host, server, url, link, 'first', page.original));
            runs['unchanged reload'].push(await timedLoad(host, server, url, link, 'unchanged reload', page.original));
            // a new process: the store is opened again, its blocks are read from disk (and verified)
            host.close();
            await host.flushStore();
            host = await open();
            runs['reload, new session'].push(await timedLoad(host, server, url, link, 'reload, new session', page.original));
            serve(page.changed);
            await warm();
            runs['one paragraph changed'].push(await timedLoad(host, server, url, link, 'one paragraph changed', page.changed));
          } finally {
            host.close();
            await host.flushStore();
            rmSync(dir, { recursive: true, force: true });
          }
        }
      } finally {
        await relay.close();
        await server.close();
      }
      for (const list of Object.values(runs)) {
        list.sort((a, b) => a.totalMs - b.totalMs);
        rows.push(list[Math.floor(list.length / 2)]);
      }
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  return { page: page.name, paragraphBytes: page.paragraphBytes, rows };
}

async function timedLoad(
  host: DhttpHost,
  server: DhttpServer,
  url: string,
  link: (typeof CATP_LINKS)[number],
  load: ReloadRow['load'],
  html: string,
): Promise<ReloadRow> {
  const c0 = server.counters();
  const tree = parse5TreeBuilder();
  const apply = (events: StreamEvent[]) => {
    for (const ev of events) tree.apply(ev as CatpEvent);
  };
  const t0 = performance.now();
  const r = await host.load(url, { mode: 'catp', rateBytesPerSec: link.rateBytesPerSec, timeoutMs: 120_000, onFrame: (_f, ev) => apply(ev), onLocalFill: apply });
  const totalMs = performance.now() - t0;
  if (r.kind !== 'stream' || tree.root === null) throw new BenchError('BENCH_ERR_NOT_STREAMED', `${url}: not streamed`);
  if (serialize(tree.root) !== serialize(parse(html, { scriptingEnabled: false }))) throw new BenchError('BENCH_ERR_TREE_DIFFERS', `${url}: the assembled page differs from parse5's`);
  await host.flushStore();
  // the session ends on the server when the client's "complete" report arrives
  const until = Date.now() + 5000;
  while (server.counters().catpActive > 0 && Date.now() < until) await new Promise((ok) => setTimeout(ok, 10));
  const c1 = server.counters();
  return {
    link: link.name,
    linkNote: link.note,
    load,
    indexBytes: c1.catpIndexBytesSent - c0.catpIndexBytesSent,
    dataBytes: c1.catpDataBytesSent - c0.catpDataBytesSent,
    dataFrames: c1.catpDataFramesSent - c0.catpDataFramesSent,
    blocks: r.reuse?.blocks ?? 0,
    blocksReused: r.reuse?.reused ?? 0,
    bytesSaved: r.reuse?.bytesSaved ?? 0,
    estimatedSavedMs: Math.round((r.reuse?.savedMs ?? 0) * 10) / 10,
    fillMs: Math.round((r.reuse?.fillMs ?? 0) * 10) / 10,
    totalMs: Math.round(totalMs * 10) / 10,
  };
}

function printReload(f: Awaited<ReturnType<typeof catpReload>>): void {
  console.log(`\nCATP reload: ${f.page}, first load vs unchanged reload vs one paragraph (${f.paragraphBytes} B) rewritten; ` +
    `a fresh payload store per run, median of ${REPEATS}; loopback, server paced at the link rate, relay delay each way; ` +
    `each page version parsed by the server before it is timed\n`);
  console.log('link | load                  | index bytes | data bytes | data frames | blocks reused | bytes saved | est. saved ms | fill ms | total ms');
  console.log('-----|-----------------------|-------------|------------|-------------|---------------|-------------|---------------|---------|---------');
  for (const r of f.rows) {
    console.log(`${r.link.padEnd(4)} | ${r.load.padEnd(21)} | ${String(r.indexBytes).padStart(11)} | ${String(r.dataBytes).padStart(10)} | ` +
      `${String(r.dataFrames).padStart(11)} | ${`${r.blocksReused}/${r.blocks}`.padStart(13)} | ${String(r.bytesSaved).padStart(11)} | ` +
      `${String(r.estimatedSavedMs).padStart(13)} | ${String(r.fillMs).padStart(7)} | ${String(r.totalMs).padStart(8)}`);
  }
}

function resultsFile(): string {
  const outDir = join(__dirname, '..', '..', '..', 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  return join(outDir, 'dtd.json');
}

async function catpOnly(): Promise<void> {
  const f = await catpReload();
  printReload(f);
  const file = resultsFile();
  const old = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>) : {};
  writeFileSync(file, `${JSON.stringify({ ...old, catpReload: { ...f, links: CATP_LINKS, repeats: REPEATS } }, null, 2)}\n`);
}

async function main(): Promise<void> {
  const w = workload();
  const root = mkdtempSync(join(tmpdir(), 'catp-dtd-bench-root-'));
  for (const [name, body] of w.files) writeFileSync(join(root, name), body);
  const script = __filename;
  const rows: Record<string, unknown>[] = [];
  for (const link of LINKS) {
    const l = await startLink({ ...link.options, log: false });
    try {
      const srv = l.spawnIn('server', process.execPath, [script, '--server', root, l.serverAddress], { stdio: ['pipe', 'pipe', 'inherit'] });
      const lines = createInterface({ input: srv.stdout! })[Symbol.asyncIterator]();
      await lines.next(); // ready
      for (const mode of MODES) {
        srv.stdin!.write('\n');
        const before = JSON.parse((await lines.next()).value as string) as { payloadBytesSent: number };
        const c0 = await l.counters();
        const out = await l.runIn('client', process.execPath, [script, '--client', l.serverAddress, mode, w.fetches.join(',')], 600_000);
        if (out.code !== 0) throw new BenchError('BENCH_ERR_CLIENT', `client failed: ${out.stderr}`);
        const res = JSON.parse(out.stdout.trim().split('\n').pop() as string) as { totalMs: number; hits: number };
        const c1 = await l.counters();
        srv.stdin!.write('\n');
        const after = JSON.parse((await lines.next()).value as string) as { payloadBytesSent: number };
        const row = {
          link: link.name,
          linkNote: link.note,
          mode,
          payloadBytes: after.payloadBytesSent - before.payloadBytesSent,
          wireBytesS2C: c1.s2c.bytesOut - c0.s2c.bytesOut,
          wireBytesC2S: c1.c2s.bytesOut - c0.c2s.bytesOut,
          totalMs: Math.round(res.totalMs * 10) / 10,
          hits: res.hits,
        };
        rows.push(row);
        process.stderr.write(`${JSON.stringify(row)}\n`);
      }
      srv.stdin!.end();
    } finally {
      await l.close();
    }
  }
  rmSync(root, { recursive: true, force: true });
  const distinct = w.files.filter(([n]) => n.startsWith('p')).reduce((a, [, b]) => a + b.length, 0);
  console.log(`\nDTD benchmark: ${w.fetches.length} fetches, duplicate fraction ${(w.duplicateFraction * 100).toFixed(0)}% ` +
    `(aliases and reloads), ${distinct} distinct payload bytes; auto-proceed threshold 4096 B; links via lab/link.ts (catp-linkemu)\n`);
  console.log('link   | mode          | payload bytes | wire bytes s2c | wire bytes c2s | total ms | hits');
  console.log('-------|---------------|---------------|----------------|----------------|----------|-----');
  for (const r of rows) {
    console.log(`${String(r.link).padEnd(6)} | ${String(r.mode).padEnd(13)} | ${String(r.payloadBytes).padStart(13)} | ${String(r.wireBytesS2C).padStart(14)} | ${String(r.wireBytesC2S).padStart(14)} | ${String(r.totalMs).padStart(8)} | ${r.hits}`);
  }
  const reload = await catpReload();
  printReload(reload);
  writeFileSync(resultsFile(), `${JSON.stringify({
    workload: { fetches: w.fetches.length, duplicateFraction: w.duplicateFraction, distinctPayloadBytes: distinct, autoProceedThresholdBytes: 4096 },
    links: LINKS.map((l) => ({ name: l.name, note: l.note, ...l.options })),
    emulation: 'lab/link.ts startLink (catp-linkemu: TUN between two network namespaces, real kernel packets)',
    rows,
    catpReload: { ...reload, links: CATP_LINKS, repeats: REPEATS },
  }, null, 2)}\n`);
}

const HELP = `usage: node dist/bench/dtd/run.js [options]      (npm run bench:dtd -- [options])

Payload bytes and total time of a workload (24 fetches: 12 distinct payloads of 1.5 to 12 KB and 12 duplicates,
aliases and reloads) with DTD off, proceed and auto-proceed, over two emulated links (modem: 56 kb/s, 100 ms RTT;
lan: 100 Mb/s, 0.5 ms RTT; lab/link.ts: real kernel packets between two network namespaces, needs root or user
namespaces). Then the CATP reload figure: one page (../shared/corpus's wikipedia.html, else the demo article) loaded
as CATP frames with a fresh payload store: first load, unchanged reload, reload in a new session, reload after one
paragraph changed; in process on loopback, the server paced at a link's rate (lan; dsl: 10 Mb/s, 40 ms RTT) and a
relay adding the delay, median of ${REPEATS} runs a row.
Prints tables and writes bench/results/dtd.json.

options:
  --catp       only the CATP reload figure (no emulated link): sets catpReload in dtd.json, keeping the rest
  -h, --help   show this help`;

/** The public modes (the child processes' --server and --client are dispatched before this). */
function parseArgs(argv: string[]): 'all' | 'catp' | 'help' {
  let mode: 'all' | 'catp' = 'all';
  for (const a of argv) {
    if (a === '-h' || a === '--help') return 'help';
    if (a !== '--catp') throw new BenchError('BENCH_ERR_USAGE', `unknown argument ${a} (--help for the options)`);
    mode = 'catp';
  }
  return mode;
}

const arg = process.argv[2];
if (arg === '--server') void serverMain(process.argv[3], process.argv[4]);
else if (arg === '--client') clientMain(process.argv[3], process.argv[4], process.argv[5]).catch((e) => {
  process.stderr.write(`${(e as Error).stack}\n`);
  process.exit(1);
});
else {
  const run = async (): Promise<void> => {
    const mode = parseArgs(process.argv.slice(2));
    if (mode === 'help') console.log(HELP);
    else await (mode === 'catp' ? catpOnly() : main());
  };
  run().catch((err: unknown) => {
    console.error(failureText(err));
    process.exit(failureStatus(err));
  });
}
