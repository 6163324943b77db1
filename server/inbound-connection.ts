// One client-opened TCP connection to the reference server: a DHTTP request stream (answers framed by request
// ID, DTD on the connection's own responder) or plain HTTP/1.1 (keep-alive, pipelining, content codings).
// Every byte is hostile: malformed input is counted by its error code and closes the connection after the
// answers before it; the pipeline, the output queue and the time a request may take to arrive are bounded.
import type * as net from 'net';
import { encodeResponse, idToHex, isDhttpStreamStart } from '../protocol/dhttp/wire';
import { RequestParser, getHeader, serializeResponse, type HttpRequest } from '../protocol/dhttp/http1';
import { DhttpRequestStream } from '../protocol/dhttp/stream';
import { isDecisionRequest } from '../protocol/dtd/messages';
import type { BodyBudget } from './body-budget';
import { BodyWriter } from './body-writer';
import { codeResponse, type CodedBodyCache } from './content-coding';
import { planFor } from './dtd';
import { DtdResponder, type DtdResponderOptions } from './dtd-responder';
import { errorCode } from './errors';
import { simpleResponse, type FileResponse, type FileServer } from './files';
import type { ServerLimits } from './limits';

/** The server's DTD settings a connection's responder shares: on/off, the counters, the clock. */
export type InboundDtd = Pick<DtdResponderOptions<Uint8Array>, 'enabled' | 'counters' | 'now'>;

/** What a connection reports to the server's counters. */
export interface ConnHooks {
  malformed(code: string): void;
  internalError(): void;
  headTimeout(): void;
  dhttpRequest(): void;
  httpRequest(): void;
}

type Parsed =
  | { kind: 'dhttp'; id: Uint8Array; request: HttpRequest }
  | { kind: 'http'; request: HttpRequest }
  | { kind: 'bad-http'; code: string };

/** DTD bodies held at once on one client-opened DHTTP connection; more are sent at once. */
const HOLDS_PER_CONNECTION = 64;
/** DTD decisions remembered per connection, so a late one is told apart from one naming nothing. */
const DECIDED_PER_CONNECTION = 256;

/** Bodies are never accepted (GET/HEAD only), so a client-opened connection may buffer at most this much. */
const INBOUND_HTTP_LIMITS = { maxBodyBytes: 1024 * 1024 };

/**
 * One client-opened TCP connection: either a DHTTP request stream (first byte >= 0x80) or plain HTTP/1.1.
 * Requests are answered strictly in order. Parsed requests are pulled from the parser only while fewer
 * than `maxPipelined` wait and their bodies come to less than INBOUND_HTTP_LIMITS.maxBodyBytes, and reading
 * pauses while that many wait or the socket's unsent output exceeds `writeHighWater`, so neither the input nor
 * the output side grows without bound.
 */
export class InboundConnection {
  private dhttp: DhttpRequestStream | null = null;
  private http: RequestParser | null = null;
  private readonly queue: Parsed[] = [];
  /**
   * Body bytes of the requests pulled from the parser and not yet answered (queued, or being answered). Nothing
   * reads them (GET/HEAD only), but each may be up to INBOUND_HTTP_LIMITS.maxBodyBytes: counted in bytes as well
   * as in requests, or a client whose answers wait for its address's body budget had its connection hold
   * maxPipelined + 1 bodies of a MiB each (33 MiB a connection, ~1 GiB from one address; fuzz s58).
   */
  private queuedBodyBytes = 0;
  private working = false;
  /** No more requests will be taken (error, Connection: close, or the client ended): close when drained. */
  private stopParsing = false;
  private ended = false;
  private paused = false;
  /**
   * DTD on this connection: held bodies by request ID (bounded like the pipeline; a file stays on disk and holds
   * no budget), each held until its decision or the connection's end; the context is the request's ID.
   */
  private readonly dtd: DtdResponder<Uint8Array>;
  private readonly out: BodyWriter;
  /** Runs from the first byte of a request until it is complete (limits.headTimeoutMs). */
  private headDeadline: NodeJS.Timeout | null = null;

