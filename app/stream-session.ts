// One streamed page load (CATP or the in-order baseline) as the host sees it: feeds every frame of the
// request to the sans-IO assembler, sends the loss reports it asks for, and tells the caller after every
// frame what became displayable.

import {
  CatpAssembler,
  FRAME_KIND,
  HEADER_BYTES,
  RawAssembler,
  type CatpEvent,
  type RawAssemblerEvent,
} from '../protocol/catp';
import { hexToId } from '../protocol/dhttp';
import { catpCodec } from './catp-codec';
import { sha256 } from './payload-store';

export type StreamMode = 'catp' | 'inorder';
export type StreamEvent = CatpEvent | RawAssemblerEvent;

const FRAME_KINDS: Record<number, FrameRecord['kind']> = { 1: 'index', 2: 'data', 3: 'raw' };

/** What one arriving frame did. One of these per datagram, in arrival order: the load's timeline. */
export interface FrameRecord {
  /** Host clock (performance.now) when the frame was handed over, ms since the request left. */
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

export interface StreamOutcome {
  events: StreamEvent[];
  done: 'complete' | 'failed' | null;
  error?: { code: string; message: string };
}

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

/** How long a finished or failed session keeps its request ID, to repeat its final "complete" report. */
const TAIL_MS = 3000;

export class StreamSession {
  readonly assembler: CatpAssembler | RawAssembler;
  private started = false;
  private finishedAtMs: number | null = null;
  frames = 0;
  firstFrameAtMs: number | null = null;
  /** Arrival of the last frame and bytes of every frame (the load's measured rate, for reuse's time estimate). */
  lastFrameAtMs: number | null = null;
  bytes = 0;
  private firstFrameBytes = 0;
  /** Block reuse: blocks filled from the store, the payload bytes they carry, and those that came anyway. */
  private readonly localBlocks = new Map<number, number>();
  private readonly arrivedAnyway = new Set<number>();

  constructor(
    readonly requestId: string,
    readonly mode: StreamMode,
    otherPort: number,
    /** performance.now() and CLOCK_REALTIME ns when the request left, to put frames on the load's clock. */
    readonly startedAtMs: number,
    private readonly startedRealtimeNs: bigint,
    private readonly send: (report: Uint8Array) => void,
  ) {
    const options = { sha256, codec: catpCodec, requestId: hexToId(requestId), otherPort };
    this.assembler = mode === 'catp' ? new CatpAssembler(options) : new RawAssembler(options);
  }

