/**
 * CATP errors and the named reasons a frame or report is rejected.
 *
 * Errors reuse protocol/errors.ts: {@link LocalProtocolError} when *we* misuse the library (a page the
 * encoder cannot represent, bad options), {@link RemoteProtocolError} for hostile bytes, and
 * {@link CatpError} for failures that are neither (gave up, stalled). Every code is `CATP_ERR_*`.
 *
 * Decoders on the receive path never throw: they return / count one of {@link CatpRejectCode}.
 */
import { ProtocolError } from '../errors';

export { LocalProtocolError, RemoteProtocolError, ProtocolError, isProtocolError } from '../errors';

/** A CATP transfer could not be completed (give-up deadline, stalled peer, corrupt page). */
export class CatpError extends ProtocolError {}

/** Every reason a frame (or a report) is refused. Counted in `counters()` under this exact string. */
export const REJECT = {
  /** Shorter than a header, or a length field runs past the end. */
  TRUNCATED: 'CATP_ERR_TRUNCATED',
  /** Longer than MAX_DATAGRAM_PAYLOAD. */
  OVERSIZED: 'CATP_ERR_OVERSIZED',
  /** Byte 8 is not the CATP magic (or byte 11 of a report). */
  BAD_MAGIC: 'CATP_ERR_BAD_MAGIC',
  BAD_VERSION: 'CATP_ERR_BAD_VERSION',
  /** Unknown frame kind, or a kind this receiver does not take (a raw frame to a CATP assembler...). */
  WRONG_KIND: 'CATP_ERR_WRONG_KIND',
  /** Reserved flag bits set. */
  BAD_FLAGS: 'CATP_ERR_BAD_FLAGS',
  /** The 8-byte request ID is not the one this transfer belongs to. */
  WRONG_ID: 'CATP_ERR_WRONG_ID',
  /** The page id (digest prefix) differs from the page this transfer is assembling. */
  WRONG_PAGE: 'CATP_ERR_WRONG_PAGE',
  /** total / indexFrames differ from what earlier frames said, or are impossible (index >= total). */
  INCONSISTENT_HEADER: 'CATP_ERR_INCONSISTENT_HEADER',
  /** Counts above the configured limits (frames, blocks, nodes, bytes). */
  ABSURD_COUNT: 'CATP_ERR_ABSURD_COUNT',
  /** Frame number not below the frame count. */
  SEQ_OUT_OF_RANGE: 'CATP_ERR_SEQ_OUT_OF_RANGE',
  /** Exact duplicate of a frame already taken (not an error, but counted). */
  DUPLICATE: 'CATP_DUPLICATE',
  /** Same frame number, different bytes from the one already taken. The first one is kept. */
  CONTRADICTING_DUPLICATE: 'CATP_ERR_CONTRADICTING_DUPLICATE',
  /** Data frames held before the index exceed the hold budget; the frame is dropped and asked for again. */
  HOLD_FULL: 'CATP_ERR_HOLD_FULL',
  /** The index does not decode: bad tag, depth, counts, a slot pointing at nothing or twice at a block... */
  BAD_INDEX: 'CATP_ERR_BAD_INDEX',
  /** An index frame does not match its own check digest (corrupted on the way). */
  INDEX_DIGEST: 'CATP_ERR_INDEX_DIGEST',
  /** Two index frames contradict each other: overlapping node ranges, a node or ancestor described two ways. */
  INDEX_CONFLICT: 'CATP_ERR_INDEX_CONFLICT',
  /** An index frame attaches a node to a parent that does not exist (not an open ancestor in the frame). */
  BAD_ATTACH: 'CATP_ERR_BAD_ATTACH',
  /** An index frame would nest the tree deeper than the limit. */
  TOO_DEEP: 'CATP_ERR_TOO_DEEP',
  /** A frame's payload names an unknown codec, does not decompress, or decompresses past the limit. */
  BAD_CODEC: 'CATP_ERR_BAD_CODEC',
  /** A data frame's payload does not decode (piece counts/lengths, bad UTF-8). */
  BAD_BLOCK: 'CATP_ERR_BAD_BLOCK',
  /** A data frame does not match the block digest the index gives. */
  BLOCK_DIGEST: 'CATP_ERR_BLOCK_DIGEST',
  /** The whole page does not match the page digest (only possible with a corrupt or hostile index). */
  PAGE_DIGEST: 'CATP_ERR_PAGE_DIGEST',
  /** The transfer already completed or failed; the frame is ignored. */
  AFTER_END: 'CATP_AFTER_END',
  /** A report that does not decode or has impossible ranges. */
  BAD_REPORT: 'CATP_ERR_BAD_REPORT',
} as const;

export type CatpRejectCode = (typeof REJECT)[keyof typeof REJECT];

/** Error codes raised (as CatpError / LocalProtocolError) or carried in error events. */
export const CATP_ERR = {
  /** The sender passed its give-up deadline or a frame's resend limit. */
  GAVE_UP: 'CATP_ERR_GAVE_UP',
  /** The receiver saw no progress over too many reports. */
  STALLED: 'CATP_ERR_STALLED',
  /** The page cannot be encoded (too deep, too many nodes, lone surrogates...). */
  UNENCODABLE: 'CATP_ERR_UNENCODABLE',
  /** Bad options passed by the caller. */
  BAD_OPTIONS: 'CATP_ERR_BAD_OPTIONS',
  /** The index failed its digest too many times. */
  INDEX_CORRUPT: 'CATP_ERR_INDEX_CORRUPT',
  PAGE_DIGEST: 'CATP_ERR_PAGE_DIGEST',
  /** A check of the encoder's own work failed (a bug of ours, never the peer's). */
  INTERNAL: 'CATP_ERR_INTERNAL',
} as const;

/** Internal: thrown by decoders, caught at the receive boundary and turned into a counted reason. */
export class Reject extends Error {
  constructor(readonly code: CatpRejectCode, detail = '') {
    super(detail ? `${code}: ${detail}` : code);
  }
}
