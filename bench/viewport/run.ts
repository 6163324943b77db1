// Viewport benchmark: how many bytes each transport must deliver before the first screen of a real page is complete.
// `bench:catp` counts the bytes until the *first* text the body shows; a user reads the whole first screen. Here
// Chromium lays each corpus page out (1280×800, scripts off, as our sandbox shows it, nothing fetched from outside
// the file) and names the text nodes it paints inside the viewport; then:
//
//  - CATP: the server's frames (the host's codec, brotli 11) in send order through the real assembler and tree
//    builder, until every one of those text nodes is in the tree with all of its text;
//  - one brotli stream of the page (what in-order UDP and TCP carry at least, as bench/catp/first-text.ts counts
//    it): its compressed size up to the end of the last of them.
//
// Text only: images, backgrounds and boxes also paint, and a screen can look done before its last line of text; but
// text is what a reader waits for, and what both transports carry. Nodes are matched by pre-order number in the
// finished tree (Chromium's DOM of the scripting-off parse and parse5's tree are the same tree; a page where the node
// counts differ is skipped and named), each followed through the assembly to the frame that last changed it: while a
// piece is missing its nodes are absent and a placeholder stands in, so positions move until it comes.
//
//   npm run build && npm run bench:viewport -- [--pages DIR|FILE[,FILE...]] [--viewport 1280x800] [--out FILE]
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { pathToFileURL } from 'node:url';
import * as parse5 from 'parse5';
import type { DefaultTreeAdapterMap } from 'parse5';

import { CHROMIUM_PATH, chromiumFlags } from '../../app/browser/chromium';
import { hostCodec } from '../../app/catp-codec';
import { sha256 } from '../../platform/sha256';
import { encodePage } from '../../protocol/catp';
import { BenchError, failureStatus, failureText } from '../errors';
import { catpBytesUntilSettled, preorder } from '../catp/first-text';
import { gitCommit } from '../commit';

type Node = DefaultTreeAdapterMap['node'];

const HELP = `usage: node dist/bench/viewport/run.js [options]      (npm run bench:viewport -- [options])

Bytes each transport delivers before every text the first screen of a page shows is on hand: CATP's frames in send
order against one brotli stream of the page (in-order UDP, TCP). Chromium lays out each page (scripts off).

options:
  --pages DIR|FILE[,FILE...]  HTML pages (default: ../shared/corpus/real-pages, all of it)
  --viewport WxH              the first screen (default 1280x800, the lab's)
  --out FILE                  JSON output (default bench/results/viewport.json)
  -h, --help                  this help
`;

interface Options {
  pages: string[];
  width: number;
  height: number;
  out: string;
}