  /** Feeds one frame; returns the timeline record and the events it produced. */
  receive(data: Uint8Array, nowMs: number, rxNs: bigint | null): { record: FrameRecord; outcome: StreamOutcome } {
    if (!this.started) {
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
    const r = this.assembler.receive(data, nowMs);
    if (this.localBlocks.size > 0 && r.code === 'CATP_DUPLICATE' && r.seq !== undefined && this.assembler instanceof CatpAssembler) {
      const b = this.assembler.blockAtSeq(r.seq);
      if (b !== null && this.localBlocks.has(b)) this.arrivedAnyway.add(b);
    }
    const outcome = this.drain(nowMs);
    // an accepted data frame brought its block over the network (a block filled locally refuses it as a duplicate)
    if (r.accepted && data[10] === FRAME_KIND.DATA) this.dataWire += data.length - HEADER_BYTES;
    const record: FrameRecord = {
      atMs: nowMs - this.startedAtMs,
      kernelAtMs: rxNs === null ? null : Number(rxNs - this.startedRealtimeNs) / 1e6,
      bytes: data.length,
      seq: r.seq ?? null,
      kind: data.length > 10 ? (FRAME_KINDS[data[10]!] ?? null) : null,
      accepted: r.accepted,
      ...(r.code !== undefined ? { code: r.code } : {}),
      displayable: outcome.events.map(displayable).filter((d): d is Displayable => d !== null),
    };
    return { record, outcome };
  }

  /**
   * Block reuse: fills the blocks the store had (verified again by the assembler against the index), then
   * tells a sender that acknowledged reuse what is held (an exhaustive report, sent at once).
   */
  fillLocal(payloads: ReadonlyMap<number, Uint8Array>, nowMs: number): StreamOutcome {
    if (this.assembler instanceof CatpAssembler) {
      for (const [block, payload] of payloads) {
        if (this.assembler.fillLocal(block, payload)) this.localBlocks.set(block, payload.length);
      }
      this.assembler.reuseReady();
    }
    return this.drain(nowMs);
  }

  /** Blocks filled from the store, their data-frame payload bytes, and how many the server sent anyway. */
  localStats(): { reused: number; payloadBytes: number; arrivedAnyway: number; arrivedAnywayBytes: number } {
    let payloadBytes = 0;
    let arrivedAnywayBytes = 0;
    for (const [block, n] of this.localBlocks) {
      payloadBytes += n;
      if (this.arrivedAnyway.has(block)) arrivedAnywayBytes += n;
    }
    return { reused: this.localBlocks.size, payloadBytes, arrivedAnyway: this.arrivedAnyway.size, arrivedAnywayBytes };
  }

  /** From the request to the first frame (ms; about a round trip plus the server's time), or null before one. */
  firstFrameDelayMs(): number | null {
    return this.firstFrameAtMs === null ? null : this.firstFrameAtMs - this.startedAtMs;
  }

  /** Data frames that came over the network: their payload bytes on the wire (no header) and decompressed. */
  dataBytes(): { wire: number; plain: number } {
    let plain = 0;
    if (this.assembler instanceof CatpAssembler) {
      for (const info of this.assembler.knownBlocks()) {
        const got = this.assembler.blockPayload(info.block);
        if (got !== null && !got.local) plain += got.payload.length;
      }
    }
    return { wire: this.dataWire, plain };
  }

  private dataWire = 0;

  /** Frames and bytes that arrived after the first frame, and over how long (the load's arrival rate). */
  arrivalSpan(): { frames: number; bytes: number; spanMs: number } {
    const span = this.firstFrameAtMs === null || this.lastFrameAtMs === null ? 0 : this.lastFrameAtMs - this.firstFrameAtMs;
    return { frames: Math.max(0, this.frames - 1), bytes: Math.max(0, this.bytes - this.firstFrameBytes), spanMs: span };
  }

  onTimer(nowMs: number): StreamOutcome {
    this.assembler.handleTimer(nowMs);
    return this.drain(nowMs);
  }

  nextTimerAt(): number | null {
    if (!this.started) return null;
    const at = this.assembler.nextTimerAt();
    if (this.finishedAtMs === null) return at;
    const tailEnd = this.finishedAtMs + TAIL_MS;
    return at === null ? tailEnd : Math.min(at, tailEnd);
  }

  /**
   * The page is done and its tail has run out: the ID can be released. Until then frames still reach the
   * assembler, which answers any that keep coming with another "complete" report: a lost one is repeated
   * only that way, so releasing the ID early would leave the server resending until it gives up.
   */
  drained(nowMs: number): boolean {
    return this.finishedAtMs !== null && nowMs >= this.finishedAtMs + TAIL_MS;
  }

  private drain(nowMs: number): StreamOutcome {
    for (let report = this.assembler.nextReport(nowMs); report !== null; report = this.assembler.nextReport(nowMs)) {
      this.send(report);
    }
    const events: StreamEvent[] = [];
    for (let ev = this.assembler.nextEvent(); ev !== null; ev = this.assembler.nextEvent()) events.push(ev);
    let done: StreamOutcome['done'] = null;
    let error: StreamOutcome['error'];
    for (const ev of events) {
      if (ev.type === 'page-complete') done = 'complete';
      else if (ev.type === 'page-corrupt' || ev.type === 'error') {
        done = 'failed';
        error = { code: ev.code, message: ev.message };
      }
    }
    if (done !== null && this.finishedAtMs === null) {
      this.finishedAtMs = nowMs;
      // the "complete" report is due now: send it before the caller sees the page as done
      for (let report = this.assembler.nextReport(nowMs); report !== null; report = this.assembler.nextReport(nowMs)) {
        this.send(report);
      }
    }
    return error ? { events, done, error } : { events, done };
  }
}
