/**
 * HTTP/1.1 messages (RFC 9112): serializers and small, strict, incremental parsers.
 *
 * Parsers treat their input as hostile: every size is bounded, every violation is an HttpParseError
 * (a RemoteProtocolError) with a stable `HTTP_ERR_...` code, and nothing else is ever thrown.
 * Parsing is eager: `push(bytes)` runs the state machine as far as the bytes allow and queues complete
 * messages; `next()` returns them one at a time, `null` when none is ready, and throws the recorded
 * error once the good messages before it have been drained (the parser is then dead for good).
 */
import { LocalProtocolError, ProtocolError } from '../errors';
import { ByteQueue, concatBytes, latin1Decode, latin1Encode } from './bytes';
import { HttpParseError } from './errors';

export type HttpHeaders = [string, string][];

export interface HttpRequest {
  method: string;
  target: string;
  headers: HttpHeaders;
  body: Uint8Array;
  /** Set by the parsers; serializers always write HTTP/1.1. */
  version?: HttpVersion;
}

export interface HttpResponse {
  status: number;
  reason: string;
  headers: HttpHeaders;
  body: Uint8Array;
  /** Set by the parsers; serializers always write HTTP/1.1. */
  version?: HttpVersion;
}

export type HttpVersion = 'HTTP/1.0' | 'HTTP/1.1';

export interface HttpLimits {
  /** Start line + header fields + the empty line (and, separately, the trailer section). Default 16 KiB. */
  maxHeaderBytes?: number;
  /** Header fields per message (and trailer fields per message). Default 100. */
  maxHeaders?: number;
  /** Body bytes per message. Default 64 MiB. */
  maxBodyBytes?: number;
}

export const DEFAULT_MAX_HEADER_BYTES = 16 * 1024;
export const DEFAULT_MAX_HEADERS = 100;
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024;
/** A chunk-size line (size + extensions) longer than this is refused. */
export const MAX_CHUNK_LINE_BYTES = 4096;

const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE_RE = /^[\t\x20-\x7e\x80-\xff]*$/;
const TARGET_RE = /^[\x21-\x7e]+$/;
const REASON_RE = /^[\t\x20-\x7e\x80-\xff]*$/;
const CR = 13;

function hasWideChar(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0xff) return true;
  return false;
}
const LF = 10;

// ---------------------------------------------------------------------------------------------
// Headers

/**
 * Value of the header `name` (case-insensitive), or null when absent. Several fields with the same
 * name are combined with ", " (RFC 9110 5.3).
 */
export function getHeader(headers: readonly (readonly [string, string])[], name: string): string | null {
  const want = name.toLowerCase();
  let out: string | null = null;
  for (const [k, v] of headers) {
    if (k.toLowerCase() === want) out = out === null ? v : `${out}, ${v}`;
  }
  return out;
}

/** Every value of the header `name` (case-insensitive), in order. */
export function getHeaders(headers: readonly (readonly [string, string])[], name: string): string[] {
  const want = name.toLowerCase();
  return headers.filter(([k]) => k.toLowerCase() === want).map(([, v]) => v);
}

export function isToken(s: string): boolean {
  return TOKEN_RE.test(s);
}

// ---------------------------------------------------------------------------------------------
// Serializers

/** True when a response with this status to a request with this method carries no body. */
export function responseHasNoBody(method: string, status: number): boolean {
  return method === 'HEAD' || (status >= 100 && status < 200) || status === 204 || status === 304;
}

function checkHeaders(headers: HttpHeaders): void {
  for (const [k, v] of headers) {
    if (!TOKEN_RE.test(k)) throw new LocalProtocolError('HTTP_ERR_BAD_HEADER', `invalid header name ${JSON.stringify(k)}`);
    if (!FIELD_VALUE_RE.test(v) || hasWideChar(v)) {
      throw new LocalProtocolError('HTTP_ERR_BAD_HEADER', `invalid value for header ${k}`);
    }
    if (v !== v.trim()) throw new LocalProtocolError('HTTP_ERR_BAD_HEADER', `header ${k} has surrounding whitespace`);
  }
}

function framingFree(headers: HttpHeaders): HttpHeaders {
  return headers.filter(([k]) => {
    const l = k.toLowerCase();
    return l !== 'content-length' && l !== 'transfer-encoding';
  });
}

function writeMessage(startLine: string, headers: HttpHeaders, body: Uint8Array | null): Uint8Array {
  let head = `${startLine}\r\n`;
  for (const [k, v] of headers) head += `${k}: ${v}\r\n`;
  head += '\r\n';
  const headBytes = latin1Encode(head);
  if (headBytes === null) throw new LocalProtocolError('HTTP_ERR_BAD_HEADER', 'header section is not ISO-8859-1');
  return body === null || body.length === 0 ? headBytes : concatBytes([headBytes, body]);
}

