// One native endpoint (a UDP and a TCP port on one bind address) driving one sans-IO DHTTP client: the IO side
// of DHTTP. Bytes and kernel receive times go from the endpoint's batches into the client as arguments, the
// client's actions go out on the sockets, one timer serves the client (stream loads included). The lane knows
// nothing of who uses it: it is told what to do through its methods, and hands every client event up, in order,
// to the one callback it was built with. Nothing is called back for what its caller asked.
import { performance } from 'node:perf_hooks';

import { Endpoint, type EndpointCounters, type Incoming, type Peer } from '../native';
import { DhttpClient, parseTarget, type ClientAction, type ClientCounters, type ClientEvent, type DhttpClientOptions, type RequestInit } from '../protocol/dhttp';
import type { Decision } from '../protocol/dtd';
import { catpCodec } from './catp-codec';
import { sha256 } from '../platform/sha256';

export interface LaneOptions {
  client?: Partial<Omit<DhttpClientOptions, 'udpPort' | 'tcpPort' | 'catp'>>;
  acceptDeadlineMs?: number;
}

export interface LaneCounters {
  bind: string;
  udpPort: number;
  tcpPort: number;
  endpoint: EndpointCounters;
  client: ClientCounters;
  /** Datagrams the kernel refused to send (a full buffer): lost packets, recovered by the protocol's timers. */
  sendErrors: number;
}

export class Lane {
  readonly endpoint: Endpoint;
  private readonly client: DhttpClient;
  /** client connection key <-> native connection number */
  private readonly keyToConn = new Map<number, number>();
  private readonly connToKey = new Map<number, number>();
  /** Host names of the requests' URLs -> the addresses their caller resolved them to. */
  private readonly addresses = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private timerAt: number | null = null;
  /** Events are being handed up: a method the handler calls queues its work for the running loop. */
  private pumping = false;
  private closed = false;
  private sendErrors = 0;

  constructor(
    readonly bind: string,
    options: LaneOptions,
    /** Every client event, in order (the caller may call the lane's methods from here). */
    private readonly onEvent: (event: ClientEvent) => void,
  ) {
    this.endpoint = new Endpoint(
      { host: bind, ...(options.acceptDeadlineMs !== undefined ? { acceptDeadlineMs: options.acceptDeadlineMs } : {}) },
      (batch) => this.onIncoming(batch),
    );
    this.client = new DhttpClient({
      ...options.client,
      udpPort: this.endpoint.udpPort,
      tcpPort: this.endpoint.tcpPort,
      catp: { sha256, codec: catpCodec },
    });
  }

  /** Starts a request to `address` (what the URL's host resolved to) at `nowMs`; returns its ID. */
  request(init: RequestInit, address: string, nowMs: number): string {
    this.addresses.set(parseTarget(init.url).host, address);
    const id = this.client.request(init, nowMs);
    this.pump();
    return id;
  }

  cancel(requestId: string): void {
    this.client.cancel(requestId, performance.now());
    this.pump();
  }

  /** A streamed request given up: its ID is released, later frames are dropped. */
  endStream(requestId: string): void {
    this.client.endStream(requestId);
    this.pump();
  }

  /** DTD: the decision on an announcement; false when the request no longer waits for one. */
  dtdDecide(requestId: string, decision: Decision): boolean {
    const taken = this.client.dtdDecide(requestId, decision, performance.now());
    this.pump();
    return taken;
  }

  /** Block reuse: blocks read from the store for a streamed CATP load ('stream-local-fill' follows). */
  fillLocal(requestId: string, payloads: ReadonlyMap<number, Uint8Array>): void {
    this.client.fillLocal(requestId, payloads, performance.now());
    this.pump();
  }

  counters(): LaneCounters {
    return {
      bind: this.bind,
      udpPort: this.endpoint.udpPort,
      tcpPort: this.endpoint.tcpPort,
      endpoint: this.endpoint.counters(),
      client: this.client.counters(),
      sendErrors: this.sendErrors,
    };
  }

  /** Whether `host`:`port` has answered this lane's client over DHTTP. */
  speaksDhttp(host: string, port: number): boolean {
    return this.client.speaksDhttp(host, port);
  }

