/**
 * The CATP index, cut into pieces that stand alone. Each index frame carries one *piece*: a contiguous pre-order
 * range of the page's nodes, with everything needed to put them on screen without any other index frame:
 *
 *  - every node is numbered (pre-order, the document itself is 0, its first child 1; a piece's nodes follow from
 *    its `firstNode`), so a piece attaches wherever its ancestors are, in any arrival order;
 *  - the piece starts with its *chain*: the ancestors of its first node (number, tag, namespace), so a piece
 *    whose ancestors are in a frame not yet here can still be placed under provisional ancestors (their
 *    attributes follow when their own piece arrives);
 *  - slots (text runs, long comments, long attribute values whose content travels in data frames) are numbered
 *    from the piece's `firstSlot`, their pieces from `firstPieces[stream]`;
 *  - the blocks whose first piece falls in this piece are described here (stream, pieces, digest, and the frame
 *    number that carries them), so their data frames can be checked and painted as soon as they arrive. A block
 *    of context or deferred text may span several consecutive frames (BLOCK_FLAG_FRAMES): it is decoded once all
 *    of them are here, since such text is used only whole (protocol/README.md, "Blocks of several frames").
 *
 * Body (the decoded bytes of an index frame; frame.ts wraps it with a check digest and compression), varints
 * LEB128:
 *
 *   u8 flags: bit 0 fragment, bits 1-2 document mode, bit 3 the page digest ends the body (index frame 0)
 *   varint ordinal (index frame number, 0-based) | varint firstNode | varint nodeCount | varint firstSlot
 *   3 × varint firstPiece (per stream: context, visible, deferred)
 *   varint chainLength, chainLength × (varint n − previous n, u8 kind (0-3 element namespace as below, 4 template
 *     content), [name], [namespace string when kind 3])
 *   string nodes: the nodeCount nodes as markup (index-markup.ts: `<p class="x">text</>`, slots `<$SP>`; each
 *     node's parent is the element open on top of a stack that starts as the root and the chain)
 *   varint firstBlock | varint blockCount | blockCount × (u8 stream (bit 7: several frames), varint firstPiece,
 *     varint pieces, 16-byte digest, u24 frame number, [varint frames ≥ 2 when bit 7 is set])
 *   [32-byte page digest]
 *   name   = varint code: 0 then a string (a literal name), k ≥ 1 = tag table entry k-1 (names.ts)
 *   string = varint byteLength, UTF-8
 *
 * The decoder treats every byte as hostile: counts are checked against the bytes left and the limits, the markup
 * token by token (index-markup.ts), depth is bounded, nothing recurses.
 */
import { REJECT, Reject } from './errors';
import { decodeNodeSection, nodeSectionMarkup, NS_HTML, NS_MATHML, NS_SVG, type OpenNode } from './index-markup';
import { TAG_CODE, TAG_NAMES } from './names';
import { ByteReader, GrowWriter } from './wire';

export type DocumentMode = 'no-quirks' | 'quirks' | 'limited-quirks';

export interface CatpAttr {
  name: string;
  value: string;
  namespace?: string;
  prefix?: string;
}

export { NS_HTML, NS_MATHML, NS_SVG, NS_XLINK, NS_XML, NS_XMLNS } from './index-markup';

/**
 * Which stream a slot's text travels in, which decides when its blocks are sent: context (long `<style>` text
 * and other head text: right after its index frame, repaired like the index), visible (body text and long
 * attribute values: in document order), deferred (script bodies, comments, template content, `<noscript>`,
 * event handlers and data-* values: nothing a user sees, sent last).
 */
export const STREAM = { CONTEXT: 0, VISIBLE: 1, DEFERRED: 2 } as const;
export type Stream = 0 | 1 | 2;
export const STREAMS = 3;

export const BLOCK_DIGEST_BYTES = 16;
export const PAGE_DIGEST_BYTES = 32;

/** A slot: content that arrives in data frames, as `parts` pieces of stream `stream` from `firstPiece` on. */
export interface SlotRef {
  slot: number;
  stream: Stream;
  parts: number;
  firstPiece: number;
}

export interface IndexAttr extends CatpAttr {
  /** The value arrives in data frames (`value` is '' until then). */
  slot?: SlotRef;
}

