/**
 * The DHTTP client state machine (sans-IO, aioquic style).
 *
 * Inputs are method calls carrying `nowMs`; outputs are actions (`nextAction()`) for the IO layer and
 * events (`nextEvent()`) for the application, both drained until `null`. The only timer is
 * `nextTimerAt()` / `handleTimer(nowMs)`. See protocol/README.md for the rules implemented here.
 */
import { LocalProtocolError } from '../errors';
import { DhttpError, HttpParseError } from './errors';
import {
  DEFAULT_MAX_BODY_BYTES,
  ResponseParser,
  getHeader,
  parseResponseDatagram,
  serializeRequest,
  type HttpHeaders,
  type HttpResponse,
} from './http1';
import { DhttpResponseStream } from './stream';
import { hostLiteral, parseTarget, type Target } from './url';
import { MAX_DATAGRAM_PAYLOAD, REQUEST_PREFIX_BYTES, decodeResponseDatagram, encodePadding, encodeRequest, idToHex, newRequestId } from './wire';
import { FIRST_CONTACT_STEP_BYTES, MIN_UNPROVEN_REQUEST_BYTES, RETRY_TOKEN, STREAM_FIRST_CONTACT_WIRE_BYTES, STREAM_REQUEST_BYTES, TOKEN_ANSWER_BYTES, TOKEN_HEADER, canonicalAddress, datagramOverhead } from './address-validation';
import { encodeDecision, parseAnnounce, type Announcement, type Decision } from '../dtd/messages';
import type { Address, Channel, ClientAction, ClientCounters, ClientEvent, DhttpClientOptions, FallbackReason, RequestInit } from './client-api';
import { TRANSITIONS, channelOf, dtdOf, overTcp, type Phase } from './request-phase';
import { StreamLoad, type StreamStep } from '../catp/stream-load';
import {
  IDEMPOTENT,
  codeOf,
  defaultRandom,
  isIpLiteral,
  keepsAlive,
  learnToken,
  requestDatagramHttp,
  retryAsked,
  structuredCloneCounters,
  type Conn,
  type ConnKind,
  type Origin,
  type Req,
} from './client-records';

/** 'H' of "HTTP/1.1 ...": a streamed request's datagram that starts otherwise is a stream datagram. */
const HTTP_FIRST_BYTE = 0x48;
/** A stream whose first flight came unproven asks again with its token at most this often (each `421 … token`). */
const MAX_STREAM_TOKEN_RETRIES = 8;
/** ... and sends that proof again unasked, with its reports, at most this often (`repeatProof`). */
const MAX_PROOF_REPEATS = 8;

export class DhttpClient {
  private readonly opts: Required<Omit<DhttpClientOptions, 'randomBytes' | 'catp'>> & Pick<DhttpClientOptions, 'catp'> & { randomBytes: (n: number) => Uint8Array };
  private readonly actions: ClientAction[] = [];
  private readonly events: ClientEvent[] = [];
  private readonly reqs = new Map<string, Req>();
  private readonly origins = new Map<string, Origin>();
  private readonly conns = new Map<number, Conn>();
  /** Completed / cancelled IDs -> method, oldest first (bounded). */
  private readonly completed = new Map<string, string>();
  private nextConnKey = 1;
  private readonly stats: ClientCounters = {
    requests: 0,
    responses: { udp: 0, tcp: 0, http: 0 },
    resends: 0,
    fallbacks: 0,
    retriesOverTcp: 0,
    retriesWithToken: 0,
    proofRepeats: 0,
    proofsOnToken: 0,
    failed: 0,
    cancelled: 0,
    dropped: { unknownId: 0, duplicate: 0, malformed: 0, total: 0 },
    connections: { opened: 0, inbound: 0, closedByUs: 0, inboundIdle: 0, inboundOverLimit: 0 },
    dtd: { announcements: 0, proceeds: 0, dontBothers: 0, aborts: 0, decisionResends: 0, badAnnouncements: 0 },
  };

  constructor(options: DhttpClientOptions) {
    this.opts = {
      udpPort: options.udpPort,
      tcpPort: options.tcpPort,
      randomBytes: options.randomBytes ?? defaultRandom,
      initialTimeoutMs: options.initialTimeoutMs ?? 1000,
      backoffFactor: options.backoffFactor ?? 2,
      maxTimeoutMs: options.maxTimeoutMs ?? 8000,
      maxResends: options.maxResends ?? 4,
      fallbackAfterResends: options.fallbackAfterResends ?? 1,
      tcpTimeoutMs: options.tcpTimeoutMs ?? 30000,
      maxBodyBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
      completedMemory: options.completedMemory ?? 4096,
      maxInboundConnections: Math.max(1, options.maxInboundConnections ?? 64),
      inboundIdleMs: options.inboundIdleMs ?? 30000,
      ...(options.catp !== undefined ? { catp: options.catp } : {}),
    };
  }

  // ------------------------------------------------------------------------------------------
  // Drains

  nextAction(): ClientAction | null {
    return this.actions.shift() ?? null;
  }

  nextEvent(): ClientEvent | null {
    return this.events.shift() ?? null;
  }

  counters(): ClientCounters {
    return structuredCloneCounters(this.stats);
  }

  /** Requests not yet completed, failed or cancelled. */
  get outstanding(): number {
    return this.reqs.size;
  }

  // ------------------------------------------------------------------------------------------
  // Inputs

