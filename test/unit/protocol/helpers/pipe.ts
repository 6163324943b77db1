// A fake network between the sans-IO DHTTP client and a scripted in-memory server (quiche Pipe style):
// the client's actions are delivered after a latency, datagrams may be dropped, duplicated and
// reordered from a seed, TCP bytes arrive reliably and in order, and the clock is fake.
import { DhttpClient } from '../../../../protocol/dhttp/client';
import type { ClientAction, ClientEvent, DhttpClientOptions } from '../../../../protocol/dhttp/client-api';
import {
  RequestParser,
  parseRequestDatagram,
  serializeResponse,
  type HttpRequest,
  type HttpResponse,
} from '../../../../protocol/dhttp/http1';
import { DhttpRequestStream } from '../../../../protocol/dhttp/stream';
import { MAX_DATAGRAM_PAYLOAD, decodeRequest, encodeResponse, idToHex, isDhttpStreamStart, isPaddingDatagram, isRequestCopy } from '../../../../protocol/dhttp/wire';

import { seededRng as mulberry32 } from '../../../../protocol/random';

export interface ServerRequest {
  via: 'udp' | 'tcp' | 'http';
  idHex: string | null;
  resend: boolean;
  otherPort: number | null;
  request: HttpRequest;
  atMs: number;
}

/** What the scripted server does with one request. */
export type Reply =
  | { kind: 'respond'; response: HttpResponse; channel?: 'udp' | 'tcp' }
  | { kind: 'silent' }
  | { kind: 'icmp' }
  | { kind: 'close' };

export interface PipeOptions {
  seed?: number;
  latencyMs?: number;
  /** Datagram loss / duplication probabilities and extra random delay (reordering). */
  loss?: number;
  duplicate?: number;
  jitterMs?: number;
  /** Whether the server speaks DHTTP on UDP ('dhttp'), answers UDP with ICMP ('icmp') or drops it ('silent'). */
  udp?: 'dhttp' | 'icmp' | 'silent';
  /** Whether the server accepts TCP connections. */
  tcp?: boolean;
  client?: Partial<DhttpClientOptions>;
  handler?: (req: ServerRequest) => Reply;
}

export const SERVER = { host: '10.0.0.1', port: 8080 };

/** Everything the client has queued: its actions, then its events. */
export function drainClient(c: DhttpClient): { actions: ClientAction[]; events: ClientEvent[] } {
  const actions: ClientAction[] = [];
  const events: ClientEvent[] = [];
  for (let a = c.nextAction(); a; a = c.nextAction()) actions.push(a);
  for (let e = c.nextEvent(); e; e = c.nextEvent()) events.push(e);
  return { actions, events };
}
const CLIENT_ADDR = { address: '10.0.0.2', port: 40000 };
const te = new TextEncoder();

export function ok(body: string | Uint8Array, headers: [string, string][] = []): HttpResponse {
  return { status: 200, reason: 'OK', headers, body: typeof body === 'string' ? te.encode(body) : body };
}

interface ServerConn {
  dhttp: DhttpRequestStream | null;
  http: RequestParser | null;
  sniffed: boolean;
  closed: boolean;
}

export class Pipe {
  now = 0;
  readonly client: DhttpClient;
  readonly events: ClientEvent[] = [];
  readonly actions: { atMs: number; action: ClientAction }[] = [];
  readonly serverLog: ServerRequest[] = [];
  readonly expected = new Set<string>();
  private readonly queue: { at: number; seq: number; run: () => void }[] = [];
  private seq = 0;
  private readonly rng: () => number;
  private readonly opts: Required<Omit<PipeOptions, 'client' | 'handler' | 'seed'>>;
  private readonly handler: (req: ServerRequest) => Reply;
  private readonly serverConns = new Map<number, ServerConn>();
  /** Server-opened connection to the client (client conn key), reused while open. */
  private inbound: number | null = null;
  readonly closedByClient = new Set<number>();

  constructor(options: PipeOptions = {}) {
    this.rng = mulberry32(options.seed ?? 1);
    this.opts = {
      latencyMs: options.latencyMs ?? 10,
      loss: options.loss ?? 0,
      duplicate: options.duplicate ?? 0,
      jitterMs: options.jitterMs ?? 0,
      udp: options.udp ?? 'dhttp',
      tcp: options.tcp ?? true,
    };
    this.handler = options.handler ?? ((r) => ({ kind: 'respond', response: ok(`body of ${r.request.target}`) }));
    let counter = 0;
    this.client = new DhttpClient({
      udpPort: 40000,
      tcpPort: 40001,
      randomBytes: (n) => {
        const out = new Uint8Array(n);
        for (let i = 0; i < n; i++) out[i] = Math.floor(this.rng() * 256);
        // keep IDs unique even with a small seed space
        out[n - 1] = counter & 0xff;
        out[n - 2] = (counter >> 8) & 0xff;
        counter++;
        return out;
      },
      ...options.client,
    });
  }

