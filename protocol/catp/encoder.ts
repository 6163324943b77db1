/**
 * CATP encoder (server side): parse5 tree -> index frames + data frames.
 *
 * What rides in the index ("context", painted with the skeleton, protected and sent first):
 *  - all text under HTML `<head>` except `<script>` bodies (title, style, noscript, inter-tag whitespace);
 *  - the text of every `<style>` (HTML or SVG) and `<title>`, wherever it is: it decides appearance;
 *  - whitespace-only text runs of at most 32 bytes anywhere (inter-tag formatting: it is part of the
 *    skeleton's shape in the source, costs less inline than as a slot, and is never "content").
 * Everything else — visible text, `<textarea>`/`<pre>` text, `<template>` content text and `<script>`
 * bodies — goes into data blocks. Script bodies are not context: the renderer never runs them and on
 * real pages they are often most of the bytes; putting them in the index would delay the first paint.
 * They still arrive (as data), so the assembled tree is exactly parse5's.
 *
 * Digests: the page digest is sha-256 (32 bytes) over the canonical encoding of the tree:
 * `indexBody || payload(block 0) || payload(block 1) ...` — deterministic for a given tree, and exactly
 * what the client holds at the end (it never sees the source bytes, which parse to the same tree in
 * many ways). Its first 8 bytes are the page id in every frame header. Each block's digest is
 * sha-256 over its data frame payload truncated to 16 bytes: 128 bits keep accidental and birthday
 * collisions out of reach (2^64 work) for the per-client block cache while costing 16 B per ~1.4 KB
 * block (~1.2%); integrity against a forger is not the goal (whoever can forge frames can forge the
 * index too). The index body itself is checked against a full sha-256 carried in index frame 0.
 */
import * as parse5 from 'parse5';
import type { DefaultTreeAdapterMap } from 'parse5';
import { CATP_ERR, LocalProtocolError } from './errors';
import {
  BLOCK_DIGEST_BYTES,
  BlockInfo,
  DEFAULT_INDEX_LIMITS,
  DocumentMode,
  encodeIndexBody,
  NS_HTML,
  NS_SVG,
  Skeleton,
  SkeletonNode,
} from './skeleton';
import { encodeFrame, FRAME_KIND, MAX_FRAME_PAYLOAD, PAGE_ID_BYTES, varintSize } from './wire';

type P5Node = DefaultTreeAdapterMap['node'];
type P5Parent = DefaultTreeAdapterMap['parentNode'];
type P5Element = DefaultTreeAdapterMap['element'];

export type Sha256 = (bytes: Uint8Array) => Uint8Array;

/** Index frame 0 starts with: page digest (32) | index body length (u32) | sha-256 of the index body (32). */
export const INDEX_META_BYTES = 68;
export const DIGEST_BYTES = 32;
/** Whitespace-only text up to this many bytes rides inline in the index. */
export const INLINE_WHITESPACE_MAX = 32;

export interface EncodeOptions {
  sha256: Sha256;
  /** parse5 scripting flag (default true, like parse5 and browsers with scripting). */
  scriptingEnabled?: boolean;
  /** Largest data frame payload (default and maximum MAX_FRAME_PAYLOAD = 1428); smaller for tests. */
  maxPayload?: number;
  /** Refuse trees deeper than this (default 2048, the assembler's default limit). */
  maxDepth?: number;
  /**
   * Where blocks end (default 'content'). 'content': content-defined boundaries (a rolling hash over the slot
   * text, see cutContent), so an edit changes only the blocks around it and a client's store keeps matching
   * the rest (block reuse). 'packed': every block filled to the brim, the previous layout — fewer frames, but
   * one inserted byte shifts every later block.
   */
  blockCut?: 'content' | 'packed';
}

