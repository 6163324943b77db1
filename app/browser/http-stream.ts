// Plain HTTP/1.1 GET whose body is handed over AS IT ARRIVES (the DhttpClient only gives whole responses),
// for the browser's `tcp` transport: painted in order, like a stock browser over TCP; and the same over TLS for
// https:// (Node's tls: no kernel timestamps through it).
//
// Runs over the native endpoint's outbound TCP (`Endpoint.connect` / `sendTcp`) so every chunk carries its
// kernel receive timestamp (CLOCK_REALTIME ns), on the same clock as the CATP frames' — the network floor of
// a tcp load is then measured the same way. One endpoint per stream, closed at the end.
//
// The response is untrusted: the head is bounded (16 KiB, 100 fields), Content-Length / chunked / close-
// delimited bodies are decoded strictly, the body is bounded (maxBodyBytes), and any violation ends the
// stream with a named error (HTTP_ERR_*), never a throw out of the callback.
import { lookup } from 'node:dns/promises';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import * as tls from 'node:tls';
import * as zlib from 'node:zlib';

import { Endpoint, realtimeNs, type Incoming } from '../../native';
import { parseTarget } from '../../protocol/dhttp';
import { ACCEPT_ENCODING, codingsOf } from '../content-coding';

export interface HttpStreamHead {
  status: number;
  reason: string;
  headers: [string, string][];
}

export interface HttpStreamHandlers {
  onHead(head: HttpStreamHead): void;
  /** Body bytes (de-chunked), in order, with the kernel receive time of the TCP segment batch that carried them. */
  onData(bytes: Uint8Array, rxNs: bigint): void;
  onEnd(): void;
  onError(err: HttpStreamError): void;
}

export class HttpStreamError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = 'HttpStreamError';
  }
}

const MAX_HEAD = 16 * 1024;
const MAX_FIELDS = 100;
const MAX_CHUNK_LINE = 4096;
const CRLF = Buffer.from('\r\n');

type BodyMode = { kind: 'length'; left: number } | { kind: 'chunked' } | { kind: 'eof' } | { kind: 'none' };

/** Incremental response decoder (sans-IO: bytes in, callbacks out). */
export class StreamingResponseDecoder {
  private buf: Buffer = Buffer.alloc(0);
  private head: HttpStreamHead | null = null;
  private body: BodyMode | null = null;
  private chunkLeft = -1; // -1: reading a chunk-size line; >0: data; 0: CRLF after data
  private trailers = false;
  private received = 0;
  done = false;
  failed: HttpStreamError | null = null;

  constructor(
    private readonly h: Pick<HttpStreamHandlers, 'onHead' | 'onData' | 'onEnd'>,
    private readonly maxBodyBytes = 64 * 1024 * 1024,
    private readonly method = 'GET',
  ) {}

  push(data: Uint8Array, rxNs: bigint): void {
    if (this.done || this.failed) return;
    try {
      this.buf = this.buf.length === 0 ? Buffer.from(data) : Buffer.concat([this.buf, data]);
      this.run(rxNs);
    } catch (e) {
      this.failed = e instanceof HttpStreamError ? e : new HttpStreamError('HTTP_ERR_INTERNAL', String(e));
      throw this.failed;
    }
  }

  /** The connection ended. Completes a close-delimited body; otherwise an error if mid-message. */
  end(): void {
    if (this.done || this.failed) return;
    if (this.body?.kind === 'eof') {
      this.finish();
      return;
    }
    this.failed = new HttpStreamError('HTTP_ERR_TRUNCATED', 'the connection ended inside the response');
    throw this.failed;
  }

  private finish(): void {
    this.done = true;
    this.h.onEnd();
  }

  private deliver(bytes: Buffer, rxNs: bigint): void {
    if (bytes.length === 0) return;
    this.received += bytes.length;
    if (this.received > this.maxBodyBytes) throw new HttpStreamError('HTTP_ERR_BODY_TOO_LARGE', `body over ${this.maxBodyBytes} bytes`);
    this.h.onData(new Uint8Array(bytes), rxNs);
  }

