// The Chromium-window shell's host side: serves the renderer on 127.0.0.1 (random port), carries the browser
// API over a WebSocket guarded by a per-launch secret, and answers the page frame's requests:
//
//   /__catp/app.html, app.js, app.css   the renderer (bundled by esbuild into dist/renderer)
//   /__catp/ws                          the API; the secret rides in the subprotocol list, Origin must be ours
//   /view/<encoded origin>/<path>       the page frame: an empty document (Sec-Fetch-Dest iframe) with
//                                       `script-src 'none'`, whose tree the renderer replaces; any other request
//                                       under it is a sub-resource, fetched over DHTTP through the host when the
//                                       page names it (page-names.ts: its tree, or a stylesheet it loaded)
//   anything else                       a root-relative sub-resource of the page in the frame (Referer / current load)
//
// Only requests whose Host header names this listener are answered (no DNS rebinding).
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

import { WebSocketServer, type WebSocket } from 'ws';

import { getHeader, parseTarget } from '../../protocol/dhttp';
import type { BrowserEvent } from '../../protocol/browser/api';
import { textDecoderFor, textEncoding } from '../../protocol/html-encoding';
import type { BrowserService } from './service';

export const VIEW_CSP = [
  "default-src 'self' data:",
  "script-src 'none'",
  "object-src 'none'",
  "frame-src 'none'",
  "worker-src 'none'",
  "connect-src 'none'",
  "form-action 'none'",
  "style-src 'self' 'unsafe-inline' data:",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "media-src 'self' data:",
].join('; ');

const APP_CSP = (hostPort: string) =>
  `default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src ws://${hostPort}; frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'`;

const EMPTY_VIEW = '<!DOCTYPE html><html><head></head><body></body></html>';

export interface ShellServerOptions {
  /** Where app.html / app.js / app.css are (dist/renderer). */
  rendererDir: string;
  /** Sub-resource fetch deadline (ms). */
  resourceTimeoutMs?: number;
  /**
   * Listen on this Unix socket instead of a loopback port, for a browser that reaches it through a proxy on
   * `publicHost`:`publicPort` (`catp demo`: the host runs in a lab namespace, the window outside it; each pane on
   * its own loopback address, so each is a site of its own with a renderer process of its own). The URLs, the
   * Host and Origin checks and the CSP name the public address.
   */
  unixSocket?: { path: string; publicPort: number; publicHost?: string };
}

export interface ShellServer {
  readonly port: number;
  readonly origin: string;
  readonly secret: string;
  /** The URL to open (secret in the fragment, which never leaves the browser). */
  readonly appUrl: string;
  /** Requests that reached /__catp/canary (tests: anything a page must not be able to make happen). */
  readonly canaryHits: string[];
  /**
   * Requests refused, by reason: WebSocket connections (bad-secret, bad-origin, wrong-host, not-found), requests
   * for another origin through the proxy-to-nowhere (proxied), /view/ fetches of another origin (cross-origin) or
   * of a URL the page does not name (not-named).
   */
  readonly refused: Record<string, number>;
  viewUrl(pageUrl: string): string;
  close(): Promise<void>;
}

