/**
 * CATP assembler (client side). Feed it every CATP datagram with `receive(bytes, nowMs)`; drain
 * `nextEvent()` after each call — the events say exactly what became displayable — and drain
 * `nextReport(nowMs)` (loss reports to send to the server) after each call and at `nextTimerAt()`.
 *
 * Frames are taken in any order; duplicates are ignored; anything malformed or inconsistent is refused
 * with a counted reason (`counters()`), never thrown. Data frames that come before the index are held
 * (up to `maxHeldBytes`) and applied when it is complete. Memory is bounded by the limits.
 */
import { CATP_ERR, REJECT, Reject } from './errors';
import { INDEX_META_BYTES, DIGEST_BYTES, Sha256 } from './encoder';
import { RepairReceiver, ReceiverOptions } from './repair';
import { BLOCK_DIGEST_BYTES, DEFAULT_INDEX_LIMITS, decodeIndexBody, IndexLimits, Skeleton } from './skeleton';
import { ByteReader, bytesEqual, decodeHeader, FRAME_FLAG_REUSE, FRAME_KIND, FrameHeader, FrameKind, HEADER_BYTES, ID_BYTES, PAGE_ID_BYTES } from './wire';

/** One piece of text for one slot: put `text` as part `part` (of `parts`) of slot `slot`'s text node. */
export interface SlotFill {
  slot: number;
  part: number;
  parts: number;
  text: string;
}

export type CatpEvent =
  /** The index is complete and verified: build the DOM skeleton (slots are empty text nodes). */
  | { type: 'skeleton-ready'; skeleton: Skeleton; blocks: number; slots: number }
  /** Block `block` arrived (or, `local`, came from the client's own store) and was verified: apply every fill. */
  | { type: 'block-filled'; block: number; fills: SlotFill[]; local?: boolean }
  /** Every block arrived and the page matches its digest. */
  | { type: 'page-complete'; digest: Uint8Array }
  /** The page cannot be assembled (hostile or broken server): the tree shown so far is not trustworthy. */
  | { type: 'page-corrupt'; code: string; message: string }
  /** The transfer failed (stalled). */
  | { type: 'error'; code: string; message: string };

export interface RawEvent {
  type: 'prefix-extended';
  /** The bytes just made usable (they follow the previous prefix). */
  bytes: Uint8Array;
  /** Offset of `bytes` in the page. */
  offset: number;
  /** Length of the usable prefix now. */
  length: number;
  /** Page length. */
  total: number;
}
export type RawAssemblerEvent =
  | RawEvent
  | { type: 'page-complete'; digest: Uint8Array }
  | { type: 'page-corrupt'; code: string; message: string }
  | { type: 'error'; code: string; message: string };

export interface AssemblerLimits extends IndexLimits {
  /** Most frames per page (default 16384: ~23 MB). */
  maxFrames: number;
  /** Most index frames (default 8192). */
  maxIndexFrames: number;
  /** Data frames held before the index is complete, in payload bytes (default 4 MiB). */
  maxHeldBytes: number;
  /** Index digest failures tolerated (each drops the index and asks again) before giving up (default 3). */
  maxIndexFailures: number;
}

export const DEFAULT_ASSEMBLER_LIMITS: AssemblerLimits = {
  ...DEFAULT_INDEX_LIMITS,
  maxFrames: 16384,
  maxIndexFrames: 8192,
  maxHeldBytes: 4 << 20,
  maxIndexFailures: 3,
};

export interface AssemblerOptions {
  sha256: Sha256;
  /** Accept only frames with this request ID (default: the first frame's). */
  requestId?: Uint8Array;
  /** Accept only this page id (first 8 bytes of the page digest), if known in advance. */
  pageId?: Uint8Array;
  /** The client's other-channel port, for the report datagrams' DHTTP prefix. */
  otherPort?: number;
  limits?: Partial<AssemblerLimits>;
  /** Report timing (see RepairReceiver). */
  repair?: Omit<ReceiverOptions, 'requestId' | 'otherPort'>;
}