const METHODS_WITH_BODY = new Set(['POST', 'PUT', 'PATCH']);

/**
 * Serialize a request as HTTP/1.1. Any Content-Length / Transfer-Encoding header given is replaced by
 * a computed Content-Length, written when the body is non-empty or the method is POST, PUT or PATCH.
 * Throws LocalProtocolError HTTP_ERR_BAD_METHOD / HTTP_ERR_BAD_TARGET / HTTP_ERR_BAD_HEADER.
 */
export function serializeRequest(req: HttpRequest): Uint8Array {
  if (!TOKEN_RE.test(req.method)) throw new LocalProtocolError('HTTP_ERR_BAD_METHOD', `invalid method ${JSON.stringify(req.method)}`);
  if (!TARGET_RE.test(req.target)) throw new LocalProtocolError('HTTP_ERR_BAD_TARGET', `invalid request target ${JSON.stringify(req.target)}`);
  const headers = framingFree(req.headers);
  checkHeaders(headers);
  if (req.body.length > 0 || METHODS_WITH_BODY.has(req.method)) headers.push(['Content-Length', String(req.body.length)]);
  return writeMessage(`${req.method} ${req.target} HTTP/1.1`, headers, req.body);
}

/**
 * Serialize a response as HTTP/1.1, always Content-Length framed. With `head: true` (the answer to a
 * HEAD request) Content-Length is the length of `body` but the body is not written. 1xx and 204 get
 * no Content-Length and no body; 304 gets no body and no Content-Length. With `bodyLength` (a body the caller
 * writes after the head itself, e.g. from a file) only the head is written, its Content-Length that length.
 * Throws LocalProtocolError HTTP_ERR_BAD_STATUS / HTTP_ERR_BAD_REASON / HTTP_ERR_BAD_HEADER.
 */
export function serializeResponse(res: HttpResponse, opts: { head?: boolean; bodyLength?: number } = {}): Uint8Array {
  if (!Number.isInteger(res.status) || res.status < 100 || res.status > 599) {
    throw new LocalProtocolError('HTTP_ERR_BAD_STATUS', `invalid status ${res.status}`);
  }
  if (!REASON_RE.test(res.reason) || hasWideChar(res.reason)) {
    throw new LocalProtocolError('HTTP_ERR_BAD_REASON', 'invalid reason phrase');
  }
  const headers = framingFree(res.headers);
  checkHeaders(headers);
  const noLength = (res.status >= 100 && res.status < 200) || res.status === 204 || res.status === 304;
  if (opts.bodyLength !== undefined && !(Number.isSafeInteger(opts.bodyLength) && opts.bodyLength >= 0)) {
    throw new LocalProtocolError('HTTP_ERR_BAD_LENGTH', `invalid body length ${opts.bodyLength}`);
  }
  if (!noLength) headers.push(['Content-Length', String(opts.bodyLength ?? res.body.length)]);
  const writeBody = !noLength && !opts.head && opts.bodyLength === undefined;
  return writeMessage(`HTTP/1.1 ${res.status} ${res.reason}`, headers, writeBody ? res.body : null);
}

// ---------------------------------------------------------------------------------------------
// The parser core, shared by RequestParser, ResponseParser and the DHTTP streams (stream.ts).

function fail(code: string, message: string): never {
  throw new HttpParseError(code, message);
}

interface ParsedHead {
  version: HttpVersion;
  headers: HttpHeaders;
  // request
  method?: string;
  target?: string;
  // response
  status?: number;
  reason?: string;
}

function parseFieldLine(line: string, headers: HttpHeaders): void {
  const c0 = line.charCodeAt(0);
  if (c0 === 0x20 || c0 === 0x09) fail('HTTP_ERR_OBS_FOLD', 'obsolete line folding is not accepted');
  const colon = line.indexOf(':');
  if (colon <= 0) fail('HTTP_ERR_BAD_HEADER', 'header line without a field name and colon');
  const name = line.slice(0, colon);
  if (!TOKEN_RE.test(name)) fail('HTTP_ERR_BAD_HEADER', 'invalid header field name');
  let a = colon + 1;
  let b = line.length;
  while (a < b && (line.charCodeAt(a) === 0x20 || line.charCodeAt(a) === 0x09)) a++;
  while (b > a && (line.charCodeAt(b - 1) === 0x20 || line.charCodeAt(b - 1) === 0x09)) b--;
  const value = line.slice(a, b);
  if (!FIELD_VALUE_RE.test(value)) fail('HTTP_ERR_BAD_HEADER', `invalid value for header ${name}`);
  headers.push([name, value]);
}

