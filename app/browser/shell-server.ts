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
import { X509Certificate, createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { TLSSocket, createSecureContext, type SecureContext } from 'node:tls';

import { WebSocketServer, type WebSocket } from 'ws';

import { getHeader, parseTarget } from '../../protocol/dhttp';
import type { BrowserEvent } from '../../protocol/browser/api';
import { textDecoderFor, textEncoding } from '../../protocol/html-encoding';
import { HostError } from '../errors';
import type { FetchOptions, FetchResult } from '../host-api';
import type { BrowserService } from './service';

export const VIEW_CSP = [
  "default-src 'self' data:",
  "script-src 'none'",
  "object-src 'none'",
  "frame-src 'none'",
  "worker-src 'none'",
  "connect-src 'none'",
  "form-action 'none'",
  // another origin's images, styles, fonts and media come through this server as the frame's proxy (see above)
  "style-src 'self' 'unsafe-inline' data: http: https:",
  "img-src 'self' data: http: https:",
  "font-src 'self' data: http: https:",
  "media-src 'self' data: http: https:",
].join('; ');

const APP_CSP = (hostPort: string, frameOrigin: string) =>
  `default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src ws://${hostPort}; frame-src 'self' ${frameOrigin}; object-src 'none'; base-uri 'none'; form-action 'none'`;

const EMPTY_VIEW = '<!DOCTYPE html><html><head></head><body></body></html>';

/**
 * The agent frame's document: our one script, admitted by a nonce made for this document, and the page frame —
 * sandboxed without scripts (the page's <script>s are inert to its parser, as in parse5's scripting-disabled
 * trees) and with allow-same-origin, so that the agent, on the same frame origin, can build it.
 */
function agentDocument(): { html: string; csp: string } {
  const nonce = randomBytes(18).toString('base64');
  return {
    html: '<!DOCTYPE html><html><head>'
      + `<style nonce="${nonce}">html,body{margin:0;height:100%;overflow:hidden}iframe{display:block;border:0;width:100%;height:100%}</style>`
      + '</head><body><iframe id="page" title="page" sandbox="allow-same-origin" src="/view/blank/"></iframe>'
      + `<script src="/__catp/frame.js" nonce="${nonce}"></script></body></html>`,
    csp: `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; frame-src 'self'; base-uri 'none'; form-action 'none'`,
  };
}

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
   * (private-network); the page frame or its sub-resources asked for on the app's origin (wrong-origin).
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
  const tunnel = await tunnelCertificate();

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`catp-browser: ${err.message}`);
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostOk(req)) {
      // Chromium's proxy is this server (chromium.ts onlyToFlags): a request for another origin comes here
      if (/^http:\/\//i.test(req.url ?? '')) return anotherOrigin(req.url ?? '', req, res);
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
    if (path === '/__catp/agent.html' && onFrameOrigin(req)) {
      const { html, csp } = agentDocument();
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': csp, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' }).end(html);
      return;
    }
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
    const dest = req.headers['sec-fetch-dest'];
    const view = /^\/view\/([^/]+)(\/.*)?$/.exec(req.url ?? '');
    if (!onFrameOrigin(req)) {
      // the page frame and its sub-resources live on the frame origin only
      count('wrong-origin');
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
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
      const ref = referer.startsWith(`http://${host}:${framePort}/view/`) ? /^\/view\/([^/]+)/.exec(referer.slice(`http://${host}:${framePort}`.length)) : null;
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
      count('cross-origin');
      res.writeHead(403, { 'content-type': 'text/plain' }).end('another origin than the page');
      return;
    }
    if (!service.named(target)) {
      // the page's tree (or a stylesheet it loaded) does not name it: a request the page's markup did not make
      count('not-named');
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not named by the page');
      return;
    }
    await fetchFor(target, req, res, {});
  }

  /**
   * A sub-resource on another origin than the page's (a proxied http:// request, or a request inside a tunnel
   * this server answers for an https:// origin): fetched only when the page names it as an image, stylesheet,
   * font or media, never over http:// for an https:// page, never from a less public address than the page's.
   */
  async function anotherOrigin(target: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refuse = (status: number, reason: string, why: string) => {
      count(reason);
      res.writeHead(status, { 'content-type': 'text/plain' }).end(why);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return refuse(405, 'proxied', 'GET and HEAD only');
    const page = service.currentUrl;
    let pageTarget: ReturnType<typeof parseTarget>;
    let wanted: ReturnType<typeof parseTarget>;
    try {
      if (page === null) return refuse(404, 'not-named', 'no page is shown');
      pageTarget = parseTarget(page);
      wanted = parseTarget(target);
    } catch {
      return refuse(400, 'proxied', 'bad target');
    }
    if (pageTarget.scheme === 'https' && wanted.scheme !== 'https') return refuse(403, 'mixed-content', 'an http:// sub-resource of an https:// page');
    if (!service.namedSubresource(target)) return refuse(404, 'not-named', 'not named by the page as an image, stylesheet, font or media');
    let reachFrom: FetchOptions['reachFrom'];
    try {
      reachFrom = await service.host.addressSpaceOf(pageTarget.host);
    } catch {
      return refuse(502, 'dns', 'the page\'s own host does not resolve');
    }
    // A font is fetched in CORS mode: the origin is asked for the page's origin, as Chromium would ask it, and its
    // answer for that origin is passed on for the frame's (the frame origin).
    const corsFrom = req.headers.origin !== undefined ? pageTarget.origin : null;
    try {
      // over DHTTP where that server speaks it (it answered this host over DHTTP before), else as asked
      const channel = await fetchFor(target, req, res, { reachFrom, ...(corsFrom !== null ? { headers: [['Origin', corsFrom]] } : {}) }, corsFrom, service.host.overDhttpIfSpoken(target));
      otherOrigins[channel] = (otherOrigins[channel] ?? 0) + 1;
    } catch (err) {
      if (err instanceof HostError && err.code === 'HOST_ERR_PRIVATE_NETWORK') return refuse(403, 'private-network', err.message);
      throw err;
    }
  }

  /** Fetches `target` through the host and answers the frame with it. */
  async function fetchFor(
    target: string, req: IncomingMessage, res: ServerResponse, fetchOptions: FetchOptions, corsFrom: string | null = null, fetchAs = target,
  ): Promise<FetchResult['channel']> {
    const result = await service.host.fetch(fetchAs, { timeoutMs: options.resourceTimeoutMs ?? 15_000, ...fetchOptions });
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
    // an answer that allows the page's origin (or any) allows the frame (the frame origin stands for the page's)
    const allowed = getHeader(r.headers, 'access-control-allow-origin');
    if (corsFrom !== null && allowed !== undefined && (allowed === '*' || allowed === corsFrom)) headers['access-control-allow-origin'] = '*';
    res.writeHead(r.status, headers).end(req.method === 'HEAD' ? undefined : Buffer.from(r.body));
    return result.channel;
  }

  // Requests inside the tunnels this server answers for https:// origins (the CONNECT handler below).
  const tunnelled = new WeakMap<object, string>();
  const tunnelServer = createServer((req, res) => {
    const origin = tunnelled.get(req.socket);
    const done = (err: Error) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`catp-browser: ${err.message}`);
    };
    // the request's Host must be the origin the tunnel was opened for
    let asked: string | null = null;
    try {
      asked = new URL(`https://${req.headers.host ?? ''}`).origin;
    } catch {
      asked = null; // a Host that is no host
    }
    if (origin === undefined || asked !== origin || !(req.url ?? '').startsWith('/')) {
      count('wrong-host');
      res.writeHead(421, { 'content-type': 'text/plain' }).end('wrong host');
      return;
    }
    anotherOrigin(origin + (req.url ?? '/'), req, res).catch(done);
  });

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: 256 * 1024 * 1024,
    handleProtocols: (protocols) => (protocols.has('catp.v1') ? 'catp.v1' : false),
  });

  const refuse = (socket: import('node:stream').Duplex, status: number, reason: string) => {
    refused[reason] = (refused[reason] ?? 0) + 1;
    socket.end(`HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  };

  server.on('connect', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    // A CONNECT through the proxy (https://, wss://): answered here, with our own certificate, for an origin the
    // page names a sub-resource on; nothing else is tunnelled anywhere.
    let origin: string | null = null;
    try {
      const u = new URL(`https://${req.url ?? ''}`);
      if (u.username === '' && u.pathname === '/' && u.search === '') origin = u.origin;
    } catch {
      origin = null;
    }
    if (origin === null || !service.namesSubresourcesOn(origin)) {
      count('proxied');
      socket.destroy();
      return;
    }
    socket.on('error', () => socket.destroy());
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) socket.unshift(head);
    const tls = new TLSSocket(socket, { isServer: true, secureContext: tunnel.context });
    tls.on('error', () => tls.destroy());
    tunnelled.set(tls, origin);
    tunnelServer.emit('connection', tls);
  });

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
    tunnelCert: { pem: tunnel.pem, spki: tunnel.spki },
    canaryHits,
    refused,
    otherOrigins,
    viewUrl: (pageUrl: string) => viewUrlFor(frameOrigin, pageUrl),
    close: async () => {
      for (const ws of sockets) ws.terminate();
      wss.close();
      server.closeAllConnections();
      tunnelServer.closeAllConnections();
      frameServer.closeAllConnections();
      await new Promise<void>((ok) => server.close(() => ok()));
      if (frameServer.listening) await new Promise<void>((ok) => frameServer.close(() => ok()));
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

/**
 * A certificate of this launch's own (a fresh key, valid two days) for the tunnels: the frame's browser trusts its
 * key by hash, for nothing but the connections it makes through this server as its proxy.
 */
async function tunnelCertificate(): Promise<{ pem: string; spki: string; context: SecureContext }> {
  // selfsigned: an X.509 certificate from a fresh key (Node's crypto makes keys, not certificates)
  const { generate } = await import('selfsigned');
  const notAfter = new Date(Date.now() + 2 * 86_400_000);
  const made = await generate([{ name: 'commonName', value: 'catp-browser shell' }], { algorithm: 'sha256', keySize: 2048, notAfterDate: notAfter });
  const der = new X509Certificate(made.cert).publicKey.export({ type: 'spki', format: 'der' });
  return {
    pem: made.cert,
    spki: createHash('sha256').update(der).digest('base64'),
    context: createSecureContext({ key: made.private, cert: made.cert }),
  };
}
