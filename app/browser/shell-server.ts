// The Chromium-window shell's host side: serves the renderer on 127.0.0.1 (random port), carries the browser
// API over a WebSocket guarded by a per-launch secret, and answers the page frame's requests:
//
//   /__catp/app.html, app.js, app.css   the renderer (bundled by esbuild into dist/renderer)
//   /__catp/ws                          the API; the secret rides in the subprotocol list, Origin must be ours
//
// and on a second port, the frame origin (another origin than the app's, the same site):
//   /__catp/agent.html, frame.js        the agent frame: our one script (a nonce per document), which takes the page
//                                       from the renderer over a MessagePort and builds it in the page frame inside it
//   /view/<encoded origin>/<path>       the page frame: an empty document (Sec-Fetch-Dest iframe) with
//                                       `script-src 'none'`, sandboxed without scripts, whose tree the agent
//                                       replaces; any other request under it is a sub-resource, fetched over DHTTP
//                                       through the host when the page names it (page-names.ts)
//   anything else                       a root-relative sub-resource of the page in the frame (Referer / current load)
//
// The page and the agent share the frame origin; the app page, its secret and its API are another origin's.
//
// Only requests whose Host header names this listener are answered (no DNS rebinding). The frame's browser uses
// this server as its proxy for everything else (chromium.ts onlyToFlags), and that is how an image, stylesheet,
// font or media on another origin reaches the frame: a proxied `GET http://other/...`, or a `CONNECT other:443`
// that this server answers itself with a certificate of its own (made at start, trusted by the frame's browser by
// its key alone), fetched by the host only when the page names it as such a sub-resource, never from an address
// less public than the page's (Private Network Access), never over plain http for an https page.
//
// The frame origin's routes are in frame-origin.ts, the CONNECT tunnels in connect-tunnel.ts; this file holds the
// app origin (the renderer, the API), the listeners and the checks that say which origin a request is for.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

import { WebSocketServer, type WebSocket } from 'ws';

import type { BrowserEvent } from '../../protocol/browser/api';
import { startConnectTunnels } from './connect-tunnel';
import { FrameRoutes, viewUrlFor } from './frame-origin';
import type { BrowserService } from './service';

const APP_CSP = (hostPort: string, frameOrigin: string) =>
  `default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src ws://${hostPort}; frame-src 'self' ${frameOrigin}; object-src 'none'; base-uri 'none'; form-action 'none'`;

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
  unixSocket?: { path: string; publicPort: number; publicHost?: string; publicFramePort?: number };
}

