// An in-process UDP relay that loses datagrams (both directions, Bernoulli, seeded) between the browser and
// an origin server: `npm start`'s link, so out-of-order painting and repair are visible on loopback. The
// client sends to the relay; the relay forwards from its own socket, so the server answers the relay, which
// passes the answer back to the last client it heard from. (TCP connections bypass it.)
import dgram from 'node:dgram';
import type { AddressInfo } from 'node:net';

import { seededRng } from '../../protocol/random';

export interface LossyRelayOptions {
  /** Loss probability per datagram, each direction (0..1). */
  loss: number;
  seed?: number;
  host?: string;
  /** Extra one-way delay (ms) for every datagram. */
  delayMs?: number;
  /** Decides a datagram's fate instead of the coin when it returns a boolean (true = drop); tests use it. */
  drop?: (direction: 'toServer' | 'toClient', data: Buffer, index: number) => boolean | undefined;
}

export interface LossyRelay {
  readonly port: number;
  readonly counts: { toServer: number; toClient: number; dropped: number };
  close(): Promise<void>;
}

export async function startLossyRelay(serverPort: number, options: LossyRelayOptions): Promise<LossyRelay> {
  const host = options.host ?? '127.0.0.1';
  const type = host.includes(':') ? 'udp6' : 'udp4';
  const front = dgram.createSocket(type);
  const back = dgram.createSocket(type);
  const rand = seededRng(options.seed ?? 1);
  const counts = { toServer: 0, toClient: 0, dropped: 0 };
  const timers = new Set<NodeJS.Timeout>();
  let client: { address: string; port: number } | null = null;
  const loss = Math.min(Math.max(options.loss, 0), 0.95);
  const pass = (send: () => void, direction: 'toServer' | 'toClient', data: Buffer, index: number) => {
    const verdict = options.drop?.(direction, data, index);
    if (verdict === true || (verdict === undefined && rand() < loss)) {
      counts.dropped++;
      return;
    }
    if (!options.delayMs) return send();
    const t = setTimeout(() => {
      timers.delete(t);
      send();
    }, options.delayMs);
    timers.add(t);
  };
  const quiet = () => undefined;
  front.on('error', quiet);
  back.on('error', quiet);
  front.on('message', (msg, rinfo) => {
    client = { address: rinfo.address, port: rinfo.port };
    pass(() => back.send(msg, serverPort, host, quiet), 'toServer', msg, counts.toServer++);
  });
  back.on('message', (msg) => {
    const to = client;
    if (to) pass(() => front.send(msg, to.port, to.address, quiet), 'toClient', msg, counts.toClient++);
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
