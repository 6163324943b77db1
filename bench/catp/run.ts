/**
 * CATP benchmark over the real-pages corpus: encode and assemble throughput (MB/s of HTML), index and all wire
 * bytes as a percentage of the page's bytes and against the page's gzip size, where the index's (decoded) bytes
 * go, frames per page, the bytes sent before the first text the body shows is on hand (CATP against one brotli
 * stream of the page), and the browser host's whole path per frame (assembling, the tree builder's DOM operations,
 * their JSON for the renderer). Prints a table and writes bench/results/catp.json.
 * Run from the project root: `npm run build && node dist/bench/catp/run.js` (CATP_BENCH_REPS=N assemble repeats,
 * CATP_BENCH_QUALITY=Q the codec's final quality, default 11 as the server uses; CATP_BENCH_BASELINE=DIR another checkout,
 * built, whose host path runs beside this one's on the same frames: machines here are too noisy to compare two runs).
 * Corpus: $CATP_CORPUS or ../shared/corpus.
 * Frames are decoded as the host decodes them (app/catp-codec.ts: libbrotli through the addon when it has it); beside
 * it, in the same run, assembling and decompressing with Node's decoder (`...NodeZlib...`), the host's fallback.
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import * as zlib from 'node:zlib';
import { sha256 } from '../../platform/sha256';
import { blockFrames, brotliCodec, CatpAssembler, type FrameCodec, CHECK_BYTES, decodeHeader, encodePage, FRAME_KIND, HEADER_BYTES, parse5TreeBuilder, StreamLoad, TAG_NAMES, unpackPayload, type IndexPiece } from '../../protocol/catp';
import { hostCodec } from '../../app/catp-codec';
import { PageNames } from '../../app/browser/page-names';
import { StreamLoadEvents } from '../../app/browser/stream-events';
import { BenchError, failureStatus, failureText } from '../errors';
import { gitCommit } from '../commit';
import { catpFirstText, streamFirstText } from './first-text';


/** What the host path uses: this build's modules, or a baseline build's (CATP_BENCH_BASELINE=DIR, built in DIR/dist). */
export interface HostModules {
  StreamLoad: typeof StreamLoad;
  StreamLoadEvents: typeof StreamLoadEvents;
  PageNames: typeof PageNames;
  sha256: typeof sha256;
  codec: FrameCodec;
}

export function baselineModules(dir: string, quality: number): HostModules {
  const load = createRequire(path.resolve(dir, 'package.json'));
  const at = (m: string): unknown => {
    try {
      return load(`./dist/${m}`);
    } catch (e) {
      throw new BenchError('BENCH_ERR_USAGE', `CATP_BENCH_BASELINE=${dir}: cannot load dist/${m} (build that checkout first): ${(e as Error).message.split('\n')[0]}`);
    }
  };
  const catp = at('protocol/catp') as typeof import('../../protocol/catp');
  return {
    StreamLoad: catp.StreamLoad,
    StreamLoadEvents: (at('app/browser/stream-events') as typeof import('../../app/browser/stream-events')).StreamLoadEvents,
    PageNames: (at('app/browser/page-names') as typeof import('../../app/browser/page-names')).PageNames,
    sha256: (at('platform/sha256') as typeof import('../../platform/sha256')).sha256,
    codec: (at('app/catp-codec') as typeof import('../../app/catp-codec')).hostCodec({ finalQuality: quality }),
  };
}

/** One run of the host's path over a page's frames in order: its time, and the `dom` events' JSON length. */
export function hostPath(m: HostModules, frames: Uint8Array[]): { ms: number; json: number } {
  const t = performance.now();
  const load = new m.StreamLoad({ mode: 'catp', requestId: frames[0].slice(0, 8), otherPort: 0, sha256: m.sha256, codec: m.codec, sentAtMs: 0, sentRealtimeNs: null });
  const events = new m.StreamLoadEvents(1, 0, new m.PageNames('dhttp://127.0.0.1/page.html'));
  let json = 0;
  frames.forEach((frame, k) => {
    const { record, step } = load.receive(frame, k + 1, null);
    for (const ev of events.frame(record, step.events)) if (ev.type === 'dom') json += JSON.stringify(ev).length;
  });
  return { ms: performance.now() - t, json };
}