export interface ShellServer {
  readonly port: number;
  readonly origin: string;
  readonly secret: string;
  /** The URL to open (secret in the fragment, which never leaves the browser). */
  readonly appUrl: string;
  /** The frame origin: the agent frame and the page frame (another port than the app's; the app's own with a Unix socket). */
  readonly frameOrigin: string;
  /**
   * The certificate this server answers a tunnelled https:// sub-resource with (PEM), and the base64 sha-256 of its
   * key (Chromium's --ignore-certificate-errors-spki-list): the frame's browser trusts it for those tunnels only;
   * the host checks the real origin's certificate when it fetches.
   */
  readonly tunnelCert: { pem: string; spki: string };
  /** Requests that reached /__catp/canary (tests: anything a page must not be able to make happen). */
  readonly canaryHits: string[];
  /**
   * Requests refused, by reason: WebSocket connections (bad-secret, bad-origin, wrong-host, not-found), requests
   * for another origin through the proxy-to-nowhere (proxied), /view/ fetches of another origin (cross-origin) or
   * of a URL the page does not name (not-named); a sub-resource on another origin the page does not name as one
   * (not-named), over http:// for an https:// page (mixed-content), or on a less public address than the page's
   * (private-network); the page frame or its sub-resources asked for on the app's origin (wrong-origin); a frame the
   * page nests navigating anywhere (nested-frame: answered 204, no document).
   */
  readonly refused: Record<string, number>;
  /** Sub-resources fetched from other origins than the page's, by the channel that carried them (udp, tcp, http, https). */
  readonly otherOrigins: Record<string, number>;
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
    '/__catp/frame.js': ['frame.js', 'text/javascript; charset=utf-8'],
    '/__catp/frame.js.map': ['frame.js.map', 'application/json'],
    '/__catp/app.css': ['app.css', 'text/css; charset=utf-8'],
  };
  let port = 0;
  let framePort = 0;
  const host = options.unixSocket?.publicHost ?? '127.0.0.1';
  const hostOk = (req: IncomingMessage) => req.headers.host === `${host}:${port}` || req.headers.host === `${host}:${framePort}`;
  /** Whether the request came to the frame origin's port (with a Unix socket the two are one). */
  const onFrameOrigin = (req: IncomingMessage) => req.headers.host === `${host}:${framePort}`;
  const onAppOrigin = (req: IncomingMessage) => req.headers.host === `${host}:${port}`;
  const otherOrigins: Record<string, number> = {};
  const count = (reason: string) => (refused[reason] = (refused[reason] ?? 0) + 1);
  const frameRoutes = new FrameRoutes({
    service, count, otherOrigins,
    frameOrigin: () => `http://${host}:${framePort}`,
    resourceTimeoutMs: options.resourceTimeoutMs ?? 15_000,
  });
  // https:// sub-resources of other origins: CONNECT tunnels this server answers itself (connect-tunnel.ts)
  const tunnels = await startConnectTunnels({
    opensTo: (origin) => service.namesSubresourcesOn(origin) || service.namesFramesOn(origin),
    onRequest: (target, req, res) => frameRoutes.anotherOrigin(target, req, res),
    count,
  });

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`catp-browser: ${err.message}`);
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostOk(req)) {
      // Chromium's proxy is this server (chromium.ts onlyToFlags): a request for another origin comes here
      if (/^http:\/\//i.test(req.url ?? '')) return frameRoutes.anotherOrigin(req.url ?? '', req, res);
      count(/^[a-z][a-z0-9+.-]*:\/\//i.test(req.url ?? '') ? 'proxied' : 'wrong-host');
      res.writeHead(421, { 'content-type': 'text/plain' }).end('wrong host');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
    const path = url.pathname;
    const file = statics[path];
    if (file && (path.startsWith('/__catp/frame.js') ? onFrameOrigin(req) : onAppOrigin(req))) {
      const body = await readFile(join(options.rendererDir, file[0]));
      const headers: Record<string, string> = { 'content-type': file[1], 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' };
      if (path.endsWith('.html')) headers['content-security-policy'] = APP_CSP(`${host}:${port}`, `http://${host}:${framePort}`);
      res.writeHead(200, headers).end(body);
      return;
    }
    if (path === '/__catp/agent.html' && onFrameOrigin(req)) return frameRoutes.agent(res);
    if (path.startsWith('/__catp/') && !path.startsWith('/__catp/canary')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
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
    if (!onFrameOrigin(req)) {
      // the page frame and its sub-resources live on the frame origin only
      count('wrong-origin');
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    await frameRoutes.page(req, res);
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
  server.on('connect', tunnels.onConnect);

  const onUpgrade = (req: IncomingMessage, socket: import('node:stream').Duplex, head: Buffer) => {
    if (!onAppOrigin(req)) return refuse(socket, 421, 'wrong-host');
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/__catp/ws') return refuse(socket, 404, 'not-found');
    if (req.headers.origin !== `http://${host}:${port}`) return refuse(socket, 403, 'bad-origin');
    const offered = String(req.headers['sec-websocket-protocol'] ?? '').split(',').map((s) => s.trim());
    const presented = offered.find((p) => p.startsWith('catp-secret.'))?.slice('catp-secret.'.length) ?? '';
    const a = Buffer.from(presented);
    const b = Buffer.from(secret);
    if (a.length !== b.length || !timingSafeEqual(a, b)) return refuse(socket, 401, 'bad-secret');
    wss.handleUpgrade(req, socket, head, (ws) => connection(ws));
  };
  server.on('upgrade', onUpgrade);

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
    // the proxy forwards the frame origin's public port to the same socket (hostOk tells the two apart)
    framePort = options.unixSocket.publicFramePort ?? publicPort;
  } else {
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    port = (server.address() as AddressInfo).port;
  }
  // The frame origin: a second listener on its own port (the same handler; hostOk tells the two apart). Behind a
  // Unix socket, the proxy's second public port (publicFramePort; without one the frame shares the app's origin).
  const frameServer = createServer((req, res) => server.emit('request', req, res));
  frameServer.on('connect', (req, socket, head) => server.emit('connect', req, socket, head));
  frameServer.on('upgrade', (_req, socket: import('node:stream').Duplex) => refuse(socket, 404, 'not-found'));
  if (!options.unixSocket) {
    await new Promise<void>((ok) => frameServer.listen(0, '127.0.0.1', ok));
    framePort = (frameServer.address() as AddressInfo).port;
  }
  const origin = `http://${host}:${port}`;
  const frameOrigin = `http://${host}:${framePort}`;

  return {
    port,
    origin,
    secret,
    appUrl: `${origin}/__catp/app.html#secret=${secret}&frame=${framePort}`,
    frameOrigin,
    tunnelCert: tunnels.cert,
    canaryHits,
    refused,
    otherOrigins,
    viewUrl: (pageUrl: string) => viewUrlFor(frameOrigin, pageUrl),
    close: async () => {
      for (const ws of sockets) ws.terminate();
      wss.close();
      server.closeAllConnections();
      tunnels.closeAllConnections();
      frameServer.closeAllConnections();
      await new Promise<void>((ok) => server.close(() => ok()));
      if (frameServer.listening) await new Promise<void>((ok) => frameServer.close(() => ok()));
    },
  };
}
