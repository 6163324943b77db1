// Plain HTTP/1.1 GET whose body is handed over AS IT ARRIVES (the DhttpClient only gives whole responses),
// for the browser's `tcp` transport: painted in order, like a stock browser over TCP; and the same over TLS for
// https:// (Node's tls: no kernel timestamps through it).
//
// Runs over the native endpoint's outbound TCP (`Endpoint.connect` / `sendTcp`) so every chunk carries its
// kernel receive timestamp (CLOCK_REALTIME ns), on the same clock as the CATP frames' — the network floor of
// a tcp load is then measured the same way. One endpoint per stream, closed at the end.
//
// The response is untrusted: it is read by the protocol's HTTP/1.1 parser (head bounded to 16 KiB and 100
// fields, Content-Length / chunked / close-delimited bodies decoded strictly, the body bounded by maxBodyBytes),
// and any violation ends the stream with a named error (HTTP_ERR_*), never a throw out of the callback.
import { lookup } from 'node:dns/promises';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import * as tls from 'node:tls';
import * as zlib from 'node:zlib';

import { Endpoint, realtimeNs, type Incoming } from '../../native';
import { hostLiteral, parseTarget, serializeRequest, StreamingResponseParser } from '../../protocol/dhttp';
import { CodedError, ProtocolError } from '../../protocol/errors';
import { ACCEPT_ENCODING, codingsOf } from '../content-coding';
import { bindAddressFor } from '../bind-address';

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

/** A stream that failed, with a stable `code` (HTTP_ERR_...). */
export class HttpStreamError extends CodedError {}

/**
 * The response decoder of a stream: protocol/dhttp/http1.ts's StreamingResponseParser (the one HTTP/1.1 parser),
 * with the receive time of the bytes that fed each event, and its errors as HttpStreamError.
 */
export class StreamingResponseDecoder {
  private readonly parser: StreamingResponseParser;
  done = false;
  failed: HttpStreamError | null = null;

  constructor(
    private readonly h: Pick<HttpStreamHandlers, 'onHead' | 'onData' | 'onEnd'>,
    maxBodyBytes = 64 * 1024 * 1024,
    method = 'GET',
  ) {
    this.parser = new StreamingResponseParser({ maxBodyBytes, method });
  }

  push(data: Uint8Array, rxNs: bigint): void {
    if (this.done || this.failed) return;
    this.guard(() => {
      this.parser.push(data);
      this.drain(rxNs);
    });
  }

  /** The connection ended. Completes a close-delimited body; otherwise an error if mid-message. */
  end(): void {
    if (this.done || this.failed) return;
    this.guard(() => {
      this.parser.end();
      this.drain(0n);
      if (!this.done) throw new HttpStreamError('HTTP_ERR_TRUNCATED', 'the connection ended inside the response');
    });
  }

  private guard(run: () => void): void {
    try {
      run();
    } catch (e) {
      this.failed =
        e instanceof HttpStreamError
          ? e
          : e instanceof ProtocolError
            ? new HttpStreamError(e.code, e.message.replace(`${e.code}: `, ''))
            : new HttpStreamError('HTTP_ERR_INTERNAL', String(e));
      throw this.failed;
    }
  }

  private drain(rxNs: bigint): void {
    for (let ev = this.parser.next(); ev !== null && !this.done; ev = this.parser.next()) {
      if (ev.type === 'head') this.h.onHead({ status: ev.response.status, reason: ev.response.reason, headers: ev.response.headers });
      else if (ev.type === 'data') this.h.onData(ev.bytes, rxNs);
      else {
        this.done = true;
        this.h.onEnd();
      }
    }
  }
}

export interface HttpStreamOptions {
  maxBodyBytes?: number;
  timeoutMs?: number;
  /** Called with the address about to be connected to; throwing refuses it (nothing is sent). */
  checkAddress?: (address: string) => void;
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
  const literal = hostLiteral(target.host);
  const address = isIP(literal) ? literal : (await lookup(literal)).address;
  options.checkAddress?.(address);
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
  const request = serializeRequest({
    method: 'GET',
    target: target.path,
    headers: [['Host', hostHeader], ['Accept', 'text/html,*/*'], ['Accept-Encoding', ACCEPT_ENCODING], ['Connection', 'close'], ['User-Agent', 'catp-browser']],
    body: new Uint8Array(0),
  });
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
function tcpConnect(address: string, port: number, request: Uint8Array, received: (d: Uint8Array, rxNs: bigint) => void, ended: () => void, failed: (e: HttpStreamError) => void): { close: () => void; abort: () => void } {
  const bind = bindAddressFor(address, 'outbound');
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
function tlsConnect(address: string, name: string, port: number, request: Uint8Array, received: (d: Uint8Array, rxNs: bigint) => void, ended: () => void, failed: (e: HttpStreamError) => void): tls.TLSSocket {
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