  private run(rxNs: bigint): void {
    if (this.head === null) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) {
        if (this.buf.length > MAX_HEAD) throw new HttpStreamError('HTTP_ERR_HEADER_TOO_LARGE', 'response head over 16 KiB');
        return;
      }
      if (end + 4 > MAX_HEAD) throw new HttpStreamError('HTTP_ERR_HEADER_TOO_LARGE', 'response head over 16 KiB');
      const text = this.buf.subarray(0, end).toString('latin1');
      this.buf = this.buf.subarray(end + 4);
      const head = parseHead(text);
      if (head.status >= 100 && head.status < 200) {
        // interim response: skip it and read the next head
        return this.run(rxNs);
      }
      this.head = head;
      this.body = bodyMode(head, this.method);
      this.h.onHead(head);
      if (this.body.kind === 'none') {
        this.finish();
        return;
      }
    }
    const body = this.body!;
    if (body.kind === 'eof') {
      const b = this.buf;
      this.buf = Buffer.alloc(0);
      this.deliver(b, rxNs);
      return;
    }
    if (body.kind === 'length') {
      const take = this.buf.subarray(0, Math.min(body.left, this.buf.length));
      this.buf = this.buf.subarray(take.length);
      body.left -= take.length;
      this.deliver(take, rxNs);
      if (body.left === 0) {
        if (this.buf.length > 0) throw new HttpStreamError('HTTP_ERR_TRAILING_DATA', 'bytes after the response');
        this.finish();
      }
      return;
    }
    // chunked
    for (;;) {
      if (this.trailers) {
        const end = this.buf.indexOf(CRLF);
        if (end < 0) {
          if (this.buf.length > MAX_HEAD) throw new HttpStreamError('HTTP_ERR_HEADER_TOO_LARGE', 'trailers too large');
          return;
        }
        const line = this.buf.subarray(0, end);
        this.buf = this.buf.subarray(end + 2);
        if (line.length === 0) {
          this.finish();
          return;
        }
        continue;
      }
      if (this.chunkLeft === -1) {
        const end = this.buf.indexOf(CRLF);
        if (end < 0) {
          if (this.buf.length > MAX_CHUNK_LINE) throw new HttpStreamError('HTTP_ERR_CHUNK_LINE_TOO_LONG', 'chunk-size line too long');
          return;
        }
        const line = this.buf.subarray(0, end).toString('latin1');
        this.buf = this.buf.subarray(end + 2);
        const m = /^([0-9A-Fa-f]{1,8})[ \t]*(;.*)?$/.exec(line);
        if (!m) throw new HttpStreamError('HTTP_ERR_BAD_CHUNK', 'bad chunk-size line');
        const size = parseInt(m[1]!, 16);
        if (size === 0) {
          this.trailers = true;
          continue;
        }
        if (this.received + size > this.maxBodyBytes) throw new HttpStreamError('HTTP_ERR_BODY_TOO_LARGE', `body over ${this.maxBodyBytes} bytes`);
        this.chunkLeft = size;
        continue;
      }
      if (this.chunkLeft > 0) {
        if (this.buf.length === 0) return;
        const take = this.buf.subarray(0, Math.min(this.chunkLeft, this.buf.length));
        this.buf = this.buf.subarray(take.length);
        this.chunkLeft -= take.length;
        this.deliver(take, rxNs);
        continue;
      }
      // chunkLeft === 0: the CRLF after the data
      if (this.buf.length < 2) return;
      if (this.buf[0] !== 13 || this.buf[1] !== 10) throw new HttpStreamError('HTTP_ERR_BAD_CHUNK', 'no CRLF after chunk data');
      this.buf = this.buf.subarray(2);
      this.chunkLeft = -1;
    }
  }
}

function parseHead(text: string): HttpStreamHead {
  if (/[^\r]\n|^\n/.test(text) || /\r(?!\n)/.test(text)) throw new HttpStreamError('HTTP_ERR_BARE_LF', 'bare CR or LF in the head');
  const lines = text.split('\r\n');
  const m = /^HTTP\/1\.[01] ([1-9][0-9]{2})(?: ([\t\x20-\x7e\x80-\xff]*))?$/.exec(lines[0]!);
  if (!m) throw new HttpStreamError('HTTP_ERR_BAD_STATUS_LINE', 'bad status line');
  if (lines.length - 1 > MAX_FIELDS) throw new HttpStreamError('HTTP_ERR_TOO_MANY_HEADERS', 'too many header fields');
  const headers: [string, string][] = [];
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    const name = i > 0 ? line.slice(0, i) : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new HttpStreamError('HTTP_ERR_BAD_HEADER', 'bad header field');
    headers.push([name, line.slice(i + 1).trim()]);
  }
  return { status: Number(m[1]), reason: m[2] ?? '', headers };
}