  url(path: string, scheme = 'dhttp'): string {
    return `${scheme}://${SERVER.host}:${SERVER.port}${path}`;
  }

  request(path: string, init: { method?: string; body?: Uint8Array; headers?: [string, string][]; scheme?: string } = {}): string {
    const id = this.client.request(
      { url: this.url(path, init.scheme), method: init.method ?? 'GET', headers: init.headers ?? [], ...(init.body ? { body: init.body } : {}) },
      this.now,
    );
    this.pump();
    return id;
  }

  schedule(delay: number, run: () => void): void {
    this.queue.push({ at: this.now + delay, seq: this.seq++, run });
  }

  /** Move time forward, delivering everything due, until nothing is left or `untilMs` passes. */
  run(untilMs = Infinity): void {
    for (let guard = 0; guard < 1_000_000; guard++) {
      this.pump();
      const timer = this.client.nextTimerAt();
      let best = -1;
      for (let i = 0; i < this.queue.length; i++) {
        const q = this.queue[i];
        if (best < 0 || q.at < this.queue[best].at || (q.at === this.queue[best].at && q.seq < this.queue[best].seq)) best = i;
      }
      const nextAt = Math.min(best >= 0 ? this.queue[best].at : Infinity, timer ?? Infinity);
      if (nextAt === Infinity || nextAt > untilMs) {
        if (untilMs !== Infinity) this.now = Math.max(this.now, untilMs);
        return;
      }
      this.now = Math.max(this.now, nextAt);
      if (best >= 0 && this.queue[best].at <= nextAt) {
        const [item] = this.queue.splice(best, 1);
        item.run();
      } else {
        this.client.handleTimer(this.now);
      }
    }
    throw new Error('pipe did not settle');
  }

  pump(): void {
    for (let a = this.client.nextAction(); a !== null; a = this.client.nextAction()) {
      this.actions.push({ atMs: this.now, action: a });
      this.perform(a);
    }
    for (let e = this.client.nextEvent(); e !== null; e = this.client.nextEvent()) this.events.push(e);
  }

  eventsOf<T extends ClientEvent['type']>(type: T): Extract<ClientEvent, { type: T }>[] {
    return this.events.filter((e): e is Extract<ClientEvent, { type: T }> => e.type === type);
  }

  datagramsSent(): { atMs: number; data: Uint8Array }[] {
    return this.actions.flatMap((a) => (a.action.type === 'send-datagram' ? [{ atMs: a.atMs, data: a.action.data }] : []));
  }

  /** Deliver a datagram to the client now (spoofing, duplicates). */
  inject(data: Uint8Array): void {
    this.client.receiveDatagram(data, { address: SERVER.host, port: SERVER.port }, this.now);
    this.pump();
  }

  /** Open a server-side connection to the client and send these bytes on it. Returns the client's key. */
  injectInbound(data: Uint8Array): number {
    const key = this.client.inboundConnection({ address: SERVER.host, port: 50000 }, this.now);
    this.client.receiveTcp(key, data, this.now);
    this.pump();
    return key;
  }

  private perform(a: ClientAction): void {
    switch (a.type) {
      case 'expect-id':
        this.expected.add(idToHex(a.id));
        return;
      case 'forget-id':
        this.expected.delete(idToHex(a.id));
        return;
      case 'send-datagram': {
        if (this.rng() < this.opts.loss) return;
        const copies = this.rng() < this.opts.duplicate ? 2 : 1;
        for (let i = 0; i < copies; i++) {
          this.schedule(this.opts.latencyMs + this.rng() * this.opts.jitterMs, () => this.serverDatagram(a.data));
        }
        return;
      }
      case 'connect':
        this.schedule(this.opts.latencyMs, () => {
          if (!this.opts.tcp) {
            this.client.tcpClosed(a.conn, { code: 'ECONNREFUSED' }, this.now);
            return;
          }
          this.serverConns.set(a.conn, { dhttp: null, http: null, sniffed: false, closed: false });
          this.client.tcpOpened(a.conn, this.now);
        });
        return;
      case 'send-tcp':
        this.schedule(this.opts.latencyMs, () => this.serverTcp(a.conn, a.data));
        return;
      case 'close-tcp': {
        this.closedByClient.add(a.conn);
        const sc = this.serverConns.get(a.conn);
        if (sc) sc.closed = true;
        if (this.inbound === a.conn) this.inbound = null;
        return;
      }
    }
  }