  /** Start a request; returns its ID (16 hex digits), which names it in every event. */
  request(init: RequestInit, nowMs: number): string {
    const target = parseTarget(init.url);
    if (target.scheme === 'https') {
      // TLS is the host's (app/browser/http-stream.ts): this client never sends an https:// request in the clear
      throw new LocalProtocolError('DHTTP_ERR_BAD_SCHEME', `https:// is not a DHTTP client's: ${target.origin}`);
    }
    if (init.stream !== undefined && init.dtd === true) {
      // a stream's datagrams are not an HTTP answer that could be announced
      throw new LocalProtocolError('DHTTP_ERR_BAD_OPTIONS', 'a request asks for a stream or for DTD, not both');
    }
    const catp = this.opts.catp;
    if (init.stream !== undefined && catp === undefined) {
      throw new LocalProtocolError('DHTTP_ERR_BAD_OPTIONS', 'a stream load needs DhttpClientOptions.catp (sha256)');
    }
    const method = (init.method ?? 'GET').toUpperCase();
    const body = init.body ?? new Uint8Array(0);
    const headers: HttpHeaders = [...(init.headers ?? [])];
    if (getHeader(headers, 'host') === null) {
      headers.unshift(['Host', target.port === 80 ? target.host : `${target.host}:${target.port}`]);
    }
    const hostHeader = getHeader(headers, 'host') as string;
    const http = serializeRequest({ method, target: target.path, headers, body });
    let id = newRequestId(this.opts.randomBytes);
    while (this.reqs.has(idToHex(id))) id = newRequestId(this.opts.randomBytes);
    const origin = this.originFor(target);
    const req: Req = {
      idHex: idToHex(id),
      id,
      target,
      origin,
      method,
      http,
      parts: { path: target.path, headers, body },
      tokenRetries: 0,
      wire: { sent: 0, received: 0, overhead: datagramOverhead(target.host), replyMs: null },
      proof: null,
      tokenless: false,
      phase: 'new',
      registered: false,
      resends: 0,
      sentAtMs: nowMs,
      lastSendMs: nowMs,
      deadline: null,
      conn: null,
      inbound: null,
      httpBytesAtSend: 0,
      httpRetried: false,
      load: init.stream === undefined || catp === undefined ? null : new StreamLoad({
        mode: init.stream.mode,
        requestId: id,
        otherPort: this.opts.tcpPort,
        sha256: catp.sha256,
        ...(catp.codec !== undefined ? { codec: catp.codec } : {}),
        sentAtMs: nowMs,
        sentRealtimeNs: init.stream.sentRealtimeNs ?? null,
      }),
      dtd: init.dtd === true,
      hostHeader,
    };
    this.reqs.set(req.idHex, req);
    this.stats.requests++;
    if (target.scheme === 'http' || (target.scheme === 'dhttp' && origin.knowledge === 'plain')) {
      this.sendHttp(req, nowMs);
    } else if (
      target.scheme === 'dhttp' &&
      IDEMPOTENT.has(method) &&
      11 + http.length <= MAX_DATAGRAM_PAYLOAD
    ) {
      this.register(req);
      this.moveTo(req, 'udp');
      this.sendUdp(req, nowMs, false);
    } else {
      this.register(req);
      this.sendDhttpTcp(req, false, nowMs);
    }
    return req.idHex;
  }

  /**
   * Whether `host`:`port` has answered this client over DHTTP (the one port number serves DHTTP and HTTP/1.1):
   * an http:// URL there may be fetched as dhttp:// (the DHTTP paper's deployment: a client that knows a server
   * speaks it uses it).
   */
  speaksDhttp(host: string, port: number): boolean {
    return this.origins.get(`${host}:${port}`)?.knowledge === 'dhttp';
  }

  /** The application gives a streamed request up (stopped, timed out): forget its ID and drop its load. */
  endStream(idHex: string): boolean {
    const req = this.reqs.get(idHex.toLowerCase());
    if (req === undefined || req.load === null) return false;
    this.finish(req);
    return true;
  }

  /**
   * Block reuse: blocks the application read from its own store for a streamed CATP load (after
   * 'stream-blocks-known'), verified by the assembler against the index; a sender that acknowledged reuse is
   * told what is held. Their events come out as 'stream-local-fill'. False when the request has no load.
   */
  fillLocal(idHex: string, payloads: ReadonlyMap<number, Uint8Array>, nowMs: number): boolean {
    const req = this.reqs.get(idHex.toLowerCase());
    if (req === undefined || req.load === null) return false;
    const step = req.load.fillLocal(payloads, nowMs);
    this.events.push({ type: 'stream-local-fill', requestId: req.idHex, events: step.events });
    this.afterStreamStep(req, req.load, step, nowMs);
    return true;
  }

  /** What a stream load's call left behind: its reports go out, its end is reported, a failed or drained load lets go of the ID. */
  private afterStreamStep(req: Req, load: StreamLoad, step: StreamStep, nowMs: number): void {
    for (let data = load.nextReport(); data !== null; data = load.nextReport()) this.sendDatagram(req, data);
    if (!load.ended) this.repeatProof(req, nowMs);
    if (step.blocksKnown !== null) this.events.push({ type: 'stream-blocks-known', requestId: req.idHex, blocks: step.blocksKnown });
    if (step.ended?.outcome === 'complete') {
      this.events.push({ type: 'stream-complete', requestId: req.idHex, atMs: nowMs, summary: load.summary() });
    } else if (step.ended?.outcome === 'failed') {
      this.events.push({ type: 'stream-failed', requestId: req.idHex, code: step.ended.code, message: step.ended.message });
      this.finish(req);
      return;
    }
    if (load.drained(nowMs)) this.finish(req);
  }

  /**
   * DTD: answer a 'dtd-announce' with PROCEED (send the body; for a body already on its way nothing is
   * sent) or DON'T-BOTHER (we hold the payload: the request ends here, no 'response' event follows, and a
   * body already arriving on a server-opened connection is cut by closing that connection). The decision
   * travels as a DHTTP request with the same ID, on the channel the request used. A PROCEED whose body does
   * not come within the resend timeout is repeated with the resend flag ('dtd-decision-resend').
   * Returns false when the request is not waiting for a decision.
   */
  dtdDecide(idHex: string, decision: Decision, nowMs: number): boolean {
    const req = this.reqs.get(idHex.toLowerCase());
    const dtd = req === undefined ? null : dtdOf(req.phase);
    if (req === undefined || (dtd !== 'held' && dtd !== 'sending')) return false;
    const channel = channelOf(req.phase) as 'udp' | 'tcp';
    if (decision === 'proceed') {
      this.stats.dtd.proceeds++;
      this.moveTo(req, `${channel}-dtd-proceeded`);
      if (dtd === 'held') {
        this.sendDecision(req, decision, false);
        req.lastSendMs = nowMs;
        req.deadline = nowMs + (channel === 'udp' ? this.timeoutFor(req.resends) : this.opts.tcpTimeoutMs);
      }
      return true;
    }
    this.stats.dtd.dontBothers++;
    this.sendDecision(req, decision, false);
    const cut = dtd === 'sending' && req.inbound !== null ? this.conns.get(req.inbound) : undefined;
    this.finish(req);
    if (cut !== undefined) {
      this.stats.dtd.aborts++;
      this.closeConn(cut, nowMs);
    }
    return true;
  }