function parseHead(kind: 'request' | 'response', text: string, maxHeaders: number): ParsedHead {
  const lines = text.split('\r\n');
  const start = lines[0];
  const headers: HttpHeaders = [];
  if (lines.length - 1 > maxHeaders) fail('HTTP_ERR_TOO_MANY_HEADERS', `more than ${maxHeaders} header fields`);
  for (let i = 1; i < lines.length; i++) parseFieldLine(lines[i], headers);
  if (kind === 'request') {
    const parts = start.split(' ');
    if (parts.length !== 3) fail('HTTP_ERR_BAD_REQUEST_LINE', 'request line is not "method SP target SP version"');
    const [method, target, version] = parts;
    if (!TOKEN_RE.test(method)) fail('HTTP_ERR_BAD_METHOD', 'invalid method token');
    if (!TARGET_RE.test(target)) fail('HTTP_ERR_BAD_TARGET', 'invalid request target');
    if (version !== 'HTTP/1.1' && version !== 'HTTP/1.0') fail('HTTP_ERR_BAD_VERSION', 'only HTTP/1.1 and HTTP/1.0 are accepted');
    const hosts = getHeaders(headers, 'host');
    if (hosts.length > 1 || (version === 'HTTP/1.1' && hosts.length === 0)) {
      fail('HTTP_ERR_BAD_HOST', 'an HTTP/1.1 request needs exactly one Host header');
    }
    return { version, headers, method, target };
  }
  const version = start.slice(0, 8);
  if (version !== 'HTTP/1.1' && version !== 'HTTP/1.0') {
    if (/^HTTP\/\d\.\d$/.test(version)) fail('HTTP_ERR_BAD_VERSION', 'only HTTP/1.1 and HTTP/1.0 are accepted');
    fail('HTTP_ERR_BAD_STATUS_LINE', 'status line does not start with HTTP/1.x');
  }
  if (start.charCodeAt(8) !== 0x20) fail('HTTP_ERR_BAD_STATUS_LINE', 'missing SP after version');
  const code = start.slice(9, 12);
  if (!/^[1-5][0-9][0-9]$/.test(code)) fail('HTTP_ERR_BAD_STATUS', 'status code is not 100..599');
  let reason = '';
  if (start.length > 12) {
    if (start.charCodeAt(12) !== 0x20) fail('HTTP_ERR_BAD_STATUS_LINE', 'missing SP after status code');
    reason = start.slice(13);
    if (!REASON_RE.test(reason)) fail('HTTP_ERR_BAD_REASON', 'invalid reason phrase');
  }
  return { version, headers, status: Number(code), reason };
}

type Framing = { kind: 'none' } | { kind: 'length'; length: number } | { kind: 'chunked' } | { kind: 'eof' };

function listValues(values: string[]): string[] {
  const out: string[] = [];
  for (const v of values) for (const part of v.split(',')) out.push(part.trim());
  return out;
}

function parseContentLength(headers: HttpHeaders, maxBody: number): number | null {
  const raw = getHeaders(headers, 'content-length');
  if (raw.length === 0) return null;
  const items = listValues(raw);
  let value: string | null = null;
  for (const it of items) {
    if (!/^[0-9]+$/.test(it)) fail('HTTP_ERR_BAD_CONTENT_LENGTH', 'Content-Length is not a number');
    const norm = it.replace(/^0+(?=.)/, '');
    if (value !== null && value !== norm) fail('HTTP_ERR_BAD_CONTENT_LENGTH', 'conflicting Content-Length values');
    value = norm;
  }
  if (value === null) fail('HTTP_ERR_BAD_CONTENT_LENGTH', 'empty Content-Length');
  if (value.length > 15 || Number(value) > maxBody) fail('HTTP_ERR_BODY_TOO_LARGE', `Content-Length ${value.slice(0, 20)} exceeds ${maxBody}`);
  return Number(value);
}