export interface EncodedPage {
  /** sha-256 of the canonical tree encoding. */
  pageDigest: Uint8Array;
  /** First 8 bytes of pageDigest, in every frame header. */
  pageId: Uint8Array;
  /** All frames, index first, with an all-zero request ID (the sender stamps the real one). */
  frames: Uint8Array[];
  indexFrames: number;
  blocks: number;
  /** Length of the index body in bytes. */
  indexBytes: number;
  /** Bytes of slot text (UTF-8) carried in data frames. */
  dataTextBytes: number;
  /** The skeleton the index describes (server-side introspection, tests). */
  skeleton: Skeleton;
}

const utf8 = new TextEncoder();

/** Parse `html` with parse5 and encode the tree. */
export function encodePage(html: string | Uint8Array, opts: EncodeOptions): EncodedPage {
  const text = typeof html === 'string' ? html : new TextDecoder('utf-8').decode(html);
  const doc = parse5.parse(text, { scriptingEnabled: opts.scriptingEnabled ?? true });
  return encodeTree(doc, opts);
}

const isWs = (s: string): boolean => /^[ \t\n\f\r]*$/.test(s);
// Lone surrogates cannot be carried as UTF-8; pages decoded from bytes never contain them.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function checkString(s: string): string {
  if (LONE_SURROGATE.test(s)) throw new LocalProtocolError(CATP_ERR.UNENCODABLE, 'lone surrogate in the tree');
  return s;
}