const HELP = `usage: node dist/bench/catp/run.js [options]      (npm run bench:catp -- [options])

CATP over every page of the real-pages corpus, in process: encode and assemble throughput (MB/s of HTML; frames decoded
by the host's codec and, beside it, by Node's decoder), index and wire bytes as a percentage of the page's bytes and
against its gzip size, where the index's decoded bytes go, frames per page, the bytes sent before the first text the
body shows is on hand (CATP against one brotli stream of the page), and the browser host's whole path per frame
(stream load, the tree builder's DOM operations, their JSON for the renderer).
Prints a table and writes bench/results/catp.json under the current directory (run it from the project root).

options:
  -h, --help                show this help

environment:
  CATP_CORPUS=DIR           the corpus, with real-pages/ in it (else ../shared/corpus from the current directory)
  CATP_BENCH_REPS=N         repeats of each timed pass over a page's frames (default 3)
  CATP_BENCH_QUALITY=Q      the codec's final brotli quality (default 11, as the server uses)
  CATP_BENCH_BASELINE=DIR   another checkout, built: its host path runs beside this one's on the same frames,
                            alternating, and the time ratio is reported`;

/** No options but --help (the settings are environment variables). */
function parseArgs(argv: string[]): 'run' | 'help' {
  const a = argv[0];
  if (a === undefined) return 'run';
  if (a === '-h' || a === '--help') return 'help';
  throw new BenchError('BENCH_ERR_USAGE', `unknown argument ${a} (--help for the options)`);
}

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

const utf8 = new TextEncoder();
const TAGS = new Set(TAG_NAMES);

/** Where an index's decoded bytes go (approximate: string payloads counted exactly, the rest is structure). */
function breakdown(pieces: IndexPiece[]): Record<string, number> {
  // names: the tag and attribute names the nodes' markup spells out (index-markup.ts); the chain's tags are table codes
  const b = { attrValues: 0, inlineText: 0, comments: 0, names: 0, chains: 0, blockTable: 0, pageDigest: 0 };
  for (const p of pieces) {
    b.chains += p.chain.reduce((s, c) => s + 2 + (TAGS.has(c.tagName) || c.content ? 0 : utf8.encode(c.tagName).length + 1), 0);
    b.blockTable += p.blocks.length * 22;
    if (p.pageDigest) b.pageDigest += 32;
    for (const n of p.nodes) {
      if (n.kind === 'element') {
        b.names += utf8.encode(n.tagName).length;
        for (const a of n.attrs) {
          if (!a.slot) b.attrValues += utf8.encode(a.value).length;
          b.names += utf8.encode(a.name).length + (a.prefix !== undefined ? utf8.encode(a.prefix).length : 0);
        }
      } else if (n.kind === 'text') b.inlineText += utf8.encode(n.value).length;
      else if (n.kind === 'comment') b.comments += utf8.encode(n.data).length;
    }
  }
  return b;
}

