// Shared set-up for the browser tests: the reference server on a temp copy of the demo site (+ corpus pages),
// an optional lossy relay, a browser session (service + shell server) and headless Chromium (playwright-core)
// on the renderer. Everything is torn down by close(): Chromium killed, temp dirs removed.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';

import { build } from 'esbuild';
import { parse, serialize } from 'parse5';
import type { FrameLocator, Page } from 'playwright-core';

import {
  openHeadless,
  serializeDump,
  startBrowserSession,
  startLossyRelay,
  type BrowserSession,
  type LoadRecord,
  type LossyRelay,
  type Transport,
} from '../../app/browser';
import type { HeadlessPage } from '../../app/browser/chromium';
import { startServer, type DhttpServer } from '../../server';
import { decodeHtml } from '../../protocol/html-encoding';

export const ROOT = join(__dirname, '..', '..');
export const DEMO = join(ROOT, 'demo', 'site');
export const ARTIFACTS = join(ROOT, 'test-artifacts');
export const CORPUS_DIR = process.env.CATP_CORPUS ?? join(ROOT, '..', 'shared', 'corpus');
export const CORPUS_PAGES = ['wikipedia.html', 'nytimes-1.html', 'bbc-1.html', 'aktualne.html', 'archive-of-our-own.html']
  .map((p) => join(CORPUS_DIR, 'real-pages', p))
  .filter(existsSync)
  .slice(0, 3);
export const chromiumPresent = existsSync(process.env.CATP_CHROMIUM ?? '/usr/bin/chromium');

/**
 * Renderer code in a plain page: `entry` (TypeScript run from the project root, which puts what a test needs on
 * `window`) bundled by esbuild and served at /bundle.js, beside `pages` (path → HTML; '/' is the page opened) over
 * loopback HTTP, in headless Chromium. close() stops both.
 */
