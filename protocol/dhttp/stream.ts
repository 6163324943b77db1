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
import { Http1Core, Http1Stream, type HttpLimits, type HttpRequest, type HttpResponse } from './http1';
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

export class DhttpResponseStream extends Http1Stream<{ id: Uint8Array; method: string }> {
  constructor(options: DhttpResponseStreamOptions = {}) {
    const methodOf = options.methodOf;
    super(
      new Http1Core(
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
      ),
    );
  }

  next(): DhttpStreamResponse | null {
    const p = this.core.next();
    return p === null ? null : { id: p.prefix.id, response: p.message as HttpResponse };
  }
}

export class DhttpRequestStream extends Http1Stream<{ id: Uint8Array; otherPort: number; resend: boolean }> {
  constructor(limits: HttpLimits = {}) {
    super(
      new Http1Core(
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
      ),
    );
  }

  next(): DhttpStreamRequest | null {
    const p = this.core.next();
    return p === null ? null : { ...p.prefix, request: p.message as HttpRequest };
  }
}
