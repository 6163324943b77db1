/**
 * In-order UDP mode (the CATP paper's Figure 5 baseline): the page's raw bytes cut into datagrams
 * (frame kind raw), repaired by the same RepairSender / RepairReceiver, but usable only up to the first
 * gap: the assembler emits `prefix-extended` only when the contiguous prefix grows.
 *
 * Raw frame 0's payload starts with: sha-256 of the page bytes (32) | page length (u32); the page id
 * in every header is the first 8 bytes of that digest.
 */
import { AssemblerBase, AssemblerOptions, RawAssemblerEvent } from './assembler';
import { CATP_ERR, LocalProtocolError, REJECT, Reject } from './errors';
import { Sha256 } from './encoder';
import { encodeFrame, FRAME_KIND, FrameHeader, MAX_FRAME_PAYLOAD, PAGE_ID_BYTES } from './wire';

export const RAW_META_BYTES = 36;

export interface EncodedRaw {
  pageDigest: Uint8Array;
  pageId: Uint8Array;
  frames: Uint8Array[];
}

export function encodeRaw(bytes: Uint8Array, opts: { sha256: Sha256; maxPayload?: number }): EncodedRaw {
  const maxPayload = Math.min(opts.maxPayload ?? MAX_FRAME_PAYLOAD, MAX_FRAME_PAYLOAD);
  if (!(maxPayload > RAW_META_BYTES)) throw new LocalProtocolError(CATP_ERR.BAD_OPTIONS, 'maxPayload too small');
  const pageDigest = opts.sha256(bytes).slice(0, 32);
  const pageId = pageDigest.slice(0, PAGE_ID_BYTES);
  const chunks: Uint8Array[] = [];
  const first = Math.min(bytes.length, maxPayload - RAW_META_BYTES);
  const c0 = new Uint8Array(RAW_META_BYTES + first);
  c0.set(pageDigest, 0);
  new DataView(c0.buffer).setUint32(32, bytes.length);
  c0.set(bytes.subarray(0, first), RAW_META_BYTES);
  chunks.push(c0);
  for (let p = first; p < bytes.length; p += maxPayload) chunks.push(bytes.subarray(p, Math.min(bytes.length, p + maxPayload)));
  const id = new Uint8Array(8);
  const frames = chunks.map((c, i) => encodeFrame({ id, kind: FRAME_KIND.RAW, pageId, seq: i, total: chunks.length, indexFrames: 0 }, c));
  return { pageDigest, pageId, frames };
}

export class RawAssembler extends AssemblerBase<RawAssemblerEvent> {
  private chunks: Array<Uint8Array | null> = [];
  private next = 0;
  private prefix = 0;
  private length = -1;

  constructor(opts: AssemblerOptions) {
    super(opts, [FRAME_KIND.RAW]);
  }

  /** Bytes usable so far (the contiguous prefix). */
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
    if (h.seq === 0) {
      if (payload.length < RAW_META_BYTES) this.refuse(0, REJECT.TRUNCATED, 'raw meta');
      const len = new DataView(payload.buffer, payload.byteOffset, payload.byteLength).getUint32(32);
      if (len > this.total * MAX_FRAME_PAYLOAD) this.refuse(0, REJECT.ABSURD_COUNT, 'page length');
      this.length = len;
    }
    this.chunks[h.seq] = payload;
    if (h.seq !== this.next) return;
    const parts: Uint8Array[] = [];
    while (this.next < this.total && this.chunks[this.next] !== null) {
      const c = this.chunks[this.next] as Uint8Array;
      parts.push(this.next === 0 ? c.subarray(36) : c);
      this.next++;
    }
    let n = 0;
    for (const p of parts) n += p.length;
    if (this.prefix + n > this.length) {
      this.ended = true;
      this.emit({ type: 'page-corrupt', code: REJECT.INCONSISTENT_HEADER, message: 'more bytes than the page length' });
      throw new Reject(REJECT.INCONSISTENT_HEADER);
    }
    const bytes = new Uint8Array(n);
    let o = 0;
    for (const p of parts) {
      bytes.set(p, o);
      o += p.length;
    }
    const offset = this.prefix;
    this.prefix += n;
    this.emit({ type: 'prefix-extended', bytes, offset, length: this.prefix, total: this.length });
    if (this.next === this.total) this.finish();
  }

  private finish(): void {
    this.ended = true;
    const all = new Uint8Array(this.prefix);
    let o = 0;
    for (let i = 0; i < this.total; i++) {
      const c = this.chunks[i] as Uint8Array;
      const p = i === 0 ? c.subarray(36) : c;
      all.set(p, o);
      o += p.length;
    }
    const meta = this.chunks[0] as Uint8Array;
    const digest = this.sha256(all).slice(0, 32);
    let ok = this.prefix === this.length;
    for (let i = 0; i < 32 && ok; i++) if (digest[i] !== meta[i]) ok = false;
    if (ok) this.emit({ type: 'page-complete', digest });
    else this.emit({ type: 'page-corrupt', code: CATP_ERR.PAGE_DIGEST, message: 'the page does not match its digest' });
  }
}
