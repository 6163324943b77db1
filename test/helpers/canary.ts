// A canary on loopback: one port on which it counts TCP connections (each closed at once) and UDP datagrams, so a
// test can show that nothing — not a request, not a connection, not a datagram — reached an address.
import * as dgram from 'node:dgram';
import { createServer } from 'node:net';

export interface Canary {
  readonly port: number;
  readonly connections: number;
  readonly datagrams: number;
  /** Both counts back to 0 (after a control that makes them count). */
  reset(): void;
  close(): void;
}

export async function startCanary(): Promise<Canary> {
  let connections = 0;
  let datagrams = 0;
  const tcp = createServer((s) => {
    connections++;
    s.destroy();
  });
  await new Promise<void>((ok) => tcp.listen(0, '127.0.0.1', ok));
  const port = (tcp.address() as { port: number }).port;
  const udp = dgram.createSocket('udp4');
  udp.on('message', () => datagrams++);
  await new Promise<void>((ok) => udp.bind(port, '127.0.0.1', ok));
  return {
    port,
    get connections() {
      return connections;
    },
    get datagrams() {
      return datagrams;
    },
    reset: () => {
      connections = 0;
      datagrams = 0;
    },
    close: () => {
      tcp.close();
      udp.close();
    },
  };
}
