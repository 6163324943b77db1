/**
 * The CATP index: the page's tree with every displayable text run replaced by a slot.
 *
 * Index body (the bytes the index frames carry, after frame 0's meta), all varints LEB128:
 *
 *   u8 rootKind (0 document, 1 fragment) | u8 mode (0 no-quirks, 1 quirks, 2 limited-quirks)
 *   varint nodeCount | varint slotCount | varint pieceCount | varint blockCount
 *   blockCount × (varint pieces, 16-byte block digest)
 *   varint rootChildCount, then the nodes in pre-order:
 *     0x01 element : u8 flags (bits 0-1 ns: 0 html, 1 svg, 2 mathml, 3 other (string follows);
 *                    bit 2 template content follows), name, [ns string], varint attrCount,
 *                    attrCount × attr, varint childCount, [varint contentCount], then children, then content
 *     0x02 text    : string (inline text: context, see encoder.ts)
 *     0x03 slot    : varint parts (>= 1): this text node is filled from the next `parts` pieces
 *     0x04 comment : string
 *     0x05 doctype : string name, string publicId, string systemId
 *   attr   = u8 flags (bits 0-2 ns: 0 none, 1 xlink, 2 xml, 3 xmlns, 4 other (string follows);
 *            bit 3 prefix follows), name, [ns string], [prefix name], string value
 *   name   = varint k: 0 => a new name follows as a string and takes the next table entry; k > 0 => entry k-1
 *   string = varint byteLength, UTF-8 bytes
 *
 * Slots are numbered in pre-order (template content included where it appears); pieces are numbered
 * slot after slot; blocks cover consecutive pieces. A slot therefore cannot point at nothing or at the
 * same piece twice: the decoder checks sum(slot parts) = pieceCount = sum(block pieces).
 */
import { REJECT, Reject } from './errors';
import { ByteReader, GrowWriter } from './wire';

export type DocumentMode = 'no-quirks' | 'quirks' | 'limited-quirks';

export interface CatpAttr {
  name: string;
  value: string;
  namespace?: string;
  prefix?: string;
}

export interface SkElement {
  kind: 'element';
  tagName: string;
  namespace: string;
  attrs: CatpAttr[];
  children: SkeletonNode[];
  /** Template contents (HTML `<template>` only). */
  content?: SkeletonNode[];
}
export interface SkText {
  kind: 'text';
  value: string;
}
/** A text node whose text arrives in data frames, as `parts` pieces (numbered from `firstPiece`). */
export interface SkSlot {
  kind: 'slot';
  slot: number;
  parts: number;
  firstPiece: number;
}
export interface SkComment {
  kind: 'comment';
  data: string;
}
export interface SkDoctype {
  kind: 'doctype';
  name: string;
  publicId: string;
  systemId: string;
}
export type SkeletonNode = SkElement | SkText | SkSlot | SkComment | SkDoctype;

export interface BlockInfo {
  firstPiece: number;
  pieces: number;
  /** First 16 bytes of sha-256 over the data frame's payload. */
  digest: Uint8Array;
}

export interface Skeleton {
  fragment: boolean;
  mode: DocumentMode;
  children: SkeletonNode[];
  nodeCount: number;
  slotCount: number;
  pieceCount: number;
  blocks: BlockInfo[];
  /** For each piece: its slot and its part number within the slot (filled by the decoder / encoder). */
  pieceSlot: Uint32Array;
  piecePart: Uint32Array;
  /** For each slot: its number of parts. */
  slotParts: Uint32Array;
}

export const BLOCK_DIGEST_BYTES = 16;

export const NS_HTML = 'http://www.w3.org/1999/xhtml';
export const NS_SVG = 'http://www.w3.org/2000/svg';
export const NS_MATHML = 'http://www.w3.org/1998/Math/MathML';
export const NS_XLINK = 'http://www.w3.org/1999/xlink';
export const NS_XML = 'http://www.w3.org/XML/1998/namespace';
export const NS_XMLNS = 'http://www.w3.org/2000/xmlns/';

