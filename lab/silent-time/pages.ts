// The pages a run loads: HTML files, directories of them (the demo site, a corpus), or generated pages of
// given sizes. Each page is served from a root directory at a path.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LabError } from '../errors';

export interface PageSpec {
  /** short name for tables: the file name, or e.g. "gen-10k" */
  name: string;
  /** directory the server serves */
  root: string;
  /** URL path, starting with '/' */
  urlPath: string;
  /** HTML bytes */
  bytes: number;
}

/** "10k" → 10000, "50K" → 50000, "1m" → 1000000, "1500" → 1500 (decimal units, as the paper's 10 KB). */
export function parseSize(s: string): number {
  const m = /^(\d+(?:\.\d+)?)([kKmM]?)[bB]?$/.exec(s.trim());
  if (!m) throw new RangeError(`not a size: '${s}' (e.g. 10k, 50k, 2000)`);
  const n = Number(m[1]) * (m[2] === '' ? 1 : m[2]!.toLowerCase() === 'k' ? 1000 : 1_000_000);
  if (!Number.isInteger(n) || n < 200 || n > 10_000_000) throw new RangeError(`page size must be a whole number of bytes from 200 to 10M, got '${s}'`);
  return n;
}

/** A deterministic pseudo-random word generator (xorshift32), so generated pages are the same every run. */
function words(seed: number): () => string {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  return () => {
    const len = 2 + (next() % 8);
    let w = '';
    for (let i = 0; i < len; i++) w += letters[next() % 26];
    return w;
  };
}

/**
 * An HTML page of exactly `bytes` bytes: a small style in the head (tiny monospace text, so that a 50 KB
 * page fits a 1280×800 viewport and every arriving byte lands on screen), then paragraphs of distinct
 * pseudo-random words. Without scripts or subresources: the page is one HTTP response.
 */
export function generatePage(bytes: number, seed = 1): string {
  const head = `<!doctype html>\n<html><head><meta charset="utf-8"><title>generated ${bytes} B</title>` +
    '<style>html,body{margin:0;padding:1px;background:#fff;color:#000}p{margin:0;font:5px/6px monospace;word-break:break-all}</style>' +
    '</head><body>\n';
  const tail = '\n</body></html>\n';
  const next = words(seed);
  let body = '';
  let para = '';
  const budget = bytes - head.length - tail.length;
  if (budget < 20) throw new RangeError(`page size ${bytes} is too small for the page skeleton`);
  for (;;) {
    const w = next();
    // room for the word, its space and the paragraph's <p></p> (7 bytes)
    if (body.length + para.length + 1 + w.length + 7 > budget) break;
    para += (para ? ' ' : '') + w;
    if (para.length > 400) {
      body += `<p>${para}</p>\n`;
      para = '';
    }
  }
  let out = head + body + (para ? `<p>${para}</p>` : '');
  // pad to the exact size with spaces inside the last paragraph's closing area (before the tail)
  const pad = bytes - out.length - tail.length;
  out += ' '.repeat(Math.max(0, pad)) + tail;
  if (Buffer.byteLength(out) !== bytes) throw new LabError('LAB_ERR_INTERNAL', `internal: generated ${Buffer.byteLength(out)} bytes instead of ${bytes}`);
  return out;
}

/** Writes generated pages of these sizes into a new temp directory; the caller removes it (cleanup()). */
export function generatedPages(sizes: readonly number[]): { pages: PageSpec[]; cleanup(): void } {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-pages-'));
  const pages = sizes.map((n) => {
    const label = n % 1000 === 0 ? `${n / 1000}k` : String(n);
    const file = `gen-${label}.html`;
    fs.writeFileSync(path.join(root, file), generatePage(n));
    return { name: `gen-${label}`, root, urlPath: `/${file}`, bytes: n };
  });
  return { pages, cleanup: () => fs.rmSync(root, { recursive: true, force: true }) };
}

function htmlFilesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...htmlFilesUnder(p));
    else if (e.isFile() && /\.html?$/i.test(e.name)) out.push(p);
  }
  return out;
}

/** Pages from files and directories: a file is served from its own directory; a directory serves all its HTML files. */
export function pagesFromPaths(paths: readonly string[]): PageSpec[] {
  const out: PageSpec[] = [];
  for (const p0 of paths) {
    const p = path.resolve(p0);
    let st: fs.Stats;
    try {
      st = fs.statSync(p);
    } catch {
      throw new RangeError(`no such page or directory: ${p0}`);
    }
    if (st.isDirectory()) {
      const files = htmlFilesUnder(p);
      if (files.length === 0) throw new RangeError(`no .html files under ${p0}`);
      for (const f of files) {
        const rel = path.relative(p, f).split(path.sep).map(encodeURIComponent).join('/');
        out.push({ name: path.relative(p, f), root: p, urlPath: `/${rel}`, bytes: fs.statSync(f).size });
      }
    } else {
      out.push({ name: path.basename(p), root: path.dirname(p), urlPath: `/${encodeURIComponent(path.basename(p))}`, bytes: st.size });
    }
  }
  const seen = new Map<string, number>();
  for (const pg of out) {
    const n = seen.get(pg.name) ?? 0;
    seen.set(pg.name, n + 1);
    if (n > 0) pg.name = `${pg.name}#${n + 1}`;
  }
  return out;
}