export interface ReceiveResult {
  accepted: boolean;
  /** Why the frame was refused (or CATP_DUPLICATE). */
  code?: string;
  seq?: number;
  /** How many events this frame queued (0 = nothing new became displayable). */
  events: number;
}

/** What CATP and raw assemblers share: header checks, duplicates, counters, events, repair. */
export abstract class AssemblerBase<E extends { type: string }> {
  protected readonly sha256: Sha256;
  protected readonly limits: AssemblerLimits;
  readonly receiver: RepairReceiver;
  protected requestId: Uint8Array | null;
  protected pageId: Uint8Array | null;
  protected total = 0;
  protected indexFrames = -1;
  protected ended = false;
  /** The sender set FRAME_FLAG_REUSE (it asked for nothing: the request carried `Catp-Reuse: hold`). */
  reuseAcked = false;
  private readonly queue: E[] = [];
  private qHead = 0;
  private readonly counts: Record<string, number> = { frames: 0, accepted: 0 };
  private errorReported = false;

  constructor(
    opts: AssemblerOptions,
    private readonly kinds: readonly FrameKind[],
  ) {
    this.sha256 = opts.sha256;
    this.limits = { ...DEFAULT_ASSEMBLER_LIMITS, ...(opts.limits ?? {}) };
    this.requestId = opts.requestId ? opts.requestId.slice(0, ID_BYTES) : null;
    this.pageId = opts.pageId ? opts.pageId.slice(0, PAGE_ID_BYTES) : null;
    this.receiver = new RepairReceiver({ ...(opts.repair ?? {}), requestId: opts.requestId, otherPort: opts.otherPort });
  }

  /** Counts of frames seen, accepted and refused by reason (REJECT codes). */
  counters(): Record<string, number> {
    return { ...this.counts };
  }

  protected count(code: string): void {
    this.counts[code] = (this.counts[code] ?? 0) + 1;
  }

  protected emit(e: E): void {
    this.queue.push(e);
  }

  /** Next event, or null when drained. */
  nextEvent(): E | null {
    if (this.qHead >= this.queue.length) {
      if (this.qHead > 0) {
        this.queue.length = 0;
        this.qHead = 0;
      }
      return null;
    }
    const e = this.queue[this.qHead];
    (this.queue as Array<E | undefined>)[this.qHead] = undefined;
    this.qHead++;
    return e;
  }

  get finished(): boolean {
    return this.ended;
  }

  /** The request went out: reports (asking for the index) follow if nothing arrives. */
  start(nowMs: number): void {
    this.receiver.start(nowMs);
  }

  nextTimerAt(): number | null {
    return this.ended && !this.receiver.complete ? null : this.receiver.nextTimerAt();
  }

  handleTimer(nowMs: number): void {
    this.receiver.handleTimer(nowMs);
  }

  /** Next report datagram (a DHTTP request datagram carrying a CATP report) due at `nowMs`, or null. */
  nextReport(nowMs: number): Uint8Array | null {
    if (this.ended && !this.receiver.complete) return null;
    const r = this.receiver.nextReport(nowMs);
    if (this.receiver.error !== null && !this.errorReported) {
      this.errorReported = true;
      this.ended = true;
      this.emit({ type: 'error', code: this.receiver.error.code, message: this.receiver.error.message } as unknown as E);
    }
    return r;
  }

  /** Take one datagram. Never throws. */
  receive(bytes: Uint8Array, nowMs: number): ReceiveResult {
    this.count('frames');
    const before = this.queue.length - this.qHead;
    let seq: number | undefined;
    try {
      if (!(bytes instanceof Uint8Array)) throw new Reject(REJECT.TRUNCATED, 'not bytes');
      const h = decodeHeader(bytes);
      seq = h.seq;
      this.checkHeader(h);
      if (this.ended) {
        this.receiver.onFrame(h.seq, h.total, h.pageId, nowMs);
        throw new Reject(REJECT.AFTER_END);
      }
      const payload = bytes.subarray(HEADER_BYTES);
      const stored = this.stored(h.seq);
      if (stored !== null) {
        this.receiver.onFrame(h.seq, h.total, h.pageId, nowMs);
        throw new Reject(bytesEqual(stored, payload) ? REJECT.DUPLICATE : REJECT.CONTRADICTING_DUPLICATE);
      }
      // Mark first so that a frame refused inside take() can unmark itself.
      this.receiver.onFrame(h.seq, h.total, h.pageId, nowMs, h.id);
      this.take(h, payload.slice());
      this.count('accepted');
      return { accepted: true, seq, events: this.queue.length - this.qHead - before };
    } catch (e) {
      const code = e instanceof Reject ? e.code : 'CATP_ERR_INTERNAL';
      this.count(code);
      return { accepted: false, code, seq, events: this.queue.length - this.qHead - before };
    }
  }