/** Encode a parse5 (default tree adapter) document or fragment. */
export function encodeTree(root: DefaultTreeAdapterMap['document'] | DefaultTreeAdapterMap['documentFragment'], opts: EncodeOptions): EncodedPage {
  if (typeof opts.sha256 !== 'function') throw new LocalProtocolError(CATP_ERR.BAD_OPTIONS, 'sha256 is required');
  const maxPayload = Math.min(opts.maxPayload ?? MAX_FRAME_PAYLOAD, MAX_FRAME_PAYLOAD);
  if (!(maxPayload >= 96)) throw new LocalProtocolError(CATP_ERR.BAD_OPTIONS, 'maxPayload must be >= 96');
  const maxDepth = opts.maxDepth ?? DEFAULT_INDEX_LIMITS.maxDepth;

  // 1. Tree -> skeleton nodes, collecting slot texts in pre-order.
  const slotTexts: string[] = [];
  const slotNodes: Array<{ kind: 'slot'; slot: number; parts: number; firstPiece: number }> = [];
  let nodeCount = 0;

  const convert = (parent: P5Parent, inHead: boolean, depth: number): SkeletonNode[] => {
    if (depth > maxDepth) throw new LocalProtocolError(CATP_ERR.UNENCODABLE, `tree deeper than ${maxDepth}`);
    const out: SkeletonNode[] = [];
    const pe = 'tagName' in parent ? (parent as P5Element) : null;
    const pName = pe ? pe.tagName : '';
    const pHtml = pe ? pe.namespaceURI === NS_HTML : false;
    const contextParent =
      pe !== null && ((pHtml && (pName === 'style' || pName === 'title')) || (pe.namespaceURI === NS_SVG && pName === 'style'));
    const scriptParent = pHtml && pName === 'script';
    for (const n of parent.childNodes as P5Node[]) {
      nodeCount++;
      switch (n.nodeName) {
        case '#text': {
          const v = checkString((n as DefaultTreeAdapterMap['textNode']).value);
          const inline =
            v.length === 0 || contextParent || (inHead && !scriptParent) || (v.length <= INLINE_WHITESPACE_MAX && isWs(v));
          if (inline) out.push({ kind: 'text', value: v });
          else {
            const s = { kind: 'slot' as const, slot: slotTexts.length, parts: 0, firstPiece: 0 };
            slotTexts.push(v);
            slotNodes.push(s);
            out.push(s);
          }
          break;
        }
        case '#comment':
          out.push({ kind: 'comment', data: checkString((n as DefaultTreeAdapterMap['commentNode']).data) });
          break;
        case '#documentType': {
          const d = n as DefaultTreeAdapterMap['documentType'];
          out.push({ kind: 'doctype', name: checkString(d.name ?? ''), publicId: checkString(d.publicId ?? ''), systemId: checkString(d.systemId ?? '') });
          break;
        }
        default: {
          const e = n as P5Element;
          const isHtml = e.namespaceURI === NS_HTML;
          const childInHead = inHead || (isHtml && e.tagName === 'head');
          const attrs = e.attrs.map((a) => {
            const c: { name: string; value: string; namespace?: string; prefix?: string } = { name: checkString(a.name), value: checkString(a.value) };
            if (a.namespace !== undefined) c.namespace = a.namespace;
            if (a.prefix !== undefined) c.prefix = a.prefix;
            return c;
          });
          const el: SkeletonNode = {
            kind: 'element',
            tagName: checkString(e.tagName),
            namespace: e.namespaceURI,
            attrs,
            children: convert(e, childInHead, depth + 1),
          };
          if (isHtml && e.tagName === 'template' && 'content' in e) {
            el.content = convert((e as DefaultTreeAdapterMap['template']).content, childInHead, depth + 1);
          }
          out.push(el);
        }
      }
    }
    return out;
  };
  const fragment = root.nodeName === '#document-fragment';
  const children = convert(root, false, 0);
  const mode: DocumentMode = fragment ? 'no-quirks' : ((root as DefaultTreeAdapterMap['document']).mode as DocumentMode);

  // 2. Pack slot texts into blocks of pieces, each block one data frame payload.
  //    payload = varint pieceCount | pieceCount × (varint byteLength | UTF-8 bytes)
  const payloads: Uint8Array[] = [];
  const blocks: BlockInfo[] = [];
  const budget = maxPayload - 3; // 3 bytes kept for the piece-count varint
  let cur: Uint8Array[] = [];
  let used = 0;
  let pieceCount = 0;
  let dataTextBytes = 0;
  const closeBlock = (): void => {
    if (cur.length === 0) return;
    let size = varintSize(cur.length);
    for (const p of cur) size += varintSize(p.length) + p.length;
    const out = new Uint8Array(size);
    let o = 0;
    const put = (v: number): void => {
      while (v >= 0x80) {
        out[o++] = (v & 0x7f) | 0x80;
        v >>>= 7;
      }
      out[o++] = v;
    };
    put(cur.length);
    for (const p of cur) {
      put(p.length);
      out.set(p, o);
      o += p.length;
    }
    blocks.push({ firstPiece: pieceCount - cur.length, pieces: cur.length, digest: opts.sha256(out).slice(0, BLOCK_DIGEST_BYTES) });
    payloads.push(out);
    cur = [];
    used = 0;
  };
  const MIN_PIECE = 24;
  const slotBytes = slotTexts.map((t) => utf8.encode(t));
  for (const b of slotBytes) dataTextBytes += b.length;
  const addPiece = (slot: number, piece: Uint8Array): void => {
    cur.push(piece);
    used += varintSize(piece.length) + piece.length;
    slotNodes[slot].parts++;
    pieceCount++;
  };
  const startSlot = (slot: number): void => {
    slotNodes[slot].firstPiece = pieceCount;
  };
  if ((opts.blockCut ?? 'content') === 'content') cutContent(slotBytes, budget, { addPiece, startSlot, closeBlock, used: () => used, pieces: () => cur.length });
  else for (let s = 0; s < slotTexts.length; s++) {
    const bytes = slotBytes[s];
    const slot = slotNodes[s];
    slot.firstPiece = pieceCount;
    let off = 0;
    while (off < bytes.length) {
      const space = budget - used - 2; // piece lengths stay < 16384: a 2-byte varint
      const left = bytes.length - off;
      if (left > space && space < MIN_PIECE && cur.length > 0) {
        closeBlock();
        continue;
      }
      let n = Math.min(left, space);
      if (n < left) {
        n = forcedCut(bytes, off, n);
        if (n === 0) {
          closeBlock();
          continue;
        }
      }
      cur.push(bytes.subarray(off, off + n));
      used += varintSize(n) + n;
      off += n;
      slot.parts++;
      pieceCount++;
      if (used >= budget - 2 - MIN_PIECE) closeBlock();
    }
  }
  closeBlock();

  const sk: Skeleton = {
    fragment,
    mode,
    children,
    nodeCount,
    slotCount: slotTexts.length,
    pieceCount,
    blocks,
    pieceSlot: new Uint32Array(0),
    piecePart: new Uint32Array(0),
    slotParts: Uint32Array.from(slotNodes, (n) => n.parts),
  };
  const body = encodeIndexBody(sk);

  // 3. Page digest over the canonical encoding.
  let total = body.length;
  for (const p of payloads) total += p.length;
  const canon = new Uint8Array(total);
  canon.set(body, 0);
  let o = body.length;
  for (const p of payloads) {
    canon.set(p, o);
    o += p.length;
  }
  const pageDigest = opts.sha256(canon).slice(0, DIGEST_BYTES);
  const pageId = pageDigest.slice(0, PAGE_ID_BYTES);

  // 4. Index frames: frame 0 = meta + start of body; the rest continue the body.
  const meta = new Uint8Array(INDEX_META_BYTES);
  meta.set(pageDigest, 0);
  new DataView(meta.buffer).setUint32(32, body.length);
  meta.set(opts.sha256(body).slice(0, DIGEST_BYTES), 36);
  const indexChunks: Uint8Array[] = [];
  const first = Math.min(body.length, maxPayload - INDEX_META_BYTES);
  const c0 = new Uint8Array(INDEX_META_BYTES + first);
  c0.set(meta, 0);
  c0.set(body.subarray(0, first), INDEX_META_BYTES);
  indexChunks.push(c0);
  for (let p = first; p < body.length; p += maxPayload) indexChunks.push(body.subarray(p, Math.min(body.length, p + maxPayload)));

  const indexFrames = indexChunks.length;
  const totalFrames = indexFrames + payloads.length;
  const id = new Uint8Array(8);
  const frames: Uint8Array[] = [];
  indexChunks.forEach((c, i) =>
    frames.push(encodeFrame({ id, kind: FRAME_KIND.INDEX, pageId, seq: i, total: totalFrames, indexFrames }, c)),
  );
  payloads.forEach((p, i) =>
    frames.push(encodeFrame({ id, kind: FRAME_KIND.DATA, pageId, seq: indexFrames + i, total: totalFrames, indexFrames }, p)),
  );
  return {
    pageDigest,
    pageId,
    frames,
    indexFrames,
    blocks: payloads.length,
    indexBytes: body.length,
    dataTextBytes,
    skeleton: sk,
  };
}