export type IndexNode =
  | { kind: 'element'; n: number; parent: number; tagName: string; namespace: string; attrs: IndexAttr[] }
  | { kind: 'text'; n: number; parent: number; value: string }
  | { kind: 'comment'; n: number; parent: number; data: string }
  | { kind: 'text-slot'; n: number; parent: number; ref: SlotRef }
  | { kind: 'comment-slot'; n: number; parent: number; ref: SlotRef }
  | { kind: 'doctype'; n: number; parent: number; name: string; publicId: string; systemId: string }
  /** A template's content fragment (its parent is the template element). */
  | { kind: 'content'; n: number; parent: number };

/** An ancestor of a piece's first node: an element, or a template's content fragment (tagName ''). */
export interface ChainEntry {
  n: number;
  content: boolean;
  tagName: string;
  namespace: string;
}

export interface BlockInfo {
  block: number;
  stream: Stream;
  firstPiece: number;
  pieces: number;
  /** First 16 bytes of sha-256 over the block's (decompressed) payload. */
  digest: Uint8Array;
  /** Frame number (seq) of the data frame that carries the block (its first frame when it spans several). */
  seq: number;
  /**
   * How many consecutive data frames carry it, from `seq` (absent: 1). Their payloads, joined in frame order, are
   * the block's packed payload (payload-codec.ts).
   */
  frames?: number;
}

/** Block description's stream byte, bit 7: the block spans several frames (their count follows its frame number). */
export const BLOCK_FLAG_FRAMES = 0x80;
/** Most frames one block may span: a block decodes to at most MAX_DECODED_PAYLOAD (64 KiB), ~16 frames of CSS. */
export const MAX_BLOCK_FRAMES = 64;
/** Most pieces one block may hold: a description of more is refused (the encoder splits a block that would). */
export const MAX_BLOCK_PIECES = 1428;

/** How many data frames carry block `b`. */
export function blockFrames(b: Pick<BlockInfo, 'frames'>): number {
  return b.frames ?? 1;
}

export interface IndexPiece {
  ordinal: number;
  fragment: boolean;
  mode: DocumentMode;
  firstNode: number;
  nodeCount: number;
  firstSlot: number;
  slotCount: number;
  firstPieces: [number, number, number];
  chain: ChainEntry[];
  nodes: IndexNode[];
  firstBlock: number;
  blocks: BlockInfo[];
  /** The page digest (index frame 0 only). */
  pageDigest: Uint8Array | null;
}

export interface IndexLimits {
  /** Deepest element nesting accepted (default 2048). */
  maxDepth: number;
  /** Most nodes in one page (default 1,048,576). */
  maxNodes: number;
  /** Most attributes on one element (default 4096). */
  maxAttrs: number;
}

export const DEFAULT_INDEX_LIMITS: IndexLimits = { maxDepth: 2048, maxNodes: 1 << 20, maxAttrs: 4096 };

const EL_NS = [NS_HTML, NS_SVG, NS_MATHML];
const MODES: DocumentMode[] = ['no-quirks', 'quirks', 'limited-quirks'];

const CHAIN_CONTENT = 4;
const FLAG_FRAGMENT = 1;
const FLAG_DIGEST = 8;

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function writeString(w: GrowWriter, s: string): void {
  const b = enc.encode(s);
  w.varint(b.length);
  w.bytes(b);
}

function writeName(w: GrowWriter, s: string, codes: ReadonlyMap<string, number>): void {
  const k = codes.get(s);
  if (k !== undefined) w.varint(k + 1);
  else {
    w.varint(0);
    writeString(w, s);
  }
}

function elNsCode(ns: string): number {
  const c = EL_NS.indexOf(ns);
  return c < 0 ? 3 : c;
}

/** The bytes before a piece's nodes: flags, position, chain. */
export function encodePieceHead(
  w: GrowWriter,
  p: Pick<IndexPiece, 'ordinal' | 'fragment' | 'mode' | 'firstNode' | 'nodeCount' | 'firstSlot' | 'firstPieces' | 'chain'>,
  withDigest: boolean,
): void {
  w.u8((p.fragment ? FLAG_FRAGMENT : 0) | (MODES.indexOf(p.mode) << 1) | (withDigest ? FLAG_DIGEST : 0));
  w.varint(p.ordinal);
  w.varint(p.firstNode);
  w.varint(p.nodeCount);
  w.varint(p.firstSlot);
  for (const f of p.firstPieces) w.varint(f);
  w.varint(p.chain.length);
  let prev = 0;
  for (const c of p.chain) {
    w.varint(c.n - prev);
    prev = c.n;
    if (c.content) w.u8(CHAIN_CONTENT);
    else {
      const ns = elNsCode(c.namespace);
      w.u8(ns);
      writeName(w, c.tagName, TAG_CODE);
      if (ns === 3) writeString(w, c.namespace);
    }
  }
}

