// Connections the server opens to clients' announced TCP ports to answer UDP requests over TCP (DHTTP paper
// III-C): one per (address, port), reused, LRU-bounded (poolMax), closed when idle. Bytes queued on one count
// against the body budget (body-budget.ts) until the kernel takes them; a full queue drops the answer, and the
// client's resend recovers it.
import * as net from 'net';
import type { BodyBudget } from './body-budget';
import type { ServerLimits } from './limits';

/** A pooled connection the server opened to a client's TCP port. */
export interface Outbound {
  key: string;
  socket: net.Socket;
  connected: boolean;
}

export interface OutboundCounters {
  tcpResponses: number;
  tcpConnectsOpened: number;
  tcpConnectsReused: number;
  tcpConnectFailures: number;
  /** TCP answers to UDP requests dropped because the pooled connection's queue was full, or the body budget. */
  tcpOutboundDropped: number;
}

export type OutboundLimits = Pick<ServerLimits, 'poolMax' | 'poolIdleMs' | 'connectTimeoutMs' | 'outboundMaxQueued'>;

export class OutboundPool {
  private readonly pool = new Map<string, Outbound>(); // insertion order = LRU order
  private readonly c: OutboundCounters = { tcpResponses: 0, tcpConnectsOpened: 0, tcpConnectsReused: 0, tcpConnectFailures: 0, tcpOutboundDropped: 0 };

  constructor(
    private readonly limits: OutboundLimits,
    private readonly bodies: BodyBudget,
    /** An answer was handed to the kernel (the channel chooser remembers it: resends of it are ignored). */
    private readonly sent: (client: string, idHex: string) => void,
  ) {}

  counters(): OutboundCounters {
    return { ...this.c };
  }

  /** Queues an answer on the connection to (client, port), opened if need be; null when it was dropped (counted). */
  send(client: string, port: number, idHex: string, bytes: Uint8Array): Outbound | null {
    const key = `${client}|${port}`;
    let ob = this.pool.get(key);
    if (ob && !ob.socket.destroyed && ob.socket.writable) {
      this.c.tcpConnectsReused++;
      this.pool.delete(key); // move to the LRU tail
      this.pool.set(key, ob);
    } else {
      if (ob) this.drop(ob);
      ob = this.open(key, client, port);
    }
    if (ob.socket.writableLength + bytes.length > this.limits.outboundMaxQueued || !this.bodies.tryTake(client, bytes.length)) {
      this.c.tcpOutboundDropped++; // the client resends; its resend goes over TCP
      return null;
    }
    ob.socket.write(bytes, (err) => {
      this.bodies.give(client, bytes.length);
      if (err) return; // connect failure or reset: counted there; the client will resend
      this.c.tcpResponses++;
      this.sent(client, idHex);
    });
    return ob;
  }

  /** Closes a connection and forgets it; what is still queued on it is discarded. */
  drop(ob: Outbound): void {
    this.forget(ob);
    if (!ob.socket.destroyed) ob.socket.destroy();
  }

  close(): void {
    for (const ob of [...this.pool.values()]) this.drop(ob);
  }

  private open(key: string, client: string, port: number): Outbound {
    while (this.pool.size >= this.limits.poolMax) {
      const oldest = this.pool.values().next().value as Outbound;
      this.drop(oldest);
    }
    this.c.tcpConnectsOpened++;
    const socket = net.connect({ host: client, port, noDelay: true });
    const ob: Outbound = { key, socket, connected: false };
    this.pool.set(key, ob);
    socket.setTimeout(this.limits.connectTimeoutMs);
    socket.on('connect', () => {
      ob.connected = true;
      socket.setTimeout(this.limits.poolIdleMs);
    });
    socket.on('timeout', () => {
      if (!ob.connected) this.c.tcpConnectFailures++;
      this.drop(ob);
    });
    socket.on('error', () => {
      if (!ob.connected) this.c.tcpConnectFailures++;
      this.drop(ob);
    });
    socket.on('close', () => this.forget(ob));
    socket.on('end', () => this.drop(ob)); // the client closed its side: stop using it
    socket.on('data', () => {
      /* clients have nothing to say on this connection; discard */
    });
    return ob;
  }

  private forget(ob: Outbound): void {
    if (this.pool.get(ob.key) === ob) this.pool.delete(ob.key);
  }
}
