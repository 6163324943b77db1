/**
 * One streamed page load (CATP, or the in-order baseline) as the DHTTP client runs it for a request made with
 * `RequestInit.stream`. Every datagram of the request comes in with its arrival times; the assembler takes it,
 * the loss reports it asks for queue up (`nextReport()`, sent by the client as its own actions), and the call
 * says what became displayable, in a `FrameRecord` per datagram: the load's timeline.
 *
 * Sans-IO like the rest of protocol/: `nowMs` is the caller's monotonic clock, `rxNs` a kernel receive time on
 * CLOCK_REALTIME (bigint ns), both passed in. Nothing here reads a clock.
 */
import { CatpAssembler, type CatpEvent, type RawAssemblerEvent } from './assembler';
import type { Sha256 } from './encoder';
import type { BlockInfo } from './index-piece';
import type { FrameCodec } from './payload-codec';
import { RawAssembler } from './raw';
import { FRAME_KIND, HEADER_BYTES, type FrameKind } from './wire';

export type StreamMode = 'catp' | 'inorder';
export type StreamEvent = CatpEvent | RawAssemblerEvent;

/** What one arriving frame did. One of these per datagram, in arrival order: the load's timeline. */
export interface FrameRecord {
  /** When the frame was handed over (the caller's `nowMs`), ms since the request left. */
  atMs: number;
  /** Kernel receive time of the datagram, ms since the request left (both on CLOCK_REALTIME), if known. */
  kernelAtMs: number | null;
  bytes: number;
  seq: number | null;
  kind: 'index' | 'data' | 'raw' | null;
  accepted: boolean;
  /** Why the frame was refused (CATP_DUPLICATE for a repeat, CATP_ERR_* for bad input). */
  code?: string;
  /** What became displayable because of this frame (empty: nothing new). */
  displayable: Displayable[];
}

export type Displayable =
  | { type: 'index-piece'; ordinal: number; nodes: number }
  | { type: 'index-complete'; blocks: number; slots: number }
  | { type: 'block-filled'; block: number }
  | { type: 'prefix-extended'; length: number; total: number }
  | { type: 'page-complete' };

/** How a load ended: the page is complete and verified, or it cannot be (corrupt, stalled). */
export type StreamEnd = { outcome: 'complete' } | { outcome: 'failed'; code: string; message: string };

/** What one call did. */
export interface StreamStep {
  /** The assembler's events, in order. */
  events: StreamEvent[];
  /** The page ended in this call (null: still loading, or it had ended before). */
  ended: StreamEnd | null;
  /** This call completed the index (CATP): every block and its digest, known from now on. */
  blocksKnown: BlockInfo[] | null;
}

/** A verified block that came over the network, with its index digest: what a payload store keeps. */
export interface ReceivedBlock {
  digest: Uint8Array;
  payload: Uint8Array;
}

/** What a finished load measured (for its result, and for block reuse's estimates). */
export interface StreamSummary {
  mode: StreamMode;
  /** Datagrams handed to the load, accepted or not. */
  frames: number;
  /** `nowMs` of the first and the last of them (null before one). */
  firstFrameAtMs: number | null;
  lastFrameAtMs: number | null;
  /** The assembler's counters: frames accepted, duplicates, refusals by reason. */
  counters: Record<string, number>;
  /** Frames and bytes that arrived after the first frame, and over how long (the load's arrival rate). */
  arrival: { frames: number; bytes: number; spanMs: number };
  /** CATP once the index is complete: the blocks (null for the in-order baseline). */
  blocks: BlockSummary | null;
}

export interface BlockSummary {
  /** Blocks of the page. */
  total: number;
  /** The sender set FRAME_FLAG_REUSE on its frames: it never sent the blocks our exhaustive reports held. */
  reuseAcked: boolean;
  /** Data frames that came over the network: their payload bytes on the wire (no header) and decompressed. */
  dataBytes: { wire: number; plain: number };
  /** Blocks filled from the store, their payload bytes, and how many of them the server sent anyway. */
  local: { reused: number; payloadBytes: number; arrivedAnyway: number; arrivedAnywayBytes: number };
  /** Every verified block that came over the network (a digest may repeat). */
  received: ReceivedBlock[];
}

export interface StreamLoadOptions {
  mode: StreamMode;
  requestId: Uint8Array;
  /** The client's other-channel port (its TCP port), for the reports' DHTTP prefix. */
  otherPort: number;
  sha256: Sha256;
  codec?: FrameCodec;
  /** When the request left: on the clock of `nowMs`, and on CLOCK_REALTIME (the clock of `rxNs`; null: unknown). */
  sentAtMs: number;
  sentRealtimeNs: bigint | null;
}

/** How long a finished load keeps its request ID, to repeat its final "complete" report. */
export const STREAM_TAIL_MS = 3000;