  private sendDecision(req: Req, decision: Decision, resend: boolean): void {
    // over UDP a PROCEED carries our address token: the body it asks for may be large (address-validation.ts)
    const token = req.origin.token;
    const overOurTcp = channelOf(req.phase) === 'tcp' && req.conn !== null;
    const http = encodeDecision(req.hostHeader, decision, token !== null && !overOurTcp ? [[TOKEN_HEADER, token]] : []);
    if (overOurTcp && req.conn !== null) {
      const conn = this.conns.get(req.conn);
      if (conn !== undefined) this.write(conn, encodeRequest({ id: req.id, otherPort: this.opts.udpPort, resend, http }));
      return;
    }
    const data = encodeRequest({ id: req.id, otherPort: this.opts.tcpPort, resend, http });
    this.actions.push({ type: 'send-datagram', to: { host: req.target.host, port: req.target.port }, data });
  }

  /** A DTD announcement arrived for `req`; false when the response is not one (an ordinary answer). */
  private announced(req: Req, response: HttpResponse, channel: Channel, connKey: number | null, nowMs: number, rxNs: bigint | null): boolean {
    if (!req.dtd || getHeader(response.headers, 'dtd-announce') === null) return false;
    let a: Announcement | null;
    try {
      a = parseAnnounce(response.headers);
    } catch (e) {
      this.stats.dtd.badAnnouncements++;
      this.drop(channel, codeOf(e), 'malformed', req.idHex);
      return true;
    }
    if (a === null) return false;
    const dtd = dtdOf(req.phase);
    if (dtd !== null) {
      // A repeat (our request was resent). A lost PROCEED is repeated; anything else is a duplicate.
      if (dtd === 'proceeded' && a.held) this.sendDecision(req, 'proceed', true);
      this.drop(channel, 'duplicate-announcement', 'duplicate', req.idHex);
      return true;
    }
    this.stats.dtd.announcements++;
    req.origin.knowledge = 'dhttp';
    this.moveTo(req, `${channelOf(req.phase) === 'tcp' ? 'tcp' : 'udp'}-dtd-${a.held ? 'held' : 'sending'}`);
    if (channel === 'tcp' && connKey !== null && this.conns.get(connKey)?.kind === 'inbound') req.inbound = connKey;
    // Waiting for the application's decision (or for the body that follows): no resend meanwhile.
    req.deadline = nowMs + this.opts.tcpTimeoutMs;
    this.events.push({
      type: 'dtd-announce',
      requestId: req.idHex,
      response,
      held: a.held,
      length: a.length,
      channel,
      sentAtMs: req.sentAtMs,
      receivedAtMs: nowMs,
      ...(rxNs !== null ? { rxNs } : {}),
    });
    return true;
  }

  /** Abandon a request: no event follows for it. Returns false when the ID is not outstanding. */
  cancel(idHex: string, nowMs: number): boolean {
    const req = this.reqs.get(idHex.toLowerCase());
    if (req === undefined) return false;
    this.stats.cancelled++;
    this.finish(req);
    this.unhookHttp(req, nowMs);
    return true;
  }

  /** A datagram arrived: `nowMs` when it was handed over, `rxNs` when the kernel received it (CLOCK_REALTIME ns), if known. */
  receiveDatagram(data: Uint8Array, _from: Address, nowMs: number, rxNs?: bigint): void {
    let msg;
    try {
      msg = decodeResponseDatagram(data);
    } catch (e) {
      this.drop('udp', codeOf(e), 'malformed');
      return;
    }
    const idHex = idToHex(msg.id);
    const req = this.reqs.get(idHex);
    if (req === undefined || channelOf(req.phase) === 'http') {
      this.dropUnmatched('udp', idHex);
      return;
    }
    if (req.load !== null && channelOf(req.phase) === 'udp' && msg.http[0] !== HTTP_FIRST_BYTE) {
      if (req.phase !== 'udp-streaming') {
        this.moveTo(req, 'udp-streaming');
        req.deadline = null;
        req.origin.knowledge = 'dhttp';
      }
      this.countReceived(req, data, nowMs);
      const { record, step } = req.load.receive(data, nowMs, rxNs ?? null);
      this.events.push({ type: 'stream-frame', requestId: idHex, record, events: step.events });
      this.afterStreamStep(req, req.load, step, nowMs);
      return;
    }
    let response: HttpResponse;
    try {
      response = parseResponseDatagram(msg.http, { method: req.method, maxBodyBytes: this.opts.maxBodyBytes });
    } catch (e) {
      // Could be spoofed: drop it and keep waiting for a good answer.
      this.drop('udp', codeOf(e), 'malformed', idHex);
      return;
    }
    req.origin.knowledge = 'dhttp';
    this.takeToken(req, response, nowMs);
    if (req.load !== null) this.countReceived(req, data, nowMs);
    const retry = retryAsked(response);
    if (retry === RETRY_TOKEN && channelOf(req.phase) === 'udp') {
      // Too large an answer for an address the server has not seen proven: again, with the token just received
      // (once; a second refusal goes over our own TCP connection, which proves the address by its handshake).
      if (req.load !== null && req.origin.token !== null && req.phase === 'udp-streaming' && req.tokenRetries < MAX_STREAM_TOKEN_RETRIES) {
        // The stream's first flight (what the server may send unproven) is here and it waits for our proof: the
        // token request was lost, or this 421 overtook it. Again, with the token; the stream's repair, not our
        // resend timer, drives what follows.
        req.tokenRetries++;
        this.stats.retriesWithToken++;
        this.sendUdp(req, nowMs, false);
        req.deadline = null;
        req.proof = { atMs: nowMs, repeats: req.proof?.repeats ?? 0 };
      } else if (req.tokenRetries === 0 && req.origin.token !== null) {
        req.tokenRetries++;
        this.stats.retriesWithToken++;
        // a resent request's answer still goes over TCP; a stream's proof is never a resend (see sendUdp)
        this.sendUdp(req, nowMs, req.load === null && req.resends > 0);
        if (req.load !== null) req.proof = { atMs: nowMs, repeats: 0 };
      } else {
        this.retryOverTcp(req, nowMs);
      }
      return;
    }
    if (this.announced(req, response, 'udp', null, nowMs, rxNs ?? null)) return;
    if (retry === 'tcp' && this.answeredRetryOverTcp(req, 'udp', nowMs)) return;
    this.complete(req, response, 'udp', nowMs, rxNs ?? null);
  }

