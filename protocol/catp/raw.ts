/**
 * In-order UDP mode (the CATP paper's Figure 5 baseline): the page's bytes cut into datagrams (frame kind raw),
 * repaired by the same RepairSender / RepairReceiver, but usable only up to the first gap: the assembler emits
 * `prefix-extended` only when the contiguous prefix grows.
 *
 * The byte stream is the page itself, or — for a client that offered `Accept-Encoding: br`, as a web server's
 * `Content-Encoding` would do — the page compressed with brotli as one stream (FRAME_FLAG_BROTLI on every frame),
 * so the baseline carries what TCP carries and differs from CATP only in framing. A compressed prefix still
 * decodes as it grows: the assembler hands on what the received part of the stream decodes to so far.
 *
 * Raw frame 0's payload starts with: sha-256 of the page bytes (32) | page length (u32); both are of the page as
 * decoded. The page id in every header is the first 8 bytes of that digest.
 */
import { concatBytes as concat } from '../dhttp/bytes';
import { AssemblerBase, AssemblerOptions, RawAssemblerEvent } from './assembler';
import { CATP_ERR, LocalProtocolError, REJECT, Reject } from './errors';
import { Sha256 } from './encoder';
import type { FrameCodec } from './payload-codec';
import { encodeFrame, FRAME_FLAG_BROTLI, FRAME_KIND, FrameHeader, MAX_FRAME_PAYLOAD, PAGE_ID_BYTES } from './wire';

export const RAW_META_BYTES = 36;
/**
 * Most bytes a compressed stream may decode to per byte of frames (a decompression bomb is refused before it is
 * decoded). HTML compresses 4–12×; a sender sends a page that compresses better than this as it is.
 */
export const RAW_MAX_EXPANSION = 64;
/** Past this many compressed bytes, the prefix is decoded again only once it has grown by an eighth (see take). */
const REDECODE_EVERY_FRAME_BYTES = 64 * 1024;

export interface EncodedRaw {
  pageDigest: Uint8Array;
  pageId: Uint8Array;
  frames: Uint8Array[];
  /** The stream is the page compressed with the codec (FRAME_FLAG_BROTLI). */
  compressed: boolean;
}

/**
 * Cut a page into raw frames. With a codec that has `compressStream` (the client offered it), the frames carry
 * the page compressed as one stream, unless that is not smaller or would expand past RAW_MAX_EXPANSION.
 */
export function encodeRaw(bytes: Uint8Array, opts: { sha256: Sha256; maxPayload?: number; codec?: FrameCodec }): EncodedRaw {
  const maxPayload = Math.min(opts.maxPayload ?? MAX_FRAME_PAYLOAD, MAX_FRAME_PAYLOAD);
  if (!(maxPayload > RAW_META_BYTES)) throw new LocalProtocolError(CATP_ERR.BAD_OPTIONS, 'maxPayload too small');
  const pageDigest = opts.sha256(bytes).slice(0, 32);
  const pageId = pageDigest.slice(0, PAGE_ID_BYTES);
  let stream = bytes;
  let compressed = false;
  if (opts.codec?.compressStream !== undefined && bytes.length > 0) {
    const c = opts.codec.compressStream(bytes);
    const frames = Math.ceil((c.length + RAW_META_BYTES) / maxPayload);
    if (c.length < bytes.length && bytes.length <= frames * maxPayload * RAW_MAX_EXPANSION) {
      stream = c;
      compressed = true;
    }
  }
  const chunks: Uint8Array[] = [];
  const first = Math.min(stream.length, maxPayload - RAW_META_BYTES);
  const c0 = new Uint8Array(RAW_META_BYTES + first);
  c0.set(pageDigest, 0);
  new DataView(c0.buffer).setUint32(32, bytes.length);
  c0.set(stream.subarray(0, first), RAW_META_BYTES);
  chunks.push(c0);
  for (let p = first; p < stream.length; p += maxPayload) chunks.push(stream.subarray(p, Math.min(stream.length, p + maxPayload)));
  const id = new Uint8Array(8);
  const flags = compressed ? FRAME_FLAG_BROTLI : 0;
  const frames = chunks.map((c, i) => encodeFrame({ id, kind: FRAME_KIND.RAW, flags, pageId, seq: i, total: chunks.length, indexFrames: 0 }, c));
  return { pageDigest, pageId, frames, compressed };
}

export class RawAssembler extends AssemblerBase<RawAssemblerEvent> {
  private readonly codec: FrameCodec | undefined;
  private chunks: Array<Uint8Array | null> = [];
  private next = 0;
  /** Page bytes handed on so far (decoded). */
  private prefix = 0;
  private length = -1;
  /** The stream is compressed (FRAME_FLAG_BROTLI), fixed by the first frame taken; null before it. */
  private compressed: boolean | null = null;
  /** Bytes of the contiguous stream received so far (frames 0 .. next-1, frame 0's meta left out), and when last decoded. */
  private streamBytes = 0;
  private decodedAt = 0;
  /** What the whole stream decoded to (compressed streams, once complete): the page the digest is checked on. */
  private decoded: Uint8Array | null = null;

  constructor(opts: AssemblerOptions) {
    super(opts, [FRAME_KIND.RAW]);
    this.codec = opts.codec;
  }