/** Framing of a message body (RFC 9112 6.3), strict: CL + TE together, or any coding but "chunked", is refused. */
function framingOf(head: ParsedHead, kind: 'request' | 'response', requestMethod: string, maxBody: number): Framing {
  const te = getHeaders(head.headers, 'transfer-encoding');
  const cl = parseContentLength(head.headers, maxBody);
  if (te.length > 0) {
    if (cl !== null) fail('HTTP_ERR_CL_TE_CONFLICT', 'both Content-Length and Transfer-Encoding');
    if (head.version === 'HTTP/1.0') fail('HTTP_ERR_BAD_TRANSFER_ENCODING', 'Transfer-Encoding in an HTTP/1.0 message');
    const codings = listValues(te).map((c) => c.toLowerCase());
    if (codings.length !== 1 || codings[0] !== 'chunked') {
      fail('HTTP_ERR_BAD_TRANSFER_ENCODING', 'only "Transfer-Encoding: chunked" is supported');
    }
  }
  if (kind === 'response' && responseHasNoBody(requestMethod, head.status ?? 0)) return { kind: 'none' };
  if (te.length > 0) return { kind: 'chunked' };
  if (cl !== null) return cl === 0 ? { kind: 'none' } : { kind: 'length', length: cl };
  return kind === 'request' ? { kind: 'none' } : { kind: 'eof' };
}

/** Hooks that specialise the core for plain HTTP and for DHTTP streams (stream.ts). */
export interface ParserHooks<P> {
  kind: 'request' | 'response';
  /** Bytes to read before each message (0, or 8 / 11 for DHTTP). */
  prefixBytes: number;
  /** Validate a prefix; throw a RemoteProtocolError to poison the stream. */
  readPrefix(prefix: Uint8Array): P;
  /** For responses: the method of the request this response answers (HEAD => no body). */
  requestMethod(prefix: P): string;
  /** Called when a final response head has been read (ResponseParser dequeues its method). */
  onFinalHead?(prefix: P): void;
  /** Whether a response may be delimited by the end of the connection. */
  allowCloseDelimited: boolean;
  /** Whether interim 1xx responses are skipped (plain HTTP) or refused (DHTTP streams). */
  skipInterim: boolean;
  /** Skip empty lines before a request line (RFC 9112 2.2). */
  skipLeadingCrlf: boolean;
  /**
   * Hand the message out as events as it arrives (head, body chunks, end: StreamingResponseParser) instead of
   * whole messages; the body limit still applies to the bytes handed out.
   */
  streamBody?: boolean;
  /** One message only (a `Connection: close` exchange): bytes after it are HTTP_ERR_TRAILING_DATA. */
  oneMessage?: boolean;
}

/** A response as it arrives (StreamingResponseParser): its head (body empty), body chunks in order, its end. */
export type ResponseEvent = { type: 'head'; response: HttpResponse } | { type: 'data'; bytes: Uint8Array } | { type: 'end' };

export interface Parsed<P> {
  prefix: P;
  message: HttpRequest | HttpResponse;
  /** Stream offset just past this message. */
  end: number;
}

type State =
  | 'prefix'
  | 'head'
  | 'body'
  | 'chunk-size'
  | 'chunk-data'
  | 'chunk-data-crlf'
  | 'trailers'
  | 'eof-body'
  | 'closed'
  | 'done'
  | 'dead';

/** Incremental HTTP/1.1 message parser core. Use RequestParser / ResponseParser / the DHTTP streams. */
export class Http1Core<P> {
  private readonly buf = new ByteQueue();
  private readonly out: Parsed<P>[] = [];
  private readonly events: ResponseEvent[] = [];
  private state: State;
  private error: ProtocolError | null = null;
  private ended = false;
  private offset = 0; // stream offset of buf[0]
  private consumed = 0;
  private scanPos = 0;
  private prefix: P | null = null;
  private head: ParsedHead | null = null;
  /** An interim (1xx) response was skipped and its final response has not begun: the answer is under way. */
  private interim = false;
  private bodyParts: Uint8Array[] = [];
  private bodyLength = 0;
  private remaining = 0;
  private trailerBytes = 0;
  private trailerCount = 0;
  private readonly maxHeaderBytes: number;
  private readonly maxHeaders: number;
  private readonly maxBodyBytes: number;

  constructor(private readonly hooks: ParserHooks<P>, limits: HttpLimits = {}) {
    this.maxHeaderBytes = limits.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
    this.maxHeaders = limits.maxHeaders ?? DEFAULT_MAX_HEADERS;
    this.maxBodyBytes = limits.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    this.state = hooks.prefixBytes > 0 ? 'prefix' : 'head';
  }

  /** Stream bytes belonging to the messages returned by next() so far. */
  get bytesConsumed(): number {
    return this.consumed;
  }

  /** Bytes held but not yet part of a complete message (bounded by the limits). */
  get bufferedBytes(): number {
    return this.buf.length + (this.hooks.streamBody ? 0 : this.bodyLength);
  }

  /** The error that poisoned this parser, or null. */
  get failure(): ProtocolError | null {
    return this.error;
  }