  /**
   * `421` with `Dhttp-Retry: tcp` (the answer is too large for a datagram): a request still on UDP goes again over
   * our own TCP connection, and the 421 is consumed (true). One already on TCP: a 421 that came over UDP is a late
   * duplicate, dropped (true); one that came over TCP is the server's answer there, and completes it (false).
   */
  private answeredRetryOverTcp(req: Req, channel: 'udp' | 'tcp', nowMs: number): boolean {
    if (channelOf(req.phase) === 'udp') {
      this.retryOverTcp(req, nowMs);
      return true;
    }
    if (channel === 'tcp') return false;
    this.drop(channel, 'duplicate-retry', 'duplicate', req.idHex);
    return true;
  }

  private retryOverTcp(req: Req, nowMs: number): void {
    this.stats.retriesOverTcp++;
    this.events.push({ type: 'retry-over-tcp', requestId: req.idHex });
    // Not a loss: the resend flag stays clear so the server's loss statistics are not skewed.
    this.sendDhttpTcp(req, false, nowMs);
  }

  /** A TCP connection the server opened to our TCP port was accepted; returns its connection key. */
  inboundConnection(_from: Address, nowMs: number): number {
    const key = this.nextConnKey++;
    const conn: Conn = this.newConn(key, 'inbound', null);
    conn.open = true;
    conn.lastRxMs = nowMs;
    conn.dhttp = new DhttpResponseStream({
      maxBodyBytes: this.opts.maxBodyBytes,
      methodOf: (id) => {
        const idHex = idToHex(id);
        const req = this.reqs.get(idHex);
        conn.current = idHex;
        if (req !== undefined && channelOf(req.phase) !== 'http') {
          req.inbound = key;
          return req.method;
        }
        // A recently completed ID (a resend crossed its answer) is read and dropped; anything else closes.
        return this.completed.get(idHex) ?? null;
      },
    });
    this.conns.set(key, conn);
    this.stats.connections.inbound++;
    this.limitInbound(conn, nowMs);
    return key;
  }

  /** Over maxInboundConnections: close the inbound connection idle longest (no answer on it), else the newcomer. */
  private limitInbound(newcomer: Conn, nowMs: number): void {
    let count = 0;
    let victim: Conn | null = null;
    for (const c of this.conns.values()) {
      if (c.kind !== 'inbound') continue;
      count++;
      if (c === newcomer || this.carriesAnswer(c)) continue;
      if (victim === null || c.lastRxMs < victim.lastRxMs) victim = c;
    }
    if (count <= this.opts.maxInboundConnections) return;
    this.stats.connections.inboundOverLimit++;
    this.closeConn(victim ?? newcomer, nowMs);
  }

  /** An inbound connection is delivering an answer to a request still outstanding. */
  private carriesAnswer(c: Conn): boolean {
    if (c.current === null) return false;
    const req = this.reqs.get(c.current);
    return req !== undefined && req.inbound === c.key;
  }

  tcpOpened(connKey: number, _nowMs: number): void {
    const conn = this.conns.get(connKey);
    if (conn === undefined || conn.open) return;
    conn.open = true;
    for (const data of conn.pending) this.actions.push({ type: 'send-tcp', conn: connKey, data });
    conn.pending = [];
  }

  /** Bytes arrived on a connection (`rxNs`: their kernel receive time, if known). */
  receiveTcp(connKey: number, data: Uint8Array, nowMs: number, rxNs?: bigint): void {
    const conn = this.conns.get(connKey);
    if (conn === undefined) return;
    conn.lastRxMs = nowMs;
    if (rxNs !== undefined) conn.lastRxNs = rxNs;
    if (conn.firstBytes.length < 5) conn.firstBytes += String.fromCharCode(...data.subarray(0, 5 - conn.firstBytes.length));
    conn.received += data.length;
    if (conn.dhttp !== null) {
      conn.dhttp.push(data);
      this.drainDhttp(conn, nowMs);
    } else if (conn.http !== null) {
      conn.http.push(data);
      this.drainHttp(conn, nowMs);
    }
  }

  tcpClosed(connKey: number, error: { code: string } | null, nowMs: number): void {
    const conn = this.conns.get(connKey);
    if (conn === undefined) return;
    const neverOpened = !conn.open;
    // Complete what the peer finished sending (a close-delimited body ends here).
    if (conn.dhttp !== null) {
      conn.dhttp.end();
      this.drainDhttp(conn, nowMs, true);
    } else if (conn.http !== null) {
      conn.http.end();
      this.drainHttp(conn, nowMs, true);
    }
    if (!this.conns.has(connKey)) return; // drain already tore it down
    this.conns.delete(connKey);
    this.afterClose(conn, neverOpened ? (error ?? { code: 'ECONNREFUSED' }) : error, neverOpened, nowMs);
  }

  receiveIcmpUnreachable(from: Address, nowMs: number): void {
    const addr = canonicalAddress(hostLiteral(from.address));
    for (const origin of this.origins.values()) {
      if (origin.port !== from.port) continue;
      if (isIpLiteral(origin.host) && canonicalAddress(hostLiteral(origin.host)) !== addr) continue;
      const waiting = [...this.reqs.values()].filter((r) => r.origin === origin && channelOf(r.phase) === 'udp');
      if (waiting.length === 0 && origin.knowledge !== 'unknown') continue;
      origin.knowledge = 'plain';
      for (const req of waiting) this.fallBack(req, 'icmp-unreachable', nowMs);
    }
  }

