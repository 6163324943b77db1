/**
 * CATP wire format (see protocol/README.md, section CATP, for the worked example).
 *
 * Every CATP frame is a DHTTP *response* datagram: the 8-byte request ID first (the native endpoint
 * matches on it), then, where an HTTP/1.1 response would start with 'H' (0x48), the CATP magic 0xCA.
 *
 *   off size field
 *    0   8   request ID (DHTTP)
 *    8   1   magic 0xCA
 *    9   1   version (2)
 *   10   1   kind: 1 index, 2 data, 3 raw (in-order mode)
 *   11   1   flags: bit 0 REUSE (the sender honours exhaustive reports: see below); bit 1 BROTLI (raw frames only:
 *               the in-order byte stream is the page compressed with brotli, raw.ts); others reserved, 0
 *   12   8   page id = first 8 bytes of the page digest (detects frames of another page / version)
 *   20   4   seq: frame number, 0 <= seq < total, in send order (index and data frames interleaved)
 *   24   4   total: number of frames of the page
 *   28   4   indexFrames: how many of them are index frames (0 for raw)
 *   32   …   payload (at most 1428 bytes: a frame is at most MAX_DATAGRAM_PAYLOAD = 1460 bytes)
 *
 * A client's loss report is a DHTTP *request* datagram whose HTTP bytes are replaced by a CATP report:
 * ID(8) | otherPort(2) | flags(1) | 0xCA … — 0xCA cannot start an HTTP request (methods are ASCII tokens),
 * so the server tells a report from a request by byte 11.
 *
 * All integers are big-endian; varints (inside payloads) are unsigned LEB128 of at most 5 bytes (< 2^32).
 */
import { ID_BYTES, MAX_DATAGRAM_PAYLOAD, REQUEST_PREFIX_BYTES } from '../dhttp/wire';
import { REJECT, Reject } from './errors';

export { ID_BYTES, MAX_DATAGRAM_PAYLOAD, REQUEST_PREFIX_BYTES };

export const CATP_MAGIC = 0xca;
/** 2: index frames that stand alone (index-piece.ts), frames in send order, compressed payloads; 3: the index's nodes as markup (index-markup.ts). */
export const CATP_VERSION = 3;
export const FRAME_KIND = { INDEX: 1, DATA: 2, RAW: 3, REPORT: 4 } as const;
export type FrameKind = (typeof FRAME_KIND)[keyof typeof FRAME_KIND];
export const PAGE_ID_BYTES = 8;
export const HEADER_BYTES = 32;
/** Largest payload after the 32-byte header. */
export const MAX_FRAME_PAYLOAD = MAX_DATAGRAM_PAYLOAD - HEADER_BYTES;
/** Hard cap on frames per page (frame numbers are u32 on the wire; this keeps state bounded). */
export const MAX_FRAMES = 1 << 20;

/**
 * Frame flag bit 0: "this sender drops the data frames an exhaustive report marks as held" (block reuse).
 * A server sets it on every frame of a session whose request carried `Catp-Reuse: hold`, and only then, so a
 * client that never asked (an old one rejects any flag bit) never sees it; a client sends exhaustive reports
 * only to a sender that set it (an old server rejects the report flag).
 */
export const FRAME_FLAG_REUSE = 1;
/**
 * Frame flag bit 1, raw frames only: the in-order byte stream is the page compressed with brotli as one stream
 * (raw.ts). Set only for a request that offered `Accept-Encoding: br`, so a client that never asked (an old one
 * rejects any flag bit) never sees it.
 */
export const FRAME_FLAG_BROTLI = 2;
const FRAME_FLAGS_KNOWN = FRAME_FLAG_REUSE | FRAME_FLAG_BROTLI;

export interface FrameHeader {
  id: Uint8Array;
  kind: FrameKind;
  /** Frame flags (FRAME_FLAG_REUSE, FRAME_FLAG_BROTLI); 0 when absent. */
  flags?: number;
  pageId: Uint8Array;
  seq: number;
  total: number;
  indexFrames: number;
}