  private serverDatagram(data: Uint8Array): void {
    if (this.opts.udp === 'silent') return;
    if (this.opts.udp === 'icmp') {
      this.schedule(this.opts.latencyMs, () => this.client.receiveIcmpUnreachable({ address: SERVER.host, port: SERVER.port }, this.now));
      return;
    }
    // a first contact's padding, or its copy of the request: budget and a stand-in for a server that keeps them
    if (isPaddingDatagram(data) || isRequestCopy(data)) return;
    const msg = decodeRequest(data);
    const request = parseRequestDatagram(msg.http);
    const sreq: ServerRequest = { via: 'udp', idHex: idToHex(msg.id), resend: msg.resend, otherPort: msg.otherPort, request, atMs: this.now };
    this.serverLog.push(sreq);
    const reply = this.handler(sreq);
    if (reply.kind === 'icmp') {
      this.schedule(this.opts.latencyMs, () => this.client.receiveIcmpUnreachable({ address: SERVER.host, port: SERVER.port }, this.now));
      return;
    }
    if (reply.kind !== 'respond') return;
    const bytes = encodeResponse(msg.id, serializeResponse(reply.response, { head: request.method === 'HEAD' }));
    const channel = reply.channel ?? (bytes.length > MAX_DATAGRAM_PAYLOAD || msg.resend ? 'tcp' : 'udp');
    if (channel === 'udp') {
      if (this.rng() < this.opts.loss) return;
      const copies = this.rng() < this.opts.duplicate ? 2 : 1;
      for (let i = 0; i < copies; i++) {
        this.schedule(this.opts.latencyMs + this.rng() * this.opts.jitterMs, () => this.client.receiveDatagram(bytes, { address: SERVER.host, port: SERVER.port }, this.now));
      }
      return;
    }
    this.sendInbound(bytes);
  }

  private sendInbound(bytes: Uint8Array): void {
    this.schedule(this.opts.latencyMs, () => {
      if (this.inbound === null) this.inbound = this.client.inboundConnection(CLIENT_ADDR, this.now);
      const key = this.inbound;
      // deliver in two pieces to exercise reassembly
      const cut = Math.floor(bytes.length / 2);
      this.client.receiveTcp(key, bytes.subarray(0, cut), this.now);
      if (!this.closedByClient.has(key)) this.client.receiveTcp(key, bytes.subarray(cut), this.now);
    });
  }

  private serverTcp(conn: number, data: Uint8Array): void {
    const sc = this.serverConns.get(conn);
    if (!sc || sc.closed) return;
    if (!sc.sniffed && data.length > 0) {
      sc.sniffed = true;
      if (isDhttpStreamStart(data[0])) sc.dhttp = new DhttpRequestStream();
      else sc.http = new RequestParser();
    }
    const respond = (reply: Reply, head: boolean, id: Uint8Array | null): void => {
      if (reply.kind === 'close') {
        sc.closed = true;
        this.schedule(this.opts.latencyMs, () => this.client.tcpClosed(conn, null, this.now));
        return;
      }
      if (reply.kind !== 'respond') return;
      const http = serializeResponse(reply.response, { head });
      const bytes = id ? encodeResponse(id, http) : http;
      this.schedule(this.opts.latencyMs, () => {
        if (!this.closedByClient.has(conn)) this.client.receiveTcp(conn, bytes, this.now);
      });
    };
    if (sc.dhttp) {
      sc.dhttp.push(data);
      for (let m = sc.dhttp.next(); m; m = sc.dhttp.next()) {
        const sreq: ServerRequest = { via: 'tcp', idHex: idToHex(m.id), resend: m.resend, otherPort: m.otherPort, request: m.request, atMs: this.now };
        this.serverLog.push(sreq);
        respond(this.handler(sreq), m.request.method === 'HEAD', m.id);
      }
    } else if (sc.http) {
      sc.http.push(data);
      for (let r = sc.http.next(); r; r = sc.http.next()) {
        const sreq: ServerRequest = { via: 'http', idHex: null, resend: false, otherPort: null, request: r, atMs: this.now };
        this.serverLog.push(sreq);
        respond(this.handler(sreq), r.method === 'HEAD', null);
      }
    }
  }
}