const EL_NS = [NS_HTML, NS_SVG, NS_MATHML];
const ATTR_NS = ['', NS_XLINK, NS_XML, NS_XMLNS];
const MODES: DocumentMode[] = ['no-quirks', 'quirks', 'limited-quirks'];

const T_ELEMENT = 1;
const T_TEXT = 2;
const T_SLOT = 3;
const T_COMMENT = 4;
const T_DOCTYPE = 5;

export interface IndexLimits {
  /** Deepest element nesting accepted (default 2048). */
  maxDepth: number;
  /** Most nodes in one index (default 1,048,576). */
  maxNodes: number;
  /** Most attributes on one element (default 4096). */
  maxAttrs: number;
}

export const DEFAULT_INDEX_LIMITS: IndexLimits = { maxDepth: 2048, maxNodes: 1 << 20, maxAttrs: 4096 };

const enc = new TextEncoder();

class NameWriter {
  private table = new Map<string, number>();
  constructor(private w: GrowWriter) {}
  name(s: string): void {
    const k = this.table.get(s);
    if (k !== undefined) {
      this.w.varint(k + 1);
      return;
    }
    this.w.varint(0);
    writeString(this.w, s);
    this.table.set(s, this.table.size);
  }
}

function writeString(w: GrowWriter, s: string): void {
  const b = enc.encode(s);
  w.varint(b.length);
  w.bytes(b);
}

/** Serialize a skeleton into index body bytes. */
export function encodeIndexBody(sk: Skeleton): Uint8Array {
  const w = new GrowWriter();
  const names = new NameWriter(w);
  w.u8(sk.fragment ? 1 : 0);
  w.u8(MODES.indexOf(sk.mode));
  w.varint(sk.nodeCount);
  w.varint(sk.slotCount);
  w.varint(sk.pieceCount);
  w.varint(sk.blocks.length);
  for (const b of sk.blocks) {
    w.varint(b.pieces);
    w.bytes(b.digest.subarray(0, BLOCK_DIGEST_BYTES));
  }
  w.varint(sk.children.length);
  // Iterative pre-order: a stack of node lists.
  const stack: Array<{ list: SkeletonNode[]; i: number }> = [{ list: sk.children, i: 0 }];
  while (stack.length > 0) {
    const top = stack[stack.length - 1];
    if (top.i >= top.list.length) {
      stack.pop();
      continue;
    }
    const n = top.list[top.i++];
    switch (n.kind) {
      case 'element': {
        w.u8(T_ELEMENT);
        let nsCode = EL_NS.indexOf(n.namespace);
        if (nsCode < 0) nsCode = 3;
        w.u8(nsCode | (n.content ? 4 : 0));
        names.name(n.tagName);
        if (nsCode === 3) writeString(w, n.namespace);
        w.varint(n.attrs.length);
        for (const a of n.attrs) {
          let an = 0;
          if (a.namespace !== undefined) {
            an = ATTR_NS.indexOf(a.namespace);
            if (an <= 0) an = 4;
          }
          w.u8(an | (a.prefix !== undefined ? 8 : 0));
          names.name(a.name);
          if (an === 4) writeString(w, a.namespace as string);
          if (a.prefix !== undefined) names.name(a.prefix);
          writeString(w, a.value);
        }
        w.varint(n.children.length);
        if (n.content) w.varint(n.content.length);
        // children first, then content: push content below children.
        if (n.content) stack.push({ list: n.content, i: 0 });
        stack.push({ list: n.children, i: 0 });
        break;
      }
      case 'text':
        w.u8(T_TEXT);
        writeString(w, n.value);
        break;
      case 'slot':
        w.u8(T_SLOT);
        w.varint(n.parts);
        break;
      case 'comment':
        w.u8(T_COMMENT);
        writeString(w, n.data);
        break;
      case 'doctype':
        w.u8(T_DOCTYPE);
        writeString(w, n.name);
        writeString(w, n.publicId);
        writeString(w, n.systemId);
        break;
    }
  }
  return w.result();
}