function header(head: HttpStreamHead, name: string): string[] {
  return head.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);
}

function bodyMode(head: HttpStreamHead, method: string): BodyMode {
  if (method === 'HEAD' || head.status === 204 || head.status === 304) return { kind: 'none' };
  const te = header(head, 'transfer-encoding');
  const cl = header(head, 'content-length');
  if (te.length > 0) {
    if (cl.length > 0) throw new HttpStreamError('HTTP_ERR_CL_TE_CONFLICT', 'both Content-Length and Transfer-Encoding');
    const codings = te.join(',').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
    if (codings[codings.length - 1] !== 'chunked' || codings.length !== 1) {
      throw new HttpStreamError('HTTP_ERR_BAD_TRANSFER_ENCODING', `unsupported transfer coding ${te.join(',')}`);
    }
    return { kind: 'chunked' };
  }
  if (cl.length > 0) {
    const values = new Set(cl.join(',').split(',').map((s) => s.trim()));
    const [v] = [...values];
    if (values.size !== 1 || !/^[0-9]{1,15}$/.test(v!)) throw new HttpStreamError('HTTP_ERR_BAD_CONTENT_LENGTH', 'bad Content-Length');
    const n = Number(v);
    return n === 0 ? { kind: 'none' } : { kind: 'length', left: n };
  }
  return { kind: 'eof' };
}

export interface HttpStreamOptions {
  maxBodyBytes?: number;
  timeoutMs?: number;
}

export interface HttpStream {
  /** CLOCK_REALTIME ns when the connect started. */
  startedNs: bigint;
  cancel(): void;
}


/**
 * Undoes a Content-Encoding as the bytes arrive (zlib's streaming decoders): decoded bytes go on with the
 * kernel receive time of the latest segment that fed them. A corrupt body, an unknown coding or a body that
 * inflates past the limit ends the stream with HTTP_ERR_CONTENT_ENCODING.
 */
class ContentDecoder {
  private readonly z: zlib.Gunzip | zlib.Inflate | zlib.BrotliDecompress;
  private rxNs = 0n;
  private out = 0;
  private failed = false;

  constructor(
    coding: string,
    private readonly maxBytes: number,
    private readonly onData: (bytes: Uint8Array, rxNs: bigint) => void,
    private readonly onEnd: () => void,
    private readonly onError: (err: HttpStreamError) => void,
  ) {
    const c = coding.toLowerCase();
    this.z = c === 'gzip' || c === 'x-gzip' ? zlib.createGunzip() : c === 'deflate' ? zlib.createInflate() : zlib.createBrotliDecompress();
    this.z.on('data', (chunk: Buffer) => {
      if (this.failed) return;
      this.out += chunk.length;
      if (this.out > this.maxBytes) return this.fail(`decoded body over ${this.maxBytes} bytes`);
      this.onData(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength), this.rxNs);
    });
    this.z.on('end', () => {
      if (!this.failed) this.onEnd();
    });
    this.z.on('error', (e: Error) => this.fail(e.message));
  }

  static supports(coding: string): boolean {
    return /^(gzip|x-gzip|deflate|br)$/i.test(coding);
  }

  write(bytes: Uint8Array, rxNs: bigint): void {
    if (this.failed) return;
    this.rxNs = rxNs;
    this.z.write(bytes);
  }

  end(): void {
    if (!this.failed) this.z.end();
  }

  private fail(why: string): void {
    if (this.failed) return;
    this.failed = true;
    this.z.destroy();
    this.onError(new HttpStreamError('HTTP_ERR_CONTENT_ENCODING', `the body's content coding does not decode: ${why}`));
  }
}

