// DTD benchmark: payload bytes and total time of a workload with a stated duplicate fraction, with DTD off,
// proceed and auto-proceed, over two emulated links (lab/link.ts: real kernel packets through catp-linkemu
// between two network namespaces; needs root or user namespaces).
//
//   node dist/bench/dtd/run.js            writes bench/results/dtd.json
//
// The server runs in the server namespace (`--server`), the client (DhttpHost + a fresh PayloadStore per
// run) in the client namespace (`--client`); they report over stdout as JSON lines.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';

import { startLink, type LinkOptions } from '../../lab/link';
import { startServer } from '../../server';
import { DhttpHost } from '../../app';
import { PayloadStore } from '../../app/payload-store';

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
    if (r.response.status !== 200) throw new Error(`${f}: ${r.response.status}`);
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
        if (out.code !== 0) throw new Error(`client failed: ${out.stderr}`);
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
  const outDir = join(__dirname, '..', '..', '..', 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'dtd.json'), `${JSON.stringify({
    workload: { fetches: w.fetches.length, duplicateFraction: w.duplicateFraction, distinctPayloadBytes: distinct, autoProceedThresholdBytes: 4096 },
    links: LINKS.map((l) => ({ name: l.name, note: l.note, ...l.options })),
    emulation: 'lab/link.ts startLink (catp-linkemu: TUN between two network namespaces, real kernel packets)',
    rows,
  }, null, 2)}\n`);
}

const arg = process.argv[2];
if (arg === '--server') void serverMain(process.argv[3], process.argv[4]);
else if (arg === '--client') clientMain(process.argv[3], process.argv[4], process.argv[5]).catch((e) => {
  process.stderr.write(`${(e as Error).stack}\n`);
  process.exit(1);
});
else main().catch((e) => {
  process.stderr.write(`${(e as Error).stack}\n`);
  process.exit(1);
});
