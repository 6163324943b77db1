/**
 * CATP benchmark over the real-pages corpus: encode and assemble throughput (MB/s of HTML), index size and
 * frame overhead as a percentage of the page's bytes, frames per page. Prints a table and writes
 * bench/results/catp.json. Run from the project root: `npm run build && node dist/bench/catp/run.js`.
 * Corpus: $CATP_CORPUS or ../shared/corpus.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { CatpAssembler, encodePage, parse5TreeBuilder } from '../../protocol/catp';

const sha256 = (b: Uint8Array): Uint8Array => new Uint8Array(crypto.createHash('sha256').update(b).digest());

function corpus(): string | null {
  for (const c of [process.env.CATP_CORPUS, path.resolve(process.cwd(), '../shared/corpus')]) {
    if (c && fs.existsSync(path.join(c, 'real-pages'))) return path.join(c, 'real-pages');
  }
  return null;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

function main(): void {
  const dir = corpus();
  if (!dir) {
    console.log('real-pages corpus not found ($CATP_CORPUS or ../shared/corpus): nothing to measure');
    return;
  }
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.html')).sort();
  const reps = Number(process.env.CATP_BENCH_REPS ?? 3);
  const rows: Array<Record<string, number | string | boolean>> = [];
  let totBytes = 0;
  let encMs = 0;
  let asmMs = 0;
  let asmTreeMs = 0;
  let totIndex = 0;
  let totWire = 0;
  let totHeaders = 0;
  const framesPer: number[] = [];
  for (const f of files) {
    const bytes = new Uint8Array(fs.readFileSync(path.join(dir, f)));
    const html = new TextDecoder().decode(bytes);
    // encode = parse5 parse + index/blocks + digests (what the server does per page)
    let page = encodePage(html, { sha256 });
    let t = performance.now();
    for (let i = 0; i < reps; i++) page = encodePage(html, { sha256 });
    const enc = (performance.now() - t) / reps;
    // assemble = receive every frame (reverse order) + verify digests + events, without building a tree
    t = performance.now();
    for (let i = 0; i < reps; i++) {
      const a = new CatpAssembler({ sha256 });
      for (let k = page.frames.length - 1; k >= 0; k--) {
        a.receive(page.frames[k], 0);
        while (a.nextEvent());
      }
    }
    const asm = (performance.now() - t) / reps;
    // ... and applying the events to a parse5 tree through the tree builder
    t = performance.now();
    let ok = false;
    for (let i = 0; i < reps; i++) {
      const a = new CatpAssembler({ sha256 });
      const b = parse5TreeBuilder();
      for (let k = page.frames.length - 1; k >= 0; k--) {
        a.receive(page.frames[k], 0);
        for (let e = a.nextEvent(); e; e = a.nextEvent()) {
          b.apply(e);
          if (e.type === 'page-complete') ok = true;
        }
      }
    }
    const asmTree = (performance.now() - t) / reps;
    const wire = page.frames.reduce((n, fr) => n + fr.length, 0);
    totBytes += bytes.length;
    encMs += enc;
    asmMs += asm;
    asmTreeMs += asmTree;
    totIndex += page.indexBytes;
    totWire += wire;
    totHeaders += page.frames.length * 32;
    framesPer.push(page.frames.length);
    rows.push({
      page: f,
      bytes: bytes.length,
      frames: page.frames.length,
      indexFrames: page.indexFrames,
      dataFrames: page.blocks,
      indexPct: +((100 * page.indexBytes) / bytes.length).toFixed(1),
      wirePct: +((100 * wire) / bytes.length).toFixed(1),
      encodeMs: +enc.toFixed(2),
      assembleMs: +asm.toFixed(2),
      complete: ok,
    });
  }
  const mb = totBytes / 1e6;
  const summary = {
    pages: files.length,
    htmlMB: +mb.toFixed(2),
    encodeMBps: +(mb / (encMs / 1000)).toFixed(1),
    assembleMBps: +(mb / (asmMs / 1000)).toFixed(1),
    assembleWithTreeMBps: +(mb / (asmTreeMs / 1000)).toFixed(1),
    indexPctOfPage: +((100 * totIndex) / totBytes).toFixed(1),
    wireBytesPctOfPage: +((100 * totWire) / totBytes).toFixed(1),
    headerOverheadPct: +((100 * totHeaders) / totBytes).toFixed(2),
    framesPerPage: { median: pct(framesPer, 50), p90: pct(framesPer, 90), max: Math.max(...framesPer) },
    indexPctPerPage: { median: pct(rows.map((r) => r.indexPct as number), 50), p90: pct(rows.map((r) => r.indexPct as number), 90) },
    allComplete: rows.every((r) => r.complete),
  };
  console.log('page'.padEnd(44), 'bytes'.padStart(9), 'frames'.padStart(7), 'index'.padStart(6), 'index%'.padStart(7), 'wire%'.padStart(7), 'enc ms'.padStart(8), 'asm ms'.padStart(8));
  for (const r of rows) {
    console.log(
      String(r.page).slice(0, 44).padEnd(44),
      String(r.bytes).padStart(9),
      String(r.frames).padStart(7),
      String(r.indexFrames).padStart(6),
      String(r.indexPct).padStart(7),
      String(r.wirePct).padStart(7),
      String(r.encodeMs).padStart(8),
      String(r.assembleMs).padStart(8),
    );
  }
  console.log('\nsummary', JSON.stringify(summary, null, 2));
  const out = path.resolve(process.cwd(), 'bench/results/catp.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify({ summary, pages: rows }, null, 2) + '\n');
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

main();
