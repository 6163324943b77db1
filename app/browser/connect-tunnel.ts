// The shell's CONNECT tunnels: how an image, stylesheet, font or media on another https:// origin reaches the page
// frame. The frame's browser uses the shell server as its proxy (chromium.ts onlyToFlags); a `CONNECT other:443`
// is answered here, for an origin the page names a sub-resource or a frame on, with a certificate of this launch's
// own (the frame's browser trusts it by its key alone, for these tunnels only). Inside the tunnel TLS ends here, and
// each request, its Host the tunnel's origin, is handed to the shell, which fetches a sub-resource through the host
// (checking the real origin's certificate) and answers a frame's navigation with no document; nothing else is
// tunnelled anywhere.
import { X509Certificate, createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { TLSSocket, createSecureContext, type SecureContext } from 'node:tls';

export interface ConnectTunnelOptions {
  /**
   * Whether the page shown names a sub-resource or a frame on `origin` (https://host:port): only then is a tunnel
   * opened (inside it, a frame's navigation is answered with no document, a sub-resource fetched if named as one).
   */
  opensTo: (origin: string) => boolean;
  /** A request inside a tunnel, for `target` (the tunnel's origin + the request's path). */
  onRequest: (target: string, req: IncomingMessage, res: ServerResponse) => Promise<void>;
  /** Counts a refusal by reason (proxied: a CONNECT refused; wrong-host: a request for another origin than its tunnel's). */
  count: (reason: string) => void;
}

export interface ConnectTunnels {
  /** The certificate the tunnels answer with (PEM), and the base64 sha-256 of its key (Chromium's --ignore-certificate-errors-spki-list). */
  readonly cert: { pem: string; spki: string };
  /** The proxy's 'connect' handler. */
  onConnect(req: IncomingMessage, socket: Socket, head: Buffer): void;
  /** Ends every tunnel (the shell server is closing). */
  closeAllConnections(): void;
}

export async function startConnectTunnels(options: ConnectTunnelOptions): Promise<ConnectTunnels> {
  const { count } = options;
  const tunnel = await tunnelCertificate();

  // Requests inside the tunnels this server answers for https:// origins (onConnect below).
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
    options.onRequest(origin + (req.url ?? '/'), req, res).catch(done);
  });

  const onConnect = (req: IncomingMessage, socket: Socket, head: Buffer) => {
    // A CONNECT through the proxy (https://, wss://): answered here, with our own certificate, for an origin the
    // page names a sub-resource or a frame on; nothing else is tunnelled anywhere.
    let origin: string | null = null;
    try {
      const u = new URL(`https://${req.url ?? ''}`);
      if (u.username === '' && u.pathname === '/' && u.search === '') origin = u.origin;
    } catch {
      origin = null;
    }
    if (origin === null || !options.opensTo(origin)) {
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
  };

  return {
    cert: { pem: tunnel.pem, spki: tunnel.spki },
    onConnect,
    closeAllConnections: () => tunnelServer.closeAllConnections(),
  };
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