/** Bytes of one block description (the frame number is a fixed 3 bytes, so sizes do not depend on it). */
export const BLOCK_INFO_MAX_BYTES = 1 + 5 + 5 + BLOCK_DIGEST_BYTES + 3 + 1;

export function encodeBlockInfo(w: GrowWriter, b: BlockInfo): void {
  const frames = blockFrames(b);
  w.u8(frames > 1 ? b.stream | BLOCK_FLAG_FRAMES : b.stream);
  w.varint(b.firstPiece);
  w.varint(b.pieces);
  w.bytes(b.digest.subarray(0, BLOCK_DIGEST_BYTES));
  w.u8((b.seq >>> 16) & 0xff);
  w.u8((b.seq >>> 8) & 0xff);
  w.u8(b.seq & 0xff);
  if (frames > 1) w.varint(frames);
}

/** A whole piece body (encoder side, tests; `section`: other node markup in place of the piece's own, for forgeries). */
export function encodePieceBody(p: IndexPiece, section = nodeSectionMarkup(p.nodes, p.chain)): Uint8Array {
  const w = new GrowWriter();
  encodePieceHead(w, p, p.pageDigest !== null);
  writeString(w, section);
  w.varint(p.firstBlock);
  w.varint(p.blocks.length);
  for (const b of p.blocks) encodeBlockInfo(w, b);
  if (p.pageDigest !== null) w.bytes(p.pageDigest.subarray(0, PAGE_DIGEST_BYTES));
  return w.result();
}

function readString(r: ByteReader): string {
  const n = r.varint();
  const b = r.bytes(n);
  try {
    return dec.decode(b);
  } catch {
    throw new Reject(REJECT.BAD_INDEX, 'bad UTF-8');
  }
}

function readName(r: ByteReader, table: readonly string[]): string {
  const k = r.varint();
  if (k === 0) return readString(r);
  if (k > table.length) throw new Reject(REJECT.BAD_INDEX, 'name code');
  return table[k - 1];
}

/**
 * Decode one piece body. Checks everything a single frame can show (shape, depth, counts, limits); what only
 * several frames together can show (overlaps, contradictions) is the assembler's. Throws {@link Reject} only.
 * `maxBlock` / `maxSeq`: block numbers and frame numbers must be below these (from the frame header).
 */
