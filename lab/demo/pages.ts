// What `catp demo` can load: a page of the bundled demo site, a page of the real-pages corpus, any HTML file,
// or an http(s):// or dhttp:// URL (fetched once, here, and then served from the lab's server like any file). Every pane
// gets the same bytes from its own copy of the server.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { repoRoot } from '../silent-time/origin';
import { DhttpHost } from '../../app/dhttp-host';
import type { PageChoice } from '../../protocol/demo/api';
import type { PageSpec } from '../silent-time/pages';

/** The page the demo opens on: long enough that a lost packet shows, short enough for a 10-second look. */
export const DEFAULT_PAGE = 'article.html';

export function demoSiteDir(): string {
  return path.join(repoRoot(), 'demo', 'site');
}

export function corpusPagesDir(): string {
  return path.join(process.env.CATP_CORPUS ?? path.join(repoRoot(), '..', 'shared', 'corpus'), 'real-pages');
}

function htmlFiles(dir: string): string[] {
  try {
    return fs.readdirSync(dir).filter((f) => f.endsWith('.html') && fs.statSync(path.join(dir, f)).isFile()).sort();
  } catch {
    return [];
  }
}

/** The pages the window offers in its list: the demo site's, then the corpus's (when it is there). */
export function pageChoices(): PageChoice[] {
  const out: PageChoice[] = [];
  for (const f of htmlFiles(demoSiteDir())) out.push({ value: f, label: f, bytes: fs.statSync(path.join(demoSiteDir(), f)).size, group: 'demo site' });
  for (const f of htmlFiles(corpusPagesDir())) out.push({ value: `corpus:${f}`, label: f, bytes: fs.statSync(path.join(corpusPagesDir(), f)).size, group: 'real pages (corpus)' });
  return out;
}

/** A page the demo cannot load (DEMO_ERR_PAGE): the message says what it accepts. */
export class DemoPageError extends Error {
  readonly code = 'DEMO_ERR_PAGE';
  constructor(message: string) {
    super(message);
    this.name = 'DemoPageError';
  }
}

const ACCEPTS = 'a page of demo/site (e.g. article.html), corpus:NAME (a real page of the corpus), an HTML file, or an http(s):// or dhttp:// URL';

/**
 * Resolves what the user asked for to a served page. URLs are fetched into `tmpRoot` (a directory the caller
 * removes); the page's own sub-resources are not (they would not be on the lab's server either way).
 */
export async function resolvePage(spec: string, tmpRoot: string, fetchTimeoutMs = 20_000): Promise<PageSpec> {
  const s = spec.trim() || DEFAULT_PAGE;
  if (/^(https?|dhttpt?):\/\//i.test(s)) {
    const body = /^dhttp/i.test(s) ? await fetchDhttp(s, fetchTimeoutMs) : await fetchHttp(s, fetchTimeoutMs);
    if (body.length > 10_000_000) throw new DemoPageError(`${s} is ${body.length} bytes; the demo takes pages up to 10 MB`);
    const dir = fs.mkdtempSync(path.join(tmpRoot, 'url-'));
    fs.writeFileSync(path.join(dir, 'index.html'), body);
    return { name: s, root: dir, urlPath: '/index.html', bytes: body.length };
  }
  const inDir = (dir: string, name: string): PageSpec | null => {
    const file = path.join(dir, name);
    if (path.dirname(file) !== dir || !fs.existsSync(file) || !fs.statSync(file).isFile()) return null;
    return { name, root: dir, urlPath: `/${encodeURIComponent(name)}`, bytes: fs.statSync(file).size };
  };
  // a name without its extension is the .html page of that name (corpus:heise is heise.html)
  const fromDir = (dir: string, name: string): PageSpec | null => inDir(dir, name) ?? (name !== '' && path.extname(name) === '' ? inDir(dir, `${name}.html`) : null);
  if (s.startsWith('corpus:')) {
    const p = fromDir(corpusPagesDir(), s.slice('corpus:'.length));
    if (!p) throw new DemoPageError(`no corpus page ${s.slice(7)} in ${corpusPagesDir()}`);
    return p;
  }
  const asFile = path.resolve(s);
  if (fs.existsSync(asFile) && fs.statSync(asFile).isFile()) {
    return { name: path.basename(asFile), root: path.dirname(asFile), urlPath: `/${encodeURIComponent(path.basename(asFile))}`, bytes: fs.statSync(asFile).size };
  }
  const p = fromDir(demoSiteDir(), s) ?? fromDir(corpusPagesDir(), s);
  if (p) return p;
  throw new DemoPageError(`no such page: ${s} (the demo loads ${ACCEPTS})`);
}

async function fetchHttp(url: string, timeoutMs: number): Promise<Buffer> {
  let res: Response;
  try {
    res = await fetch(url, { redirect: 'follow', signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    throw new DemoPageError(`could not fetch ${url}: ${(err as Error).message}`);
  }
  if (!res.ok) throw new DemoPageError(`could not fetch ${url}: ${res.status} ${res.statusText}`);
  return Buffer.from(await res.arrayBuffer());
}

/** A dhttp:// page (the browser's Compare button hands the demo the page it shows), fetched with our own client. */
async function fetchDhttp(url: string, timeoutMs: number): Promise<Buffer> {
  const host = new DhttpHost();
  try {
    const r = await host.fetch(url, { timeoutMs });
    if (r.response.status !== 200) throw new DemoPageError(`could not fetch ${url}: ${r.response.status} ${r.response.reason}`);
    return Buffer.from(r.response.body);
  } catch (err) {
    if (err instanceof DemoPageError) throw err;
    throw new DemoPageError(`could not fetch ${url}: ${(err as Error).message}`);
  } finally {
    host.close();
  }
}

export function demoTempRoot(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'catp-demo-'));
}
