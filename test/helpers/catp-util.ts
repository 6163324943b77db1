/**
 * Shared helpers for the CATP tests: hashing, the frame codec, a seeded RNG, frame delivery, tree inspection,
 * and an in-memory lossy pipe.
 */
import * as zlib from 'node:zlib';
import type { DefaultTreeAdapterMap } from 'parse5';
import {
  type AssemblerOptions,
  type BlockInfo,
  brotliCodec,
  CatpAssembler,
  CatpEvent,
  parse5TreeBuilder,
  RawAssembler,
  RawAssemblerEvent,
  RepairSender,
  FRAME_KIND,
  encodeFrame,
  encodePieceBody,
  GrowWriter,
  packPayload,
} from '../../protocol/catp';
import { seededRng } from '../../protocol/random';
import { sha256 } from '../../platform/sha256';
import { hostCodec } from '../../app/catp-codec';

export { sha256 };

/**
 * The frame codec for tests where the wire bytes do not matter: brotli at quality 5 (the encoder's search
 * setting), several times faster to encode than the server's quality 11, decoded as the host decodes (libbrotli
 * through the addon when it has it, app/catp-codec.ts).
 */
export const codec = hostCodec({ finalQuality: 5 });
/** The codec the server uses (quality 11), for tests that check the real wire output. */
export const serverCodec = hostCodec();
/** Node's decoder throughout (the host's fallback without libbrotli). */
export const zlibCodec = brotliCodec(zlib, { finalQuality: 5 });

/** A CATP assembler with the test hash and codec. */
export function newAssembler(opts: Partial<AssemblerOptions> = {}): CatpAssembler {
  return new CatpAssembler({ sha256, codec, ...opts });
}

/** Every event the assembler has queued, in order. */
export function drain(a: CatpAssembler): CatpEvent[] {
  const out: CatpEvent[] = [];
  for (let e = a.nextEvent(); e; e = a.nextEvent()) out.push(e);
  return out;
}

/** An assembler with a parse5 tree: `deliver` takes one frame and applies its events; `types` lists them. */
export function treeLoad(asm: CatpAssembler = newAssembler()) {
  const b = parse5TreeBuilder();
  const types: string[] = [];
  const deliver = (f: Uint8Array) => {
    const r = asm.receive(f, 0);
    for (const e of drain(asm)) {
      types.push(e.type);
      b.apply(e);
    }
    return r;
  };
  return { asm, b, types, deliver };
}

/** mulberry32: small, fast, seeded (the one the server's channel choice uses). */
export const rng = seededRng;

export function shuffle<T>(a: T[], r: () => number): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Frames in a random order, with some duplicated (dupRate) at random later positions. */
export function scramble(frames: Uint8Array[], r: () => number, dupRate = 0.2): Uint8Array[] {
  const out = shuffle([...frames], r);
  const extra = frames.filter(() => r() < dupRate);
  for (const f of extra) out.splice(Math.floor(r() * (out.length + 1)), 0, f);
  return out;
}

/** Feed frames to a fresh assembler + parse5 tree builder; returns the builder, assembler and events. */
export function assemble(frames: Uint8Array[], asm = newAssembler()) {
  const builder = parse5TreeBuilder();
  const events: CatpEvent[] = [];
  for (const f of frames) {
    asm.receive(f, 0);
    for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
      events.push(e);
      builder.apply(e);
    }
  }
  return { builder, asm, events };
}

export function seqOf(frame: Uint8Array): number {
  return new DataView(frame.buffer, frame.byteOffset).getUint32(20);
}
export function kindOf(frame: Uint8Array): number {
  return frame[10];
}
export { FRAME_KIND };

