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
import { CHECK_BYTES, DIGEST_BYTES, Sha256 } from './encoder';
import { BLOCK_DIGEST_BYTES, BlockInfo, blockFrames, DEFAULT_INDEX_LIMITS, decodeIndexPiece, IndexLimits, IndexPiece, PAGE_DIGEST_BYTES, SlotRef, STREAMS } from './index-piece';
import { FrameCodec, MAX_DECODED_PAYLOAD, unpackPayload } from './payload-codec';
import { OrderedList } from './ordered-list';
import { RepairReceiver, ReceiverOptions } from './repair';
import { ByteReader, bytesEqual, decodeHeader, FRAME_FLAG_REUSE, FRAME_KIND, FrameHeader, FrameKind, HEADER_BYTES, ID_BYTES, PAGE_ID_BYTES } from './wire';

/** One piece of content for one slot: put `text` as part `part` (of `parts`) of slot `slot`. */
export interface SlotFill {
  slot: number;
  part: number;
  parts: number;
  text: string;
}

export type CatpEvent =
  /**
   * An index frame arrived and checked out: add its piece of the tree now (under provisional ancestors where
   * theirs are not here yet). `fills` are slot contents that arrived before the piece that holds their slots.
   */
  | { type: 'index-piece'; piece: IndexPiece; fills: SlotFill[] }
  /** Every index frame is here: every block's digest is known (block reuse looks them up now). */
  | { type: 'index-complete'; blocks: number; slots: number }
  /**
   * Block `block` arrived (or, `local`, came from the client's own store) and was verified: apply every fill.
   * Pieces of it whose slots are in an index frame not yet here follow with that frame's `index-piece`.
   */
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
  /** Data frames held before the index frame that describes them, in payload bytes (default 4 MiB). */
  maxHeldBytes: number;
}

export const DEFAULT_ASSEMBLER_LIMITS: AssemblerLimits = {
  ...DEFAULT_INDEX_LIMITS,
  maxFrames: 16384,
  maxIndexFrames: 8192,
  maxHeldBytes: 4 << 20,
};

export interface AssemblerOptions {
  sha256: Sha256;
  /** Decompresses frames the sender compressed (payload-codec.ts); without one, compressed frames are refused. */
  codec?: FrameCodec;
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
  /** The frame's kind, once its header decoded (as `seq`). */
  kind?: FrameKind;
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