/**
 * Where to cut `bytes[off..]` when at most `n` bytes fit: at a UTF-8 sequence boundary (a surrogate pair is
 * one 4-byte sequence, never split), preferably just after a space or newline in the last 32 bytes. Returns
 * the length to take (0 when no boundary fits).
 */
function forcedCut(bytes: Uint8Array, off: number, n: number): number {
  let k = n;
  while (k > 0 && (bytes[off + k] & 0xc0) === 0x80) k--;
  for (let j = k; j > k - 32 && j > 1; j--) {
    const c = bytes[off + j - 1];
    if (c === 0x20 || c === 0x0a) return j;
  }
  return k;
}

// ---------------------------------------------------------------------------------------------
// Content-defined block boundaries (block reuse)

/**
 * Gear rolling hash table (FastCDC, Xia et al. 2016): 256 fixed pseudo-random 32-bit words from splitmix32 with
 * a fixed seed, so every encoder cuts the same text the same way. h = (h << 1) + GEAR[byte] (mod 2^32) depends
 * only on the last 32 bytes fed, so a boundary depends only on the text just before it.
 */
const GEAR: Uint32Array = (() => {
  const t = new Uint32Array(256);
  let x = 0x9e3779b9;
  for (let i = 0; i < 256; i++) {
    x = (x + 0x9e3779b9) >>> 0;
    let z = x;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    t[i] = (z ^ (z >>> 16)) >>> 0;
  }
  return t;
})();
/** Fed into the hash at the end of every slot, so slot structure takes part in the boundaries. */
const GEAR_SLOT_END = 0x5bd1e995;