  nextTimerAt(): number | null {
    let at: number | null = null;
    for (const req of this.reqs.values()) {
      if (req.deadline !== null && (at === null || req.deadline < at)) at = req.deadline;
      const t = req.load?.nextTimerAt() ?? null;
      if (t !== null && (at === null || t < at)) at = t;
    }
    for (const c of this.conns.values()) {
      if (c.kind === 'inbound' && (at === null || c.lastRxMs + this.opts.inboundIdleMs < at)) at = c.lastRxMs + this.opts.inboundIdleMs;
    }
    return at;
  }

  handleTimer(nowMs: number): void {
    for (const c of [...this.conns.values()]) {
      if (c.kind === 'inbound' && nowMs >= c.lastRxMs + this.opts.inboundIdleMs && this.conns.get(c.key) === c) {
        this.stats.connections.inboundIdle++;
        this.closeConn(c, nowMs);
      }
    }
    const due = [...this.reqs.values()].filter((r) => r.deadline !== null && r.deadline <= nowMs);
    due.sort((a, b) => (a.deadline as number) - (b.deadline as number));
    for (const req of due) {
      if (!this.reqs.has(req.idHex) || req.deadline === null || req.deadline > nowMs) continue;
      if (req.phase === 'udp-dtd-proceeded' && req.inbound === null && req.resends < this.opts.maxResends) {
        // Our PROCEED (or the body it asked for) was lost: say it again, flagged as a resend.
        req.resends++;
        this.stats.dtd.decisionResends++;
        this.events.push({ type: 'dtd-decision-resend', requestId: req.idHex, attempt: req.resends });
        this.sendDecision(req, 'proceed', true);
        req.deadline = nowMs + this.timeoutFor(req.resends);
      } else if ((req.phase === 'udp' || req.phase === 'udp-streaming') && req.inbound === null) {
        this.udpTimeout(req, nowMs);
      } else {
        this.fail(req, 'DHTTP_ERR_TIMEOUT', `no answer within ${this.opts.tcpTimeoutMs} ms`, nowMs);
      }
    }
    // then the stream loads' own timers (reports, the stall limit, the tail that keeps a finished load's ID)
    for (const req of [...this.reqs.values()]) {
      const load = req.load;
      const t = load?.nextTimerAt() ?? null;
      if (load === null || t === null || t > nowMs || this.reqs.get(req.idHex) !== req) continue;
      this.afterStreamStep(req, load, load.handleTimer(nowMs), nowMs);
    }
  }

  // ------------------------------------------------------------------------------------------
  // UDP

  private timeoutFor(resends: number): number {
    return Math.min(this.opts.initialTimeoutMs * Math.pow(this.opts.backoffFactor, resends), this.opts.maxTimeoutMs);
  }



  /**
   * The origin's token, from `answered`'s answer. The first one also proves every stream to that origin the server
   * started unproven that has not sent its proof: its own token answer was lost (the stream's frames came without
   * it), and a server whose address budget the client keeps filling (reports, sub-resource requests padded to a full
   * datagram) is never held up by it, so never asks again; the session would end unproven after its 3 s, and the
   * load stall (traced: dropbox-blog at 10,000 B/s, 10%, seed 7216).
   */
  private takeToken(answered: Req, response: HttpResponse, nowMs: number): void {
    const origin = answered.origin;
    const had = origin.token !== null;
    learnToken(origin, response);
    if (had || origin.token === null) return;
    for (const req of this.reqs.values()) {
      if (req === answered || req.origin !== origin || req.load === null || req.phase !== 'udp-streaming' || !req.tokenless || req.proof !== null) continue;
      if (req.tokenRetries >= MAX_STREAM_TOKEN_RETRIES) continue;
      req.tokenRetries++;
      this.stats.proofsOnToken++;
      this.sendUdp(req, nowMs, false);
      req.deadline = null;
      req.proof = { atMs: nowMs, repeats: 0 };
    }
  }

  /**
   * (Again) the request's datagram, from a UDP phase, which it keeps. `resend`: flagged as a resend (its answer
   * goes over TCP, and the server counts it as a loss); every caller says, so that no send inherits the flag from
   * the request's history. A stream's proof (after its `421 … token`, when the token comes in another answer, and its
   * repeats) never is, whatever came before it: the server asked for it, its frames go over UDP whatever the flag
   * says, and the flag would only count as a second loss there.
   */
  private sendUdp(req: Req, nowMs: number, resend: boolean): void {
    req.lastSendMs = nowMs;
    req.tokenless = req.origin.token === null;
    req.deadline = nowMs + this.timeoutFor(req.resends);
    const stream = req.load !== null;
    const data = encodeRequest({ id: req.id, otherPort: this.opts.tcpPort, resend, http: requestDatagramHttp(req, stream ? STREAM_REQUEST_BYTES : this.tokenOnItsWay(req) ? TOKEN_ANSWER_BYTES : MIN_UNPROVEN_REQUEST_BYTES) });
    this.sendDatagram(req, data);
    // A stream's first contact: right behind the request, what pays for its first flight (address-validation.ts).
    // The first time a padded copy of the request, so that a lost request costs a round trip, not a resend (wire.ts
    // FLAG_COPY), then padding datagrams; a resend is followed by padding alone (a copy of a resend would be a
    // second resend). Each a quarter datagram, so the server's budget grows as the uplink carries it.
    if (!stream || req.origin.token !== null) return;
    // counted on the wire, as the server counts its budget (each datagram with its IP and UDP headers)
    const overhead = req.wire.overhead;
    let rest = STREAM_FIRST_CONTACT_WIRE_BYTES - (data.length + overhead);
    if (req.resends === 0) {
      const http = requestDatagramHttp(req, Math.min(rest - overhead, FIRST_CONTACT_STEP_BYTES));
      const copy = encodeRequest({ id: req.id, otherPort: this.opts.tcpPort, resend: false, copy: true, http });
      this.sendDatagram(req, copy);
      rest -= copy.length + overhead;
    }
    while (rest - overhead > REQUEST_PREFIX_BYTES) {
      const n = Math.min(rest - overhead, FIRST_CONTACT_STEP_BYTES);
      this.sendDatagram(req, encodePadding(req.id, this.opts.tcpPort, n));
      rest -= n + overhead;
    }
  }