  /**
   * True when no partial message is buffered (a clean place for the connection to end). A message has begun once
   * its DHTTP prefix (already out of the buffer) or an interim response before it has been read.
   */
  get idle(): boolean {
    return (
      this.buf.length === 0 &&
      (this.state === 'head' || this.state === 'prefix' || this.state === 'closed' || this.state === 'done') &&
      this.head === null &&
      this.prefix === null &&
      !this.interim
    );
  }

  push(data: Uint8Array): void {
    if (this.ended) throw new LocalProtocolError('HTTP_ERR_AFTER_EOF', 'push() after end()');
    if (this.state === 'dead') return;
    if (this.state === 'done') {
      if (data.length > 0) this.poison(new HttpParseError('HTTP_ERR_TRAILING_DATA', 'bytes after the response'));
      return;
    }
    if (this.state === 'closed') {
      if (data.length > 0) this.poison(new HttpParseError('HTTP_ERR_DATA_AFTER_CLOSE', 'bytes after a close-delimited response'));
      return;
    }
    this.buf.push(data);
    this.run();
  }

  /** End of stream. Completes a close-delimited response; records HTTP_ERR_TRUNCATED mid-message. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.state === 'dead' || this.state === 'closed' || this.state === 'done') return;
    if (this.state === 'eof-body') {
      this.finish();
      this.state = 'closed';
      return;
    }
    if (!this.idle) this.poison(new HttpParseError('HTTP_ERR_TRUNCATED', 'connection ended inside a message'));
  }

  /** The next event of a streamed message (hooks.streamBody), null if none yet; throws the error that poisoned the parser. */
  nextEvent(): ResponseEvent | null {
    const ev = this.events.shift();
    if (ev !== undefined) return ev;
    if (this.error !== null) throw this.error;
    return null;
  }

  next(): Parsed<P> | null {
    const item = this.out.shift();
    if (item !== undefined) {
      this.consumed = item.end;
      return item;
    }
    if (this.error !== null) throw this.error;
    return null;
  }

  private poison(e: ProtocolError): void {
    this.error = e;
    this.state = 'dead';
    this.bodyParts = [];
  }

  private run(): void {
    try {
      while (this.step()) {
        /* keep going while progress is made */
      }
    } catch (e) {
      // Hooks and the head parser throw RemoteProtocolErrors; anything else is a bug of ours, but a
      // decoder must still fail with a named error rather than escape with a TypeError.
      this.poison(e instanceof ProtocolError ? e : new HttpParseError('HTTP_ERR_INTERNAL', String(e)));
    }
  }

  private consume(n: number): void {
    this.buf.skip(n);
    this.offset += n;
    this.scanPos = 0;
  }

  /** Find the end of a CRLF-terminated line starting at buf[0]; -1 if not yet complete. Rejects bare CR/LF. */
  private findLineEnd(limit: number, code: string): number {
    const len = this.buf.length;
    for (let i = this.scanPos; i < len; i++) {
      const b = this.buf.at(i);
      if (i > 0 && this.buf.at(i - 1) === CR && b !== LF) fail('HTTP_ERR_BARE_CR', 'CR not followed by LF');
      if (b === LF) {
        if (i === 0 || this.buf.at(i - 1) !== CR) fail('HTTP_ERR_BARE_LF', 'LF without CR');
        return i - 1;
      }
      if (i > limit) fail(code, `line longer than ${limit} bytes`);
    }
    this.scanPos = len;
    return -1;
  }