const dec = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function readString(r: ByteReader): string {
  const n = r.varint();
  const b = r.bytes(n);
  try {
    return dec.decode(b);
  } catch {
    throw new Reject(REJECT.BAD_INDEX, 'bad UTF-8');
  }
}

/**
 * Decode index body bytes. Hostile input: every count is checked against the bytes left and the
 * limits; depth is bounded by an explicit stack (no recursion). Throws {@link Reject} only.
 */
export function decodeIndexBody(body: Uint8Array, limits: IndexLimits = DEFAULT_INDEX_LIMITS): Skeleton {
  const r = new ByteReader(body, 0, REJECT.BAD_INDEX);
  const rootKind = r.u8();
  const modeCode = r.u8();
  if (rootKind > 1 || modeCode > 2) throw new Reject(REJECT.BAD_INDEX, 'root kind / mode');
  const nodeCount = r.varint();
  const slotCount = r.varint();
  const pieceCount = r.varint();
  const blockCount = r.varint();
  // Each node costs >= 2 bytes, each slot / piece >= 1 byte of index or data: cheap plausibility bounds
  // before anything is allocated.
  if (nodeCount > limits.maxNodes || nodeCount * 2 > body.length) throw new Reject(REJECT.BAD_INDEX, 'node count');
  if (slotCount > nodeCount || pieceCount < slotCount || blockCount > pieceCount) throw new Reject(REJECT.BAD_INDEX, 'counts');
  if (blockCount * (1 + BLOCK_DIGEST_BYTES) > r.remaining) throw new Reject(REJECT.BAD_INDEX, 'block table');
  if (pieceCount > blockCount * 1428) throw new Reject(REJECT.BAD_INDEX, 'piece count');
  const blocks: BlockInfo[] = new Array(blockCount);
  let piece = 0;
  for (let i = 0; i < blockCount; i++) {
    const pieces = r.varint();
    if (pieces === 0 || pieces > pieceCount - piece) throw new Reject(REJECT.BAD_INDEX, 'block pieces');
    blocks[i] = { firstPiece: piece, pieces, digest: r.bytes(BLOCK_DIGEST_BYTES).slice() };
    piece += pieces;
  }
  if (piece !== pieceCount) throw new Reject(REJECT.BAD_INDEX, 'blocks do not cover every piece');
  const pieceSlot = new Uint32Array(pieceCount);
  const piecePart = new Uint32Array(pieceCount);
  const slotParts = new Uint32Array(slotCount);
  const names: string[] = [];
  const readName = (): string => {
    const k = r.varint();
    if (k === 0) {
      const s = readString(r);
      names.push(s);
      return s;
    }
    if (k > names.length) throw new Reject(REJECT.BAD_INDEX, 'name reference');
    return names[k - 1];
  };
  const rootChildren: SkeletonNode[] = [];
  const rootCount = r.varint();
  if (rootCount > nodeCount) throw new Reject(REJECT.BAD_INDEX, 'root child count');
  // Each stack entry: a list to fill and how many nodes it still expects; `then` is a second list
  // (template content) to fill once the first is done.
  interface Frame {
    list: SkeletonNode[];
    left: number;
    thenList?: SkeletonNode[];
    thenLeft?: number;
  }
  const stack: Frame[] = [{ list: rootChildren, left: rootCount }];
  let nodes = 0;
  let slots = 0;
  let pieces = 0;
  let depth = 0; // number of element frames on the stack
  while (stack.length > 0) {
    const top = stack[stack.length - 1];
    if (top.left === 0) {
      if (top.thenList !== undefined) {
        top.list = top.thenList;
        top.left = top.thenLeft as number;
        top.thenList = undefined;
        continue;
      }
      stack.pop();
      depth--;
      continue;
    }
    top.left--;
    if (++nodes > nodeCount) throw new Reject(REJECT.BAD_INDEX, 'more nodes than declared');
    const tag = r.u8();
    switch (tag) {
      case T_ELEMENT: {
        const flags = r.u8();
        if (flags & ~7) throw new Reject(REJECT.BAD_INDEX, 'element flags');
        const nsCode = flags & 3;
        const tagName = readName();
        const namespace = nsCode === 3 ? readString(r) : EL_NS[nsCode];
        const attrCount = r.varint();
        if (attrCount > limits.maxAttrs || attrCount * 3 > r.remaining) throw new Reject(REJECT.BAD_INDEX, 'attr count');
        const attrs: CatpAttr[] = new Array(attrCount);
        for (let i = 0; i < attrCount; i++) {
          const af = r.u8();
          if (af & ~15) throw new Reject(REJECT.BAD_INDEX, 'attr flags');
          const an = af & 7;
          if (an > 4) throw new Reject(REJECT.BAD_INDEX, 'attr namespace');
          const name = readName();
          const a: CatpAttr = { name, value: '' };
          if (an === 4) a.namespace = readString(r);
          else if (an > 0) a.namespace = ATTR_NS[an];
          if (af & 8) a.prefix = readName();
          a.value = readString(r);
          // property order like parse5 ({name, value, namespace?, prefix?}) does not matter to consumers
          attrs[i] = a;
        }
        const childCount = r.varint();
        const hasContent = (flags & 4) !== 0;
        const contentCount = hasContent ? r.varint() : 0;
        if (childCount + contentCount > nodeCount - nodes) throw new Reject(REJECT.BAD_INDEX, 'child count');
        const el: SkElement = { kind: 'element', tagName, namespace, attrs, children: [] };
        if (hasContent) el.content = [];
        top.list.push(el);
        if (childCount + contentCount > 0 || hasContent) {
          if (++depth > limits.maxDepth) throw new Reject(REJECT.BAD_INDEX, 'too deep');
          const f: Frame = { list: el.children, left: childCount };
          if (hasContent) {
            f.thenList = el.content;
            f.thenLeft = contentCount;
          }
          stack.push(f);
        }
        break;
      }
      case T_TEXT:
        top.list.push({ kind: 'text', value: readString(r) });
        break;
      case T_SLOT: {
        const parts = r.varint();
        if (parts === 0 || parts > pieceCount - pieces || slots >= slotCount) throw new Reject(REJECT.BAD_INDEX, 'slot parts');
        for (let i = 0; i < parts; i++) {
          pieceSlot[pieces + i] = slots;
          piecePart[pieces + i] = i;
        }
        slotParts[slots] = parts;
        top.list.push({ kind: 'slot', slot: slots, parts, firstPiece: pieces });
        slots++;
        pieces += parts;
        break;
      }
      case T_COMMENT:
        top.list.push({ kind: 'comment', data: readString(r) });
        break;
      case T_DOCTYPE: {
        const name = readString(r);
        const publicId = readString(r);
        const systemId = readString(r);
        top.list.push({ kind: 'doctype', name, publicId, systemId });
        break;
      }
      default:
        throw new Reject(REJECT.BAD_INDEX, `node tag ${tag}`);
    }
  }
  if (r.remaining !== 0) throw new Reject(REJECT.BAD_INDEX, 'trailing bytes');
  if (nodes !== nodeCount || slots !== slotCount || pieces !== pieceCount) {
    throw new Reject(REJECT.BAD_INDEX, 'declared counts do not match the tree');
  }
  return {
    fragment: rootKind === 1,
    mode: MODES[modeCode],
    children: rootChildren,
    nodeCount,
    slotCount,
    pieceCount,
    blocks,
    pieceSlot,
    piecePart,
    slotParts,
  };
}
