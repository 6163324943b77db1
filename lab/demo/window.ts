// `catp demo`'s window: an HTTP server on 127.0.0.1 for the demo page (dist/renderer/demo.*) and its WebSocket
// (guarded like the browser's: a per-launch secret in the subprotocol list, our Host and Origin only), Chromium
// driven by playwright-core (a visible `--app` window, or headless), and the filmstrip: a CDP screencast of the
// window while the three panes load, cut into one frame per tick (100 ms) that the page crops to each pane.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';

import type { BrowserContext, CDPSession, Page } from 'playwright-core';
import { WebSocketServer, type WebSocket } from 'ws';

import { CHROMIUM_PATH, chromiumFlags, onlyToFlags } from '../../app/browser';
import { checkSettings, DEMO_TRANSPORTS, type DemoEvent, type DemoRun, type DemoSettings } from '../../protocol/demo/api';
import { DemoController, type DemoView } from './controller';
import { pageChoices } from './pages';
import { LabError } from '../errors';

interface CapturedFrame {
  tEpochMs: number;
  data: string;
  width: number;
  height: number;
}

/** The latest frame at or before each tick (-1: none yet), ticks every intervalMs from startMs to endMs. */
export function filmstripTicks(frameTimes: readonly number[], startMs: number, endMs: number, intervalMs: number): number[] {
  const ticks: number[] = [];
  let j = -1;
  for (let t = startMs; t <= endMs + 1e-9; t += intervalMs) {
    while (j + 1 < frameTimes.length && frameTimes[j + 1]! <= t) j++;
    ticks.push(j);
  }
  return ticks;
}

/** 100 ms between thumbnails (WebPageTest's finest), coarser for long loads so a strip stays near 100 thumbnails. */
export function filmstripInterval(spanMs: number): number {
  for (const i of [100, 200, 500, 1000]) if (spanMs / i <= 100) return i;
  return 2000;
}

export interface DemoWindowOptions {
  rendererDir: string;
  tmpRoot: string;
  settings: DemoSettings;
  headless: boolean;
  width?: number;
  height?: number;
  timeoutMs?: number;
  /** every run, as it ends */
  onRun?: (run: DemoRun) => void;
  onProgress?: (message: string) => void;
}

export interface DemoWindow {
  readonly url: string;
  readonly page: Page;
  /** runs with these settings (as the page's Load button does); resolves when the run and its filmstrip are done */
  run(settings?: DemoSettings): Promise<DemoRun>;
  /** resolves once the page has drawn run `runId`'s filmstrip (false: not within timeoutMs) */
  drawn(runId: number, timeoutMs: number): Promise<boolean>;
  /** resolves when the window is closed by the user */
  readonly closed: Promise<void>;
  close(): Promise<void>;
}