const KIND_NAMES: Record<FrameKind, FrameRecord['kind']> = {
  [FRAME_KIND.INDEX]: 'index',
  [FRAME_KIND.DATA]: 'data',
  [FRAME_KIND.RAW]: 'raw',
  [FRAME_KIND.REPORT]: null,
};

function displayable(ev: StreamEvent): Displayable | null {
  switch (ev.type) {
    case 'index-piece':
      return { type: 'index-piece', ordinal: ev.piece.ordinal, nodes: ev.piece.nodeCount };
    case 'index-complete':
      return { type: 'index-complete', blocks: ev.blocks, slots: ev.slots };
    case 'block-filled':
      return { type: 'block-filled', block: ev.block };
    case 'prefix-extended':
      return { type: 'prefix-extended', length: ev.length, total: ev.total };
    case 'page-complete':
      return { type: 'page-complete' };
    default:
      return null;
  }
}

export class StreamLoad {
  readonly mode: StreamMode;
  private readonly assembler: CatpAssembler | RawAssembler;
  private readonly sentAtMs: number;
  private readonly sentRealtimeNs: bigint | null;
  private readonly reports: Uint8Array[] = [];
  private started = false;
  private endedAtMs: number | null = null;
  private frames = 0;
  private bytes = 0;
  private firstFrameAtMs: number | null = null;
  private firstFrameBytes = 0;
  private lastFrameAtMs: number | null = null;
  private dataWire = 0;
  /** Block reuse: blocks filled from the store (payload bytes by block), and those that came anyway. */
  private readonly localBlocks = new Map<number, number>();
  private readonly arrivedAnyway = new Set<number>();

  constructor(options: StreamLoadOptions) {
    this.mode = options.mode;
    this.sentAtMs = options.sentAtMs;
    this.sentRealtimeNs = options.sentRealtimeNs;
    const assemblerOptions = { sha256: options.sha256, codec: options.codec, requestId: options.requestId, otherPort: options.otherPort };
    this.assembler = options.mode === 'catp' ? new CatpAssembler(assemblerOptions) : new RawAssembler(assemblerOptions);
  }

  /** Takes one datagram of the stream: `nowMs` when it was handed over, `rxNs` when the kernel received it. */
  receive(data: Uint8Array, nowMs: number, rxNs: bigint | null): { record: FrameRecord; step: StreamStep } {
    if (!this.started) {
      // the report timers run from the first frame: before it, the request's own resend timer waits for one
      this.started = true;
      this.assembler.start(nowMs);
    }
    this.frames++;
    if (this.firstFrameAtMs === null) {
      this.firstFrameAtMs = nowMs;
      this.firstFrameBytes = data.length;
    }
    this.lastFrameAtMs = nowMs;
    this.bytes += data.length;
    const kernelAtMs = rxNs === null || this.sentRealtimeNs === null ? null : Number(rxNs - this.sentRealtimeNs) / 1e6;
    const r = this.assembler.receive(data, nowMs, this.arrivedAt(nowMs, kernelAtMs));
    if (r.code === 'CATP_DUPLICATE' && r.seq !== undefined && this.localBlocks.size > 0 && this.assembler instanceof CatpAssembler) {
      const b = this.assembler.blockAtSeq(r.seq);
      if (b !== null && this.localBlocks.has(b)) this.arrivedAnyway.add(b);
    }
    const step = this.step(nowMs);
    // an accepted data frame brought its block over the network (a block filled locally refuses it as a duplicate)
    if (r.accepted && r.kind === FRAME_KIND.DATA) this.dataWire += data.length - HEADER_BYTES;
    const record: FrameRecord = {
      atMs: nowMs - this.sentAtMs,
      kernelAtMs,
      bytes: data.length,
      seq: r.seq ?? null,
      kind: r.kind === undefined ? null : KIND_NAMES[r.kind],
      accepted: r.accepted,
      ...(r.code !== undefined ? { code: r.code } : {}),
      displayable: step.events.map(displayable).filter((d): d is Displayable => d !== null),
    };
    return { record, step };
  }

  /**
   * When the kernel received a datagram (`kernelAtMs` after the request, on CLOCK_REALTIME), on the clock of
   * `nowMs`: the request's send time on both clocks maps one onto the other. Never after `nowMs`, nor more than a
   * second before it (CLOCK_REALTIME may be stepped).
   */
  private arrivedAt(nowMs: number, kernelAtMs: number | null): number {
    if (kernelAtMs === null || !Number.isFinite(kernelAtMs)) return nowMs;
    return Math.min(nowMs, Math.max(nowMs - 1000, this.sentAtMs + kernelAtMs));
  }