  private checkHeader(h: FrameHeader): void {
    if (!this.kinds.includes(h.kind)) throw new Reject(REJECT.WRONG_KIND);
    if (this.requestId === null) this.requestId = h.id.slice();
    else if (!bytesEqual(this.requestId, h.id)) throw new Reject(REJECT.WRONG_ID);
    if (this.pageId !== null && !bytesEqual(this.pageId, h.pageId)) throw new Reject(REJECT.WRONG_PAGE);
    if (h.total > this.limits.maxFrames || h.indexFrames > this.limits.maxIndexFrames) throw new Reject(REJECT.ABSURD_COUNT);
    if (((h.flags ?? 0) & FRAME_FLAG_REUSE) !== 0) this.reuseAcked = true;
    if (this.indexFrames < 0) {
      this.pageId = h.pageId.slice();
      this.total = h.total;
      this.indexFrames = h.indexFrames;
      this.init();
    } else if (h.total !== this.total || h.indexFrames !== this.indexFrames) {
      throw new Reject(REJECT.INCONSISTENT_HEADER);
    }
  }

  /** Called once the first valid header fixed total / indexFrames. */
  protected abstract init(): void;
  /** The payload already taken for `seq`, or null. */
  protected abstract stored(seq: number): Uint8Array | null;
  /** Take a new, header-checked frame (may throw Reject; must unmark the receiver if it refuses). */
  protected abstract take(h: FrameHeader, payload: Uint8Array): void;