export interface PipeOptions {
  seed: number;
  /** Drop probability per datagram, both directions. */
  loss: number;
  /** Duplicate probability per datagram. */
  dup?: number;
  /** One-way delay and jitter (ms): jitter reorders. */
  delayMs?: number;
  jitterMs?: number;
  /** Custom drop rule (overrides `loss` for datagrams it returns a boolean for). */
  drop?: (dir: 'down' | 'up', bytes: Uint8Array, n: number) => boolean | undefined;
  /** Give up the simulation at this fake time. */
  maxMs?: number;
  /**
   * A bottleneck on the way down: datagrams are serialized one after another at this many bytes per ms
   * (FIFO, unbounded queue) before the propagation delay, as on a slow link. Default: none.
   */
  downBytesPerMs?: number;
  /** Called with every client event as it is drained (e.g. block reuse fills from a store on index-piece). */
  onEvent?: (e: CatpEvent | RawAssemblerEvent, now: number) => void;
}

export interface PipeResult<E> {
  events: Array<{ at: number; e: E }>;
  completeAt: number | null;
  sent: Uint8Array[];
  reports: number;
  endMs: number;
}

/** quiche Pipe style: a sender and an assembler, a fake clock, drops / duplicates / reorders from a seed. */
export function runPipe<E extends { type: string }>(
  sender: RepairSender,
  client: CatpAssembler | RawAssembler,
  o: PipeOptions,
): PipeResult<E> {
  const r = rng(o.seed);
  const delay = o.delayMs ?? 10;
  const jitter = o.jitterMs ?? 4;
  const inflight: Array<{ at: number; dir: 'down' | 'up'; bytes: Uint8Array }> = [];
  const events: Array<{ at: number; e: E }> = [];
  const sent: Uint8Array[] = [];
  let now = 0;
  let nDown = 0;
  let nUp = 0;
  let reports = 0;
  let completeAt: number | null = null;
  const maxMs = o.maxMs ?? 120_000;
  let linkFreeAt = 0;
  const send = (dir: 'down' | 'up', bytes: Uint8Array): void => {
    const n = dir === 'down' ? nDown++ : nUp++;
    let wire = now;
    if (dir === 'down' && o.downBytesPerMs) {
      linkFreeAt = Math.max(linkFreeAt, now) + bytes.length / o.downBytesPerMs;
      wire = linkFreeAt;
    }
    const d = o.drop?.(dir, bytes, n);
    if (d ?? r() < o.loss) return;
    inflight.push({ at: wire + delay + r() * jitter, dir, bytes });
    if (r() < (o.dup ?? 0)) inflight.push({ at: now + delay + r() * jitter * 3, dir, bytes });
  };
  client.start(0);
  for (let iter = 0; iter < 5_000_000; iter++) {
    for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) {
      sent.push(d);
      send('down', d);
    }
    inflight.sort((a, b) => a.at - b.at);
    while (inflight.length > 0 && inflight[0].at <= now) {
      const m = inflight.shift() as (typeof inflight)[number];
      if (m.dir === 'down') {
        client.receive(m.bytes, now);
        for (let e = client.nextEvent(); e; e = client.nextEvent()) {
          events.push({ at: now, e: e as unknown as E });
          if (e.type === 'page-complete' && completeAt === null) completeAt = now;
          o.onEvent?.(e, now);
        }
      } else sender.receiveReport(m.bytes, now);
    }
    for (let rep = client.nextReport(now); rep; rep = client.nextReport(now)) {
      reports++;
      send('up', rep);
    }
    for (let e = client.nextEvent(); e; e = client.nextEvent()) {
      events.push({ at: now, e: e as unknown as E });
      if (e.type === 'page-complete' && completeAt === null) completeAt = now;
      o.onEvent?.(e, now);
    }
    if (client.finished && (sender.finished || inflight.length === 0) && client.nextTimerAt() === null) break;
    if (sender.finished && client.finished) break;
    const cands = [sender.nextTimerAt(), client.nextTimerAt(), inflight.length > 0 ? inflight[0].at : null].filter(
      (x): x is number => x !== null,
    );
    if (cands.length === 0) break;
    const next = Math.min(...cands);
    now = Math.max(now + 1e-6, next);
    if (now > maxMs) break;
  }
  return { events, completeAt, sent, reports, endMs: now };
}