  /** Frees the sockets; the client's later work (a load settled after the close) goes nowhere. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.endpoint.close();
  }

  private onIncoming(batch: Incoming[]): void {
    let now = performance.now();
    for (const item of batch) {
      switch (item.kind) {
        case 'datagram':
          // the clock moves through a batch: the reports queued here go out now, and say how long they held
          now = performance.now();
          this.client.receiveDatagram(item.data, peerAddress(item.peer), now, item.rxNs);
          // what that datagram asked for goes now, not after the rest of the batch: a token answer's proof, which
          // the server's whole page waits for, came behind a first flight's frames (8 ms on a cold client), and
          // a report's RTT sample would carry the batch's processing time. Its events go up now too: a first
          // flight arrives as one batch, and its first frame's paint must not wait for the others' assembly.
          // (The timer is re-armed once, after the batch.)
          this.drain();
          break;
        case 'tcp-open':
          if (item.inbound) {
            const key = this.client.inboundConnection(peerAddress(item.peer), now);
            this.map(key, item.conn);
          } else {
            const key = this.connToKey.get(item.conn);
            if (key !== undefined) this.client.tcpOpened(key, now);
          }
          break;
        case 'tcp-data': {
          const key = this.connToKey.get(item.conn);
          if (key !== undefined) this.client.receiveTcp(key, item.data, now, item.rxNs);
          break;
        }
        case 'tcp-closed': {
          const key = this.connToKey.get(item.conn);
          if (key !== undefined) {
            this.unmap(key);
            this.client.tcpClosed(key, item.error ? { code: item.error.code } : null, now);
          }
          break;
        }
        case 'icmp-unreachable':
          this.client.receiveIcmpUnreachable(peerAddress(item.peer), now);
          break;
      }
    }
    this.pump();
  }

  /** Drains both queues, then re-arms the timer (once: the client's next deadline after all of that work). */
  private pump(): void {
    this.drain();
    this.arm();
  }

  /**
   * Carries out every action the client queued and hands its events up, until both queues are empty (handling
   * an event may queue actions, e.g. a DTD decision). A call from inside the handler leaves its work to the loop
   * already running, so events go up one at a time, in order.
   */
  private drain(): void {
    if (this.pumping || this.closed) return;
    this.pumping = true;
    try {
      for (let busy = true; busy; ) {
        busy = false;
        for (let action = this.client.nextAction(); action !== null; action = this.client.nextAction()) {
          this.perform(action);
          busy = true;
        }
        for (let event = this.client.nextEvent(); event !== null; event = this.client.nextEvent()) {
          this.onEvent(event);
          busy = true;
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  private map(key: number, conn: number): void {
    this.keyToConn.set(key, conn);
    this.connToKey.set(conn, key);
  }

  private unmap(key: number): void {
    const conn = this.keyToConn.get(key);
    this.keyToConn.delete(key);
    if (conn !== undefined) this.connToKey.delete(conn);
  }

  private resolved(host: string): string {
    return this.addresses.get(host) ?? host;
  }

  private perform(action: ClientAction): void {
    try {
      switch (action.type) {
        case 'expect-id':
          this.endpoint.expect(action.id);
          break;
        case 'forget-id':
          this.endpoint.forget(action.id);
          break;
        case 'send-datagram':
          this.endpoint.sendDatagram(action.data, this.resolved(action.to.host), action.to.port);
          break;
        case 'connect':
          this.map(action.conn, this.endpoint.connect(this.resolved(action.to.host), action.to.port));
          break;
        case 'send-tcp': {
          const conn = this.keyToConn.get(action.conn);
          if (conn !== undefined) this.endpoint.sendTcp(conn, action.data);
          break;
        }
        case 'close-tcp': {
          const conn = this.keyToConn.get(action.conn);
          if (conn !== undefined) {
            this.unmap(action.conn);
            this.endpoint.closeConnection(conn);
          }
          break;
        }
      }
    } catch (err) {
      // A send that the kernel refused (e.g. EAGAIN on a full buffer) is a lost packet as far as the
      // protocol is concerned: the client's own timers recover it. A failed connect is reported to it.
      if (action.type === 'connect') {
        this.client.tcpClosed(action.conn, { code: (err as { code?: string }).code ?? 'ECONNREFUSED' }, performance.now());
      } else {
        this.sendErrors++;
      }
    }
  }

  /** One timer: the client's next deadline (its requests' and their stream loads'). */
  private arm(): void {
    const at = this.client.nextTimerAt();
    if (at === this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = at;
    if (at === null) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = null;
      this.client.handleTimer(performance.now());
      this.pump();
    }, Math.max(0, at - performance.now()));
  }
}

function peerAddress(peer: Peer): { address: string; port: number } {
  return { address: peer.address, port: peer.port };
}