/** GETs an http:// or https:// URL and streams its body. Exactly one of onEnd / onError is called (unless cancelled). */
export async function httpStream(url: string, h: HttpStreamHandlers, options: HttpStreamOptions = {}): Promise<HttpStream> {
  const target = parseTarget(url);
  if (target.scheme !== 'http' && target.scheme !== 'https') throw new HttpStreamError('HTTP_ERR_SCHEME', `not an http:// or https:// URL: ${url}`);
  const literal = target.host.startsWith('[') ? target.host.slice(1, -1) : target.host;
  const address = isIP(literal) ? literal : (await lookup(literal)).address;
  let settled = false;
  let closeTransport: () => void = () => undefined;
  const settle = (err: HttpStreamError | null) => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    // let the transport deliver its last events before it is closed
    setImmediate(() => closeTransport());
    if (err) h.onError(err);
    else h.onEnd();
  };
  let coded: ContentDecoder | null = null;
  let abort: () => void = () => undefined;
  const decoder = new StreamingResponseDecoder(
    {
      onHead: (head) => {
        const codings = codingsOf(head.headers);
        if (codings.length > 1 || (codings.length === 1 && !ContentDecoder.supports(codings[0]!))) {
          throw new HttpStreamError('HTTP_ERR_CONTENT_ENCODING', `content coding not supported: ${codings.join(', ')}`);
        }
        if (codings.length === 1) {
          coded = new ContentDecoder(codings[0]!, options.maxBodyBytes ?? 64 * 1024 * 1024, (b, rx) => {
            if (!settled) h.onData(b, rx);
          }, () => settle(null), (err) => {
            abort();
            settle(err);
          });
        }
        h.onHead(head);
      },
      onData: (b, rx) => (coded ? coded.write(b, rx) : h.onData(b, rx)),
      onEnd: () => (coded ? coded.end() : settle(null)),
    },
    options.maxBodyBytes,
  );
  const defaultPort = target.scheme === 'https' ? 443 : 80;
  const hostHeader = target.port === defaultPort ? target.host : `${target.host}:${target.port}`;
  const request = Buffer.from(`GET ${target.path} HTTP/1.1\r\nHost: ${hostHeader}\r\nAccept: text/html,*/*\r\nAccept-Encoding: ${ACCEPT_ENCODING}\r\nConnection: close\r\nUser-Agent: catp-browser\r\n\r\n`, 'latin1');
  /** Bytes from the server, with their receive time: into the decoder; a violation ends the stream. */
  const received = (data: Uint8Array, rxNs: bigint) => {
    if (settled) return;
    try {
      decoder.push(data, rxNs);
    } catch (e) {
      abort();
      settle(e as HttpStreamError);
    }
  };
  const ended = () => {
    if (settled) return;
    try {
      decoder.end();
    } catch (e) {
      settle(e as HttpStreamError);
    }
  };
  const startedNs = realtimeNs();
  const timer = setTimeout(() => {
    abort();
    settle(new HttpStreamError('HTTP_ERR_TIMEOUT', `no complete answer from ${target.origin} within ${options.timeoutMs ?? 30000} ms`));
  }, options.timeoutMs ?? 30000);
  if (target.scheme === 'https') {
    const sock = tlsConnect(address, literal, target.port, request, received, ended, (err) => settle(err));
    closeTransport = () => sock.destroy();
    abort = () => sock.destroy();
  } else {
    const t = tcpConnect(address, target.port, request, received, ended, (err) => settle(err));
    closeTransport = t.close;
    abort = t.abort;
  }
  return {
    startedNs,
    cancel: () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      abort();
      setImmediate(() => closeTransport());
    },
  };
}

/** Plain TCP through the native endpoint: every segment batch carries its kernel receive time. */
function tcpConnect(address: string, port: number, request: Buffer, received: (d: Uint8Array, rxNs: bigint) => void, ended: () => void, failed: (e: HttpStreamError) => void): { close: () => void; abort: () => void } {
  const loopback = address === '::1' || address.startsWith('127.');
  const bind = loopback ? address : address.includes(':') ? '::' : '0.0.0.0';
  let conn = -1;
  const onIncoming = (batch: Incoming[]) => {
    for (const item of batch) {
      if (item.kind === 'tcp-open' && item.conn === conn) {
        endpoint.sendTcp(conn, request);
      } else if (item.kind === 'tcp-data' && item.conn === conn) {
        received(item.data, item.rxNs);
      } else if (item.kind === 'tcp-closed' && item.conn === conn) {
        if (item.error) {
          failed(new HttpStreamError('HTTP_ERR_CONNECT', `${item.error.code}: ${item.error.message}`));
          continue;
        }
        ended();
      }
    }
  };
  const endpoint = new Endpoint({ host: bind }, onIncoming);
  try {
    conn = endpoint.connect(address, port);
  } catch (e) {
    failed(new HttpStreamError('HTTP_ERR_CONNECT', (e as Error).message));
  }
  return {
    close: () => endpoint.close(),
    abort: () => {
      if (conn >= 0) endpoint.closeConnection(conn);
    },
  };
}

