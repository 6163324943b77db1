/**
 * DHTTP over TCP: a connection carries a sequence of self-delimiting messages.
 *
 * - DhttpResponseStream (client side): `ID(8) | HTTP response` messages, each Content-Length or chunked
 *   framed (a close-delimited response is refused: HTTP_ERR_UNFRAMED).
 * - DhttpRequestStream (server side): `ID(8) | otherPort(2) | flags(1) | HTTP request` messages.
 *
 * Buffering is bounded by the HTTP limits (head <= 16 KiB, body <= maxBodyBytes). The first malformed
 * message poisons the stream: next() returns the good messages before it, then throws its error for
 * good (the caller closes the connection).
 */
import { RemoteProtocolError } from '../errors';
import { Http1Core, type HttpLimits, type HttpRequest, type HttpResponse } from './http1';
import { ID_BYTES, REQUEST_PREFIX_BYTES, decodeRequestPrefix, isValidId } from './wire';

export interface DhttpStreamResponse {
  id: Uint8Array;
  response: HttpResponse;
}

export interface DhttpStreamRequest {
  id: Uint8Array;
  otherPort: number;
  resend: boolean;
  request: HttpRequest;
}

export interface DhttpResponseStreamOptions extends HttpLimits {
  /**
   * Called with each message's ID as soon as its 8 bytes arrive. Return the method of the request it
   * answers (HEAD => the response has no body), or null to refuse the ID: the stream is then poisoned with
   * DHTTP_ERR_UNKNOWN_ID at once, before the rest of the message is read. Without it every ID is
   * accepted and read as the answer to a GET.
   */
  methodOf?: (id: Uint8Array) => string | null;
}

export class DhttpResponseStream {
  private readonly core: Http1Core<{ id: Uint8Array; method: string }>;

  constructor(options: DhttpResponseStreamOptions = {}) {
    const methodOf = options.methodOf;
    this.core = new Http1Core(
      {
        kind: 'response',
        prefixBytes: ID_BYTES,
        readPrefix: (bytes) => {
          if (!isValidId(bytes)) throw new RemoteProtocolError('DHTTP_ERR_BAD_ID', 'response id must have the top bit set');
          const method = methodOf ? methodOf(bytes) : 'GET';
          if (method === null) throw new RemoteProtocolError('DHTTP_ERR_UNKNOWN_ID', 'response names no outstanding request');
          return { id: bytes, method: method.toUpperCase() };
        },
        requestMethod: (p) => p.method,
        allowCloseDelimited: false,
        skipInterim: false,
        skipLeadingCrlf: false,
      },
      options,
    );
  }

  push(data: Uint8Array): void {
    this.core.push(data);
  }

  /** The connection ended; a partial message is recorded as HTTP_ERR_TRUNCATED (thrown by next()). */
  end(): void {
    this.core.end();
  }

  next(): DhttpStreamResponse | null {
    const p = this.core.next();
    return p === null ? null : { id: p.prefix.id, response: p.message as HttpResponse };
  }

  get bytesConsumed(): number {
    return this.core.bytesConsumed;
  }

  get bufferedBytes(): number {
    return this.core.bufferedBytes;
  }

  /** True when no partial message is buffered. */
  get idle(): boolean {
    return this.core.idle;
  }

  /** The error that poisoned the stream (also thrown by next() once drained), or null. */
  get failure(): RemoteProtocolError | null {
    return this.core.failure as RemoteProtocolError | null;
  }
}

export class DhttpRequestStream {
  private readonly core: Http1Core<{ id: Uint8Array; otherPort: number; resend: boolean }>;

  constructor(limits: HttpLimits = {}) {
    this.core = new Http1Core(
      {
        kind: 'request',
        prefixBytes: REQUEST_PREFIX_BYTES,
        readPrefix: (bytes) => decodeRequestPrefix(bytes),
        requestMethod: () => 'GET',
        allowCloseDelimited: false,
        skipInterim: false,
        skipLeadingCrlf: false,
      },
      limits,
    );
  }

  push(data: Uint8Array): void {
    this.core.push(data);
  }

  end(): void {
    this.core.end();
  }

  next(): DhttpStreamRequest | null {
    const p = this.core.next();
    return p === null ? null : { ...p.prefix, request: p.message as HttpRequest };
  }

  get bytesConsumed(): number {
    return this.core.bytesConsumed;
  }

  get bufferedBytes(): number {
    return this.core.bufferedBytes;
  }

  get idle(): boolean {
    return this.core.idle;
  }

  get failure(): RemoteProtocolError | null {
    return this.core.failure as RemoteProtocolError | null;
  }
}