interface CutSink {
  addPiece(slot: number, piece: Uint8Array): void;
  startSlot(slot: number): void;
  closeBlock(): void;
  used(): number;
  pieces(): number;
}

/**
 * Cuts the slot texts into blocks at content-defined points. A block ends
 *  - after a byte (on a UTF-8 sequence boundary) where the Gear hash of the preceding text falls below a
 *    threshold of 1 in `minFill` — once the block holds at least `minFill` bytes (35% of a frame);
 *  - at the end of a slot (a text run: a paragraph, a list item...) with odds of 1 in 4, same minimum — so
 *    blocks tend to follow the page's own structure;
 *  - or when the frame is full (forced: at a UTF-8 boundary, after a space or newline in the last 32 bytes
 *    when there is one, as the packed layout does).
 * The hash restarts at each block; with minFill ≥ 32 fed bytes a boundary depends only on the 32 bytes before
 * it, so after an edit the boundaries of the old and new text fall in the same places again within a block or
 * two: a changed paragraph changes about its own blocks.
 *
 * Measured on 60 corpus pages (195 edits inserting a phrase inside a paragraph): 1.9 new blocks (1.3 KB) per
 * edit, against 23 (33 KB) with 'packed'; blocks average 745 bytes against 1442, so twice the data frames and
 * 2.3% more data bytes (headers). A larger minimum (or rarer slot-end cuts) gives bigger blocks but slower
 * resynchronisation after an edit (min 20%, 1 in 800, slot ends 1 in 32: 972 B blocks, 2.2 KB per edit).
 */
function cutContent(slots: readonly Uint8Array[], budget: number, sink: CutSink): void {
  const minFill = Math.max(32, Math.floor(budget * 0.35));
  const byteThreshold = Math.floor(0x1_0000_0000 / minFill);
  const slotThreshold = 0x4000_0000; // 1 in 4
  let h = 0;
  const close = (): void => {
    sink.closeBlock();
    h = 0;
  };
  for (let s = 0; s < slots.length; s++) {
    const bytes = slots[s];
    sink.startSlot(s);
    let off = 0;
    while (off < bytes.length) {
      const room = budget - sink.used() - 2; // a piece's length takes at most 2 bytes (pieces < 16384)
      if (room < 24 && sink.pieces() > 0) {
        close();
        continue;
      }
      const limit = Math.min(bytes.length, off + room);
      let cut = -1;
      let hh = h;
      for (let i = off; i < limit; i++) {
        hh = ((hh << 1) + GEAR[bytes[i]]) >>> 0;
        const pos = i + 1;
        if (pos < bytes.length && (bytes[pos] & 0xc0) === 0x80) continue; // inside a UTF-8 sequence
        if (sink.used() + 2 + (pos - off) >= minFill && hh < byteThreshold) {
          cut = pos;
          break;
        }
      }
      if (cut > 0) {
        sink.addPiece(s, bytes.subarray(off, cut));
        off = cut;
        close();
        continue;
      }
      if (limit === bytes.length) {
        // the rest of the slot fits: the slot's end is the next candidate
        sink.addPiece(s, bytes.subarray(off));
        off = bytes.length;
        h = ((hh << 1) + GEAR_SLOT_END) >>> 0;
        if (sink.used() >= minFill && h < slotThreshold) close();
        break;
      }
      // The frame is full without a content-defined point.
      const k = forcedCut(bytes, off, limit - off);
      if (k === 0) {
        close();
        continue;
      }
      sink.addPiece(s, bytes.subarray(off, off + k));
      off += k;
      close();
    }
  }
}