  /** One step of the state machine; false when more bytes are needed. */
  private step(): boolean {
    switch (this.state) {
      case 'prefix': {
        if (this.buf.length < this.hooks.prefixBytes) return false;
        const bytes = this.buf.take(this.hooks.prefixBytes);
        this.offset += this.hooks.prefixBytes;
        this.scanPos = 0;
        this.prefix = this.hooks.readPrefix(bytes);
        this.state = 'head';
        return true;
      }
      case 'head':
        return this.stepHead();
      case 'body': {
        const n = Math.min(this.remaining, this.buf.length);
        if (n === 0) return false;
        this.takeBody(n);
        this.remaining -= n;
        if (this.remaining === 0) this.finish();
        return true;
      }
      case 'chunk-size': {
        const end = this.findLineEnd(MAX_CHUNK_LINE_BYTES, 'HTTP_ERR_CHUNK_LINE_TOO_LONG');
        if (end < 0) return false;
        const line = latin1Decode(this.buf.peek(end));
        this.consume(end + 2);
        const m = /^([0-9A-Fa-f]+)([\t ;].*)?$/.exec(line);
        if (m === null) fail('HTTP_ERR_BAD_CHUNK', 'invalid chunk-size line');
        const ext = m[2] ?? '';
        if (ext !== '' && (!/^[\t ]*;/.test(ext) || !FIELD_VALUE_RE.test(ext))) fail('HTTP_ERR_BAD_CHUNK', 'invalid chunk extension');
        const digits = m[1].replace(/^0+(?=.)/, '');
        const size = digits.length > 12 ? Infinity : parseInt(digits, 16);
        if (size > this.maxBodyBytes - this.bodyLength) fail('HTTP_ERR_BODY_TOO_LARGE', `chunked body exceeds ${this.maxBodyBytes}`);
        if (size === 0) {
          this.state = 'trailers';
          this.trailerBytes = 0;
          this.trailerCount = 0;
        } else {
          this.remaining = size;
          this.state = 'chunk-data';
        }
        return true;
      }
      case 'chunk-data': {
        const n = Math.min(this.remaining, this.buf.length);
        if (n === 0) return false;
        this.takeBody(n);
        this.remaining -= n;
        if (this.remaining === 0) this.state = 'chunk-data-crlf';
        return true;
      }
      case 'chunk-data-crlf': {
        if (this.buf.length < 2) {
          if (this.buf.length === 1 && this.buf.at(0) !== CR) fail('HTTP_ERR_BAD_CHUNK', 'chunk data not followed by CRLF');
          return false;
        }
        if (this.buf.at(0) !== CR || this.buf.at(1) !== LF) fail('HTTP_ERR_BAD_CHUNK', 'chunk data not followed by CRLF');
        this.consume(2);
        this.state = 'chunk-size';
        return true;
      }
      case 'trailers': {
        const room = this.maxHeaderBytes - this.trailerBytes;
        const end = this.findLineEnd(Math.max(room, 0), 'HTTP_ERR_HEADER_TOO_LARGE');
        if (end < 0) return false;
        const line = latin1Decode(this.buf.peek(end));
        this.consume(end + 2);
        this.trailerBytes += end + 2;
        // the scan bounds the line's content, not its CRLF: the section is held to the limit here, as the head is
        if (this.trailerBytes > this.maxHeaderBytes) fail('HTTP_ERR_HEADER_TOO_LARGE', `trailer section exceeds ${this.maxHeaderBytes} bytes`);
        if (line === '') {
          this.finish();
          return true;
        }
        if (++this.trailerCount > this.maxHeaders) fail('HTTP_ERR_TOO_MANY_HEADERS', `more than ${this.maxHeaders} trailer fields`);
        parseFieldLine(line, []); // validated, then ignored
        return true;
      }
      case 'eof-body': {
        const n = this.buf.length;
        if (n === 0) return false;
        if (n > this.maxBodyBytes - this.bodyLength) fail('HTTP_ERR_BODY_TOO_LARGE', `body exceeds ${this.maxBodyBytes}`);
        this.takeBody(n);
        return false;
      }
      case 'done':
        if (this.buf.length > 0) fail('HTTP_ERR_TRAILING_DATA', 'bytes after the response');
        return false;
      case 'closed':
      case 'dead':
        return false;
    }
  }

  /** Moves n body bytes out of the buffer: kept for the whole message, or handed out at once when streaming. */
  private takeBody(n: number): void {
    const bytes = this.buf.take(n);
    if (this.hooks.streamBody) this.events.push({ type: 'data', bytes });
    else this.bodyParts.push(bytes);
    this.offset += n;
    this.bodyLength += n;
  }

