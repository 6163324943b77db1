// Binds the server's UDP socket and TCP listener on one port number, as DHTTP needs (a client sends both to the
// same port). TCP is bound first (port 0 = the kernel picks), then UDP on the same number; when the port was
// picked by the kernel and UDP cannot have it, both are retried on a new number (up to 10 times).
import * as dgram from 'dgram';
import * as net from 'net';
import { ServerError } from './errors';

export interface BoundSockets {
  udp: dgram.Socket;
  tcp: net.Server;
  port: number;
}

/** `host` must be an IP literal (both sockets bind its family); `recvBufferBytes` 0 keeps the kernel's default. */
export async function bindSamePort(host: string, requested: number, recvBufferBytes: number): Promise<BoundSockets> {
  const type: dgram.SocketType = net.isIPv6(host) ? 'udp6' : 'udp4';
  const attempts = requested === 0 ? 10 : 1;
  let lastErr: unknown;
  for (let i = 0; i < attempts; i++) {
    const tcp = net.createServer({ allowHalfOpen: true });
    const port = await listenTcp(tcp, requested, host);
    const udp = dgram.createSocket({
      type,
      reuseAddr: false,
      recvBufferSize: recvBufferBytes > 0 ? recvBufferBytes : undefined,
    });
    try {
      await bindUdp(udp, port, host);
    } catch (e) {
      lastErr = e;
      try {
        udp.close();
      } catch {
        /* never bound */
      }
      await closeTcp(tcp);
      continue;
    }
    return { udp, tcp, port };
  }
  throw lastErr instanceof Error ? lastErr : new ServerError('SERVER_ERR_BIND', 'could not bind UDP and TCP on the same port');
}

function bindUdp(sock: dgram.Socket, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      sock.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      sock.off('error', onError);
      resolve();
    };
    sock.once('error', onError);
    sock.once('listening', onListening);
    sock.bind({ port, address: host, exclusive: true });
  });
}

function listenTcp(srv: net.Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      srv.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      srv.off('error', onError);
      const a = srv.address();
      resolve(a && typeof a === 'object' ? a.port : port);
    };
    srv.once('error', onError);
    srv.once('listening', onListening);
    srv.listen({ port, host, exclusive: true });
  });
}

function closeTcp(srv: net.Server): Promise<void> {
  return new Promise((resolve) => srv.close(() => resolve()));
}
