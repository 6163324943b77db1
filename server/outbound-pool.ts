// Connections the server opens to clients' announced TCP ports to answer UDP requests over TCP (DHTTP paper
// III-C): one per (address, port), reused, LRU-bounded (poolMax), closed when idle. Bytes queued on one count
// against the body budget (body-budget.ts) until the kernel takes them; a full queue drops the answer, and the
// client's resend recovers it. A connection not connected `connectRaceMs` after its last attempt began gets another
// (at most `connectAttempts`): a lost SYN or SYN-ACK costs that, not the kernel's one-second SYN retransmission.
import * as net from 'net';
import type { BodyBudget } from './body-budget';
import type { ServerLimits } from './limits';

/** A pooled connection the server opened to a client's TCP port. */
export interface Outbound {
  key: string;
  /** The attempt that connected first (null while they race). */
  socket: net.Socket | null;
  /** Closed (or failed): nothing more goes on it. */
  closed: boolean;
  /** The first attempt (a later one that connects before it won a race). */
  first: net.Socket | null;
  /** Attempts still racing to connect. */
  attempts: net.Socket[];
  /** Attempts begun (at most `connectAttempts`). */
  tries: number;
  /** Answers waiting for a connection, their bytes already taken from the body budget. */
  queued: Array<{ idHex: string; bytes: Uint8Array }>;
  queuedBytes: number;
  client: string;
  port: number;
  raceTimer: NodeJS.Timeout | null;
  connectTimer: NodeJS.Timeout | null;
}

export interface OutboundCounters {
  tcpResponses: number;
  tcpConnectsOpened: number;
  tcpConnectsReused: number;
  tcpConnectFailures: number;
  /** Further connect attempts begun because the first had not connected after `connectRaceMs`. */
  tcpConnectRaces: number;
  /** Connections where a further attempt connected first (its predecessor's SYN or SYN-ACK was lost, or late). */
  tcpConnectRaceWins: number;
  /** TCP answers to UDP requests dropped because the pooled connection's queue was full. */
  tcpOutboundDropped: number;
  /** TCP answers to UDP requests the body budget had no room for: the client was sent to its own connection. */
  tcpOutboundOverBudget: number;
}

export type OutboundLimits = Pick<ServerLimits, 'poolMax' | 'poolIdleMs' | 'connectTimeoutMs' | 'connectRaceMs' | 'connectAttempts' | 'outboundMaxQueued'>;

export class OutboundPool {
  private readonly pool = new Map<string, Outbound>(); // insertion order = LRU order
  private readonly c: OutboundCounters = {
    tcpResponses: 0,
    tcpConnectsOpened: 0,
    tcpConnectsReused: 0,
    tcpConnectFailures: 0,
    tcpConnectRaces: 0,
    tcpConnectRaceWins: 0,
    tcpOutboundDropped: 0,
    tcpOutboundOverBudget: 0,
  };

  constructor(
    private readonly limits: OutboundLimits,
    private readonly bodies: BodyBudget,
    /** An answer was handed to the kernel (the channel chooser remembers it: resends of it are ignored). */
    private readonly sent: (client: string, idHex: string) => void,
  ) {}

  counters(): OutboundCounters {
    return { ...this.c };
  }

  /**
   * Queues an answer on the connection to (client, port), opened if need be; null when it was dropped (counted): the
   * connection has outboundMaxQueued unsent (its client does not read; its resend recovers it). 'over-budget'
   * (counted) when the body budget has no room for it: the caller sends the client to its own connection, since
   * others may hold the total for as long as they like and every resend would meet the same refusal.
   */
  send(client: string, port: number, idHex: string, bytes: Uint8Array): Outbound | null | 'over-budget' {
    const key = `${client}|${port}`;
    let ob = this.pool.get(key);
    if (ob && !ob.closed && (ob.socket === null || (!ob.socket.destroyed && ob.socket.writable))) {
      this.c.tcpConnectsReused++;
      this.pool.delete(key); // move to the LRU tail
      this.pool.set(key, ob);
    } else {
      if (ob) this.drop(ob);
      ob = this.open(key, client, port);
    }
    const unsent = ob.queuedBytes + (ob.socket?.writableLength ?? 0);
    if (unsent + bytes.length > this.limits.outboundMaxQueued) {
      this.c.tcpOutboundDropped++; // the client resends; its resend goes over TCP
      return null;
    }
    if (!this.bodies.tryTake(client, bytes.length)) {
      this.c.tcpOutboundOverBudget++;
      return 'over-budget';
    }
    if (ob.socket !== null) this.write(ob, ob.socket, idHex, bytes);
    else {
      ob.queued.push({ idHex, bytes });
      ob.queuedBytes += bytes.length;
    }
    return ob;
  }

