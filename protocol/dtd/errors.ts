/**
 * DTD errors. Every one carries a stable code:
 *
 * - `DTD_ERR_SYNTAX`        a structured field (RFC 8941) or RFC 3230 list that does not parse
 * - `DTD_ERR_TOO_LONG`      a field value or member count beyond the bounds below
 * - `DTD_ERR_BAD_BASE64`    a digest value that is not canonical base64
 * - `DTD_ERR_DIGEST_LENGTH` a sha-256 value that is not 32 bytes
 * - `DTD_ERR_BAD_WEIGHT`    a Want-Repr-Digest weight outside 0..10 / a Want-Digest q outside 0..1
 * - `DTD_ERR_CONFLICT`      Repr-Digest and Digest name different sha-256 values
 * - `DTD_ERR_BAD_MODE`      a DTD-Mode request field we cannot read
 * - `DTD_ERR_BAD_ANNOUNCE`  a DTD-Announce response field we cannot read
 * - `DTD_ERR_BAD_DECISION`  a PROCEED / DON'T-BOTHER message that is malformed
 * - `DTD_ERR_DIGEST_MISMATCH` a body that does not match the digest its server announced (a lying server)
 *
 * Parse failures are RemoteProtocolErrors (the peer's bytes); the last one is a DtdError too.
 */
import { RemoteProtocolError } from '../errors';

export class DtdError extends RemoteProtocolError {}

export type DtdErrorCode =
  | 'DTD_ERR_SYNTAX'
  | 'DTD_ERR_TOO_LONG'
  | 'DTD_ERR_BAD_BASE64'
  | 'DTD_ERR_DIGEST_LENGTH'
  | 'DTD_ERR_BAD_WEIGHT'
  | 'DTD_ERR_CONFLICT'
  | 'DTD_ERR_BAD_MODE'
  | 'DTD_ERR_BAD_ANNOUNCE'
  | 'DTD_ERR_BAD_DECISION'
  | 'DTD_ERR_DIGEST_MISMATCH';

export function dtdError(code: DtdErrorCode, message: string): DtdError {
  return new DtdError(code, message);
}
