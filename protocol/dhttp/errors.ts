import { ProtocolError, RemoteProtocolError } from '../errors';

/**
 * A DHTTP request could not be completed (not a protocol violation by either side):
 * `DHTTP_ERR_TIMEOUT`, `DHTTP_ERR_CONNECT`, `DHTTP_ERR_CONNECTION_CLOSED`, `DHTTP_ERR_CANCELLED`,
 * `DHTTP_ERR_PROTOCOL` (the peer broke the protocol; `cause` holds the RemoteProtocolError).
 */
export class DhttpError extends ProtocolError {
  override readonly cause: unknown;

  constructor(code: string, message: string, cause?: unknown) {
    super(code, message);
    this.cause = cause;
  }
}

/** The peer sent malformed HTTP/1.1 (`HTTP_ERR_...`). */
export class HttpParseError extends RemoteProtocolError {}