function parseArgs(argv: string[]): Options | null {
  const root = path.join(__dirname, '..', '..', '..');
  let pages = [path.join(root, '..', 'shared', 'corpus', 'real-pages')];
  let width = 1280;
  let height = 800;
  let out = path.join(root, 'bench', 'results', 'viewport.json');
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') return null;
    const m = /^--(pages|viewport|out)(?:=(.*))?$/.exec(a);
    if (!m) throw new BenchError('BENCH_ERR_USAGE', `unknown argument ${a} (see --help)`);
    const v = m[2] ?? argv[++i];
    if (v === undefined) throw new BenchError('BENCH_ERR_USAGE', `--${m[1]} needs a value`);
    if (m[1] === 'pages') pages = v.split(',');
    else if (m[1] === 'out') out = v;
    else {
      const wh = /^(\d+)x(\d+)$/.exec(v);
      if (!wh || Number(wh[1]) < 100 || Number(wh[2]) < 100) throw new BenchError('BENCH_ERR_USAGE', '--viewport needs WxH, each at least 100');
      width = Number(wh[1]);
      height = Number(wh[2]);
    }
  }
  const files = pages.flatMap((p) => {
    if (!fs.existsSync(p)) throw new BenchError('BENCH_ERR_USAGE', `no such page or directory: ${p}`);
    return fs.statSync(p).isDirectory() ? fs.readdirSync(p).filter((f) => f.endsWith('.html')).sort().map((f) => path.join(p, f)) : [p];
  });
  if (files.length === 0) throw new BenchError('BENCH_ERR_USAGE', 'no .html pages to measure');
  return { pages: files, width, height, out };
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
};

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  if (opts === null) {
    process.stdout.write(HELP);
    return;
  }
  const commit = gitCommit();
  const codec = hostCodec({ finalQuality: 11 });
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: chromiumFlags() });
  const rows: Array<Record<string, string | number | null>> = [];
  const skipped: Array<{ page: string; why: string }> = [];
  console.log(`${opts.pages.length} pages, first screen ${opts.width}x${opts.height} (Chromium, scripts off) ...`);
  console.log(`${'page'.padEnd(44)} ${'texts'.padStart(5)} ${'catp'.padStart(8)} ${'stream'.padStart(8)} ${'ratio'.padStart(6)}`);
  try {
    const context = await browser.newContext({ viewport: { width: opts.width, height: opts.height }, javaScriptEnabled: false });
    for (const file of opts.pages) {
      const name = path.basename(file);
      const url = pathToFileURL(file).href;
      const page = await context.newPage();
      let shown: { texts: number[]; count: number };
      try {
        // nothing from outside the file (no internet here; the figure is about the page's own bytes)
        await page.route((u) => u.href !== url, (route) => route.abort());
        await page.goto(url, { waitUntil: 'load', timeout: 30_000 });
        // (a string: this file is compiled without the DOM library)
        shown = (await page.evaluate(`(() => {
          const texts = [];
          let i = 0;
          const stack = [document];
          while (stack.length) {
            const n = stack.pop();
            const k = i++;
            if (n.nodeType === 3 && /\\S/.test(n.data)) {
              const r = document.createRange();
              r.selectNodeContents(n);
              for (const q of r.getClientRects()) {
                if (q.width > 0 && q.height > 0 && q.bottom > 0 && q.top < innerHeight && q.right > 0 && q.left < innerWidth) { texts.push(k); break; }
              }
            }
            for (let c = n.lastChild; c; c = c.previousSibling) stack.push(c);
          }
          return { texts, count: i };
        })()`)) as { texts: number[]; count: number };
      } catch (e) {
        skipped.push({ page: name, why: `Chromium: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}` });
        continue;
      } finally {
        await page.close();
      }
      const bytes = new Uint8Array(fs.readFileSync(file));
      const html = new TextDecoder().decode(bytes);
      const doc = parse5.parse(html, { sourceCodeLocationInfo: true, scriptingEnabled: false }) as Node;
      const nodes = preorder(doc);
      if (nodes.length !== shown.count) {
        skipped.push({ page: name, why: `Chromium's DOM has ${shown.count} nodes, parse5's tree ${nodes.length}` });
        continue;
      }
      if (shown.texts.length === 0) {
        skipped.push({ page: name, why: 'no text on the first screen' });
        continue;
      }
      const end = Math.max(...shown.texts.map((n) => nodes[n].sourceCodeLocation?.endOffset ?? 0));
      const stream = zlib.brotliCompressSync(Buffer.from(html.slice(0, end))).length;
      const encoded = encodePage(bytes, { sha256, codec });
      const catp = catpBytesUntilSettled(encoded.frames, sha256, codec, shown.texts);
      if (catp === null) throw new BenchError('BENCH_ERR_INCOMPLETE', `${name}: the first screen's text never came whole from CATP's frames`);
      const ratio = +(catp.bytes / stream).toFixed(2);
      rows.push({ page: name, bytes: bytes.length, texts: shown.texts.length, catpBytes: catp.bytes, catpFrames: catp.frames, framesInAll: encoded.frames.length, streamBytes: stream, ratio });
      console.log(`${name.padEnd(44)} ${String(shown.texts.length).padStart(5)} ${String(catp.bytes).padStart(8)} ${String(stream).padStart(8)} ${ratio.toFixed(2).padStart(6)}`);
    }
  } finally {
    await browser.close();
  }
  for (const s of skipped) console.log(`skipped ${s.page}: ${s.why}`);
  const num = (k: string): number[] => rows.map((r) => r[k] as number);
  const summary = {
    pages: rows.length,
    skipped: skipped.length,
    catpBytes: { median: pct(num('catpBytes'), 50), p90: pct(num('catpBytes'), 90) },
    streamBytes: { median: pct(num('streamBytes'), 50), p90: pct(num('streamBytes'), 90) },
    /** CATP's bytes over the stream's, per page. */
    ratio: { median: pct(num('ratio'), 50), p90: pct(num('ratio'), 90) },
    catpNotMore: rows.filter((r) => (r.ratio as number) <= 1).length,
  };
  console.log(JSON.stringify(summary, null, 2));
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  fs.writeFileSync(opts.out, JSON.stringify({ bench: 'viewport', commit, date: new Date().toISOString(), viewport: { width: opts.width, height: opts.height }, summary, rows, skipped }, null, 2) + '\n');
  console.log(`wrote ${path.relative(process.cwd(), opts.out)}`);
}

main().catch((e: unknown) => {
  console.error(failureText(e));
  process.exitCode = failureStatus(e);
});