export type { RawAssemblerEvent };

type P5Node = DefaultTreeAdapterMap['node'];
type P5Element = DefaultTreeAdapterMap['element'];

/** Every element of a parse5 tree in document order (template contents included), iteratively. */
export function elementsOf(root: P5Node): P5Element[] {
  const out: P5Element[] = [];
  const stack: P5Node[] = [root];
  while (stack.length > 0) {
    const n = stack.pop() as P5Node;
    if ('tagName' in n) out.push(n);
    const kids: P5Node[] = [];
    if ('childNodes' in n) kids.push(...(n.childNodes as P5Node[]));
    if ('content' in n && (n as DefaultTreeAdapterMap['template']).content) kids.push((n as DefaultTreeAdapterMap['template']).content);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
  return out;
}

/** The `<catp-missing>` placeholders in a tree, by kind. */
export function placeholders(root: P5Node): { slot: number; index: number } {
  const c = { slot: 0, index: 0 };
  for (const e of elementsOf(root)) {
    if (e.tagName !== 'catp-missing') continue;
    const kind = e.attrs.find((a) => a.name === 'data-catp-kind')?.value;
    if (kind === 'slot') c.slot++;
    else if (kind === 'index') c.index++;
    else throw new Error(`placeholder of kind ${kind}`);
  }
  return c;
}

/**
 * A page built frame by frame (every digest right, as a hostile server can) whose one <pre> slot has 1,428 parts a
 * block, its blocks' data frames in `order`; part i of the slot is the character `i % 10`.
 */
export function manyPartsPage(blocks: number, order: (data: Uint8Array[]) => Uint8Array[]): Uint8Array[] {
  const per = 1428;
  const perIndex = 40; // block descriptions an index frame holds (their digests do not compress)
  const indexFrames = Math.ceil(blocks / perIndex);
  const total = indexFrames + blocks;
  const payloads = Array.from({ length: blocks }, (_, b) => {
    const w = new GrowWriter();
    w.varint(per);
    for (let i = 0; i < per; i++) {
      w.varint(1);
      w.u8(0x30 + ((b * per + i) % 10));
    }
    return w.result();
  });
  const infos: BlockInfo[] = payloads.map((p, b) => ({ block: b, stream: 1, firstPiece: per * b, pieces: per, digest: sha256(p).slice(0, 16), seq: indexFrames + b }));
  const body = (k: number, pageDigest: Uint8Array | null): Uint8Array =>
    encodePieceBody(
      { ordinal: k, fragment: false, mode: 'no-quirks', firstNode: k === 0 ? 1 : 6, nodeCount: k === 0 ? 5 : 0, firstSlot: k === 0 ? 0 : 1, slotCount: k === 0 ? 1 : 0,
        firstPieces: k === 0 ? [0, 0, 0] : [0, per * blocks, 0], chain: [], nodes: [], firstBlock: k * perIndex, blocks: infos.slice(k * perIndex, (k + 1) * perIndex), pageDigest },
      k === 0 ? `<html><head></><body><pre><$1${per * blocks}>` : '',
    );
  const bodies = Array.from({ length: indexFrames }, (_, k) => body(k, k === 0 ? new Uint8Array(32) : null));
  const canon = Buffer.concat([bodies[0].subarray(0, bodies[0].length - 32), ...bodies.slice(1), ...payloads]);
  const pageDigest = sha256(canon).slice(0, 32);
  bodies[0] = body(0, pageDigest);
  const frame = (kind: number, seq: number, payload: Uint8Array): Uint8Array =>
    encodeFrame({ id: new Uint8Array(8), kind: kind as 1 | 2, pageId: pageDigest.subarray(0, 8), seq, total, indexFrames }, payload);
  return [
    ...bodies.map((b, k) => frame(1, k, Buffer.concat([sha256(b).subarray(0, 8), packPayload(b, codec, 'final')]))),
    ...order(payloads.map((p, b) => frame(2, indexFrames + b, packPayload(p, codec, 'final')))),
  ];
}