  private stepHead(): boolean {
    if (this.hooks.skipLeadingCrlf && this.scanPos === 0) {
      while (this.buf.length >= 2 && this.buf.at(0) === CR && this.buf.at(1) === LF) this.consume(2);
      if (this.buf.length === 1 && this.buf.at(0) === CR) return false;
    }
    const len = this.buf.length;
    const limit = this.maxHeaderBytes;
    let found = -1;
    for (let i = this.scanPos; i < len; i++) {
      const b = this.buf.at(i);
      // every byte counts, the LF that ends the section too (checked after the end was found, limit + 1 bytes passed)
      if (i + 1 > limit) fail('HTTP_ERR_HEADER_TOO_LARGE', `header section exceeds ${limit} bytes`);
      if (i > 0 && this.buf.at(i - 1) === CR && b !== LF) fail('HTTP_ERR_BARE_CR', 'CR not followed by LF');
      if (b === LF) {
        if (i === 0 || this.buf.at(i - 1) !== CR) fail('HTTP_ERR_BARE_LF', 'LF without CR');
        if (i === 1) fail(this.hooks.kind === 'request' ? 'HTTP_ERR_BAD_REQUEST_LINE' : 'HTTP_ERR_BAD_STATUS_LINE', 'empty start line');
        if (i >= 3 && this.buf.at(i - 2) === LF) {
          found = i + 1;
          break;
        }
      } else if (b === 0) {
        fail('HTTP_ERR_BAD_HEADER', 'NUL byte in the header section');
      }
    }
    if (found < 0) {
      this.scanPos = len;
      if (len > limit) fail('HTTP_ERR_HEADER_TOO_LARGE', `header section exceeds ${limit} bytes`);
      return false;
    }
    const text = latin1Decode(this.buf.peek(found - 4));
    this.consume(found);
    const head = parseHead(this.hooks.kind, text, this.maxHeaders);
    const prefix = this.prefix as P;
    if (this.hooks.kind === 'response' && head.status !== undefined && head.status < 200) {
      if (head.status === 101) fail('HTTP_ERR_UPGRADE', '101 Switching Protocols was not asked for');
      if (!this.hooks.skipInterim) fail('HTTP_ERR_INTERIM', 'interim (1xx) responses are not allowed here');
      // Validate framing headers anyway, then skip the interim response.
      framingOf(head, 'response', 'GET', this.maxBodyBytes);
      this.interim = true;
      return true;
    }
    const method = this.hooks.kind === 'response' ? this.hooks.requestMethod(prefix) : '';
    const framing = framingOf(head, this.hooks.kind, method, this.maxBodyBytes);
    if (this.hooks.kind === 'response') this.hooks.onFinalHead?.(prefix);
    this.head = head;
    this.interim = false;
    this.bodyParts = [];
    this.bodyLength = 0;
    if (this.hooks.streamBody && this.hooks.kind === 'response') {
      this.events.push({ type: 'head', response: { status: head.status as number, reason: head.reason as string, headers: head.headers, body: new Uint8Array(0), version: head.version } });
    }
    switch (framing.kind) {
      case 'none':
        this.finish();
        break;
      case 'length':
        this.remaining = framing.length;
        this.state = 'body';
        break;
      case 'chunked':
        this.state = 'chunk-size';
        break;
      case 'eof':
        if (!this.hooks.allowCloseDelimited) fail('HTTP_ERR_UNFRAMED', 'response has neither Content-Length nor chunked framing');
        this.state = 'eof-body';
        break;
    }
    return true;
  }

  private finish(): void {
    if (this.hooks.streamBody) {
      this.events.push({ type: 'end' });
      this.head = null;
      this.prefix = null;
      this.bodyLength = 0;
      this.state = this.hooks.oneMessage ? 'done' : this.hooks.prefixBytes > 0 ? 'prefix' : 'head';
      return;
    }
    const head = this.head as ParsedHead;
    const body = this.bodyParts.length === 1 ? this.bodyParts[0] : concatBytes(this.bodyParts);
    const message: HttpRequest | HttpResponse =
      this.hooks.kind === 'request'
        ? { method: head.method as string, target: head.target as string, headers: head.headers, body, version: head.version }
        : { status: head.status as number, reason: head.reason as string, headers: head.headers, body, version: head.version };
    this.out.push({ prefix: this.prefix as P, message, end: this.offset });
    this.head = null;
    this.prefix = null;
    this.bodyParts = [];
    this.bodyLength = 0;
    this.state = this.hooks.oneMessage ? 'done' : this.hooks.prefixBytes > 0 ? 'prefix' : 'head';
  }
}

// ---------------------------------------------------------------------------------------------
// Public parsers

/** What every incremental parser over an Http1Core offers besides its own next(). */
export abstract class Http1Stream<P> {
  protected constructor(protected readonly core: Http1Core<P>) {}

  push(data: Uint8Array): void {
    this.core.push(data);
  }

  /** End of the byte stream: completes a close-delimited body; mid-message records HTTP_ERR_TRUNCATED (thrown by next()). */
  end(): void {
    this.core.end();
  }

  get bytesConsumed(): number {
    return this.core.bytesConsumed;
  }

  get bufferedBytes(): number {
    return this.core.bufferedBytes;
  }

  /** No partial message is buffered. */
  get idle(): boolean {
    return this.core.idle;
  }

  /** The error that poisoned the stream (also thrown by next() once drained), or null. */
  get failure(): ProtocolError | null {
    return this.core.failure;
  }
}