  protected refuse(seq: number, code: (typeof REJECT)[keyof typeof REJECT], detail = ''): never {
    this.receiver.unmark(seq);
    throw new Reject(code, detail);
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export class CatpAssembler extends AssemblerBase<CatpEvent> {
  private indexParts: Array<Uint8Array | null> = [];
  private indexHave = 0;
  private indexFailures = 0;
  private held = new Map<number, Uint8Array>();
  private heldBytes = 0;
  private data: Array<Uint8Array | null> = [];
  /** 1 for a block filled from the client's own store. */
  private local = new Uint8Array(0);
  private filled = 0;
  /** Blocks filled from the client's own store. */
  localFilled = 0;
  private sk: Skeleton | null = null;
  private indexBody: Uint8Array | null = null;
  private meta: Uint8Array | null = null;

  constructor(opts: AssemblerOptions) {
    super(opts, [FRAME_KIND.INDEX, FRAME_KIND.DATA]);
  }

  /** The verified skeleton, once the index is complete. */
  get skeleton(): Skeleton | null {
    return this.sk;
  }

  /** Blocks filled so far / in total (total is -1 until the first frame). */
  progress(): { blocksFilled: number; blocks: number; indexReady: boolean } {
    return { blocksFilled: this.filled, blocks: this.indexFrames < 0 ? -1 : this.total - this.indexFrames, indexReady: this.sk !== null };
  }

  protected init(): void {
    this.indexParts = new Array(this.indexFrames).fill(null);
    this.data = new Array(this.total - this.indexFrames).fill(null);
    this.local = new Uint8Array(this.total - this.indexFrames);
  }

  protected stored(seq: number): Uint8Array | null {
    if (seq < this.indexFrames) return this.indexParts[seq];
    return this.data[seq - this.indexFrames] ?? this.held.get(seq) ?? null;
  }

  protected take(h: FrameHeader, payload: Uint8Array): void {
    if (h.kind === FRAME_KIND.INDEX) {
      if (h.seq === 0 && payload.length < INDEX_META_BYTES) this.refuse(h.seq, REJECT.TRUNCATED, 'index frame 0 meta');
      this.indexParts[h.seq] = payload;
      if (++this.indexHave === this.indexFrames) this.indexComplete();
      return;
    }
    if (this.sk === null) {
      if (this.heldBytes + payload.length > this.limits.maxHeldBytes) this.refuse(h.seq, REJECT.HOLD_FULL);
      this.held.set(h.seq, payload);
      this.heldBytes += payload.length;
      return;
    }
    this.applyData(h.seq, payload);
  }

  private corrupt(code: string, message: string): void {
    this.ended = true;
    this.held.clear();
    this.emit({ type: 'page-corrupt', code, message });
  }

  private dropIndex(): void {
    for (let i = 0; i < this.indexFrames; i++) {
      this.indexParts[i] = null;
      this.receiver.unmark(i);
    }
    this.indexHave = 0;
  }

  private indexComplete(): void {
    const p0 = this.indexParts[0] as Uint8Array;
    const meta = p0.subarray(0, INDEX_META_BYTES);
    const bodyLen = new DataView(meta.buffer, meta.byteOffset, meta.byteLength).getUint32(32);
    let have = p0.length - INDEX_META_BYTES;
    for (let i = 1; i < this.indexFrames; i++) have += (this.indexParts[i] as Uint8Array).length;
    let body: Uint8Array | null = null;
    if (have === bodyLen) {
      body = new Uint8Array(bodyLen);
      body.set(p0.subarray(INDEX_META_BYTES), 0);
      let o = p0.length - INDEX_META_BYTES;
      for (let i = 1; i < this.indexFrames; i++) {
        const p = this.indexParts[i] as Uint8Array;
        body.set(p, o);
        o += p.length;
      }
    }
    if (body === null || !bytesEqual(this.sha256(body).subarray(0, DIGEST_BYTES), meta.subarray(36, 68))) {
      // One of the index frames is bad and we cannot tell which: forget them all and ask again.
      this.dropIndex();
      if (++this.indexFailures > this.limits.maxIndexFailures) {
        this.corrupt(CATP_ERR.INDEX_CORRUPT, 'the index failed its digest too often');
      }
      throw new Reject(REJECT.INDEX_DIGEST);
    }
    if (!bytesEqual(meta.subarray(0, PAGE_ID_BYTES), this.pageId as Uint8Array)) {
      this.corrupt(REJECT.WRONG_PAGE, 'page digest in the index does not match the page id');
      throw new Reject(REJECT.WRONG_PAGE);
    }
    let sk: Skeleton;
    try {
      sk = decodeIndexBody(body, this.limits);
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      this.corrupt(REJECT.BAD_INDEX, msg);
      throw e;
    }
    if (sk.blocks.length !== this.total - this.indexFrames) {
      this.corrupt(REJECT.BAD_INDEX, 'block count does not match the frame count');
      throw new Reject(REJECT.BAD_INDEX, 'block count');
    }
    this.sk = sk;
    this.indexBody = body;
    this.meta = meta.slice();
    this.emit({ type: 'skeleton-ready', skeleton: sk, blocks: sk.blocks.length, slots: sk.slotCount });
    const held = [...this.held.entries()].sort((a, b) => a[0] - b[0]);
    this.held.clear();
    this.heldBytes = 0;
    for (const [seq, payload] of held) {
      try {
        this.applyData(seq, payload);
      } catch (e) {
        this.count(e instanceof Reject ? e.code : 'CATP_ERR_INTERNAL');
      }
    }
    if (sk.blocks.length === 0) this.finish();
  }

  private applyData(seq: number, payload: Uint8Array): void {
    const b = seq - this.indexFrames;
    let fills: SlotFill[];
    try {
      fills = this.decodeBlock(b, payload);
    } catch (e) {
      this.refuse(seq, e instanceof Reject ? e.code : REJECT.BAD_BLOCK);
    }
    this.accept(b, payload, fills, false);
  }

  /** Checks a block payload against the index (digest, piece count, UTF-8) and returns its fills. Throws Reject. */
  private decodeBlock(b: number, payload: Uint8Array): SlotFill[] {
    const sk = this.sk as Skeleton;
    const info = sk.blocks[b];
    if (!bytesEqual(this.sha256(payload).subarray(0, BLOCK_DIGEST_BYTES), info.digest)) throw new Reject(REJECT.BLOCK_DIGEST);
    const fills: SlotFill[] = [];
    try {
      const r = new ByteReader(payload, 0, REJECT.BAD_BLOCK);
      const n = r.varint();
      if (n !== info.pieces) throw new Reject(REJECT.BAD_BLOCK, 'piece count');
      for (let i = 0; i < n; i++) {
        const len = r.varint();
        const text = utf8.decode(r.bytes(len));
        const p = info.firstPiece + i;
        const slot = sk.pieceSlot[p];
        fills.push({ slot, part: sk.piecePart[p], parts: sk.slotParts[slot], text });
      }
      if (r.remaining !== 0) throw new Reject(REJECT.BAD_BLOCK, 'trailing bytes');
    } catch (e) {
      throw e instanceof Reject ? e : new Reject(REJECT.BAD_BLOCK);
    }
    return fills;
  }

  private accept(b: number, payload: Uint8Array, fills: SlotFill[], local: boolean): void {
    const sk = this.sk as Skeleton;
    this.data[b] = payload;
    this.filled++;
    if (local) {
      this.local[b] = 1;
      this.localFilled++;
    }
    this.emit(local ? { type: 'block-filled', block: b, fills, local: true } : { type: 'block-filled', block: b, fills });
    if (this.filled === sk.blocks.length) this.finish();
  }

  /**
   * Block reuse: fill block `block` from the client's own store (the caller looked its digest up after
   * `skeleton-ready`). Verified exactly like a data frame: a payload that does not match the index's digest,
   * piece count or UTF-8 is refused (counted CATP_REUSE_REFUSED, the block stays missing and is fetched).
   * Returns true when the block was filled (queueing a `block-filled` event with `local: true`).
   */
  fillLocal(block: number, payload: Uint8Array): boolean {
    const sk = this.sk;
    if (sk === null || this.ended || !(block >= 0 && block < sk.blocks.length) || this.data[block] !== null) return false;
    let fills: SlotFill[];
    try {
      fills = this.decodeBlock(block, payload);
    } catch {
      this.count('CATP_REUSE_REFUSED');
      return false;
    }
    this.receiver.holdLocal(this.indexFrames + block);
    this.accept(block, payload.slice(), fills, true);
    return true;
  }

  /**
   * Block reuse: the local fill is done. Towards a sender that acknowledged reuse, the receiver's full reports
   * become exhaustive and one goes at once, so the sender drops what is held and ends its hold.
   * Returns whether it did (false: the sender did not acknowledge, or the transfer is over).
   */
  reuseReady(): boolean {
    if (!this.reuseAcked || this.ended) return false;
    this.receiver.reportExhaustive();
    return true;
  }

  /** A block's verified payload once filled (for the client's store), and whether it came from the store. */
  blockPayload(block: number): { payload: Uint8Array; local: boolean } | null {
    const p = this.data[block];
    return p ? { payload: p, local: this.local[block] === 1 } : null;
  }

  private finish(): void {
    const body = this.indexBody as Uint8Array;
    let total = body.length;
    for (const d of this.data) total += (d as Uint8Array).length;
    const canon = new Uint8Array(total);
    canon.set(body, 0);
    let o = body.length;
    for (const d of this.data) {
      canon.set(d as Uint8Array, o);
      o += (d as Uint8Array).length;
    }
    const digest = this.sha256(canon).slice(0, DIGEST_BYTES);
    const want = (this.meta as Uint8Array).subarray(0, DIGEST_BYTES);
    this.ended = true;
    if (bytesEqual(digest, want)) this.emit({ type: 'page-complete', digest });
    else this.emit({ type: 'page-corrupt', code: CATP_ERR.PAGE_DIGEST, message: 'the page does not match its digest' });
  }
}