  /**
   * Another request to `req`'s origin went without a token and is still on UDP: the server answers it with a token
   * (in its answer, or in a `421 … token` when the answer is larger than what it paid for), so `req` pays only for
   * that `421` (TOKEN_ANSWER_BYTES) and goes again with the token it brings. Padding every tokenless request to a
   * full datagram filled a slow uplink: when a stream's token answer was lost, a page's dozen image requests took
   * 1.5–1.8 s of a 10,000 B/s uplink, and the stream's reports, and so its repairs, waited behind them (hukumusume,
   * 10% loss: silent 1,117 and 1,267 ms against 150–280 in the loads whose token answer came).
   */
  private tokenOnItsWay(req: Req): boolean {
    if (req.origin.token !== null) return false;
    for (const r of this.reqs.values()) {
      if (r !== req && r.origin === req.origin && r.tokenless && channelOf(r.phase) === 'udp') return true;
    }
    return false;
  }

  /** One datagram of a request to its server (a stream's counted on the wire: `wire.sent`). */
  private sendDatagram(req: Req, data: Uint8Array): void {
    if (req.load !== null) req.wire.sent += data.length + req.wire.overhead;
    this.actions.push({ type: 'send-datagram', to: { host: req.target.host, port: req.target.port }, data });
  }

  private countReceived(req: Req, data: Uint8Array, nowMs: number): void {
    req.wire.received += data.length + req.wire.overhead;
    req.wire.replyMs ??= nowMs - req.lastSendMs;
    // more than we sent: the server has our proof (a later `421` would start `repeatProof` again)
    if (req.proof !== null && req.wire.received > req.wire.sent) req.proof = null;
  }

  /**
   * A stream the server started unproven sends its first flight and then waits for our proof (the request with the
   * token its `421` handed us). A lost proof would wait for the server's next `421`, which only our reports bring, at
   * most one a round trip: three lossy legs a try, a stall of several round trips at 20% loss. So while the server has
   * sent no more than we did (on the wire: what it may send an address it has not seen proven, so it may still be
   * waiting), the proof goes again when the stream next acts (a frame in, a report out: in a stall, the report timer)
   * once the last one has had time to show (the first reply's delay: a round trip and a little more), at most
   * MAX_PROOF_REPEATS times. Once proven, the server sends
   * more than it received, and a proof it gets again is a repeat it ignores (server.ts).
   */
  private repeatProof(req: Req, nowMs: number): void {
    const p = req.proof;
    if (p === null || req.phase !== 'udp-streaming' || req.origin.token === null || p.repeats >= MAX_PROOF_REPEATS) return;
    const spacing = Math.min(1000, Math.max(20, req.wire.replyMs ?? 200));
    if (nowMs - p.atMs < spacing) return;
    p.repeats++;
    p.atMs = nowMs;
    this.stats.proofRepeats++;
    // a proof, never a resend (see sendUdp): until session 68 it took the request's resend count, and a repeat the
    // server had answered counted as a loss and put the client's whole prefix in high-loss mode
    this.sendUdp(req, nowMs, false);
    req.deadline = null;
  }

  private udpTimeout(req: Req, nowMs: number): void {
    if (req.origin.knowledge === 'unknown' && req.resends >= this.opts.fallbackAfterResends) {
      req.origin.knowledge = 'plain';
      for (const r of [...this.reqs.values()]) {
        if (r.origin === req.origin && channelOf(r.phase) === 'udp' && r.inbound === null) this.fallBack(r, 'timeout', nowMs);
      }
      return;
    }
    if (req.resends >= this.opts.maxResends) {
      this.fail(req, 'DHTTP_ERR_TIMEOUT', `no answer after ${req.resends} resends`, nowMs);
      return;
    }
    req.resends++;
    this.stats.resends++;
    this.events.push({ type: 'resend', requestId: req.idHex, attempt: req.resends, overTcp: false });
    this.sendUdp(req, nowMs, true);
  }

  private fallBack(req: Req, reason: FallbackReason, nowMs: number): void {
    this.stats.fallbacks++;
    this.events.push({ type: 'fallback', requestId: req.idHex, reason });
    this.sendHttp(req, nowMs);
  }

  // ------------------------------------------------------------------------------------------
  // DHTTP over our own TCP connection

  private sendDhttpTcp(req: Req, resend: boolean, nowMs: number): void {
    const origin = req.origin;
    let conn = origin.dhttpConn === null ? undefined : this.conns.get(origin.dhttpConn);
    if (conn === undefined) {
      conn = this.connect(origin, 'dhttp-out');
      origin.dhttpConn = conn.key;
    }
    this.moveTo(req, overTcp(req.phase));
    req.conn = conn.key;
    req.inbound = null;
    req.lastSendMs = nowMs;
    req.deadline = nowMs + this.opts.tcpTimeoutMs;
    const data = encodeRequest({ id: req.id, otherPort: this.opts.udpPort, resend, http: req.http });
    this.write(conn, data);
  }

  private drainDhttp(conn: Conn, nowMs: number, closing = false): void {
    const stream = conn.dhttp as DhttpResponseStream;
    for (;;) {
      let item;
      try {
        item = stream.next();
      } catch (e) {
        this.poisoned(conn, e, nowMs, closing);
        return;
      }
      if (item === null) break;
      const idHex = idToHex(item.id);
      if (conn.current === idHex) conn.current = null;
      const req = this.reqs.get(idHex);
      if (req === undefined || channelOf(req.phase) === 'http') {
        this.dropUnmatched('tcp', idHex);
        continue;
      }
      req.origin.knowledge = 'dhttp';
      const r = item.response;
      this.takeToken(req, r, nowMs);
      if (this.announced(req, r, 'tcp', conn.key, nowMs, conn.lastRxNs)) continue;
      if (retryAsked(r) === 'tcp' && this.answeredRetryOverTcp(req, 'tcp', nowMs)) continue;
      this.complete(req, r, 'tcp', nowMs, conn.lastRxNs);
    }
    // An inbound answer in progress keeps its request alive (no UDP resend while bytes flow).
    if (conn.kind === 'inbound' && conn.current !== null) {
      const req = this.reqs.get(conn.current);
      if (req !== undefined && req.inbound === conn.key) req.deadline = nowMs + this.opts.tcpTimeoutMs;
    }
  }