export async function openDemoWindow(o: DemoWindowOptions): Promise<DemoWindow> {
  const secret = randomBytes(24).toString('hex');
  const controller = new DemoController({ tmpRoot: o.tmpRoot, ...(o.timeoutMs ? { timeoutMs: o.timeoutMs } : {}) });
  await controller.start();
  let settings = o.settings;
  let port = 0;
  const sockets = new Set<WebSocket>();
  const broadcast = (ev: DemoEvent) => {
    const m = JSON.stringify(ev);
    for (const ws of sockets) if (ws.readyState === ws.OPEN) ws.send(m);
  };
  const files: Record<string, [string, string]> = {
    '/demo.html': ['demo.html', 'text/html; charset=utf-8'],
    '/demo.js': ['demo.js', 'text/javascript; charset=utf-8'],
    '/demo.css': ['demo.css', 'text/css; charset=utf-8'],
  };
  const paneOrigins = () => DEMO_TRANSPORTS.map((t) => controller.paneOrigin(t)).join(' ');
  const csp = () => `default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src ws://127.0.0.1:${port}; frame-src ${paneOrigins()}; object-src 'none'; base-uri 'none'; form-action 'none'`;
  const hostOk = (req: IncomingMessage) => req.headers.host === `127.0.0.1:${port}`;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (!hostOk(req)) return void res.writeHead(421).end('wrong host');
    const pathname = new URL(req.url ?? '/', 'http://x').pathname;
    if (pathname === '/favicon.ico') return void res.writeHead(204).end();
    const f = files[pathname];
    if (!f || (req.method !== 'GET' && req.method !== 'HEAD')) return void res.writeHead(404).end('not found');
    fs.readFile(path.join(o.rendererDir, f[0]), (err, body) => {
      if (err) return void res.writeHead(500).end(`the demo page is not built (${f[0]}): run npm run build`);
      res.writeHead(200, { 'content-type': f[1], 'cache-control': 'no-store', 'x-content-type-options': 'nosniff', ...(f[0].endsWith('.html') ? { 'content-security-policy': csp() } : {}) }).end(body);
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1024 * 1024, handleProtocols: (p) => (p.has('catp-demo.v1') ? 'catp-demo.v1' : false) });
  server.on('upgrade', (req, socket, head) => {
    const offered = String(req.headers['sec-websocket-protocol'] ?? '').split(',').map((s) => s.trim());
    const presented = Buffer.from(offered.find((p) => p.startsWith('catp-secret.'))?.slice('catp-secret.'.length) ?? '');
    const ok = hostOk(req) && req.headers.origin === `http://127.0.0.1:${port}` && new URL(req.url ?? '/', 'http://x').pathname === '/__demo/ws' &&
      presented.length === secret.length && timingSafeEqual(presented, Buffer.from(secret));
    if (!ok) return void socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    wss.handleUpgrade(req, socket, head, (ws) => {
      sockets.add(ws);
      ws.on('close', () => sockets.delete(ws));
      ws.on('error', () => ws.close());
      ws.send(JSON.stringify({ type: 'init', settings, pages: pageChoices(), transports: DEMO_TRANSPORTS } satisfies DemoEvent));
      ws.on('message', (data, isBinary) => {
        if (isBinary) return;
        let m: { type?: unknown; settings?: unknown };
        try {
          m = JSON.parse(data.toString()) as typeof m;
        } catch {
          return;
        }
        if (m.type === 'run') {
          let s: DemoSettings;
          try {
            s = checkSettings(m.settings);
          } catch (err) {
            broadcast({ type: 'error', runId: null, code: (err as { code?: string }).code ?? 'DEMO_ERR', message: (err as Error).message });
            return;
          }
          run(s).catch((err: Error & { code?: string }) => {
            // a failed run has said so already; a refused one says it here
            if (err.code === 'DEMO_ERR_BUSY') broadcast({ type: 'error', runId: null, code: err.code, message: 'a run is in progress: wait for it to end' });
          });
        }
      });
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  port = (server.address() as AddressInfo).port;
  const url = `http://127.0.0.1:${port}/demo.html#secret=${secret}`;

  // ---- the browser ----------------------------------------------------------------------------------------
  const { chromium } = await import('playwright-core');
  const profile = fs.mkdtempSync(path.join(o.tmpRoot, 'profile-'));
  const width = o.width ?? 1600;
  const height = o.height ?? 1000;
  const context: BrowserContext = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: o.headless,
    // the demo page and the three panes, nothing else (a page in a pane opens no connection anywhere)
    args: [...chromiumFlags(), ...onlyToFlags([`http://127.0.0.1:${port}`, ...DEMO_TRANSPORTS.flatMap((t) => [controller.paneOrigin(t), controller.paneFrameOrigin(t)])]),
      ...(o.headless ? [] : [`--app=${url}`, `--window-size=${width},${height}`])],
    viewport: o.headless ? { width, height } : null,
  });
  const page = context.pages()[0] ?? (await context.waitForEvent('page'));
  if (!page.url().startsWith(`http://127.0.0.1:${port}/`)) await page.goto(url);
  const cdp: CDPSession = await context.newCDPSession(page);
  let capturing: CapturedFrame[] | null = null;
  cdp.on('Page.screencastFrame', (f) => {
    capturing?.push({ tEpochMs: (f.metadata.timestamp ?? Date.now() / 1000) * 1000, data: f.data, width: f.metadata.deviceWidth, height: f.metadata.deviceHeight });
    cdp.send('Page.screencastFrameAck', { sessionId: f.sessionId }).catch(() => undefined);
  });
  const closed = new Promise<void>((ok) => context.once('close', () => ok()));

  // ---- runs -----------------------------------------------------------------------------------------------
  let busy: Promise<DemoRun> | null = null;
  const view: DemoView = {
    progress: (runId, message) => {
      o.onProgress?.(message);
      broadcast({ type: 'progress', runId, message });
    },
    showPanes: (runId, panes) => broadcast({ type: 'panes', runId, panes }),
    loadStarting: async (runId, atEpochMs) => {
      capturing = [];
      await cdp.send('Page.startScreencast', { format: 'jpeg', quality: 70, everyNthFrame: 1 }).catch(() => undefined);
      broadcast({ type: 'started', runId, atEpochMs });
    },
    paneDone: (runId, pane) => broadcast({ type: 'pane-done', runId, pane }),
  };
  async function runOnce(s: DemoSettings): Promise<DemoRun> {
    settings = s;
    let r: DemoRun;
    try {
      r = await controller.run(s, view);
    } catch (err) {
      await cdp.send('Page.stopScreencast').catch(() => undefined);
      capturing = null;
      broadcast({ type: 'error', runId: null, code: (err as { code?: string }).code ?? 'DEMO_ERR_RUN', message: (err as Error).message });
      throw err;
    }
    // the last paints reach the screencast a few frames later
    await new Promise((ok) => setTimeout(ok, 400));
    await cdp.send('Page.stopScreencast').catch(() => undefined);
    const frames = capturing ?? [];
    capturing = null;
    broadcast({ type: 'run', run: r });
    const ends = r.panes.map((p) => p.completeMs ?? (p.silentGap ? p.silentGap.to - r.startedAtEpochMs : 0));
    const span = Math.max(500, ...ends) + 300;
    const intervalMs = filmstripInterval(span);
    const ticks = filmstripTicks(frames.map((f) => f.tEpochMs), r.startedAtEpochMs, r.startedAtEpochMs + span, intervalMs);
    const used = [...new Set(ticks.filter((i) => i >= 0))].sort((a, b) => a - b);
    const index = new Map(used.map((i, k) => [i, k]));
    broadcast({
      type: 'filmstrip',
      runId: r.runId,
      intervalMs,
      frames: used.map((i) => ({ dataUrl: `data:image/jpeg;base64,${frames[i]!.data}`, width: frames[i]!.width, height: frames[i]!.height })),
      ticks: ticks.map((i) => (i < 0 ? -1 : index.get(i)!)),
    });
    o.onRun?.(r);
    return r;
  }
  function run(s: DemoSettings = settings): Promise<DemoRun> {
    if (busy) return Promise.reject(new LabError('DEMO_ERR_BUSY', 'a run is in progress'));
    busy = runOnce(s).finally(() => {
      busy = null;
    });
    return busy;
  }

  async function drawn(runId: number, timeoutMs: number): Promise<boolean> {
    // polled with evaluate: waitForFunction needs eval, which the demo page's CSP forbids
    for (const until = Date.now() + timeoutMs; Date.now() < until;) {
      if ((await page.evaluate('document.body.dataset.filmstrip').catch(() => null)) === String(runId)) return true;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    return false;
  }

  return {
    url,
    page,
    run,
    drawn,
    closed,
    close: async () => {
      await busy?.catch(() => undefined);
      await context.close().catch(() => undefined);
      for (const ws of sockets) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((ok) => server.close(() => ok()));
      await controller.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}