export function writeHeader(out: Uint8Array, h: FrameHeader): void {
  out.set(h.id.subarray(0, ID_BYTES), 0);
  out[8] = CATP_MAGIC;
  out[9] = CATP_VERSION;
  out[10] = h.kind;
  out[11] = (h.flags ?? 0) & FRAME_FLAGS_KNOWN;
  out.set(h.pageId.subarray(0, PAGE_ID_BYTES), 12);
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  dv.setUint32(20, h.seq);
  dv.setUint32(24, h.total);
  dv.setUint32(28, h.indexFrames);
}

/** Build one frame: header + payload. */
export function encodeFrame(h: FrameHeader, payload: Uint8Array): Uint8Array {
  if (payload.length > MAX_FRAME_PAYLOAD) throw new RangeError('CATP payload too large');
  const out = new Uint8Array(HEADER_BYTES + payload.length);
  writeHeader(out, h);
  out.set(payload, HEADER_BYTES);
  return out;
}

/** True when the datagram looks like a CATP frame (byte 8 is the magic), not an HTTP response. */
export function isCatpFrame(datagram: Uint8Array): boolean {
  return datagram.length > 8 && datagram[8] === CATP_MAGIC;
}

/** True when a DHTTP request datagram carries a CATP report instead of HTTP (byte 11 is the magic). */
export function isCatpReport(datagram: Uint8Array): boolean {
  return datagram.length > REQUEST_PREFIX_BYTES && datagram[REQUEST_PREFIX_BYTES] === CATP_MAGIC;
}

/** Decode and bound-check a frame header. Throws {@link Reject} (never anything else). */
export function decodeHeader(b: Uint8Array): FrameHeader {
  if (b.length > MAX_DATAGRAM_PAYLOAD) throw new Reject(REJECT.OVERSIZED);
  if (b.length < HEADER_BYTES) throw new Reject(REJECT.TRUNCATED, 'shorter than a header');
  if (b[8] !== CATP_MAGIC) throw new Reject(REJECT.BAD_MAGIC);
  if (b[9] !== CATP_VERSION) throw new Reject(REJECT.BAD_VERSION);
  const kind = b[10];
  if (kind !== FRAME_KIND.INDEX && kind !== FRAME_KIND.DATA && kind !== FRAME_KIND.RAW) throw new Reject(REJECT.WRONG_KIND);
  if ((b[11] & ~FRAME_FLAGS_KNOWN) !== 0) throw new Reject(REJECT.BAD_FLAGS);
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const seq = dv.getUint32(20);
  const total = dv.getUint32(24);
  const indexFrames = dv.getUint32(28);
  if (total === 0 || total > MAX_FRAMES) throw new Reject(REJECT.ABSURD_COUNT, `total ${total}`);
  if (seq >= total) throw new Reject(REJECT.SEQ_OUT_OF_RANGE);
  if (kind === FRAME_KIND.RAW) {
    if (indexFrames !== 0) throw new Reject(REJECT.INCONSISTENT_HEADER, 'raw frames have no index');
  } else {
    if ((b[11] & FRAME_FLAG_BROTLI) !== 0) throw new Reject(REJECT.BAD_FLAGS, 'BROTLI on a CATP frame');
    // Index and data frames interleave in send order: the kind byte (and the index's block table) say which is which.
    if (indexFrames === 0 || indexFrames > total) throw new Reject(REJECT.INCONSISTENT_HEADER, 'indexFrames');
  }
  return {
    id: b.subarray(0, ID_BYTES),
    kind: kind as FrameKind,
    flags: b[11],
    pageId: b.subarray(12, 12 + PAGE_ID_BYTES),
    seq,
    total,
    indexFrames,
  };
}

// ---------------------------------------------------------------------------------------------
// Loss reports (client -> server)

/**
 *   off size field
 *    0   8   request ID
 *    8   2   otherPort (DHTTP request prefix; the client's TCP port)
 *   10   1   DHTTP flags (0)
 *   11   1   magic 0xCA
 *   12   1   version
 *   13   1   kind 4 (report)
 *   14   1   report flags: bit 0 complete (all frames held), bit 1 ranges truncated, bit 2 exhaustive
 *            (every frame of [0, coverEnd) not listed is held, so the sender need never send it; coverEnd =
 *            total, or the end of the last range listed when bit 1 is set); others 0
 *   15   8   page id (zeros while the client has not seen any frame)
 *   23   4   report number (increases by one per report; the sender ignores older ones)
 *   27   4   total frames as the client knows it (0 = unknown)
 *   31   4   frames received so far (distinct)
 *   35   4   echo seq: the last frame received (0xffffffff = none)
 *   39   2   echo delay: ms between receiving echo seq and sending this report (saturates at 65535)
 *   41   2   range count
 *   43   …   ranges of missing frames, ascending: varint gap (from the end of the previous range,
 *            or from 0), varint length-1
 */