  // ------------------------------------------------------------------------------------------
  // Plain HTTP/1.1

  private sendHttp(req: Req, nowMs: number): void {
    if (req.registered) {
      // The ID no longer travels; the native table may let it go.
      this.actions.push({ type: 'forget-id', id: req.id });
      req.registered = false;
    }
    this.moveTo(req, 'http-queued');
    req.conn = null;
    req.inbound = null;
    req.deadline = nowMs + this.opts.tcpTimeoutMs;
    req.origin.httpQueue.push(req);
    this.pumpHttp(req.origin, nowMs);
  }

  private pumpHttp(origin: Origin, nowMs: number): void {
    if (origin.httpInFlight !== null || origin.httpQueue.length === 0) return;
    let conn = origin.httpConn === null ? undefined : this.conns.get(origin.httpConn);
    if (conn === undefined) {
      conn = this.connect(origin, 'http');
      origin.httpConn = conn.key;
    }
    const req = origin.httpQueue.shift() as Req;
    origin.httpInFlight = req;
    this.moveTo(req, 'http-sent');
    req.conn = conn.key;
    req.httpBytesAtSend = conn.received;
    req.lastSendMs = nowMs;
    req.deadline = nowMs + this.opts.tcpTimeoutMs;
    (conn.http as ResponseParser).expect(req.method);
    this.write(conn, req.http);
  }

  private drainHttp(conn: Conn, nowMs: number, closing = false): void {
    const parser = conn.http as ResponseParser;
    const origin = conn.origin as Origin;
    for (;;) {
      let res;
      try {
        res = parser.next();
      } catch (e) {
        this.poisoned(conn, e, nowMs, closing);
        return;
      }
      if (res === null) break;
      const req = origin.httpInFlight;
      if (req === null || req.conn !== conn.key) {
        this.poisoned(conn, new HttpParseError('HTTP_ERR_UNSOLICITED', 'response without a request'), nowMs, closing);
        return;
      }
      origin.httpInFlight = null;
      const keepAlive = keepsAlive(res);
      if (req.phase === 'done') {
        this.drop('http', 'cancelled', 'duplicate', req.idHex);
      } else {
        this.complete(req, res, 'http', nowMs, conn.lastRxNs);
      }
      if (!keepAlive) {
        this.closeConn(conn, nowMs);
        return;
      }
      this.pumpHttp(origin, nowMs);
    }
  }


  // ------------------------------------------------------------------------------------------
  // Connections

  private newConn(key: number, kind: ConnKind, origin: Origin | null): Conn {
    return { key, kind, origin, open: false, pending: [], dhttp: null, http: null, received: 0, firstBytes: '', current: null, lastRxMs: 0, lastRxNs: null };
  }

  private connect(origin: Origin, kind: 'dhttp-out' | 'http'): Conn {
    const key = this.nextConnKey++;
    const conn = this.newConn(key, kind, origin);
    if (kind === 'http') {
      conn.http = new ResponseParser({ maxBodyBytes: this.opts.maxBodyBytes });
    } else {
      conn.dhttp = new DhttpResponseStream({
        maxBodyBytes: this.opts.maxBodyBytes,
        // Our own connection: an unknown ID is read (as a GET answer) and dropped, not fatal.
        methodOf: (id) => {
          const idHex = idToHex(id);
          return this.reqs.get(idHex)?.method ?? this.completed.get(idHex) ?? 'GET';
        },
      });
    }
    this.conns.set(key, conn);
    this.stats.connections.opened++;
    this.actions.push({ type: 'connect', conn: key, to: { host: origin.host, port: origin.port } });
    return conn;
  }

  private write(conn: Conn, data: Uint8Array): void {
    if (conn.open) this.actions.push({ type: 'send-tcp', conn: conn.key, data });
    else conn.pending.push(data);
  }

  /** A stream broke the protocol: close the connection, count it, and recover its requests. */
  private poisoned(conn: Conn, e: unknown, nowMs: number, closing: boolean): void {
    const code = codeOf(e);
    const cat = code === 'DHTTP_ERR_UNKNOWN_ID' ? 'unknownId' : 'malformed';
    this.drop(conn.kind === 'http' ? 'http' : 'tcp', code, cat);
    // A DHTTP connection answered in plain HTTP: the origin does not speak DHTTP.
    if (conn.kind === 'dhttp-out' && code === 'DHTTP_ERR_BAD_ID' && conn.firstBytes.startsWith('HTTP/') && conn.origin !== null) {
      const origin = conn.origin;
      origin.knowledge = 'plain';
      this.conns.delete(conn.key);
      if (!closing) this.closeAction(conn);
      if (origin.dhttpConn === conn.key) origin.dhttpConn = null;
      for (const r of [...this.reqs.values()]) if (r.conn === conn.key && channelOf(r.phase) === 'tcp') this.fallBack(r, 'http-answer', nowMs);
      return;
    }
    this.conns.delete(conn.key);
    if (!closing) this.closeAction(conn);
    this.afterClose(conn, { code }, false, nowMs);
  }

  private closeConn(conn: Conn, nowMs: number): void {
    this.conns.delete(conn.key);
    this.closeAction(conn);
    this.afterClose(conn, null, false, nowMs);
  }

  private closeAction(conn: Conn): void {
    this.stats.connections.closedByUs++;
    this.actions.push({ type: 'close-tcp', conn: conn.key });
  }