export async function startShellServer(service: BrowserService, options: ShellServerOptions): Promise<ShellServer> {
  const secret = randomBytes(24).toString('hex');
  const canaryHits: string[] = [];
  const refused: Record<string, number> = {};
  const statics: Record<string, [string, string]> = {
    '/__catp/app.html': ['index.html', 'text/html; charset=utf-8'],
    '/__catp/app.js': ['app.js', 'text/javascript; charset=utf-8'],
    '/__catp/app.js.map': ['app.js.map', 'application/json'],
    '/__catp/app.css': ['app.css', 'text/css; charset=utf-8'],
  };
  let port = 0;
  const host = options.unixSocket?.publicHost ?? '127.0.0.1';
  const hostOk = (req: IncomingMessage) => req.headers.host === `${host}:${port}`;

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`catp-browser: ${err.message}`);
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostOk(req)) {
      // Chromium's proxy is this server (chromium.ts onlyToFlags): a request for anywhere else ends here
      const reason = /^[a-z][a-z0-9+.-]*:\/\//i.test(req.url ?? '') ? 'proxied' : 'wrong-host';
      refused[reason] = (refused[reason] ?? 0) + 1;
      res.writeHead(421, { 'content-type': 'text/plain' }).end('wrong host');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    const url = new URL(req.url ?? '/', `http://${host}:${port}`);
    const path = url.pathname;
    const file = statics[path];
    if (file) {
      const body = await readFile(join(options.rendererDir, file[0]));
      const headers: Record<string, string> = { 'content-type': file[1], 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' };
      if (path.endsWith('.html')) headers['content-security-policy'] = APP_CSP(`${host}:${port}`);
      res.writeHead(200, headers).end(body);
      return;
    }
    if (path.startsWith('/__catp/canary')) {
      canaryHits.push(url.pathname + url.search);
      res.writeHead(204).end();
      return;
    }
    if (path === '/favicon.ico') {
      res.writeHead(204).end();
      return;
    }
    const dest = req.headers['sec-fetch-dest'];
    const view = /^\/view\/([^/]+)(\/.*)?$/.exec(req.url ?? '');
    if (view && (dest === 'iframe' || dest === 'document' || dest === 'frame')) {
      res.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': VIEW_CSP,
        'cache-control': 'no-store',
        'x-content-type-options': 'nosniff',
      }).end(EMPTY_VIEW);
      return;
    }
    let target: string | null = null;
    if (view) {
      target = decodeURIComponent(view[1]!) + (view[2] ?? '/');
    } else {
      // root-relative: the page that asked for it (Referer), else the current load's origin
      const referer = String(req.headers.referer ?? '');
      const ref = referer.startsWith(`http://${host}:${port}/view/`) ? /^\/view\/([^/]+)/.exec(referer.slice(`http://${host}:${port}`.length)) : null;
      const origin = ref ? decodeURIComponent(ref[1]!) : service.currentOrigin;
      if (origin) target = origin + (req.url ?? '/');
    }
    if (target === null) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    let targetOrigin: string;
    try {
      targetOrigin = parseTarget(target).origin; // a target we cannot parse is refused here, not by the fetch
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('bad target');
      return;
    }
    if (targetOrigin !== service.currentOrigin) {
      // The frame's own URLs all resolve under the current page's origin; another origin named under /view/ is
      // a page making the host fetch for it (any host and port: request forgery past Chromium's own rules).
      refused['cross-origin'] = (refused['cross-origin'] ?? 0) + 1;
      res.writeHead(403, { 'content-type': 'text/plain' }).end('another origin than the page');
      return;
    }
    if (!service.named(target)) {
      // the page's tree (or a stylesheet it loaded) does not name it: a request the page's markup did not make
      refused['not-named'] = (refused['not-named'] ?? 0) + 1;
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not named by the page');
      return;
    }
    const result = await service.host.fetch(target, { timeoutMs: options.resourceTimeoutMs ?? 15_000 });
    service.noteSubresource(result); // a DTD hit counts towards the page's savings (HUD, load record)
    const r = result.response;
    const type = getHeader(r.headers, 'content-type') ?? '';
    if (r.status === 200 && /^text\/css\b/i.test(type)) service.noteStylesheet(target, textDecoderFor(textEncoding(type)).decode(r.body));
    const headers: Record<string, string> = {
      'content-type': getHeader(r.headers, 'content-type') ?? 'application/octet-stream',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      // a sub-resource opened on its own (e.g. an SVG) must not run either
      'content-security-policy': VIEW_CSP,
    };
    res.writeHead(r.status, headers).end(req.method === 'HEAD' ? undefined : Buffer.from(r.body));
  }

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: 256 * 1024 * 1024,
    handleProtocols: (protocols) => (protocols.has('catp.v1') ? 'catp.v1' : false),
  });

  const refuse = (socket: import('node:stream').Duplex, status: number, reason: string) => {
    refused[reason] = (refused[reason] ?? 0) + 1;
    socket.end(`HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  };

  server.on('connect', (_req, socket) => {
    refused.proxied = (refused.proxied ?? 0) + 1; // a CONNECT through the proxy-to-nowhere (https://, wss://)
    socket.destroy();
  });

  server.on('upgrade', (req, socket, head) => {
    if (!hostOk(req)) return refuse(socket, 421, 'wrong-host');
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/__catp/ws') return refuse(socket, 404, 'not-found');
    if (req.headers.origin !== `http://${host}:${port}`) return refuse(socket, 403, 'bad-origin');
    const offered = String(req.headers['sec-websocket-protocol'] ?? '').split(',').map((s) => s.trim());
    const presented = offered.find((p) => p.startsWith('catp-secret.'))?.slice('catp-secret.'.length) ?? '';
    const a = Buffer.from(presented);
    const b = Buffer.from(secret);
    if (a.length !== b.length || !timingSafeEqual(a, b)) return refuse(socket, 401, 'bad-secret');
    wss.handleUpgrade(req, socket, head, (ws) => connection(ws));
  });

  const sockets = new Set<WebSocket>();
  function connection(ws: WebSocket): void {
    sockets.add(ws);
    const send = (ev: BrowserEvent) => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(ev));
    };
    const { handle: take, detach } = service.attach(send);
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      let command: unknown;
      try {
        command = JSON.parse(data.toString());
      } catch {
        service.refusedCommands++;
        return;
      }
      take(command);
    });
    ws.on('close', () => {
      sockets.delete(ws);
      detach();
    });
    ws.on('error', () => ws.close());
  }

  if (options.unixSocket) {
    const { path: socketPath, publicPort } = options.unixSocket;
    await new Promise<void>((ok, fail) => {
      server.once('error', fail);
      server.listen(socketPath, () => {
        server.off('error', fail);
        ok();
      });
    });
    port = publicPort;
  } else {
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    port = (server.address() as AddressInfo).port;
  }
  const origin = `http://${host}:${port}`;

  return {
    port,
    origin,
    secret,
    appUrl: `${origin}/__catp/app.html#secret=${secret}`,
    canaryHits,
    refused,
    viewUrl: (pageUrl: string) => viewUrlFor(origin, pageUrl),
    close: async () => {
      for (const ws of sockets) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}

/** The frame URL for a page: /view/<encoded origin><path>, so relative URLs resolve under it. */
export function viewUrlFor(origin: string, pageUrl: string): string {
  try {
    const t = parseTarget(pageUrl);
    return `${origin}/view/${encodeURIComponent(t.origin)}${t.path}`;
  } catch {
    return `${origin}/view/invalid/`;
  }
}