  constructor(
    private readonly sock: net.Socket,
    private readonly files: FileServer,
    private readonly coded: CodedBodyCache,
    private readonly limits: ServerLimits,
    dtd: InboundDtd,
    bodies: BodyBudget,
    private readonly hooks: ConnHooks,
  ) {
    const address = sock.remoteAddress ?? '';
    this.out = new BodyWriter(sock, address, bodies, limits.writeHighWater);
    this.dtd = new DtdResponder({
      ...dtd,
      maxHolds: HOLDS_PER_CONNECTION,
      holdTimeoutMs: Infinity, // never expired: held until decided or the connection closes
      recentMemory: DECIDED_PER_CONNECTION,
      // Nothing is lost on the client's own connection: a body sent after PROCEED is not kept for a repeat.
      repeatProceeds: false,
      budget: bodies,
      addressOf: () => address,
    });
    sock.on('data', (chunk: Buffer) => this.onData(chunk));
    sock.on('end', () => {
      // allowHalfOpen: answer what was asked, then close our side.
      this.ended = true;
      void this.pump();
    });
    sock.on('drain', () => this.flowControl());
    sock.on('close', () => {
      this.clearHeadDeadline();
      this.dtd.close();
    });
  }

  private armHeadDeadline(): void {
    this.headDeadline = setTimeout(() => {
      this.headDeadline = null;
      // Paused by us (answers not yet written, the pipeline full): the wait is ours, not the client's.
      if (this.paused) return this.armHeadDeadline();
      this.hooks.headTimeout();
      this.sock.destroy();
    }, this.limits.headTimeoutMs);
    this.headDeadline.unref();
  }

  private clearHeadDeadline(): void {
    if (this.headDeadline !== null) clearTimeout(this.headDeadline);
    this.headDeadline = null;
  }

  private onData(chunk: Buffer): void {
    if (this.stopParsing || chunk.length === 0) return;
    if (this.headDeadline === null) this.armHeadDeadline();
    if (!this.dhttp && !this.http) {
      if (isDhttpStreamStart(chunk[0])) this.dhttp = new DhttpRequestStream(INBOUND_HTTP_LIMITS);
      else this.http = new RequestParser(INBOUND_HTTP_LIMITS);
    }
    (this.dhttp ?? this.http)?.push(chunk);
    this.pull();
    void this.pump();
  }

  /** Moves complete requests from the parser to the queue while there is room. */
  private pull(): void {
    try {
      while (!this.stopParsing && !this.pipelineFull()) {
        if (this.dhttp) {
          const m = this.dhttp.next();
          if (!m) break;
          this.hooks.dhttpRequest();
          this.clearHeadDeadline();
          this.queuedBodyBytes += m.request.body.length;
          this.queue.push({ kind: 'dhttp', id: m.id, request: m.request });
        } else if (this.http) {
          const r = this.http.next();
          if (!r) break;
          this.hooks.httpRequest();
          this.clearHeadDeadline();
          this.queuedBodyBytes += r.body.length;
          this.queue.push({ kind: 'http', request: r });
          if (!keepAlive(r)) this.stopParsing = true;
        } else {
          break;
        }
      }
    } catch (e) {
      const code = errorCode(e);
      this.hooks.malformed(code);
      this.stopParsing = true;
      // Plain HTTP gets a 400 after the good requests before it; a broken DHTTP stream has no ID to
      // answer, so it is simply closed once the requests before the error are answered.
      if (this.http) this.queue.push({ kind: 'bad-http', code });
    }
    this.flowControl();
  }

  /** As many requests wait as the connection may hold: maxPipelined of them, or a request body's worth of bytes. */
  private pipelineFull(): boolean {
    return this.queue.length >= this.limits.maxPipelined || this.queuedBodyBytes >= INBOUND_HTTP_LIMITS.maxBodyBytes;
  }

  private flowControl(): void {
    const full = this.pipelineFull() || this.sock.writableLength > this.limits.writeHighWater;
    if (full && !this.paused) {
      this.paused = true;
      this.sock.pause();
    } else if (!full && this.paused) {
      this.paused = false;
      if (!this.stopParsing) this.sock.resume();
    }
  }