export const REPORT_HEADER_BYTES = 43;
export const REPORT_FLAG_COMPLETE = 1;
export const REPORT_FLAG_TRUNCATED = 2;
/** Block reuse: the missing list is exhaustive (see the layout above). Needs total and page id known. */
export const REPORT_FLAG_EXHAUSTIVE = 4;
const REPORT_FLAGS_KNOWN = REPORT_FLAG_COMPLETE | REPORT_FLAG_TRUNCATED | REPORT_FLAG_EXHAUSTIVE;
export const NO_ECHO = 0xffffffff;

export interface Report {
  id: Uint8Array;
  otherPort: number;
  complete: boolean;
  truncated: boolean;
  /**
   * Every frame of [0, coverEnd) that `missing` does not list is held by the client (received, or filled
   * from its own store): the sender drops it. coverEnd = total, or the last range's end when truncated.
   */
  exhaustive?: boolean;
  pageId: Uint8Array;
  reportNo: number;
  total: number;
  received: number;
  echoSeq: number;
  echoDelayMs: number;
  /** Missing frames as [start, end) pairs, ascending, non-overlapping. */
  missing: Array<[number, number]>;
}

export function encodeReport(r: Report): Uint8Array {
  const out = new Uint8Array(MAX_DATAGRAM_PAYLOAD);
  out.set(r.id.subarray(0, ID_BYTES), 0);
  const dv = new DataView(out.buffer);
  dv.setUint16(8, r.otherPort & 0xffff);
  out[10] = 0;
  out[11] = CATP_MAGIC;
  out[12] = CATP_VERSION;
  out[13] = FRAME_KIND.REPORT;
  out.set(r.pageId.subarray(0, PAGE_ID_BYTES), 15);
  dv.setUint32(23, r.reportNo >>> 0);
  dv.setUint32(27, r.total >>> 0);
  dv.setUint32(31, r.received >>> 0);
  dv.setUint32(35, r.echoSeq >>> 0);
  dv.setUint16(39, Math.max(0, Math.min(0xffff, Math.round(r.echoDelayMs))));
  const w = new ByteWriter(out, REPORT_HEADER_BYTES);
  let prevEnd = 0;
  let count = 0;
  let truncated = r.truncated;
  for (const [s, e] of r.missing) {
    if (s < prevEnd || e <= s) throw new RangeError('report ranges must be ascending and non-empty');
    if (w.pos + 10 > out.length) {
      truncated = true;
      break;
    }
    w.varint(s - prevEnd);
    w.varint(e - s - 1);
    prevEnd = e;
    count++;
  }
  if (r.exhaustive === true && (r.total === 0 || r.complete)) throw new RangeError('an exhaustive report needs the total and is never complete');
  out[14] = (r.complete ? REPORT_FLAG_COMPLETE : 0) | (truncated ? REPORT_FLAG_TRUNCATED : 0) | (r.exhaustive === true ? REPORT_FLAG_EXHAUSTIVE : 0);
  dv.setUint16(41, count);
  return out.slice(0, w.pos);
}