  /**
   * Block reuse: fills the blocks the store had (verified again by the assembler against the index), then tells
   * a sender that acknowledged reuse what is held (an exhaustive report, due at once).
   */
  fillLocal(payloads: ReadonlyMap<number, Uint8Array>, nowMs: number): StreamStep {
    if (this.assembler instanceof CatpAssembler) {
      for (const [block, payload] of payloads) {
        if (this.assembler.fillLocal(block, payload)) this.localBlocks.set(block, payload.length);
      }
      this.assembler.reuseReady();
    }
    return this.step(nowMs);
  }

  nextTimerAt(): number | null {
    if (!this.started) return null;
    const at = this.assembler.nextTimerAt();
    if (this.endedAtMs === null) return at;
    const tailEnd = this.endedAtMs + STREAM_TAIL_MS;
    return at === null ? tailEnd : Math.min(at, tailEnd);
  }

  handleTimer(nowMs: number): StreamStep {
    this.assembler.handleTimer(nowMs);
    return this.step(nowMs);
  }

  /** The next report datagram to send to the server (queued by the last call), or null. */
  nextReport(): Uint8Array | null {
    return this.reports.shift() ?? null;
  }

  /** The page ended (complete, corrupt or stalled): nothing more is asked of the server. */
  get ended(): boolean {
    return this.endedAtMs !== null;
  }

  /**
   * The page ended and its tail has run out: the request ID can be released. Until then frames still reach the
   * assembler, which answers any that keep coming with another "complete" report: a lost one is repeated only
   * that way, so releasing the ID early would leave the server resending until it gives up.
   */
  drained(nowMs: number): boolean {
    return this.endedAtMs !== null && nowMs >= this.endedAtMs + STREAM_TAIL_MS;
  }

  summary(): StreamSummary {
    const span = this.firstFrameAtMs === null || this.lastFrameAtMs === null ? 0 : this.lastFrameAtMs - this.firstFrameAtMs;
    return {
      mode: this.mode,
      frames: this.frames,
      firstFrameAtMs: this.firstFrameAtMs,
      lastFrameAtMs: this.lastFrameAtMs,
      counters: this.assembler.counters(),
      arrival: { frames: Math.max(0, this.frames - 1), bytes: Math.max(0, this.bytes - this.firstFrameBytes), spanMs: span },
      blocks: this.blockSummary(),
    };
  }

  private blockSummary(): BlockSummary | null {
    const a = this.assembler;
    if (!(a instanceof CatpAssembler)) return null;
    const progress = a.progress();
    if (!progress.indexReady) return null;
    const received: ReceivedBlock[] = [];
    let plain = 0;
    for (const info of a.knownBlocks()) {
      const got = a.blockPayload(info.block);
      if (got === null || got.local) continue;
      received.push({ digest: info.digest, payload: got.payload });
      plain += got.payload.length;
    }
    let payloadBytes = 0;
    let arrivedAnywayBytes = 0;
    for (const [block, n] of this.localBlocks) {
      payloadBytes += n;
      if (this.arrivedAnyway.has(block)) arrivedAnywayBytes += n;
    }
    return {
      total: progress.blocks,
      reuseAcked: a.reuseAcked,
      dataBytes: { wire: this.dataWire, plain },
      local: { reused: this.localBlocks.size, payloadBytes, arrivedAnyway: this.arrivedAnyway.size, arrivedAnywayBytes },
      received,
    };
  }

  /** Queues the reports due, drains the events, and notes the end when one of them ends the page. */
  private step(nowMs: number): StreamStep {
    // reports first: asking for one is what surfaces a stall (the receiver's error becomes an 'error' event)
    this.takeReports(nowMs);
    const events: StreamEvent[] = [];
    for (let ev = this.assembler.nextEvent(); ev !== null; ev = this.assembler.nextEvent()) events.push(ev);
    let ended: StreamEnd | null = null;
    let blocksKnown: BlockInfo[] | null = null;
    for (const ev of events) {
      if (ev.type === 'page-complete') ended = { outcome: 'complete' };
      else if (ev.type === 'page-corrupt' || ev.type === 'error') ended = { outcome: 'failed', code: ev.code, message: ev.message };
      else if (ev.type === 'index-complete' && this.assembler instanceof CatpAssembler) blocksKnown = this.assembler.knownBlocks();
    }
    if (ended !== null) {
      if (this.endedAtMs !== null) ended = null; // reported once
      else {
        this.endedAtMs = nowMs;
        // the "complete" report is due now: it goes before anyone sees the page as done
        this.takeReports(nowMs);
      }
    }
    return { events, ended, blocksKnown };
  }

  private takeReports(nowMs: number): void {
    for (let r = this.assembler.nextReport(nowMs); r !== null; r = this.assembler.nextReport(nowMs)) this.reports.push(r);
  }
}