export function decodeIndexPiece(body: Uint8Array, limits: IndexLimits, maxBlock: number, maxSeq: number): IndexPiece {
  const r = new ByteReader(body, 0, REJECT.BAD_INDEX);
  const flags = r.u8();
  if (flags & ~15) throw new Reject(REJECT.BAD_INDEX, 'piece flags');
  const modeCode = (flags >> 1) & 3;
  if (modeCode > 2) throw new Reject(REJECT.BAD_INDEX, 'mode');
  const ordinal = r.varint();
  const firstNode = r.varint();
  const nodeCount = r.varint();
  const firstSlot = r.varint();
  const firstPieces: [number, number, number] = [r.varint(), r.varint(), r.varint()];
  // A piece may hold blocks only (nodeCount 0): the blocks a huge slot introduces spill into pieces of their own.
  if (firstNode < 1 || firstNode - 1 + nodeCount > limits.maxNodes + (nodeCount === 0 ? 1 : 0)) throw new Reject(REJECT.ABSURD_COUNT, 'node range');
  if (nodeCount > r.remaining) throw new Reject(REJECT.BAD_INDEX, 'node count');
  const chainLen = r.varint();
  if (chainLen > limits.maxDepth) throw new Reject(REJECT.TOO_DEEP, 'chain');
  if (nodeCount === 0 && chainLen > 0) throw new Reject(REJECT.BAD_INDEX, 'a chain without nodes');
  if (chainLen * 2 > r.remaining) throw new Reject(REJECT.BAD_INDEX, 'chain length');
  const chain: ChainEntry[] = [];
  // Open ancestors: the root (0), then the chain, then this piece's open elements / contents.
  const stack: OpenNode[] = [{ n: 0, ns: NS_HTML, isTemplate: false, hasContent: false }];
  let prev = 0;
  for (let i = 0; i < chainLen; i++) {
    const n = prev + r.varint();
    if (n === prev || n >= firstNode) throw new Reject(REJECT.BAD_ATTACH, 'chain numbers');
    prev = n;
    const kind = r.u8();
    if (kind === CHAIN_CONTENT) {
      const top = stack[stack.length - 1];
      if (!top.isTemplate || top.hasContent) throw new Reject(REJECT.BAD_ATTACH, 'content outside a template');
      top.hasContent = true;
      chain.push({ n, content: true, tagName: '', namespace: '' });
      stack.push({ n, ns: NS_HTML, isTemplate: false, hasContent: false });
      continue;
    }
    if (kind > 3) throw new Reject(REJECT.BAD_INDEX, 'chain kind');
    const tagName = readName(r, TAG_NAMES);
    const namespace = kind === 3 ? readString(r) : EL_NS[kind];
    chain.push({ n, content: false, tagName, namespace });
    stack.push({ n, ns: namespace, isTemplate: namespace === NS_HTML && tagName === 'template', hasContent: false });
  }
  // The nodes, as markup (index-markup.ts): at least one character a node.
  const sectionBytes = r.varint();
  if (nodeCount > sectionBytes) throw new Reject(REJECT.BAD_INDEX, 'node count');
  const section = r.bytes(sectionBytes);
  let markup: string;
  try {
    markup = dec.decode(section);
  } catch {
    throw new Reject(REJECT.BAD_INDEX, 'bad UTF-8');
  }
  const pieceAt: [number, number, number] = [firstPieces[0], firstPieces[1], firstPieces[2]];
  let slot = firstSlot;
  const slotRef = (stream: number, parts: number): SlotRef => {
    if (stream >= STREAMS) throw new Reject(REJECT.BAD_INDEX, 'stream');
    if (parts === 0 || parts > r.buf.length * 1428) throw new Reject(REJECT.BAD_INDEX, 'slot parts');
    const ref: SlotRef = { slot: slot++, stream: stream as Stream, parts, firstPiece: pieceAt[stream] };
    pieceAt[stream] += parts;
    if (pieceAt[stream] > 0xffffffff || slot > 0xffffffff) throw new Reject(REJECT.ABSURD_COUNT, 'pieces');
    return ref;
  };
  const nodes = decodeNodeSection(markup, firstNode, nodeCount, limits, stack, slotRef);
  const firstBlock = r.varint();
  const blockCount = r.varint();
  if (blockCount * (3 + BLOCK_DIGEST_BYTES + 3) > r.remaining || firstBlock + blockCount > maxBlock) throw new Reject(REJECT.BAD_INDEX, 'block table');
  const blocks: BlockInfo[] = new Array(blockCount);
  for (let i = 0; i < blockCount; i++) {
    const streamByte = r.u8();
    const several = (streamByte & BLOCK_FLAG_FRAMES) !== 0;
    const stream = streamByte & ~BLOCK_FLAG_FRAMES;
    if (stream >= STREAMS) throw new Reject(REJECT.BAD_INDEX, 'stream');
    const firstPiece = r.varint();
    const pieces = r.varint();
    if (pieces === 0 || pieces > MAX_BLOCK_PIECES) throw new Reject(REJECT.BAD_INDEX, 'block pieces');
    const digest = r.bytes(BLOCK_DIGEST_BYTES).slice();
    const s = r.bytes(3);
    const seq = (s[0] << 16) | (s[1] << 8) | s[2];
    if (seq >= maxSeq) throw new Reject(REJECT.BAD_INDEX, 'block frame number');
    if (!several) {
      blocks[i] = { block: firstBlock + i, stream: stream as Stream, firstPiece, pieces, digest, seq };
      continue;
    }
    // Only text used whole may wait for several frames; visible text must paint from each frame alone.
    const frames = r.varint();
    if (frames < 2 || frames > MAX_BLOCK_FRAMES || stream === STREAM.VISIBLE) throw new Reject(REJECT.BAD_INDEX, 'block frames');
    if (seq + frames > maxSeq) throw new Reject(REJECT.BAD_INDEX, 'block frame number');
    blocks[i] = { block: firstBlock + i, stream: stream as Stream, firstPiece, pieces, digest, seq, frames };
  }
  let pageDigest: Uint8Array | null = null;
  if (flags & FLAG_DIGEST) pageDigest = r.bytes(PAGE_DIGEST_BYTES).slice();
  if (r.remaining !== 0) throw new Reject(REJECT.BAD_INDEX, 'trailing bytes');
  return {
    ordinal,
    fragment: (flags & FLAG_FRAGMENT) !== 0,
    mode: MODES[modeCode],
    firstNode,
    nodeCount,
    firstSlot,
    slotCount: slot - firstSlot,
    firstPieces,
    chain,
    nodes,
    firstBlock,
    blocks,
    pageDigest,
  };
}