  /**
   * Take one datagram. Never throws. `arrivedAtMs` (on the clock of `nowMs`, not after it): when the datagram
   * reached this host, if known (a kernel receive time); the report's echo delay runs from then, so a frame that
   * waited behind others in a busy client's socket or batch does not lengthen the sender's RTT sample.
   */
  receive(bytes: Uint8Array, nowMs: number, arrivedAtMs: number = nowMs): ReceiveResult {
    this.count('frames');
    const before = this.queue.length - this.qHead;
    let seq: number | undefined;
    let kind: FrameKind | undefined;
    try {
      if (!(bytes instanceof Uint8Array)) throw new Reject(REJECT.TRUNCATED, 'not bytes');
      const h = decodeHeader(bytes);
      seq = h.seq;
      kind = h.kind;
      this.checkHeader(h);
      if (this.ended) {
        this.receiver.onFrame(h.seq, h.total, h.pageId, nowMs, undefined, arrivedAtMs);
        throw new Reject(REJECT.AFTER_END);
      }
      const payload = bytes.subarray(HEADER_BYTES);
      const stored = this.stored(h.seq);
      if (stored !== null) {
        this.receiver.onFrame(h.seq, h.total, h.pageId, nowMs, undefined, arrivedAtMs);
        throw new Reject(bytesEqual(stored, payload) ? REJECT.DUPLICATE : REJECT.CONTRADICTING_DUPLICATE);
      }
      // Mark first so that a frame refused inside take() can unmark itself.
      this.receiver.onFrame(h.seq, h.total, h.pageId, nowMs, h.id, arrivedAtMs);
      this.take(h, payload.slice());
      this.count('accepted');
      return { accepted: true, seq, kind, events: this.queue.length - this.qHead - before };
    } catch (e) {
      const code = e instanceof Reject ? e.code : 'CATP_ERR_INTERNAL';
      this.count(code);
      return { accepted: false, code, seq, kind, events: this.queue.length - this.qHead - before };
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

const KIND_INDEX = 1;
const KIND_DATA = 2;

/**
 * What the assembler knows of each node, by number: whether it is known (provisionally, from a chain, or for real,
 * from its own piece), its parent, and what it is ('e|ns|tag' for an element, 'c' for template content, 'x' for
 * anything else, interned). Typed arrays that grow: a page has up to a million nodes.
 */
class NodeTable {
  state = new Uint8Array(1024); // 0 unknown, 1 provisional, 2 real
  parent = new Int32Array(1024);
  key = new Int32Array(1024);
  size = 0;
  private readonly keys = new Map<string, Map<string, number>>();
  private nextKey = 2;

  /** 0 template content, 1 a non-element, else an id per (namespace, tag). */
  keyOf(kind: string, tagName = '', namespace = ''): number {
    if (kind !== 'element') return kind === 'content' ? 0 : 1;
    let byTag = this.keys.get(namespace);
    if (byTag === undefined) this.keys.set(namespace, (byTag = new Map()));
    let id = byTag.get(tagName);
    if (id === undefined) byTag.set(tagName, (id = this.nextKey++));
    return id;
  }

  private grow(n: number): void {
    let cap = this.state.length;
    while (cap <= n) cap *= 2;
    const st = new Uint8Array(cap);
    st.set(this.state);
    const pa = new Int32Array(cap);
    pa.set(this.parent);
    const ke = new Int32Array(cap);
    ke.set(this.key);
    this.state = st;
    this.parent = pa;
    this.key = ke;
  }

  /** 0 unknown, 1 provisional, 2 real. */
  at(n: number): number {
    return n < this.state.length ? this.state[n] : 0;
  }

  set(n: number, state: 1 | 2, parent: number, key: number): void {
    if (n >= this.state.length) this.grow(n);
    if (this.state[n] === 0) this.size++;
    this.state[n] = state;
    this.parent[n] = parent;
    this.key[n] = key;
  }
}

/**
 * `bytes` to keep: as they are when they span their whole buffer (a decoder's own output), else copied, so that a view
 * into a larger buffer (a stored payload, a decoder's output chunk) does not keep the rest of that buffer alive.
 */
function own(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : bytes.slice();
}

/** The node and slot numbers an index piece covers. */
type PieceRanges = Pick<IndexPiece, 'firstNode' | 'nodeCount' | 'firstSlot' | 'slotCount'>;

/** Slots of one stream, by piece number: sorted, non-overlapping [firstPiece, firstPiece + parts). */
interface SlotSpan {
  firstPiece: number;
  parts: number;
  slot: number;
}

/** A block's consecutive pieces whose slot is not known yet (assembler `pending`). */
interface PendingRun {
  firstPiece: number;
  texts: Array<string | undefined>;
}

/** Spans of pieces (a slot's, a block's), in order of their first piece. */
function spanList<T extends { firstPiece: number }>(): OrderedList<T> {
  return new OrderedList<T>((s) => s.firstPiece);
}

/** True when [first, first+count) overlaps a span of the list. */
function overlaps<T extends { firstPiece: number; parts: number }>(spans: OrderedList<T>, first: number, count: number): boolean {
  const s = spans.floor(first + count - 1);
  return s !== undefined && s.firstPiece + s.parts > first;
}

export class CatpAssembler extends AssemblerBase<CatpEvent> {
  private readonly codec: FrameCodec | undefined;
  /** Accepted frames' payloads by seq (duplicate detection), and what kind each turned out to be. */
  private raw: Array<Uint8Array | null> = [];
  private seqKind = new Uint8Array(0);
  /** Each index piece's ranges (what the checks of later pieces need): not the piece, whose nodes would live on. */
  private pieces: Array<PieceRanges | null> = [];
  /** Ordinals of the pieces here. */
  private readonly present = new OrderedList<number>((n) => n);
  private bodies: Array<Uint8Array | null> = [];
  private piecesHave = 0;
  private fragment: boolean | null = null;
  private mode: IndexPiece['mode'] | null = null;
  private pageDigest: Uint8Array | null = null;
  private readonly nodes = new NodeTable();
  private provisional = 0;
  private readonly slotSpans: Array<OrderedList<SlotSpan>> = [spanList(), spanList(), spanList()];
  private readonly blockSpans: Array<OrderedList<{ firstPiece: number; parts: number }>> = [spanList(), spanList(), spanList()];
  private slotParts = 0;
  private slots = 0;
  private blockPieces = 0;
  private infos: Array<BlockInfo | null> = [];
  /** Blocks the index frames here describe, and the data frames they span (the whole index: every data frame). */
  private blocksDescribed = 0;
  private blockFramesDescribed = 0;
  private readonly blockOfSeq = new Map<number, number>();
  /** Data frames whose block is not described yet (by seq; payload in `raw`). */
  private readonly held = new Set<number>();
  private heldBytes = 0;
  private data: Array<Uint8Array | null> = [];
  /**
   * Verified pieces whose slot's index frame is not here yet: per stream, runs of a block's consecutive pieces (a
   * taken piece's text becomes undefined), and how many are left. A slot takes what its span covers, so however
   * many parts it declares it visits only the runs it meets: a map of pieces was looked up once per declared part,
   * or scanned whole for a slot of more parts than pieces waiting — 2,000 slots of 20,000 parts against 20,000
   * waiting pieces took 0.6–1.3 s, and the 8,192 index frames a page may have minutes.
   */
  private readonly pending: Array<OrderedList<PendingRun>> = [spanList(), spanList(), spanList()];
  private readonly pendingPieces = [0, 0, 0];
  /** 1 for a block filled from the client's own store. */
  private local = new Uint8Array(0);
  private filled = 0;
  /** Blocks filled from the client's own store. */
  localFilled = 0;

  constructor(opts: AssemblerOptions) {
    super(opts, [FRAME_KIND.INDEX, FRAME_KIND.DATA]);
    this.codec = opts.codec;
  }

  /** Blocks filled so far / in total (total is -1 until the first frame); whether every index frame is here. */
  progress(): { blocksFilled: number; blocks: number; indexReady: boolean; indexPieces: number; indexFrames: number } {
    return {
      blocksFilled: this.filled,
      // every data frame a block until the whole index says which blocks span several
      blocks: this.indexFrames < 0 ? -1 : this.piecesHave === this.indexFrames ? this.blocksDescribed : this.total - this.indexFrames,
      indexReady: this.indexFrames > 0 && this.piecesHave === this.indexFrames,
      indexPieces: this.piecesHave,
      indexFrames: Math.max(0, this.indexFrames),
    };
  }

  /** What the index says of block `block` (its digest, stream, frame number), once its index frame is here. */
  blockInfo(block: number): BlockInfo | null {
    return this.infos[block] ?? null;
  }

  /** Every block the index frames here so far describe. */
  knownBlocks(): BlockInfo[] {
    return this.infos.filter((b): b is BlockInfo => b !== null);
  }

  /** The block frame `seq` carries, once the index frame describing it is here. */
  blockAtSeq(seq: number): number | null {
    return this.blockOfSeq.get(seq) ?? null;
  }

  protected init(): void {
    const blocks = this.total - this.indexFrames;
    this.raw = new Array(this.total).fill(null);
    this.seqKind = new Uint8Array(this.total);
    this.pieces = new Array(this.indexFrames).fill(null);
    this.bodies = new Array(this.indexFrames).fill(null);
    this.infos = new Array(blocks).fill(null);
    this.data = new Array(blocks).fill(null);
    this.local = new Uint8Array(blocks);
  }

  protected stored(seq: number): Uint8Array | null {
    return this.raw[seq] ?? null;
  }

  protected take(h: FrameHeader, payload: Uint8Array): void {
    if (h.kind === FRAME_KIND.INDEX) {
      if (this.blockOfSeq.has(h.seq)) this.refuse(h.seq, REJECT.INDEX_CONFLICT, 'an index frame where the index puts a block');
      this.takeIndex(h.seq, payload);
      return;
    }
    const b = this.blockOfSeq.get(h.seq);
    if (b !== undefined && this.data[b] !== null) {
      // the network copy of a block already filled from the client's own store
      this.raw[h.seq] = payload;
      this.seqKind[h.seq] = KIND_DATA;
      throw new Reject(REJECT.DUPLICATE);
    }
    if (b === undefined) {
      if (this.heldBytes + payload.length > this.limits.maxHeldBytes) this.refuse(h.seq, REJECT.HOLD_FULL);
      this.raw[h.seq] = payload;
      this.seqKind[h.seq] = KIND_DATA;
      this.held.add(h.seq);
      this.heldBytes += payload.length;
      return;
    }
    this.raw[h.seq] = payload;
    this.seqKind[h.seq] = KIND_DATA;
    if (this.blockComplete(b)) this.applyData(h.seq, b);
  }

  /** Whether every data frame of block `b` is here (and none is still held for want of its description). */
  private blockComplete(b: number): boolean {
    const info = this.infos[b] as BlockInfo;
    const n = blockFrames(info);
    for (let k = 0; k < n; k++) if (this.raw[info.seq + k] === null || this.held.has(info.seq + k)) return false;
    return true;
  }

  private corrupt(code: string, message: string): void {
    this.ended = true;
    this.held.clear();
    this.emit({ type: 'page-corrupt', code, message });
  }

  /** Decodes, checks against what other frames said, then (only if all is well) adds an index piece. */
  private takeIndex(seq: number, payload: Uint8Array): void {
    let piece: IndexPiece;
    let body: Uint8Array;
    try {
      if (payload.length < CHECK_BYTES + 1) throw new Reject(REJECT.TRUNCATED, 'index frame');
      body = unpackPayload(payload.subarray(CHECK_BYTES), this.codec, MAX_DECODED_PAYLOAD);
      if (!bytesEqual(this.sha256(body).subarray(0, CHECK_BYTES), payload.subarray(0, CHECK_BYTES))) throw new Reject(REJECT.INDEX_DIGEST);
      piece = decodeIndexPiece(body, this.limits, this.total - this.indexFrames, this.total);
      this.check(piece, seq);
    } catch (e) {
      this.refuse(seq, e instanceof Reject ? e.code : REJECT.BAD_INDEX, e instanceof Error ? e.message : '');
    }
    this.raw[seq] = payload;
    this.seqKind[seq] = KIND_INDEX;
    this.commit(piece, own(body));
  }

  /** Everything a new piece (arriving as frame `seq`) must agree with. Throws Reject; changes nothing. */
  private check(p: IndexPiece, seq: number): void {
    if (p.ordinal >= this.indexFrames) throw new Reject(REJECT.BAD_INDEX, 'ordinal past the index');
    if (this.pieces[p.ordinal] !== null) throw new Reject(REJECT.INDEX_CONFLICT, `a second index frame ${p.ordinal}`);
    if ((p.ordinal === 0) !== (p.pageDigest !== null)) throw new Reject(REJECT.BAD_INDEX, 'page digest in the wrong frame');
    if (p.pageDigest !== null && !bytesEqual(p.pageDigest.subarray(0, PAGE_ID_BYTES), this.pageId as Uint8Array)) throw new Reject(REJECT.WRONG_PAGE);
    if (p.ordinal === 0 && (p.firstNode !== 1 || p.chain.length > 0)) throw new Reject(REJECT.INDEX_CONFLICT, 'index frame 0 starts the page');
    if (this.fragment !== null && (this.fragment !== p.fragment || this.mode !== p.mode)) throw new Reject(REJECT.INDEX_CONFLICT, 'document mode');
    // Pieces follow each other in node order as their ordinals do; neighbours meet exactly.
    const end = p.firstNode + p.nodeCount;
    // the nearest present pieces on each side, from the list of those here (a scan over the absent ones between was
    // quadratic in a page whose index frames arrive in reverse, or in order)
    const before = this.present.floor(p.ordinal - 1);
    if (before !== undefined) {
      const q = this.pieces[before] as PieceRanges;
      const qEnd = q.firstNode + q.nodeCount;
      if (qEnd > p.firstNode || (before === p.ordinal - 1 && qEnd !== p.firstNode)) {
        throw new Reject(REJECT.INDEX_CONFLICT, 'overlapping or misordered node ranges');
      }
      if (q.firstSlot + q.slotCount > p.firstSlot) throw new Reject(REJECT.INDEX_CONFLICT, 'slot numbers');
    }
    const after = this.present.higher(p.ordinal);
    if (after !== undefined) {
      const q = this.pieces[after] as PieceRanges;
      if (end > q.firstNode || (after === p.ordinal + 1 && end !== q.firstNode)) {
        throw new Reject(REJECT.INDEX_CONFLICT, 'overlapping or misordered node ranges');
      }
      if (p.firstSlot + p.slotCount > q.firstSlot) throw new Reject(REJECT.INDEX_CONFLICT, 'slot numbers');
    }
    if (this.nodes.size + p.nodeCount + p.chain.length > this.limits.maxNodes) throw new Reject(REJECT.ABSURD_COUNT, 'nodes');
    // The chain and the nodes against what other pieces said of the same numbers.
    const t = this.nodes;
    let parent = 0;
    for (const c of p.chain) {
      if (t.at(c.n) !== 0 && (t.key[c.n] !== t.keyOf(c.content ? 'content' : 'element', c.tagName, c.namespace) || t.parent[c.n] !== parent)) {
        throw new Reject(REJECT.INDEX_CONFLICT, `ancestor ${c.n}`);
      }
      parent = c.n;
    }
    for (const nd of p.nodes) {
      const state = t.at(nd.n);
      if (state === 0) continue;
      const key = (nd.kind === 'element' ? t.keyOf('element', nd.tagName, nd.namespace) : t.keyOf(nd.kind));
      if (state === 2 || t.key[nd.n] !== key || t.parent[nd.n] !== nd.parent) throw new Reject(REJECT.INDEX_CONFLICT, `node ${nd.n}`);
    }
    // Slots and blocks: no piece number described twice.
    const refs = slotRefs(p);
    const seen: Array<Array<[number, number]>> = [[], [], []];
    for (const r of refs) {
      if (overlaps(this.slotSpans[r.stream], r.firstPiece, r.parts)) throw new Reject(REJECT.INDEX_CONFLICT, `slot ${r.slot}`);
      seen[r.stream].push([r.firstPiece, r.parts]);
    }
    for (const b of p.blocks) {
      if (this.infos[b.block] !== null) throw new Reject(REJECT.INDEX_CONFLICT, `block ${b.block} described twice`);
      if (overlaps(this.blockSpans[b.stream], b.firstPiece, b.pieces)) throw new Reject(REJECT.INDEX_CONFLICT, `block ${b.block} pieces`);
      for (let k = 0, n = blockFrames(b); k < n; k++) {
        const at = b.seq + k;
        if (at === seq || this.seqKind[at] === KIND_INDEX || (this.blockOfSeq.has(at) && this.blockOfSeq.get(at) !== b.block)) {
          throw new Reject(REJECT.INDEX_CONFLICT, `block ${b.block} frame number`);
        }
      }
    }
    if (this.blockFramesDescribed + p.blocks.reduce((sum, b) => sum + blockFrames(b), 0) > this.total - this.indexFrames) {
      throw new Reject(REJECT.INDEX_CONFLICT, 'blocks span more frames than the page has data frames');
    }
    // ... nor twice within this piece
    const dupSeq = new Set<number>();
    const byStream: Array<Array<[number, number]>> = [[], [], []];
    for (const b of p.blocks) {
      for (let k = 0, n = blockFrames(b); k < n; k++) {
        if (dupSeq.has(b.seq + k)) throw new Reject(REJECT.INDEX_CONFLICT, 'two blocks in one frame');
        dupSeq.add(b.seq + k);
      }
      byStream[b.stream].push([b.firstPiece, b.pieces]);
    }
    for (let s = 0; s < STREAMS; s++) {
      for (const list of [seen[s], byStream[s]]) {
        list.sort((a, b) => a[0] - b[0]);
        for (let i = 1; i < list.length; i++) if (list[i - 1][0] + list[i - 1][1] > list[i][0]) throw new Reject(REJECT.INDEX_CONFLICT, 'pieces described twice');
      }
    }
  }

  private commit(p: IndexPiece, body: Uint8Array): void {
    this.pieces[p.ordinal] = { firstNode: p.firstNode, nodeCount: p.nodeCount, firstSlot: p.firstSlot, slotCount: p.slotCount };
    this.bodies[p.ordinal] = body;
    this.piecesHave++;
    this.present.insert(p.ordinal);
    this.fragment = p.fragment;
    this.mode = p.mode;
    if (p.pageDigest !== null) this.pageDigest = p.pageDigest;
    const t = this.nodes;
    let parent = 0;
    for (const c of p.chain) {
      if (t.at(c.n) === 0) {
        t.set(c.n, 1, parent, t.keyOf(c.content ? 'content' : 'element', c.tagName, c.namespace));
        this.provisional++;
      }
      parent = c.n;
    }
    for (const nd of p.nodes) {
      if (t.at(nd.n) === 1) {
        t.state[nd.n] = 2;
        this.provisional--;
      } else {
        t.set(nd.n, 2, nd.parent, (nd.kind === 'element' ? t.keyOf('element', nd.tagName, nd.namespace) : t.keyOf(nd.kind)));
      }
    }
    const fills: SlotFill[] = [];
    const refs = slotRefs(p);
    for (const r of refs) this.slotSpans[r.stream].insert({ firstPiece: r.firstPiece, parts: r.parts, slot: r.slot });
    for (const r of refs) {
      this.slotParts += r.parts;
      this.slots++;
      if (this.pendingPieces[r.stream] > 0) this.takePending(r, fills);
    }
    const newlyKnown: number[] = []; // blocks some of whose frames were held
    for (const b of p.blocks) this.blockSpans[b.stream].insert({ firstPiece: b.firstPiece, parts: b.pieces });
    for (const b of p.blocks) {
      this.infos[b.block] = b;
      this.blocksDescribed++;
      this.blockPieces += b.pieces;
      let wasHeld = false;
      for (let k = 0, n = blockFrames(b); k < n; k++) {
        this.blockOfSeq.set(b.seq + k, b.block);
        this.blockFramesDescribed++;
        if (!this.held.delete(b.seq + k)) continue;
        this.heldBytes -= (this.raw[b.seq + k] as Uint8Array).length;
        wasHeld = true;
      }
      if (wasHeld) newlyKnown.push(b.block);
    }
    this.emit({ type: 'index-piece', piece: p, fills });
    // index-complete comes before the fills of data frames held for this piece: the last of them may finish the page
    if (this.piecesHave === this.indexFrames) {
      // every data frame in exactly one block (no two blocks share one: check), blocks numbered 0 .. count - 1
      if (this.blockFramesDescribed !== this.total - this.indexFrames || this.infos.slice(0, this.blocksDescribed).includes(null)) {
        return this.corrupt(REJECT.BAD_INDEX, 'the blocks do not cover the data frames');
      }
      this.emit({ type: 'index-complete', blocks: this.blocksDescribed, slots: this.slots });
    }
    for (const b of newlyKnown) {
      const info = this.infos[b] as BlockInfo;
      if (!this.blockComplete(b)) continue;
      try {
        this.applyData(info.seq, b);
      } catch (e) {
        this.count(e instanceof Reject ? e.code : 'CATP_ERR_INTERNAL');
      }
    }
    this.maybeFinish();
  }

  /**
   * Decodes block `b` from its frames (all here) and fills it. `seq`: the frame that completed it, refused with the
   * reason when the block does not decode or check out; the block's other frames are dropped with it (which of
   * them is bad cannot be told), so all are asked for again.
   */
  private applyData(seq: number, b: number): void {
    const info = this.infos[b] as BlockInfo;
    const n = blockFrames(info);
    let decoded: Uint8Array;
    let fills: SlotFill[];
    try {
      decoded = unpackPayload(n === 1 ? (this.raw[info.seq] as Uint8Array) : this.joinFrames(info.seq, n), this.codec, MAX_DECODED_PAYLOAD);
      fills = this.decodeBlock(b, decoded);
    } catch (e) {
      for (let k = 0; k < n; k++) {
        this.raw[info.seq + k] = null;
        this.seqKind[info.seq + k] = 0;
        if (info.seq + k !== seq) this.receiver.unmark(info.seq + k);
      }
      this.refuse(seq, e instanceof Reject ? e.code : REJECT.BAD_BLOCK);
    }
    this.accept(b, own(decoded), fills, false);
  }

  /** The payloads of frames seq .. seq + n - 1, joined: a block's packed payload. */
  private joinFrames(seq: number, n: number): Uint8Array {
    let size = 0;
    for (let k = 0; k < n; k++) size += (this.raw[seq + k] as Uint8Array).length;
    const out = new Uint8Array(size);
    let o = 0;
    for (let k = 0; k < n; k++) {
      const part = this.raw[seq + k] as Uint8Array;
      out.set(part, o);
      o += part.length;
    }
    return out;
  }

  /** Checks a decoded block against the index (digest, piece count, UTF-8) and returns its fills. Throws Reject. */
  private decodeBlock(b: number, payload: Uint8Array): SlotFill[] {
    const info = this.infos[b] as BlockInfo;
    if (!bytesEqual(this.sha256(payload).subarray(0, BLOCK_DIGEST_BYTES), info.digest)) throw new Reject(REJECT.BLOCK_DIGEST);
    const texts: string[] = [];
    try {
      const r = new ByteReader(payload, 0, REJECT.BAD_BLOCK);
      const n = r.varint();
      if (n !== info.pieces) throw new Reject(REJECT.BAD_BLOCK, 'piece count');
      for (let i = 0; i < n; i++) texts.push(utf8.decode(r.bytes(r.varint())));
      if (r.remaining !== 0) throw new Reject(REJECT.BAD_BLOCK, 'trailing bytes');
    } catch (e) {
      throw e instanceof Reject ? e : new Reject(REJECT.BAD_BLOCK);
    }
    // Pieces whose slot is known now are fills; the rest wait for their index frame.
    const fills: SlotFill[] = [];
    const spans = this.slotSpans[info.stream];
    let run: PendingRun | null = null;
    texts.forEach((text, i) => {
      const piece = info.firstPiece + i;
      const s = spans.floor(piece);
      if (s !== undefined && piece < s.firstPiece + s.parts) {
        fills.push({ slot: s.slot, part: piece - s.firstPiece, parts: s.parts, text });
        run = null;
      } else {
        if (run === null) {
          run = { firstPiece: piece, texts: [] };
          this.pending[info.stream].insert(run);
        }
        run.texts.push(text);
        this.pendingPieces[info.stream]++;
      }
    });
    return fills;
  }

  /** The waiting pieces slot `r` covers, as its fills. */
  private takePending(r: SlotRef, fills: SlotFill[]): void {
    const runs = this.pending[r.stream];
    const end = r.firstPiece + r.parts;
    const take = (run: PendingRun): void => {
      const to = Math.min(run.firstPiece + run.texts.length, end);
      for (let piece = Math.max(run.firstPiece, r.firstPiece); piece < to; piece++) {
        const text = run.texts[piece - run.firstPiece];
        if (text === undefined) continue;
        run.texts[piece - run.firstPiece] = undefined;
        this.pendingPieces[r.stream]--;
        fills.push({ slot: r.slot, part: piece - r.firstPiece, parts: r.parts, text });
      }
    };
    const before = runs.floor(r.firstPiece - 1);
    if (before !== undefined) take(before);
    for (const run of runs.from(r.firstPiece)) {
      if (run.firstPiece >= end) break;
      take(run);
    }
  }

  private accept(b: number, payload: Uint8Array, fills: SlotFill[], local: boolean): void {
    if (this.data[b] !== null) return; // filled already (guard: a block counts once)
    this.data[b] = payload;
    this.filled++;
    if (local) {
      this.local[b] = 1;
      this.localFilled++;
    }
    this.emit(local ? { type: 'block-filled', block: b, fills, local: true } : { type: 'block-filled', block: b, fills });
    this.maybeFinish();
  }

  /**
   * Block reuse: fill block `block` from the client's own store (the caller looked its digest up once the index
   * frame describing it arrived). Verified exactly like a data frame: a payload that does not match the index's
   * digest, piece count or UTF-8 is refused (counted CATP_REUSE_REFUSED, the block stays missing and is fetched).
   * Returns true when the block was filled (queueing a `block-filled` event with `local: true`).
   */
  fillLocal(block: number, payload: Uint8Array): boolean {
    const info = this.infos[block];
    if (this.ended || info === null || info === undefined || this.data[block] !== null) return false;
    let fills: SlotFill[];
    try {
      fills = this.decodeBlock(block, payload);
    } catch {
      this.count('CATP_REUSE_REFUSED');
      return false;
    }
    for (let k = 0, n = blockFrames(info); k < n; k++) this.receiver.holdLocal(info.seq + k);
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

  /** A block's verified (decoded) payload once filled (for the client's store), and whether it came from the store. */
  blockPayload(block: number): { payload: Uint8Array; local: boolean } | null {
    const p = this.data[block];
    return p ? { payload: p, local: this.local[block] === 1 } : null;
  }

  private maybeFinish(): void {
    if (this.ended || this.piecesHave !== this.indexFrames || this.filled !== this.blocksDescribed) return;
    // Everything is here: the pieces must tile the page, every ancestor must have turned up, every slot piece must
    // be covered by exactly one block; then the whole must match the page digest.
    let next = 1;
    for (const p of this.pieces as PieceRanges[]) {
      if (p.firstNode !== next) return this.corrupt(REJECT.BAD_INDEX, 'the index frames leave a gap');
      next += p.nodeCount;
    }
    if (this.provisional !== 0) return this.corrupt(REJECT.BAD_ATTACH, 'an ancestor named by an index frame never came');
    if (this.slotParts !== this.blockPieces || this.pendingPieces.some((n) => n > 0)) return this.corrupt(REJECT.BAD_INDEX, 'slots and blocks do not match');
    const bodies = this.bodies as Uint8Array[];
    let total = -PAGE_DIGEST_BYTES;
    for (const b of bodies) total += b.length;
    const data = this.data.slice(0, this.blocksDescribed) as Uint8Array[];
    for (const d of data) total += d.length;
    const canon = new Uint8Array(total);
    let o = 0;
    bodies.forEach((b, k) => {
      const part = k === 0 ? b.subarray(0, b.length - PAGE_DIGEST_BYTES) : b;
      canon.set(part, o);
      o += part.length;
    });
    for (const d of data) {
      canon.set(d, o);
      o += d.length;
    }
    const digest = this.sha256(canon).slice(0, DIGEST_BYTES);
    this.ended = true;
    if (bytesEqual(digest, this.pageDigest as Uint8Array)) this.emit({ type: 'page-complete', digest });
    else this.emit({ type: 'page-corrupt', code: CATP_ERR.PAGE_DIGEST, message: 'the page does not match its digest' });
  }
}

/** Every slot of a piece, in slot order (attributes of an element before the nodes after it). */
export function slotRefs(p: IndexPiece): SlotRef[] {
  const out: SlotRef[] = [];
  for (const nd of p.nodes) {
    if (nd.kind === 'element') {
      for (const a of nd.attrs) if (a.slot) out.push(a.slot);
    } else if (nd.kind === 'text-slot' || nd.kind === 'comment-slot') out.push(nd.ref);
  }
  return out;
}