  /** The connection is gone (already removed from the table): recover or fail what depended on it. */
  private afterClose(conn: Conn, error: { code: string } | null, neverOpened: boolean, nowMs: number): void {
    const origin = conn.origin;
    if (conn.kind === 'inbound') {
      // A partly received answer: resend over UDP at once (the resend flag makes the server use TCP).
      for (const req of this.reqs.values()) {
        if (req.inbound === conn.key) {
          req.inbound = null;
          req.deadline = nowMs;
          // DTD: a body announced as following on this connection will not come: ask again from scratch.
          if (dtdOf(req.phase) === 'sending') this.moveTo(req, channelOf(req.phase) === 'tcp' ? 'tcp' : 'udp');
        }
      }
      return;
    }
    if (origin === null) return;
    if (conn.kind === 'dhttp-out') {
      if (origin.dhttpConn === conn.key) origin.dhttpConn = null;
      const stranded = [...this.reqs.values()].filter((r) => channelOf(r.phase) === 'tcp' && r.conn === conn.key);
      for (const req of stranded) {
        if (neverOpened) {
          this.fail(req, 'DHTTP_ERR_CONNECT', `cannot connect to ${origin.key}: ${error?.code ?? 'closed'}`, nowMs);
        } else if (!IDEMPOTENT.has(req.method)) {
          this.fail(req, 'DHTTP_ERR_CONNECTION_CLOSED', `connection closed before the answer (${error?.code ?? 'EOF'}); ${req.method} is not repeated`, nowMs);
        } else if (req.resends >= this.opts.maxResends) {
          this.fail(req, 'DHTTP_ERR_TIMEOUT', `connection closed and ${req.resends} resends used`, nowMs);
        } else {
          req.resends++;
          this.stats.resends++;
          this.events.push({ type: 'resend', requestId: req.idHex, attempt: req.resends, overTcp: true });
          this.sendDhttpTcp(req, true, nowMs);
        }
      }
      return;
    }
    // plain HTTP
    if (origin.httpConn === conn.key) origin.httpConn = null;
    const req = origin.httpInFlight;
    if (req !== null && req.conn === conn.key) {
      origin.httpInFlight = null;
      if (req.phase === 'done') {
        // cancelled or failed while on the wire: nothing to do
      } else if (neverOpened) {
        this.fail(req, 'DHTTP_ERR_CONNECT', `cannot connect to ${origin.key}: ${error?.code ?? 'refused'}`, nowMs);
        for (const q of origin.httpQueue.splice(0)) this.fail(q, 'DHTTP_ERR_CONNECT', `cannot connect to ${origin.key}`, nowMs);
        return;
      } else if (conn.received === req.httpBytesAtSend && IDEMPOTENT.has(req.method) && !req.httpRetried) {
        req.httpRetried = true;
        this.moveTo(req, 'http-queued');
        origin.httpQueue.unshift(req);
      } else {
        this.fail(req, 'DHTTP_ERR_CONNECTION_CLOSED', `connection closed before the whole answer (${error?.code ?? 'EOF'})`, nowMs);
      }
    } else if (neverOpened) {
      for (const q of origin.httpQueue.splice(0)) this.fail(q, 'DHTTP_ERR_CONNECT', `cannot connect to ${origin.key}`, nowMs);
      return;
    }
    this.pumpHttp(origin, nowMs);
  }

  // ------------------------------------------------------------------------------------------
  // Completion

  private originFor(target: Target): Origin {
    const key = `${target.host}:${target.port}`;
    let origin = this.origins.get(key);
    if (origin === undefined) {
      origin = { key, host: target.host, port: target.port, knowledge: 'unknown', dhttpConn: null, httpConn: null, httpQueue: [], httpInFlight: null, token: null };
      this.origins.set(key, origin);
    }
    return origin;
  }

  /** The one way a request changes phase: a move `TRANSITIONS` does not list is our bug, refused by name. */
  private moveTo(req: Req, next: Phase): void {
    if (next === req.phase) return;
    if (!TRANSITIONS[req.phase].includes(next)) {
      throw new LocalProtocolError('DHTTP_ERR_INTERNAL', `request ${req.idHex} cannot move from ${req.phase} to ${next}`);
    }
    req.phase = next;
  }

  private register(req: Req): void {
    if (req.registered) return;
    req.registered = true;
    this.actions.push({ type: 'expect-id', id: req.id });
  }

  private complete(req: Req, response: HttpResponse, channel: Channel, nowMs: number, rxNs: bigint | null): void {
    this.stats.responses[channel]++;
    this.finish(req);
    this.events.push({
      type: 'response',
      requestId: req.idHex,
      response,
      channel,
      resends: req.resends,
      sentAtMs: req.sentAtMs,
      receivedAtMs: nowMs,
      ...(rxNs !== null ? { rxNs } : {}),
    });
  }

  private fail(req: Req, code: string, message: string, nowMs: number): void {
    this.stats.failed++;
    this.finish(req);
    this.events.push({ type: 'request-failed', requestId: req.idHex, error: new DhttpError(code, message) });
    this.unhookHttp(req, nowMs);
  }

  /**
   * A plain HTTP request ended early (failed or cancelled): drop it from the queue, or, when it is on the
   * wire, close the connection (its answer would block the ones behind it) and carry on with the queue.
   */
  private unhookHttp(req: Req, nowMs: number): void {
    const origin = req.origin;
    origin.httpQueue = origin.httpQueue.filter((r) => r !== req);
    if (origin.httpInFlight !== req) return;
    const conn = req.conn === null ? undefined : this.conns.get(req.conn);
    if (conn !== undefined) this.closeConn(conn, nowMs);
    else origin.httpInFlight = null;
  }

  private finish(req: Req): void {
    this.moveTo(req, 'done');
    this.reqs.delete(req.idHex);
    req.deadline = null;
    if (req.registered) {
      req.registered = false;
      this.actions.push({ type: 'forget-id', id: req.id });
    }
    this.remember(req);
  }

  private remember(req: Req): void {
    this.completed.set(req.idHex, req.method);
    while (this.completed.size > this.opts.completedMemory) {
      const oldest = this.completed.keys().next().value as string;
      this.completed.delete(oldest);
    }
  }

  private dropUnmatched(channel: Channel, idHex: string): void {
    if (this.completed.has(idHex)) this.drop(channel, 'duplicate', 'duplicate', idHex);
    else this.drop(channel, 'unknown-id', 'unknownId', idHex);
  }

  private drop(channel: Channel, reason: string, cat: 'unknownId' | 'duplicate' | 'malformed', requestId?: string): void {
    this.stats.dropped[cat]++;
    this.stats.dropped.total++;
    this.events.push(requestId === undefined ? { type: 'dropped', channel, reason } : { type: 'dropped', channel, reason, requestId });
  }
}

