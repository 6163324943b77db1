// A UDP relay between a client and a server, for tests that need a real lost or delayed datagram.
// The client sends to the relay; the relay forwards from its own socket, so the server answers the relay,
// which passes the answer back. (The server's TCP connections go straight to the client's announced port.)
import dgram from 'node:dgram';
import type { AddressInfo } from 'node:net';

export interface RelayPolicy {
  /** Return 'drop' to lose the datagram, a number to delay it by that many ms, or 'pass'. */
  toServer?: (data: Buffer, index: number) => 'drop' | 'pass' | number;
  toClient?: (data: Buffer, index: number) => 'drop' | 'pass' | number;
}

export interface UdpRelay {
  port: number;
  counts: { toServer: number; toClient: number; dropped: number };
  close(): Promise<void>;
}

export async function startUdpRelay(serverPort: number, policy: RelayPolicy, host = '127.0.0.1'): Promise<UdpRelay> {
  const type = host.includes(':') ? 'udp6' : 'udp4';
  const front = dgram.createSocket(type);
  const back = dgram.createSocket(type);
  const counts = { toServer: 0, toClient: 0, dropped: 0 };
  const timers = new Set<NodeJS.Timeout>();
  let client: { address: string; port: number } | null = null;

  const forward = (verdict: 'drop' | 'pass' | number, send: () => void) => {
    if (verdict === 'drop') {
      counts.dropped++;
    } else if (verdict === 'pass' || verdict <= 0) {
      send();
    } else {
      const t = setTimeout(() => {
        timers.delete(t);
        send();
      }, verdict);
      timers.add(t);
    }
  };
  front.on('message', (msg, rinfo) => {
    client = { address: rinfo.address, port: rinfo.port };
    const i = counts.toServer++;
    forward(policy.toServer?.(msg, i) ?? 'pass', () => back.send(msg, serverPort, host));
  });
  back.on('message', (msg) => {
    const i = counts.toClient++;
    const to = client;
    if (!to) return;
    forward(policy.toClient?.(msg, i) ?? 'pass', () => front.send(msg, to.port, to.address));
  });
  await new Promise<void>((ok) => front.bind(0, host, ok));
  await new Promise<void>((ok) => back.bind(0, host, ok));
  return {
    port: (front.address() as AddressInfo).port,
    counts,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      await Promise.all([new Promise<void>((ok) => front.close(() => ok())), new Promise<void>((ok) => back.close(() => ok()))]);
    },
  };
}