export async function bundledPage(entry: string, pages: Record<string, string>): Promise<{ head: HeadlessPage; close(): Promise<void> }> {
  const bundle = await build({ stdin: { contents: entry, resolveDir: ROOT, loader: 'ts' }, bundle: true, format: 'iife', target: 'chrome110', write: false, logLevel: 'warning' });
  const js = bundle.outputFiles[0]!.text;
  const server = createHttpServer((req, res) => {
    const page = pages[req.url ?? '/'];
    res.setHeader('content-type', req.url === '/bundle.js' ? 'text/javascript' : 'text/html');
    res.end(req.url === '/bundle.js' ? js : (page ?? pages['/'] ?? ''));
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  const head = await openHeadless(url);
  await head.page.goto(url);
  return {
    head,
    async close() {
      await head.close();
      await new Promise((ok) => server.close(ok));
    },
  };
}

let rendererBuilt: string | null = null;

/** Bundles the renderer and the demo page (esbuild, ~100 ms) into a temp dir so tests never run a stale dist/. */
export async function buildRenderer(): Promise<string> {
  if (rendererBuilt && existsSync(join(rendererBuilt, 'app.js'))) return rendererBuilt;
  const out = mkdtempSync(join(tmpdir(), 'catp-renderer-'));
  await build({ entryPoints: [join(ROOT, 'renderer', 'main.ts')], bundle: true, format: 'iife', target: 'chrome110', outfile: join(out, 'app.js'), logLevel: 'warning' });
  await build({ entryPoints: [join(ROOT, 'renderer', 'demo.ts')], bundle: true, format: 'iife', target: 'chrome110', outfile: join(out, 'demo.js'), logLevel: 'warning' });
  await build({ entryPoints: [join(ROOT, 'renderer', 'frame-agent.ts')], bundle: true, format: 'iife', target: 'chrome110', outfile: join(out, 'frame.js'), logLevel: 'warning' });
  for (const f of ['index.html', 'app.css', 'demo.html', 'demo.css']) cpSync(join(ROOT, 'renderer', f), join(out, f));
  rendererBuilt = out;
  return out;
}

export interface Rig {
  root: string;
  server: DhttpServer;
  relay: LossyRelay | null;
  session: BrowserSession;
  page: Page;
  /** dhttp:// base URL (through the relay when there is one). */
  base: string;
  load(path: string, transport?: Transport, timeoutMs?: number): Promise<LoadRecord>;
  loadUrl(url: string, transport?: Transport, timeoutMs?: number): Promise<LoadRecord>;
  dump(): Promise<string>;
  state(): Promise<ProbeState>;
  close(): Promise<void>;
}

export interface ProbeState {
  loadId: number;
  url: string;
  transport: string;
  finished: boolean;
  filledBlocks: number[];
  blockCount: number;
  missingSlots: number;
  fallbacks: number;
  arrivals: number;
  updates: number;
  record: LoadRecord | null;
  hudSilent: string;
  hudReuse: string;
  hudSaved: string;
  savings: LoadRecord['savings'] | null;
}

export interface RigOptions {
  loss?: number;
  seed?: number;
  rate?: number;
  /** One-way delay through the relay (ms): with a real RTT, later frames overtake the repair of a lost one. */
  delayMs?: number;
  drop?: (direction: 'toServer' | 'toClient', data: Buffer, index: number) => boolean | undefined;
  extraFiles?: Record<string, string | Uint8Array>;
  width?: number;
  height?: number;
  /** Payload store directory (DTD, CATP block reuse); default none, so loads never depend on earlier runs. */
  storeDir?: string;
}

export async function startRig(o: RigOptions = {}): Promise<Rig> {
  const root = mkdtempSync(join(tmpdir(), 'catp-browser-site-'));
  cpSync(DEMO, root, { recursive: true });
  CORPUS_PAGES.forEach((p, i) => writeFileSync(join(root, `corpus-${i}.html`), readFileSync(p)));
  for (const [name, body] of Object.entries(o.extraFiles ?? {})) {
    mkdirSync(join(root, name, '..'), { recursive: true });
    writeFileSync(join(root, name), body);
  }
  const server = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: o.rate ?? 4_000_000 } });
  const relay = o.loss ? await startLossyRelay(server.port, { loss: o.loss, seed: o.seed ?? 7, delayMs: o.delayMs ?? 0, ...(o.drop ? { drop: o.drop } : {}) }) : null;
  const rendererDir = await buildRenderer();
  const session = await startBrowserSession({
    rendererDir,
    shell: 'test-headless',
    ...(o.rate ? { rateBytesPerSec: o.rate } : {}),
    loadTimeoutMs: 45_000,
    storeDir: o.storeDir ?? null,
    hostOptions: { client: { initialTimeoutMs: 300, fallbackAfterResends: o.loss ? 8 : 2, maxResends: 8 } },
  });
  const head = await openHeadless(session.shell.appUrl, { width: o.width ?? 1280, height: o.height ?? 900, tunnelSpki: session.shell.tunnelCert.spki, alsoOrigins: [session.shell.frameOrigin] });
  await session.service.whenReady(20_000);
  const base = `dhttp://127.0.0.1:${relay ? relay.port : server.port}`;
  const rig: Rig = {
    root,
    server,
    relay,
    session,
    page: head.page,
    base,
    loadUrl: async (url, transport, timeoutMs = 45_000) => {
      const id = session.service.navigate(url, transport);
      return session.service.recordOf(id, timeoutMs);
    },
    load: (path, transport, timeoutMs) => rig.loadUrl(`${base}/${path}`, transport, timeoutMs),
    dump: async () => {
      const tree = await session.service.requestDump();
      if (!tree) throw new Error('no tree');
      return serializeDump(tree);
    },
    state: async () => (await head.page.evaluate('window.__catp.state()')) as ProbeState,
    close: async () => {
      await head.close();
      await session.close();
      await relay?.close();
      await server.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
  return rig;
}

/** parse5's tree of a page file as a browser reads it: its bytes decoded as the host does (the encoding sniffed, a byte
 * order mark taken off, where readFileSync's 'utf8' kept it as text), parsed with scripting off (CATP_SCRIPTING, the
 * sandbox). */
export function parse5Of(file: string): string {
  return serialize(parse(decodeHtml(new Uint8Array(readFileSync(file))).text, { scriptingEnabled: false }));
}

export function artifact(name: string): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return join(ARTIFACTS, name);
}

/** Debian packages the browser tests need (checked so a missing one fails with a clear message). */
export function xvfbRunPresent(): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v xvfb-run'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A loopback TCP port free right now (for a browser's --remote-debugging-port). */
export function freePort(): Promise<number> {
  return new Promise((ok) => {
    const s = createNetServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

/** Stops a process started `detached` (xvfb-run and what it runs): SIGTERM to its group, SIGKILL after 5 s. */
export async function stopGroup(pid: number, exited: Promise<void>): Promise<void> {
  const kill = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      // already gone
    }
  };
  kill('SIGTERM');
  const t = setTimeout(() => kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(t);
}

/** The page frame: inside the agent frame (both on the shell's frame origin, another origin than the app page's). */
export function pageFrame(page: Page): FrameLocator {
  return page.frameLocator('#page').frameLocator('#page');
}

/** `get()` until it returns `want` (or 10 s pass): what it returned last (a style or an image that loads later). */
export async function poll(get: () => Promise<unknown>, want: unknown): Promise<unknown> {
  const until = Date.now() + 10_000;
  let got: unknown;
  do {
    got = await get();
    if (got === want) return got;
    await new Promise((r) => setTimeout(r, 100));
  } while (Date.now() < until);
  return got;
}
