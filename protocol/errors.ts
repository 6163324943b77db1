/**
 * Error classes shared by every part of protocol/ (DHTTP, CATP, DTD).
 *
 * Every error carries a stable, machine-readable `code` (`DHTTP_ERR_...`, `HTTP_ERR_...`,
 * `CATP_ERR_...`, `DTD_ERR_...`); messages are for humans and may change. Like h11 we keep two kinds of protocol
 * violation apart:
 *
 * - {@link LocalProtocolError}: *we* (the caller of this library) misused it — an invalid header name
 *   passed to a serializer, an unknown request id passed to `cancel`, pushing data after `end()`.
 * - {@link RemoteProtocolError}: the *peer* sent bytes that break the protocol. Decoders throw (or record)
 *   only these for hostile input, never a TypeError or RangeError.
 *
 * Failures that are neither (a request timed out, a connection could not be made) are reported with
 * {@link DhttpError} in protocol/dhttp.
 */
export class ProtocolError extends Error {
  /** Stable code, e.g. `HTTP_ERR_BAD_HEADER`. */
  readonly code: string;

  constructor(code: string, message: string) {
    super(`${code}: ${message}`);
    this.code = code;
    this.name = new.target.name;
  }
}

/** The library was used in a way it does not allow (our bug, not the peer's). */
export class LocalProtocolError extends ProtocolError {}

/** The peer sent something that violates the protocol; the connection or datagram should be dropped. */
export class RemoteProtocolError extends ProtocolError {}

/**
 * A failure outside the protocol with a stable `code` (the message is for humans): the base of each layer's own
 * class (app's HostError, server's ServerError, lab's LabError, bench's BenchError), so that none is written twice.
 */
export class CodedError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** True for any error class defined by protocol/ (what a decoder is allowed to throw). */
export function isProtocolError(e: unknown): e is ProtocolError {
  return e instanceof ProtocolError;
}