/** Decode a report datagram. Throws {@link Reject} on anything malformed. */
export function decodeReport(b: Uint8Array): Report {
  if (b.length > MAX_DATAGRAM_PAYLOAD) throw new Reject(REJECT.OVERSIZED);
  if (b.length < REPORT_HEADER_BYTES) throw new Reject(REJECT.TRUNCATED);
  if (b[11] !== CATP_MAGIC) throw new Reject(REJECT.BAD_MAGIC);
  if (b[12] !== CATP_VERSION) throw new Reject(REJECT.BAD_VERSION);
  if (b[13] !== FRAME_KIND.REPORT) throw new Reject(REJECT.WRONG_KIND);
  if (b[10] !== 0 || (b[14] & ~REPORT_FLAGS_KNOWN) !== 0) throw new Reject(REJECT.BAD_FLAGS);
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const total = dv.getUint32(27);
  if (total > MAX_FRAMES) throw new Reject(REJECT.ABSURD_COUNT);
  const exhaustive = (b[14] & REPORT_FLAG_EXHAUSTIVE) !== 0;
  if (exhaustive) {
    // "Everything not listed is held" over an unknown page, or beside "complete", would let one bad report
    // silence a whole transfer: refused.
    if (total === 0 || (b[14] & REPORT_FLAG_COMPLETE) !== 0) throw new Reject(REJECT.BAD_REPORT, 'exhaustive without a total, or complete');
    if (b.subarray(15, 15 + PAGE_ID_BYTES).every((x) => x === 0)) throw new Reject(REJECT.BAD_REPORT, 'exhaustive without a page id');
  }
  const count = dv.getUint16(41);
  const r = new ByteReader(b, REPORT_HEADER_BYTES);
  const missing: Array<[number, number]> = [];
  let prevEnd = 0;
  for (let i = 0; i < count; i++) {
    const s = prevEnd + r.varint();
    const e = s + r.varint() + 1;
    if (e > MAX_FRAMES || (total !== 0 && e > total)) throw new Reject(REJECT.BAD_REPORT, 'range past the end');
    missing.push([s, e]);
    prevEnd = e;
  }
  if (r.pos !== b.length) throw new Reject(REJECT.BAD_REPORT, 'trailing bytes');
  return {
    id: b.subarray(0, ID_BYTES),
    otherPort: dv.getUint16(8),
    complete: (b[14] & REPORT_FLAG_COMPLETE) !== 0,
    truncated: (b[14] & REPORT_FLAG_TRUNCATED) !== 0,
    exhaustive,
    pageId: b.subarray(15, 15 + PAGE_ID_BYTES),
    reportNo: dv.getUint32(23),
    total,
    received: dv.getUint32(31),
    echoSeq: dv.getUint32(35),
    echoDelayMs: dv.getUint16(39),
    missing,
  };
}

// ---------------------------------------------------------------------------------------------
// Byte helpers

/** Bounds-checked reader: every overrun throws Reject(TRUNCATED) (or the code given). */
export class ByteReader {
  constructor(
    readonly buf: Uint8Array,
    public pos = 0,
    readonly code: typeof REJECT.TRUNCATED | typeof REJECT.BAD_INDEX | typeof REJECT.BAD_BLOCK = REJECT.TRUNCATED,
  ) {}

  get remaining(): number {
    return this.buf.length - this.pos;
  }

  u8(): number {
    if (this.pos >= this.buf.length) throw new Reject(this.code, 'unexpected end');
    return this.buf[this.pos++];
  }

  varint(): number {
    let v = 0;
    for (let i = 0; i < 5; i++) {
      const b = this.u8();
      v += (b & 0x7f) * 2 ** (7 * i);
      if ((b & 0x80) === 0) {
        if (v > 0xffffffff) break;
        return v;
      }
    }
    throw new Reject(this.code, 'varint too long');
  }

  bytes(n: number): Uint8Array {
    if (n > this.buf.length - this.pos) throw new Reject(this.code, 'length past the end');
    const s = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return s;
  }
}

/** Writer into a fixed buffer (callers size it). */
export class ByteWriter {
  constructor(
    public buf: Uint8Array,
    public pos = 0,
  ) {}

  u8(v: number): void {
    this.buf[this.pos++] = v;
  }

  varint(v: number): void {
    while (v >= 0x80) {
      this.buf[this.pos++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }

  bytes(b: Uint8Array): void {
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
}

/** Growable writer (for the index body, whose size is not known in advance). */
export class GrowWriter {
  buf = new Uint8Array(4096);
  pos = 0;

  private ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.pos + n) cap *= 2;
    const nb = new Uint8Array(cap);
    nb.set(this.buf.subarray(0, this.pos));
    this.buf = nb;
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.pos++] = v;
  }

  varint(v: number): void {
    this.ensure(5);
    while (v >= 0x80) {
      this.buf[this.pos++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }

  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  result(): Uint8Array {
    return this.buf.slice(0, this.pos);
  }
}

export function varintSize(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const HEX = '0123456789abcdef';
export function hex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += HEX[b >> 4] + HEX[b & 15];
  return s;
}