/**
 * HTTP/1.1 over TLS (Node's tls: the system's CA store, SNI, ALPN http/1.1). Receive times are taken as the
 * decrypted bytes arrive (no kernel timestamps through TLS). A certificate that does not check out ends the
 * stream with a code that says why (expired, wrong name, unknown issuer): never a silent bypass.
 */
function tlsConnect(address: string, name: string, port: number, request: Buffer, received: (d: Uint8Array, rxNs: bigint) => void, ended: () => void, failed: (e: HttpStreamError) => void): tls.TLSSocket {
  const sock = tls.connect({
    host: address,
    port,
    // SNI names a host, never an address; the certificate is checked against `name` either way
    ...(isIP(name) ? {} : { servername: name }),
    checkServerIdentity: (_host, cert) => tls.checkServerIdentity(name, cert),
    ALPNProtocols: ['http/1.1'],
    minVersion: 'TLSv1.2',
    ca: trustedCertificates(),
  });
  sock.on('secureConnect', () => sock.write(request));
  sock.on('data', (d: Buffer) => received(d, realtimeNs()));
  sock.on('end', ended);
  sock.on('error', (err: Error & { code?: string }) => failed(tlsError(err, name, port)));
  return sock;
}

const UNKNOWN_ISSUER = new Set(['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_GET_ISSUER_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'CERT_UNTRUSTED']);

/** A TLS failure as a named error a user can read. */
export function tlsError(err: Error & { code?: string }, name: string, port: number): HttpStreamError {
  const who = `${name}:${port}`;
  const code = err.code ?? '';
  if (code === 'CERT_HAS_EXPIRED') return new HttpStreamError('HTTP_ERR_TLS_CERT_EXPIRED', `the certificate of ${who} has expired`);
  if (code === 'CERT_NOT_YET_VALID') return new HttpStreamError('HTTP_ERR_TLS_CERT_NOT_YET_VALID', `the certificate of ${who} is not valid yet`);
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return new HttpStreamError('HTTP_ERR_TLS_WRONG_NAME', `the certificate of ${who} is for another name: ${err.message}`);
  if (UNKNOWN_ISSUER.has(code)) return new HttpStreamError('HTTP_ERR_TLS_UNKNOWN_ISSUER', `the certificate of ${who} is not from an authority this browser trusts (${code})`);
  if (/^E(CONNREFUSED|HOSTUNREACH|NETUNREACH|CONNRESET|TIMEDOUT)$/.test(code)) return new HttpStreamError('HTTP_ERR_CONNECT', `${code}: ${err.message}`);
  return new HttpStreamError('HTTP_ERR_TLS', `TLS with ${who} failed: ${code ? `${code}: ` : ''}${err.message}`);
}

let systemCas: string[] | null = null;

/**
 * The certificates TLS connections trust: the system's store (Debian's /etc/ssl/certs/ca-certificates.crt; Node's
 * bundled roots where there is none), and the PEM file CATP_EXTRA_CA_CERTS names, if any (a private or a test CA,
 * as NODE_EXTRA_CA_CERTS is for Node itself).
 */
export function trustedCertificates(): string[] {
  if (systemCas === null) {
    try {
      systemCas = [readFileSync('/etc/ssl/certs/ca-certificates.crt', 'utf8')];
    } catch {
      systemCas = [...tls.rootCertificates];
    }
  }
  const extra = process.env.CATP_EXTRA_CA_CERTS;
  return extra ? [...systemCas, readFileSync(extra, 'utf8')] : systemCas;
}