/** Server side: incremental HTTP/1.1 request parser (pipelining allowed). */
export class RequestParser extends Http1Stream<null> {
  constructor(limits: HttpLimits = {}) {
    super(
      new Http1Core<null>(
        {
          kind: 'request',
          prefixBytes: 0,
          readPrefix: () => null,
          requestMethod: () => 'GET',
          allowCloseDelimited: false,
          skipInterim: false,
          skipLeadingCrlf: true,
        },
        limits,
      ),
    );
  }

  /** The next complete request, null if none yet; throws the HttpParseError that poisoned the stream. */
  next(): HttpRequest | null {
    const p = this.core.next();
    return p === null ? null : (p.message as HttpRequest);
  }
}

/**
 * Client side: incremental HTTP/1.1 response parser. Call `expect(method)` for every request sent, in
 * order, so a response to HEAD is read without a body. With no method queued a response is read as an
 * answer to GET. Interim 1xx responses are skipped; 101 is refused.
 */
export class ResponseParser extends Http1Stream<null> {
  private readonly methods: string[];

  constructor(limits: HttpLimits = {}) {
    const methods: string[] = [];
    super(
      new Http1Core<null>(
        {
          kind: 'response',
          prefixBytes: 0,
          readPrefix: () => null,
          requestMethod: () => methods[0] ?? 'GET',
          onFinalHead: () => {
            methods.shift();
          },
          allowCloseDelimited: true,
          skipInterim: true,
          skipLeadingCrlf: false,
        },
        limits,
      ),
    );
    this.methods = methods;
  }

  expect(method: string): void {
    this.methods.push(method.toUpperCase());
  }

  next(): HttpResponse | null {
    const p = this.core.next();
    return p === null ? null : (p.message as HttpResponse);
  }

  /** Requests expected but not answered yet. */
  get pending(): number {
    return this.methods.length;
  }
}

/**
 * Client side, one response over a connection the client closes after it (`Connection: close`), handed out
 * as it arrives, h11-style: a `head` event (body empty), `data` events with the body bytes in order (de-chunked),
 * one `end`. Interim 1xx responses are skipped; a close-delimited body ends with `end()`; bytes after the
 * response are HTTP_ERR_TRAILING_DATA. The body limit counts the bytes handed out.
 */
export class StreamingResponseParser extends Http1Stream<null> {
  constructor(limits: HttpLimits & { method?: string } = {}) {
    const method = (limits.method ?? 'GET').toUpperCase();
    super(
      new Http1Core<null>(
        {
          kind: 'response',
          prefixBytes: 0,
          readPrefix: () => null,
          requestMethod: () => method,
          allowCloseDelimited: true,
          skipInterim: true,
          skipLeadingCrlf: false,
          streamBody: true,
          oneMessage: true,
        },
        limits,
      ),
    );
  }

  /** The next event, null if none yet; throws the HttpParseError that poisoned the stream once the events before it are read. */
  next(): ResponseEvent | null {
    return this.core.nextEvent();
  }
}

/**
 * One whole request in one buffer (the HTTP part of a DHTTP request datagram).
 * Throws HttpParseError; HTTP_ERR_INCOMPLETE when the message is cut short, HTTP_ERR_TRAILING_DATA when
 * bytes follow it.
 */
export function parseRequestDatagram(bytes: Uint8Array, limits: HttpLimits = {}): HttpRequest {
  const p = new RequestParser(limits);
  p.push(bytes);
  const req = p.next();
  if (req === null) fail('HTTP_ERR_INCOMPLETE', 'datagram ends inside the request');
  if (p.bytesConsumed !== bytes.length) fail('HTTP_ERR_TRAILING_DATA', 'bytes after the request');
  return req;
}

/**
 * One whole response in one buffer (the HTTP part of a DHTTP response datagram). It must be framed
 * (Content-Length or chunked, or a bodiless status) — HTTP_ERR_UNFRAMED otherwise.
 * `method` is the request's method (HEAD => no body).
 */
export function parseResponseDatagram(bytes: Uint8Array, opts: HttpLimits & { method?: string } = {}): HttpResponse {
  const method = (opts.method ?? 'GET').toUpperCase();
  const core = new Http1Core<null>(
    {
      kind: 'response',
      prefixBytes: 0,
      readPrefix: () => null,
      requestMethod: () => method,
      allowCloseDelimited: false,
      skipInterim: false,
      skipLeadingCrlf: false,
    },
    opts,
  );
  core.push(bytes);
  const res = core.next();
  if (res === null) fail('HTTP_ERR_INCOMPLETE', 'datagram ends inside the response');
  if (core.bytesConsumed !== bytes.length) fail('HTTP_ERR_TRAILING_DATA', 'bytes after the response');
  return res.message as HttpResponse;
}