  private async pump(): Promise<void> {
    if (this.working) return;
    this.working = true;
    try {
      while (this.queue.length > 0 && !this.sock.destroyed) {
        const item = this.queue.shift() as Parsed;
        try {
          await this.answer(item);
        } catch {
          // Could not produce an answer (a bug, not the peer's fault): the stream cannot stay in order.
          this.hooks.internalError();
          this.queue.length = 0;
          this.queuedBodyBytes = 0;
          this.sock.destroy();
          break;
        }
        if (item.kind !== 'bad-http') this.queuedBodyBytes -= item.request.body.length;
        this.pull();
      }
    } finally {
      this.working = false;
    }
    if (this.queue.length === 0 && (this.stopParsing || this.ended)) this.finish();
  }

  private async answer(item: Parsed): Promise<void> {
    if (item.kind === 'bad-http') {
      await this.out.write(serializeResponse(simpleResponse(400, [['Connection', 'close']])));
      this.queue.length = 0;
      this.queuedBodyBytes = 0;
      return;
    }
    const req = item.request;
    if (item.kind === 'dhttp' && isDecisionRequest(req)) {
      await this.decision(item.id, req);
      return;
    }
    const dtdMode = item.kind === 'dhttp' ? this.dtd.mode(req.headers) : null;
    const res = await this.files.handle(req, { reprDigest: dtdMode !== null, stream: true });
    const head = req.method === 'HEAD';
    if (item.kind === 'dhttp') {
      // On the client's own connection a body sent at once cannot be cut without cutting the requests behind
      // it, so only `hold` changes anything here; otherwise the answer (with its digest) goes as usual.
      // A held body counts against the body budget (a file stays on disk); no room: it goes at once.
      const held = planFor(dtdMode, req.method, res) === 'hold' ? this.dtd.hold(idToHex(item.id), res, item.id) : null;
      if (held !== null) {
        await this.out.write(encodeResponse(item.id, serializeResponse(held)));
        return;
      }
      this.dtd.countPayload(res, req.method);
      await this.send(res, head, item.id);
      return;
    }
    // plain HTTP/1.1: compressed as real servers do (content-coding.ts); a file streamed from disk goes as it is
    const out: FileResponse = res.file === undefined ? codeResponse(res, getHeader(req.headers, 'accept-encoding'), this.coded) : res;
    this.dtd.countPayload(out, req.method);
    const headers = out.headers.filter(([n]) => n.toLowerCase() !== 'connection');
    headers.push(['Connection', keepAlive(req) ? 'keep-alive' : 'close']);
    await this.send({ ...out, headers }, head, null);
  }

  /** One answer: its head, then its body (from memory, or from disk a chunk at a time); `id`: DHTTP framing. */
  private async send(res: FileResponse, head: boolean, id: Uint8Array | null): Promise<void> {
    const file = res.file;
    const http = serializeResponse(res, file === undefined ? { head } : { bodyLength: file.size });
    await this.out.write(id === null ? http : encodeResponse(id, http));
    if (file !== undefined && !head && !(await this.out.writeFile(file))) this.hooks.internalError();
  }

  /** PROCEED / DON'T-BOTHER on this connection; a decided body stops counting against the budget (the writer charges what it queues). */
  private async decision(id: Uint8Array, req: HttpRequest): Promise<void> {
    const proceed = this.dtd.decide(req, idToHex(id), false);
    if (proceed === null) return;
    this.dtd.countPayload(proceed.res, 'GET');
    await this.send(proceed.res, false, id);
  }

  private finish(): void {
    if (!this.sock.destroyed) this.sock.end();
  }
}

function keepAlive(r: HttpRequest): boolean {
  const conn = getHeader(r.headers, 'connection') ?? undefined;
  if (hasToken(conn, 'close')) return false;
  if (r.version === 'HTTP/1.0') return hasToken(conn, 'keep-alive');
  return true;
}

function hasToken(value: string | undefined, token: string): boolean {
  if (value === undefined) return false;
  return value
    .toLowerCase()
    .split(',')
    .some((t) => t.trim() === token);
}