  /** Page bytes usable so far (the contiguous prefix, decoded). */
  get prefixLength(): number {
    return this.prefix;
  }

  protected init(): void {
    this.chunks = new Array(this.total).fill(null);
  }

  protected stored(seq: number): Uint8Array | null {
    return this.chunks[seq];
  }

  protected take(h: FrameHeader, payload: Uint8Array): void {
    const compressed = ((h.flags ?? 0) & FRAME_FLAG_BROTLI) !== 0;
    if (this.compressed === null) {
      if (compressed && this.codec?.decodeStreamPrefix === undefined) this.refuse(h.seq, REJECT.BAD_CODEC, 'compressed stream, no codec');
      this.compressed = compressed;
    } else if (compressed !== this.compressed) {
      this.refuse(h.seq, REJECT.INCONSISTENT_HEADER, 'BROTLI flag differs between frames');
    }
    if (h.seq === 0) {
      if (payload.length < RAW_META_BYTES) this.refuse(0, REJECT.TRUNCATED, 'raw meta');
      const len = new DataView(payload.buffer, payload.byteOffset, payload.byteLength).getUint32(32);
      const most = compressed ? Math.min(this.total * MAX_FRAME_PAYLOAD * RAW_MAX_EXPANSION, this.limits.maxFrames * MAX_FRAME_PAYLOAD) : this.total * MAX_FRAME_PAYLOAD;
      if (len > most) this.refuse(0, REJECT.ABSURD_COUNT, 'page length');
      this.length = len;
    }
    this.chunks[h.seq] = payload;
    if (h.seq !== this.next) return;
    const from = this.next;
    while (this.next < this.total && this.chunks[this.next] !== null) this.next++;
    const bytes = this.compressed ? this.decodeMore(from) : this.stream(from, this.next);
    if (bytes === null) return;
    if (this.prefix + bytes.length > this.length) this.corrupt(REJECT.INCONSISTENT_HEADER, 'more bytes than the page length');
    const offset = this.prefix;
    this.prefix += bytes.length;
    // (a coded stream's last bits may add no bytes: nothing to hand on; an empty page as it is still says so)
    if (bytes.length > 0 || !this.compressed) this.emit({ type: 'prefix-extended', bytes, offset, length: this.prefix, total: this.length });
    if (this.next === this.total) this.finish();
  }

  /**
   * The page bytes a grown compressed prefix adds, or null when it is not decoded this time. The prefix is decoded
   * from its start each time (protocol/ has no streaming decoder to keep between frames): every frame up to 64 KiB
   * of stream, then each time it has grown by an eighth, so a large page costs a bounded multiple of one decode.
   */
  private decodeMore(from: number): Uint8Array | null {
    for (let i = from; i < this.next; i++) this.streamBytes += (this.chunks[i] as Uint8Array).length - (i === 0 ? RAW_META_BYTES : 0);
    const end = this.next === this.total;
    if (!end && this.streamBytes > REDECODE_EVERY_FRAME_BYTES && this.streamBytes - this.decodedAt < this.streamBytes / 8) return null;
    this.decodedAt = this.streamBytes;
    let out: Uint8Array;
    try {
      out = (this.codec as Required<FrameCodec>).decodeStreamPrefix(this.stream(0, this.next), this.length, end);
    } catch (e) {
      return this.corrupt(REJECT.BAD_CODEC, e instanceof Error ? e.message : 'the stream does not decode');
    }
    if (!(out instanceof Uint8Array) || out.length > this.length) return this.corrupt(REJECT.BAD_CODEC, 'more bytes than the page length');
    // a decoder never takes back what it gave for a shorter prefix; one that does is refused, not trusted
    if (out.length < this.prefix) return this.corrupt(REJECT.BAD_CODEC, 'the stream decoded to less than before');
    if (end) this.decoded = out;
    return out.slice(this.prefix);
  }

  /** Frames `from` .. `to`-1 of the stream joined (frame 0 without its meta); all of them have arrived. */
  private stream(from: number, to: number): Uint8Array {
    const parts: Uint8Array[] = [];
    for (let i = from; i < to; i++) parts.push(i === 0 ? (this.chunks[0] as Uint8Array).subarray(RAW_META_BYTES) : (this.chunks[i] as Uint8Array));
    return concat(parts);
  }

  private corrupt(code: string, message: string): never {
    this.ended = true;
    this.emit({ type: 'page-corrupt', code, message });
    throw new Reject(code as (typeof REJECT)[keyof typeof REJECT], message);
  }

  private finish(): void {
    this.ended = true;
    // (a coded stream was decoded whole, with `end`, by decodeMore just before this)
    const all = this.compressed ? (this.decoded as Uint8Array) : this.stream(0, this.total);
    const meta = this.chunks[0] as Uint8Array;
    const digest = this.sha256(all).slice(0, 32);
    let ok = this.prefix === this.length;
    for (let i = 0; i < 32 && ok; i++) if (digest[i] !== meta[i]) ok = false;
    if (ok) this.emit({ type: 'page-complete', digest });
    else this.emit({ type: 'page-corrupt', code: CATP_ERR.PAGE_DIGEST, message: 'the page does not match its digest' });
  }
}