  /** Closes a connection (and its racing attempts) and forgets it; what is still queued on it is discarded. */
  drop(ob: Outbound): void {
    this.forget(ob);
    if (ob.closed) return;
    ob.closed = true;
    this.stopTimers(ob);
    for (const a of ob.attempts) a.destroy();
    ob.attempts.length = 0;
    if (ob.socket !== null && !ob.socket.destroyed) ob.socket.destroy();
    for (const q of ob.queued) this.bodies.give(ob.client, q.bytes.length);
    ob.queued.length = 0;
    ob.queuedBytes = 0;
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
    const ob: Outbound = {
      key, socket: null, closed: false, first: null, attempts: [], tries: 0, queued: [], queuedBytes: 0, client, port, raceTimer: null, connectTimer: null,
    };
    this.pool.set(key, ob);
    ob.connectTimer = setTimeout(() => this.fail(ob), this.limits.connectTimeoutMs);
    this.attempt(ob);
    return ob;
  }

  /** One more connect attempt; another follows after `connectRaceMs` unless one connects first. */
  private attempt(ob: Outbound): void {
    const socket = net.connect({ host: ob.client, port: ob.port, noDelay: true });
    ob.attempts.push(socket);
    ob.first ??= socket;
    ob.tries++;
    socket.on('connect', () => this.won(ob, socket));
    socket.on('error', () => {
      if (ob.socket === socket) this.drop(ob);
      else this.lost(ob, socket);
    });
    socket.on('close', () => {
      if (ob.socket === socket) this.forget(ob);
      else this.lost(ob, socket);
    });
    if (ob.tries < this.limits.connectAttempts) {
      ob.raceTimer = setTimeout(() => {
        ob.raceTimer = null;
        if (ob.closed || ob.socket !== null) return;
        this.c.tcpConnectRaces++;
        this.attempt(ob);
      }, this.limits.connectRaceMs);
    }
  }

  /** An attempt failed before connecting (refused, reset): the connection fails when none is left racing. */
  private lost(ob: Outbound, socket: net.Socket): void {
    const i = ob.attempts.indexOf(socket);
    if (i < 0) return;
    ob.attempts.splice(i, 1);
    if (ob.socket === null && ob.attempts.length === 0) this.fail(ob);
  }

  private fail(ob: Outbound): void {
    if (ob.closed || ob.socket !== null) return;
    this.c.tcpConnectFailures++;
    this.drop(ob);
  }

  /** The first attempt to connect carries the answers; the others are closed. */
  private won(ob: Outbound, socket: net.Socket): void {
    if (ob.closed || ob.socket !== null) {
      socket.destroy();
      return;
    }
    if (socket !== ob.first) this.c.tcpConnectRaceWins++;
    ob.socket = socket;
    this.stopTimers(ob);
    for (const a of ob.attempts) if (a !== socket) a.destroy();
    ob.attempts.length = 0;
    socket.setTimeout(this.limits.poolIdleMs);
    socket.on('timeout', () => this.drop(ob));
    socket.on('end', () => this.drop(ob)); // the client closed its side: stop using it
    socket.on('data', () => {
      /* clients have nothing to say on this connection; discard */
    });
    const queued = ob.queued;
    ob.queued = [];
    ob.queuedBytes = 0;
    for (const q of queued) this.write(ob, socket, q.idHex, q.bytes);
  }

  private write(ob: Outbound, socket: net.Socket, idHex: string, bytes: Uint8Array): void {
    socket.write(bytes, (err) => {
      this.bodies.give(ob.client, bytes.length);
      if (err) return; // reset: the client will resend
      this.c.tcpResponses++;
      this.sent(ob.client, idHex);
    });
  }

  private stopTimers(ob: Outbound): void {
    if (ob.raceTimer !== null) clearTimeout(ob.raceTimer);
    if (ob.connectTimer !== null) clearTimeout(ob.connectTimer);
    ob.raceTimer = null;
    ob.connectTimer = null;
  }

  private forget(ob: Outbound): void {
    if (this.pool.get(ob.key) === ob) this.pool.delete(ob.key);
  }
}