function main(): void {
  if (parseArgs(process.argv.slice(2)) === 'help') {
    console.log(HELP);
    return;
  }
  const commit = gitCommit();
  const dir = corpus();
  if (!dir) {
    console.log('real-pages corpus not found ($CATP_CORPUS or ../shared/corpus): nothing to measure');
    return;
  }
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.html')).sort();
  const reps = Number(process.env.CATP_BENCH_REPS ?? 3);
  const quality = Number(process.env.CATP_BENCH_QUALITY ?? 11);
  const codec = hostCodec({ finalQuality: quality });
  const zlibCodec = brotliCodec(zlib, { finalQuality: quality });
  const rows: Array<Record<string, number | string | boolean | null>> = [];
  let totBytes = 0;
  let encMs = 0;
  let asmMs = 0;
  let asmZlibMs = 0;
  let decompressZlibMs = 0;
  let asmTreeMs = 0;
  let decompressMs = 0;
  let hostMs = 0;
  let domJson = 0;
  const baseDir = process.env.CATP_BENCH_BASELINE;
  const here: HostModules = { StreamLoad, StreamLoadEvents, PageNames, sha256, codec };
  const baseline = baseDir ? baselineModules(baseDir, quality) : null;
  let baseHostMs = 0;
  let totIndex = 0;
  let totIndexRaw = 0;
  let totWire = 0;
  let totGzip = 0;
  let totBrotli = 0;
  let totHeaders = 0;
  const where: Record<string, number> = {};
  const framesPer: number[] = [];
  /** Per page: bytes before the first shown body text is on hand, CATP's and one brotli stream's. */
  const firstText: Array<{ catp: number; stream: number }> = [];
  console.log(`encoding ${files.length} pages (brotli final quality ${quality}; frames decoded by ${codec.decoder}, and by node-zlib beside it) ...`);
  for (const f of files) {
    const bytes = new Uint8Array(fs.readFileSync(path.join(dir, f)));
    // encode = parse5 parse + index pieces + blocks + per-frame compression + digests (what the server does per page, once)
    const t1 = performance.now();
    const page = encodePage(bytes, { sha256, codec });
    const enc = performance.now() - t1;
    // assemble = receive every frame (reverse order) + decompress + verify digests + events, without building a tree;
    // beside it the same with Node's decoder (the host's fallback without libbrotli). One unmeasured pass of each
    // first, then the two alternate which goes first: whichever ran first after the page's encode read ~25% slower.
    const assembleOnce = (c: FrameCodec): number => {
      const t0 = performance.now();
      const a = new CatpAssembler({ sha256, codec: c });
      for (let k = page.frames.length - 1; k >= 0; k--) {
        a.receive(page.frames[k], 0);
        while (a.nextEvent());
      }
      return performance.now() - t0;
    };
    assembleOnce(codec);
    assembleOnce(zlibCodec);
    let asm = 0;
    for (let i = 0; i < reps; i++) {
      if (i % 2 === 0) {
        asm += assembleOnce(codec);
        asmZlibMs += assembleOnce(zlibCodec) / reps;
      } else {
        asmZlibMs += assembleOnce(zlibCodec) / reps;
        asm += assembleOnce(codec);
      }
    }
    asm /= reps;
    // ... of which the decompression alone (what per-frame brotli costs the receiver at the least): each index frame
    // and each block on its own (a block of several frames is its frames' payloads joined)
    const packed = page.frames.flatMap((fr) => (decodeHeader(fr).kind === FRAME_KIND.INDEX ? [fr.subarray(HEADER_BYTES + CHECK_BYTES)] : []));
    for (const b of page.pieces.flatMap((pc) => pc.blocks)) {
      const parts = page.frames.slice(b.seq, b.seq + blockFrames(b)).map((fr) => fr.subarray(HEADER_BYTES));
      packed.push(parts.length === 1 ? parts[0] : Buffer.concat(parts));
    }
    let t = performance.now();
    for (let i = 0; i < reps; i++) for (const p of packed) unpackPayload(p, codec);
    decompressMs += (performance.now() - t) / reps;
    t = performance.now();
    for (let i = 0; i < reps; i++) for (const p of packed) unpackPayload(p, zlibCodec);
    decompressZlibMs += (performance.now() - t) / reps;
    // ... and applying the events to a parse5 tree through the tree builder
    t = performance.now();
    let ok = false;
    for (let i = 0; i < reps; i++) {
      const a = new CatpAssembler({ sha256, codec });
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
    // ... and the browser host's whole path for a frame, in arrival order: the stream load (assembler, reports),
    // the tree builder into DOM operations with the page's names, and the JSON the renderer's socket carries;
    // with a baseline, its build's path on the same frames, the two alternating which goes first
    let json = 0;
    if (baseline !== null) {
      // one unmeasured pass of each first (the frames are new to both)
      hostPath(here, page.frames);
      hostPath(baseline, page.frames);
    }
    for (let i = 0; i < reps; i++) {
      if (baseline !== null && i % 2 === 1) baseHostMs += hostPath(baseline, page.frames).ms / reps;
      const r = hostPath(here, page.frames);
      hostMs += r.ms / reps;
      json = r.json;
      if (baseline !== null && i % 2 === 0) baseHostMs += hostPath(baseline, page.frames).ms / reps;
    }
    domJson += json;
    const wire = page.frames.reduce((n, fr) => n + fr.length, 0);
    const ftCatp = catpFirstText(page.frames, sha256, codec);
    const ftStream = streamFirstText(new TextDecoder().decode(bytes));
    if (ftCatp && ftStream !== null) firstText.push({ catp: ftCatp.bytes, stream: ftStream });
    const indexWire = page.indexBytes + page.indexFrames * 32;
    const gz = zlib.gzipSync(bytes).length;
    totBytes += bytes.length;
    encMs += enc;
    asmMs += asm;
    asmTreeMs += asmTree;
    totIndex += indexWire;
    totIndexRaw += page.indexRawBytes;
    totWire += wire;
    totGzip += gz;
    totBrotli += zlib.brotliCompressSync(bytes).length;
    totHeaders += page.frames.length * 32;
    for (const [k, v] of Object.entries(breakdown(page.pieces))) where[k] = (where[k] ?? 0) + v;
    framesPer.push(page.frames.length);
    rows.push({
      page: f,
      bytes: bytes.length,
      frames: page.frames.length,
      indexFrames: page.indexFrames,
      dataFrames: page.frames.length - page.indexFrames,
      blocks: page.blocks,
      indexPct: +((100 * indexWire) / bytes.length).toFixed(1),
      wirePct: +((100 * wire) / bytes.length).toFixed(1),
      wireVsGzip: +(wire / gz).toFixed(2),
      firstTextBytes: ftCatp?.bytes ?? null,
      firstTextFrames: ftCatp?.frames ?? null,
      firstTextStreamBytes: ftStream,
      encodeMs: +enc.toFixed(2),
      assembleMs: +asm.toFixed(2),
      complete: ok,
    });
  }
  const mb = totBytes / 1e6;
  const structure = totIndexRaw - Object.values(where).reduce((s, v) => s + v, 0);
  const summary = {
    pages: files.length,
    htmlMB: +mb.toFixed(2),
    encodeMBps: +(mb / (encMs / 1000)).toFixed(2),
    /** Which decoder the host's frame codec uses here (libbrotli through the addon, or Node's zlib). */
    frameDecoder: codec.decoder,
    assembleMBps: +(mb / (asmMs / 1000)).toFixed(1),
    /** The same frames assembled with Node's decoder, in the same run. */
    assembleNodeZlibMBps: +(mb / (asmZlibMs / 1000)).toFixed(1),
    assembleWithTreeMBps: +(mb / (asmTreeMs / 1000)).toFixed(1),
    /** The frames' decompression alone (each frame on its own, as the receiver must): a ceiling for assembling. */
    decompressOnlyMBps: +(mb / (decompressMs / 1000)).toFixed(1),
    decompressOnlyNodeZlibMBps: +(mb / (decompressZlibMs / 1000)).toFixed(1),
    /** The browser host's path per frame (stream load, tree builder, DOM operations, their JSON), in order. */
    hostPathMBps: +(mb / (hostMs / 1000)).toFixed(1),
    /** CATP_BENCH_BASELINE: the baseline build's host path on the same frames in the same run, and this one's over it. */
    ...(baseline !== null && baseDir !== undefined
      ? { baseline: { dir: baseDir, commit: gitCommit(baseDir), hostPathMBps: +(mb / (baseHostMs / 1000)).toFixed(1), hostPathTimeRatio: +(hostMs / baseHostMs).toFixed(3) } }
      : {}),
    /** The `dom` events' JSON (what the renderer is handed) as % of the page's bytes. */
    domEventsJsonPctOfPage: +((100 * domJson) / totBytes).toFixed(1),
    indexPctOfPage: +((100 * totIndex) / totBytes).toFixed(1),
    wireBytesPctOfPage: +((100 * totWire) / totBytes).toFixed(1),
    gzipPctOfPage: +((100 * totGzip) / totBytes).toFixed(1),
    brotliPctOfPage: +((100 * totBrotli) / totBytes).toFixed(1),
    wireVsGzip: +(totWire / totGzip).toFixed(2),
    headerOverheadPct: +((100 * totHeaders) / totBytes).toFixed(2),
    /** Decoded index bytes (before compression) as % of the page, and where they go, % of the decoded index. */
    indexDecodedPctOfPage: +((100 * totIndexRaw) / totBytes).toFixed(1),
    indexDecodedWhere: Object.fromEntries([...Object.entries(where), ['structure', structure]].map(([k, v]) => [k, +((100 * (v as number)) / totIndexRaw).toFixed(1)])),
    framesPerPage: { median: pct(framesPer, 50), p90: pct(framesPer, 90), max: Math.max(...framesPer) },
    indexPctPerPage: { median: pct(rows.map((r) => r.indexPct as number), 50), p90: pct(rows.map((r) => r.indexPct as number), 90) },
    wireVsGzipPerPage: { median: pct(rows.map((r) => r.wireVsGzip as number), 50), p90: pct(rows.map((r) => r.wireVsGzip as number), 90) },
    /**
     * Bytes sent before the first text the body shows is on hand (bench/catp/first-text.ts), over the pages that
     * have one: CATP's frames in send order, and one brotli stream of the page up to that text (what in-order UDP
     * and TCP carry at least); and per page CATP's over the stream's.
     */
    firstTextBytes: {
      pages: firstText.length,
      catpMedian: pct(firstText.map((x) => x.catp), 50),
      catpP90: pct(firstText.map((x) => x.catp), 90),
      streamMedian: pct(firstText.map((x) => x.stream), 50),
      streamP90: pct(firstText.map((x) => x.stream), 90),
      catpOverStreamMedian: +pct(firstText.map((x) => x.catp / x.stream), 50).toFixed(2),
    },
    allComplete: rows.every((r) => r.complete),
  };
  console.log('page'.padEnd(44), 'bytes'.padStart(9), 'frames'.padStart(7), 'index'.padStart(6), 'index%'.padStart(7), 'wire%'.padStart(7), 'xgzip'.padStart(6), '1st txt'.padStart(8), 'stream'.padStart(7), 'enc ms'.padStart(8), 'asm ms'.padStart(8));
  for (const r of rows) {
    console.log(
      String(r.page).slice(0, 44).padEnd(44),
      String(r.bytes).padStart(9),
      String(r.frames).padStart(7),
      String(r.indexFrames).padStart(6),
      String(r.indexPct).padStart(7),
      String(r.wirePct).padStart(7),
      String(r.wireVsGzip).padStart(6),
      String(r.firstTextBytes ?? '-').padStart(8),
      String(r.firstTextStreamBytes ?? '-').padStart(7),
      String(r.encodeMs).padStart(8),
      String(r.assembleMs).padStart(8),
    );
  }
  console.log('\nsummary', JSON.stringify(summary, null, 2));
  const out = path.resolve(process.cwd(), 'bench/results/catp.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), commit, summary, pages: rows }, null, 2) + '\n');
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

if (require.main === module) {
  try {
    main();
  } catch (err: unknown) {
    console.error(failureText(err));
    process.exitCode = failureStatus(err);
  }
}
