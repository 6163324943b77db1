/**
 * Hostile frames against the v2 index (pieces that stand alone): each is refused with its named, counted reason,
 * nothing throws, memory stays bounded, and an honest load that receives the hostile frame still completes with
 * parse5's tree. Hostile index frames are built with the exported encoders (encodePieceBody, packPayload,
 * encodeFrame) from the honest page's own pieces, so each is well-formed except for its one lie.
 */
import * as zlib from 'node:zlib';
import fc from 'fast-check';
import * as parse5 from 'parse5';
import {
  CATP_VERSION,
  CatpAssembler,
  ChainEntry,
  decodeIndexPiece,
  DEFAULT_INDEX_LIMITS,
  encodeFrame,
  encodePage,
  encodePieceBody,
  encodeReport,
  FRAME_KIND,
  FrameCodec,
  HEADER_BYTES,
  IndexNode,
  IndexPiece,
  MAX_DATAGRAM_PAYLOAD,
  MAX_DECODED_PAYLOAD,
  packPayload,
  parse5TreeBuilder,
  REJECT,
  RepairSender,
  slotRefs,
} from '../../../protocol/catp';
import { Reject } from '../../../protocol/catp/errors';
import { nodeSectionMarkup } from '../../../protocol/catp/index-markup';
import { codec, drain, newAssembler, placeholders, rng, sha256, shuffle, treeLoad } from '../../helpers/catp-util';

type Doc = parse5.DefaultTreeAdapterMap['document'];

// An honest page with several index frames (small frames, no codec: readable, and forged frames are easy to
// place), ancestors deep enough for chains (html > body > div > section > ul/p), a template and a script.
const HTML =
  `<!DOCTYPE html><html lang=en><head><title>Hostile</title><style>p{color:red}</style></head><body class=b><div id=outer><section class=s><h1>Title</h1>` +
  Array.from({ length: 24 }, (_, i) => `<p class="p${i}">para ${i} ${'hello wörld 😀 '.repeat(i % 3 === 0 ? 40 : 4)}</p><ul>${'<li>item é</li>'.repeat(4)}</ul>`).join('') +
  `<template><b>t</b></template></section></div><script>var x = 1;</script></body></html>`;
// (every piece a full frame, the first too: the cases below rely on where pieces start)
const page = encodePage(HTML, { sha256, maxPayload: 400, firstPiece: 'full' });
const other = encodePage(HTML + '<p>other</p>', { sha256, maxPayload: 400, firstPiece: 'full' });
/** The same page compressed (brotli), for mutations of compressed frames. */
const zpage = encodePage(HTML, { sha256, codec, maxPayload: 200 });
const want = parse5.serialize(parse5.parse(HTML, { scriptingEnabled: false }));
const IX = page.indexFrames;
const TOTAL = page.frames.length;
const P = page.pieces;
/** Frame number of index frame k. */
const S = page.frames.flatMap((f, i) => (f[10] === FRAME_KIND.INDEX ? [i] : []));
const ZERO_ID = new Uint8Array(8);

/** Every node of the page, by number (nodes[n - 1]). */
const nodes: IndexNode[] = P.flatMap((p) => p.nodes);
const chainOf = (n: number): ChainEntry[] => {
  const out: ChainEntry[] = [];
  for (let p = nodes[n - 1].parent; p > 0; p = nodes[p - 1].parent) {
    const nd = nodes[p - 1];
    if (nd.kind === 'content') out.push({ n: p, content: true, tagName: '', namespace: '' });
    else if (nd.kind === 'element') out.push({ n: p, content: false, tagName: nd.tagName, namespace: nd.namespace });
  }
  return out.reverse();
};
/** A well-formed piece of nodes [from, from + count) with the given ordinal and blocks. */
function cut(from: number, count: number, ordinal: number, blocks = P[0].blocks.slice(0, 0)): IndexPiece {
  let firstSlot = 0;
  const firstPieces: [number, number, number] = [0, 0, 0];
  for (const nd of nodes.slice(0, from - 1)) {
    for (const r of slotRefs({ nodes: [nd] } as IndexPiece)) {
      firstSlot++;
      firstPieces[r.stream] += r.parts;
    }
  }
  const own = nodes.slice(from - 1, from - 1 + count);
  return {
    ordinal,
    fragment: false,
    mode: P[0].mode,
    firstNode: from,
    nodeCount: count,
    firstSlot,
    slotCount: slotRefs({ nodes: own } as IndexPiece).length,
    firstPieces,
    chain: chainOf(from),
    nodes: own,
    firstBlock: blocks.length > 0 ? blocks[0].block : 0,
    blocks,
    pageDigest: ordinal === 0 ? page.pageDigest : null,
  };
}
/** A deep copy of honest piece k, changed by `edit`. */
function piece(k: number, edit: (p: IndexPiece) => void = () => {}): IndexPiece {
  const p = structuredClone(P[k]);
  edit(p);
  return p;
}
const concat = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};
/** An index frame payload: 8-byte check of the decoded body | packed body. */
const indexPayload = (body: Uint8Array, c?: FrameCodec): Uint8Array => concat(sha256(body).subarray(0, 8), packPayload(body, c, 'final'));
/** A frame of this page (header right: page id, total, indexFrames) at frame number `seq`. */
const frame = (kind: 1 | 2, seq: number, payload: Uint8Array): Uint8Array =>
  encodeFrame({ id: ZERO_ID, kind, pageId: page.pageId, seq, total: TOTAL, indexFrames: IX }, payload);
/** An index frame carrying piece `p` at frame number `seq` (default: where the honest frame of its ordinal goes). */
const indexFrame = (p: IndexPiece, seq = S[Math.min(p.ordinal, IX - 1)], c?: FrameCodec, section?: string): Uint8Array =>
  frame(FRAME_KIND.INDEX, seq, indexPayload(encodePieceBody(p, section), c));
/** Piece p's node markup, node by node (each with the closes before it), joined by `edit` (default: as they are). */
function markupOf(p: IndexPiece, edit: (nodes: string[]) => string = (nodes) => nodes.join('')): string {
  const all = nodeSectionMarkup(p.nodes, p.chain);
  // split before each node: one piece per node, from its own markup alone on the same chain
  const nodes: string[] = [];
  let from = 0;
  for (let i = 1; i <= p.nodes.length; i++) {
    const upTo = i === p.nodes.length ? all.length : nodeSectionMarkup(p.nodes.slice(0, i), p.chain).length;
    nodes.push(all.slice(from, upTo));
    from = upTo;
  }
  return edit(nodes);
}

const setU32 = (f: Uint8Array, off: number, v: number): Uint8Array => {
  const c = f.slice();
  new DataView(c.buffer).setUint32(off, v);
  return c;
};

/** An assembler with a tree: `deliver` applies every event; `types` lists them. */
function honestLoad(asm: CatpAssembler = newAssembler()) {
  const { b, types, deliver } = treeLoad(asm);
  const finish = (): void => {
    for (const f of page.frames) deliver(f);
    expect(types).toContain('page-complete');
    expect(types).not.toContain('page-corrupt');
    expect(parse5.serialize(b.root as Doc)).toBe(want);
    expect(placeholders(b.root as Doc)).toEqual({ slot: 0, index: 0 });
  };
  return { asm, b, types, deliver, finish };
}

function expectRefused(frames: Uint8Array[], code: string, setup: Uint8Array[] = [], asm: CatpAssembler = newAssembler()): CatpAssembler {
  for (const f of setup) asm.receive(f, 0);
  let last;
  for (const f of frames) last = asm.receive(f, 0);
  expect(last?.accepted).toBe(false);
  expect(last?.code).toBe(code);
  expect(asm.counters()[code]).toBeGreaterThanOrEqual(1);
  return asm;
}

test('the exported encoders rebuild the encoder\'s own index frames byte for byte (so a forged frame differs only by its lie)', () => {
  expect(IX).toBeGreaterThanOrEqual(6);
  expect(S[0]).toBe(0);
  P.forEach((p, k) => expect(Buffer.from(indexFrame(p)).equals(Buffer.from(page.frames[S[k]]))).toBe(true));
  expect(Buffer.from(indexFrame(cut(P[2].firstNode, P[2].nodeCount, 2, P[2].blocks))).equals(Buffer.from(page.frames[S[2]]))).toBe(true);
  // pieces 1-3 start inside an element (their chains end below <section>), which the chain cases below rely on
  expect(P[1].chain.map((c) => c.tagName)).toEqual(['html', 'body', 'div', 'section', 'ul']);
  expect(P[2].chain.map((c) => c.tagName)).toEqual(['html', 'body', 'div', 'section', 'ul', 'li']);
});

// ------------------------------------------------------------------------------------------------------------
// The table: each hostile index frame (or data frame), the honest index frames that arrive before it, the reason.

interface Case {
  name: string;
  /** Honest index frames (by ordinal) delivered before the hostile frame. */
  setup: number[];
  frame: () => Uint8Array;
  code: string;
  /** The assembler (default: newAssembler()). */
  asm?: () => CatpAssembler;
}

/** A run of `depth` nested divs (chain entries n = 1..depth), then one text node under the innermost. */
function deepChainPiece(depth: number, nested = 0): IndexPiece {
  const chain: ChainEntry[] = Array.from({ length: depth }, (_, i) => ({ n: i + 1, content: false, tagName: 'div', namespace: 'http://www.w3.org/1999/xhtml' }));
  const own: IndexNode[] = [];
  let parent = depth;
  for (let i = 0; i < nested; i++) {
    const n = depth + 1 + i;
    own.push({ kind: 'element', n, parent, tagName: 'div', namespace: 'http://www.w3.org/1999/xhtml', attrs: [] });
    parent = n;
  }
  own.push({ kind: 'text', n: depth + nested + 1, parent, value: 'deep' });
  return { ...cut(1, 0, 5), firstNode: depth + 1, nodeCount: own.length, chain, nodes: own, slotCount: 0 };
}
const bomb = (bytes: number): Uint8Array => new Uint8Array(zlib.brotliCompressSync(new Uint8Array(bytes)));

const CASES: Case[] = [
  // --- node ranges
  { name: 'overlapping node ranges: piece 2 also claims the last node of piece 1', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(cut(P[2].firstNode - 1, P[2].nodeCount + 1, 2, P[2].blocks)) },
  { name: 'misordered node ranges: piece 3 claims nodes of piece 1', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(cut(P[1].firstNode, 10, 3)) },
  { name: 'neighbouring pieces that do not meet: piece 2 starts one node late (a gap)', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(cut(P[2].firstNode + 1, P[2].nodeCount - 1, 2)) },
  { name: 'a second index frame with the same ordinal', setup: [3], code: REJECT.INDEX_CONFLICT, frame: () => indexFrame(P[3], S[4]) },
  { name: 'ordinal past the index (>= indexFrames)', setup: [], code: REJECT.BAD_INDEX, frame: () => indexFrame(piece(3, (p) => (p.ordinal = IX)), S[3]) },
  { name: 'index frame 0 that does not start the page', setup: [], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(1, (p) => ((p.ordinal = 0), (p.pageDigest = page.pageDigest))), S[0]) },
  { name: 'absurd node range (firstNode near 2^32)', setup: [], code: REJECT.ABSURD_COUNT, frame: () => indexFrame(piece(3, (p) => (p.firstNode = 0xfffff000))) },
  // --- chains that contradict other pieces
  { name: 'a chain naming an ancestor with another tag than a provisional one (both chains, neither piece holds it)', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(2, (p) => (p.chain[3].tagName = 'article'))) },
  { name: 'a chain naming an ancestor with another tag than the real node', setup: [0], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(2, (p) => (p.chain[2].tagName = 'span'))) },
  { name: 'a chain naming an ancestor in another namespace than the real node', setup: [0], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(2, (p) => (p.chain[2].namespace = 'http://www.w3.org/2000/svg'))) },
  { name: 'a chain giving an ancestor another parent (body left out: div directly under html)', setup: [0], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(2, (p) => p.chain.splice(1, 1))) },
  { name: 'a node contradicting the provisional ancestor another piece\'s chain named', setup: [2], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(1, (p) => {
      const nd = p.nodes.find((x) => x.n === P[2].chain[4].n) as IndexNode & { tagName: string };
      nd.tagName = 'div';
    })) },
  // --- attach points
  // (a node's parent is the open element on top of the markup's stack, so a parent that is a text node or an
  // element already closed cannot be written; what can be written instead is a close in the wrong place)
  { name: 'a close before the first node (the first node above the chain\'s last entry)', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(P[1], undefined, undefined, `</>${markupOf(P[1])}`) },
  { name: 'closes past the root', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(P[1], undefined, undefined, markupOf(P[1], (nodes) => `${nodes[0]}${'</>'.repeat(P[1].chain.length + 2)}${nodes.slice(1).join('')}`)) },
  { name: 'a close after the last node', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(P[1], undefined, undefined, `${markupOf(P[1])}</>`) },
  { name: 'more nodes in the markup than the piece counts', setup: [], code: REJECT.BAD_INDEX,
    frame: () => indexFrame(P[1], undefined, undefined, `${markupOf(P[1])}<b>`) },
  { name: 'fewer nodes in the markup than the piece counts', setup: [], code: REJECT.BAD_INDEX,
    frame: () => indexFrame(piece(1, (p) => p.nodeCount++)) },
  { name: 'an escape the decoder does not know', setup: [], code: REJECT.BAD_INDEX,
    frame: () => indexFrame(P[1], undefined, undefined, markupOf(P[1], (nodes) => `<b title="&bogus;">${nodes.slice(1).join('')}`)) },
  { name: 'a token cut short (an element with no end)', setup: [], code: REJECT.BAD_INDEX,
    frame: () => indexFrame(P[1], undefined, undefined, `${markupOf(P[1]).slice(0, -1)}<div class="x`) },
  { name: 'a text slot in a stream that does not exist', setup: [], code: REJECT.BAD_INDEX,
    frame: () => indexFrame(P[1], undefined, undefined, markupOf(P[1], (nodes) => `<$31>${nodes.slice(1).join('')}`)) },
  { name: 'a first node whose parent is not the chain\'s last entry (the chain stops short)', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(piece(2, (p) => p.chain.pop())) },
  { name: 'a first node that is not a child of the chain (the chain goes one further)', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(piece(4, (p) => p.chain.push({ n: P[4].firstNode - 1, content: false, tagName: 'b', namespace: 'http://www.w3.org/1999/xhtml' }))) },
  { name: 'a chain naming ancestors at or after the piece\'s first node', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(piece(2, (p) => p.chain.push({ n: P[2].firstNode + 3, content: false, tagName: 'b', namespace: 'http://www.w3.org/1999/xhtml' }))) },
  { name: 'template content under an element that is not a template', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(piece(1, (p) => {
      const i = p.nodes.findIndex((x) => x.kind === 'text-slot');
      p.nodes[i] = { kind: 'content', n: p.nodes[i].n, parent: p.nodes[i].parent };
    })) },
  { name: 'template content in a chain, under something that is not a template', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(piece(2, (p) => p.chain.splice(4, 0, { n: P[2].chain[4].n - 1, content: true, tagName: '', namespace: '' }))) },
  { name: 'a doctype below the root', setup: [], code: REJECT.BAD_ATTACH,
    frame: () => indexFrame(piece(1, (p) => {
      const i = p.nodes.findIndex((x) => x.kind === 'text-slot');
      p.nodes[i] = { kind: 'doctype', n: p.nodes[i].n, parent: p.nodes[i].parent, name: 'html', publicId: '', systemId: '' };
    })) },
  // --- depth
  { name: 'a chain 3,000 ancestors deep (brotli packs it into one datagram)', setup: [], code: REJECT.TOO_DEEP,
    frame: () => indexFrame(deepChainPiece(3000), S[5], codec) },
  { name: 'a chain of 2,000 plus 100 nested elements in the piece: past the limit of 2,048', setup: [], code: REJECT.TOO_DEEP,
    frame: () => indexFrame(deepChainPiece(2000, 100), S[5], codec) },
  { name: 'a chain of 1,000,000 ancestors (declared count)', setup: [], code: REJECT.TOO_DEEP,
    frame: () => {
      const body = encodePieceBody(deepChainPiece(4));
      // the chain length is the varint after flags, ordinal, firstNode, nodeCount, firstSlot and 3 first pieces
      expect(body[8]).toBe(4);
      return frame(FRAME_KIND.INDEX, S[5], indexPayload(concat(body.subarray(0, 8), Uint8Array.of(0xc0, 0x84, 0x3d), body.subarray(9))));
    } },
  // --- slots and blocks described twice
  { name: 'a block number described by two pieces', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(3, (p) => ((p.blocks = structuredClone(P[1].blocks)), (p.firstBlock = P[1].firstBlock)))) },
  { name: 'a block whose pieces overlap a block of another piece', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(3, (p) => (p.blocks[0].firstPiece = P[1].blocks[0].firstPiece))) },
  { name: 'slot pieces overlapping the slots of another piece', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(3, (p) => (p.firstPieces[1] = P[1].firstPieces[1]))) },
  { name: 'slot numbers overlapping the neighbouring piece', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(2, (p) => (p.firstSlot = P[1].firstSlot + 1))) },
  { name: 'two blocks of one piece in the same frame', setup: [], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(1, (p) => (p.blocks[1].seq = p.blocks[0].seq))) },
  { name: 'two blocks of one piece over the same slot pieces', setup: [], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(1, (p) => (p.blocks[1].firstPiece = p.blocks[0].firstPiece))) },
  { name: 'a block with 0 pieces', setup: [], code: REJECT.BAD_INDEX, frame: () => indexFrame(piece(1, (p) => (p.blocks[0].pieces = 0))) },
  { name: 'block numbers past the page\'s blocks', setup: [], code: REJECT.BAD_INDEX, frame: () => indexFrame(piece(1, (p) => (p.firstBlock = TOTAL))) },
  // --- blocks and frame numbers
  { name: 'a block naming an index frame\'s frame number', setup: [0], code: REJECT.INDEX_CONFLICT, frame: () => indexFrame(piece(1, (p) => (p.blocks[0].seq = S[0]))) },
  { name: 'a block naming the frame number of another piece\'s block', setup: [1], code: REJECT.INDEX_CONFLICT,
    frame: () => indexFrame(piece(3, (p) => (p.blocks[0].seq = P[1].blocks[0].seq))) },
  { name: 'a block naming a frame number past the page', setup: [], code: REJECT.BAD_INDEX, frame: () => indexFrame(piece(1, (p) => (p.blocks[0].seq = TOTAL))) },
  { name: 'an index frame where the index puts a block', setup: [1], code: REJECT.INDEX_CONFLICT, frame: () => indexFrame(P[3], P[1].blocks[0].seq) },
  { name: 'a data frame relabelled as an index frame (its block is known)', setup: [0], code: REJECT.INDEX_CONFLICT,
    frame: () => {
      const f = page.frames[P[0].blocks[0].seq].slice();
      f[10] = FRAME_KIND.INDEX;
      return f;
    } },
  { name: 'a data frame relabelled as an index frame (its block is not known yet): no index payload (method byte)', setup: [], code: REJECT.BAD_CODEC,
    frame: () => {
      const f = page.frames[P[3].blocks[0].seq].slice();
      f[10] = FRAME_KIND.INDEX;
      return f;
    } },
  // --- the page digest
  { name: 'the page digest in a frame other than 0', setup: [], code: REJECT.BAD_INDEX, frame: () => indexFrame(piece(3, (p) => (p.pageDigest = page.pageDigest))) },
  { name: 'index frame 0 without the page digest', setup: [], code: REJECT.BAD_INDEX, frame: () => indexFrame(piece(0, (p) => (p.pageDigest = null))) },
  { name: 'index frame 0 with another page\'s digest', setup: [], code: REJECT.WRONG_PAGE, frame: () => indexFrame(piece(0, (p) => (p.pageDigest = other.pageDigest))) },
  // --- codec and check
  { name: 'an unknown codec method (2)', setup: [], code: REJECT.BAD_CODEC,
    frame: () => frame(FRAME_KIND.INDEX, S[3], concat(sha256(encodePieceBody(P[3])).subarray(0, 8), Uint8Array.of(2), encodePieceBody(P[3]))) },
  { name: 'method 1 (compressed) with bytes that are not brotli', setup: [], code: REJECT.BAD_CODEC,
    frame: () => frame(FRAME_KIND.INDEX, S[3], concat(sha256(encodePieceBody(P[3])).subarray(0, 8), Uint8Array.of(1), encodePieceBody(P[3]))) },
  { name: 'a compressed index frame that would inflate to 10 MB (brotli bomb)', setup: [], code: REJECT.BAD_CODEC,
    frame: () => frame(FRAME_KIND.INDEX, S[3], concat(new Uint8Array(8), Uint8Array.of(1), bomb(10_000_000))) },
  { name: 'a compressed index frame that inflates to 64 KiB + 1 byte', setup: [], code: REJECT.BAD_CODEC,
    frame: () => frame(FRAME_KIND.INDEX, S[3], concat(new Uint8Array(8), Uint8Array.of(1), bomb(MAX_DECODED_PAYLOAD + 1))) },
  { name: 'a compressed data frame that would inflate to 10 MB (brotli bomb), its block known', setup: [0], code: REJECT.BAD_CODEC,
    frame: () => frame(FRAME_KIND.DATA, P[0].blocks[0].seq, concat(Uint8Array.of(1), bomb(10_000_000))) },
  { name: 'a data frame with an unknown codec method', setup: [0], code: REJECT.BAD_CODEC,
    frame: () => frame(FRAME_KIND.DATA, P[0].blocks[0].seq, concat(Uint8Array.of(9), page.frames[P[0].blocks[0].seq].subarray(HEADER_BYTES + 1))) },
  { name: 'a data frame that does not match its block digest', setup: [0], code: REJECT.BLOCK_DIGEST,
    frame: () => frame(FRAME_KIND.DATA, P[0].blocks[0].seq, page.frames[P[0].blocks[1].seq].subarray(HEADER_BYTES)) },
  { name: 'an index frame whose check does not match its body (check bytes changed)', setup: [], code: REJECT.INDEX_DIGEST,
    frame: () => {
      const f = page.frames[S[3]].slice();
      f[HEADER_BYTES + 2] ^= 0x10;
      return f;
    } },
  { name: 'an index frame whose body was changed after its check was made', setup: [], code: REJECT.INDEX_DIGEST,
    frame: () => {
      const f = page.frames[S[3]].slice();
      f[f.length - 5] ^= 0x01;
      return f;
    } },
  { name: 'a compressed index frame recompressed from another body under the old check', setup: [], code: REJECT.INDEX_DIGEST,
    frame: () => frame(FRAME_KIND.INDEX, S[3], concat(sha256(encodePieceBody(P[3])).subarray(0, 8), packPayload(encodePieceBody(piece(3, (p) => (p.firstSlot += 1))), codec, 'final'))) },
  { name: 'an index frame too short for its check', setup: [], code: REJECT.TRUNCATED, frame: () => frame(FRAME_KIND.INDEX, S[3], new Uint8Array(5)) },
  { name: 'a well-checked index body with trailing bytes', setup: [], code: REJECT.BAD_INDEX,
    frame: () => frame(FRAME_KIND.INDEX, S[3], indexPayload(concat(encodePieceBody(P[3]), Uint8Array.of(0)))) },
  { name: 'a well-checked index body cut short', setup: [], code: REJECT.BAD_INDEX,
    frame: () => frame(FRAME_KIND.INDEX, S[3], indexPayload(encodePieceBody(P[3]).subarray(0, 40))) },
];

describe('hostile index frames: refused with a named, counted reason; the honest load completes', () => {
  test.each(CASES.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const h = honestLoad(c.asm ? c.asm() : newAssembler());
    for (const k of c.setup) expect(h.deliver(page.frames[S[k]]).accepted).toBe(true);
    const before = h.types.length;
    const r = h.deliver(c.frame());
    expect({ accepted: r.accepted, code: r.code }).toEqual({ accepted: false, code: c.code });
    expect(h.asm.counters()[c.code]).toBe(1);
    expect(h.types.length).toBe(before); // nothing displayed from it
    h.finish();
  });

  test('the other way round (the hostile frame first, the honest ones after): never a page-complete with a wrong tree', () => {
    let completes = 0;
    for (const c of CASES) {
      const a = c.asm ? c.asm() : newAssembler();
      const b = parse5TreeBuilder();
      const types: string[] = [];
      for (const f of [c.frame(), ...page.frames]) {
        expect(() => a.receive(f, 0)).not.toThrow();
        for (const e of drain(a)) {
          types.push(e.type);
          b.apply(e);
        }
      }
      if (types.includes('page-complete')) {
        completes++;
        expect([c.name, parse5.serialize(b.root as Doc)]).toEqual([c.name, want]);
      }
    }
    // most hostile frames are refused on their own, whatever came before
    expect(completes).toBeGreaterThan(CASES.length / 2);
  });

  test('decoder reasons name what is wrong', () => {
    const reason = (p: IndexPiece): string => {
      try {
        decodeIndexPiece(encodePieceBody(p), DEFAULT_INDEX_LIMITS, TOTAL - IX, TOTAL);
        return 'accepted';
      } catch (e) {
        return e instanceof Reject ? e.message : `THREW ${String(e)}`;
      }
    };
    expect(reason(deepChainPiece(3000))).toBe('CATP_ERR_TOO_DEEP: chain');
    expect(reason(piece(2, (p) => p.chain.pop()))).toBe('CATP_ERR_BAD_ATTACH: a close before the first node or after the last');
    expect(reason(piece(4, (p) => p.chain.push({ n: P[4].firstNode - 1, content: false, tagName: 'b', namespace: 'http://www.w3.org/1999/xhtml' })))).toBe('CATP_ERR_BAD_ATTACH: a close before the first node or after the last');
    expect(reason(piece(1, (p) => p.nodeCount++))).toBe('CATP_ERR_BAD_INDEX: fewer nodes than counted');
    expect(reason(piece(1, (p) => (p.blocks[0].seq = TOTAL)))).toBe('CATP_ERR_BAD_INDEX: block frame number');
    expect(reason(P[3])).toBe('accepted');
  });

  test('a frame 0 whose page digest has the right prefix but a wrong tail is caught at completion: page-corrupt, never page-complete', () => {
    const lie = page.pageDigest.slice();
    lie[31] ^= 1;
    const h = honestLoad();
    expect(h.deliver(indexFrame(piece(0, (p) => (p.pageDigest = lie)))).accepted).toBe(true);
    for (const f of page.frames) h.deliver(f);
    expect(h.types).not.toContain('page-complete');
    expect(h.types[h.types.length - 1]).toBe('page-corrupt');
  });

  test('a compressed frame without a codec on the assembler is refused by name', () => {
    const a = new CatpAssembler({ sha256 });
    const f = zpage.frames.find((x) => x[10] === FRAME_KIND.INDEX && x[HEADER_BYTES + 8] === 1) as Uint8Array;
    expect(a.receive(f, 0).code).toBe(REJECT.BAD_CODEC);
  });
});

describe('hostile frames: header, duplicates, bounds', () => {
  const f0 = page.frames[0];
  const d0 = page.frames[P[0].blocks[0].seq];

  test('truncated, oversized, not CATP, wrong version, wrong kind, bad flags', () => {
    expectRefused([f0.subarray(0, 20)], REJECT.TRUNCATED);
    expectRefused([new Uint8Array(MAX_DATAGRAM_PAYLOAD + 1)], REJECT.OVERSIZED);
    const http = new TextEncoder().encode('\x80\x01\x02\x03\x04\x05\x06\x07HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
    expectRefused([http], REJECT.BAD_MAGIC);
    for (const version of [CATP_VERSION - 1, CATP_VERSION + 1, 0xff]) {
      const v = f0.slice();
      v[9] = version;
      expectRefused([v], REJECT.BAD_VERSION);
    }
    const k = f0.slice();
    k[10] = 9;
    expectRefused([k], REJECT.WRONG_KIND);
    const raw = encodeFrame({ id: new Uint8Array(8), kind: FRAME_KIND.RAW, pageId: page.pageId, seq: 0, total: 1, indexFrames: 0 }, new Uint8Array(40));
    expectRefused([raw], REJECT.WRONG_KIND);
    // bit 0 is FRAME_FLAG_REUSE (block reuse); every other flag bit is still refused
    for (const bits of [2, 4, 0x80, 0xfe]) {
      const fl = f0.slice();
      fl[11] = bits;
      expectRefused([fl], REJECT.BAD_FLAGS);
    }
  });

  test('wrong page, wrong request id, inconsistent header, out-of-range numbers, absurd counts', () => {
    expectRefused([other.frames[1]], REJECT.WRONG_PAGE, [f0]);
    const a = newAssembler({ pageId: page.pageId });
    expect(a.receive(other.frames[0], 0).code).toBe(REJECT.WRONG_PAGE);
    const id = f0.slice();
    id[3] ^= 1;
    expectRefused([id], REJECT.WRONG_ID, [f0]);
    expectRefused([setU32(d0, 24, TOTAL + 1)], REJECT.INCONSISTENT_HEADER, [f0]);
    expectRefused([setU32(d0, 28, IX + 1)], REJECT.INCONSISTENT_HEADER, [f0]);
    expectRefused([setU32(d0, 20, TOTAL)], REJECT.SEQ_OUT_OF_RANGE);
    expectRefused([setU32(d0, 24, 0xffffffff)], REJECT.ABSURD_COUNT);
    expectRefused([setU32(setU32(d0, 24, 1_000_000), 20, 999_999)], REJECT.ABSURD_COUNT);
    expectRefused([setU32(d0, 28, 0)], REJECT.INCONSISTENT_HEADER);
    expectRefused([setU32(d0, 28, TOTAL + 5)], REJECT.INCONSISTENT_HEADER);
    // an index too large for the configured limit is refused by its frame count
    expect(newAssembler({ limits: { maxIndexFrames: IX - 1 } }).receive(f0, 0).code).toBe(REJECT.ABSURD_COUNT);
    expect(newAssembler({ limits: { maxFrames: TOTAL - 1 } }).receive(f0, 0).code).toBe(REJECT.ABSURD_COUNT);
    // and a piece past the page's node limit
    const small = newAssembler({ limits: { maxNodes: P[3].firstNode + 5 } });
    for (const k of [0, 1, 2]) expect(small.receive(page.frames[S[k]], 0).accepted).toBe(true);
    expect(small.receive(page.frames[S[3]], 0).code).toBe(REJECT.ABSURD_COUNT);
  });

  test('slot numbers as large as a varint carries (2^32 - 1) reach the tree builder without a table that size', () => {
    // Node numbers are bounded by the node limit (above); slot numbers only by the wire. The tree builder keeps
    // nodes in an array by number and slots in a map: an array grown to a slot number near 2^32 would never return.
    const { b, deliver } = treeLoad(newAssembler());
    for (const k of [0, 1, 2]) deliver(page.frames[S[k]]);
    const r = deliver(indexFrame(piece(3, (p) => (p.firstSlot = 0xfffff000))));
    expect(r.accepted).toBe(true); // slot numbers are checked against the neighbours' when they come
    expect(parse5.serialize(b.root as Doc)).toContain(`waiting for slot ${0xfffff000}`);
    // the honest frame 4 meets piece 3's slot numbers and is refused; what was built stays
    expect(deliver(page.frames[S[4]]).code).toBe(REJECT.INDEX_CONFLICT);
  });

  test('slot part counts as large as an index frame may declare reach the tree builder without an array that size', () => {
    // A slot's part count is only bounded by its frame's bytes (1,428 a byte). The tree builder made an array of that
    // many per slot as the piece came: 2,000 slots of a million parts each (one 137-byte datagram) ran it out of memory.
    const slots = 40;
    const parts = 500_000;
    const forged = piece(5, (p) => ((p.nodeCount = slots), (p.blocks = []), (p.firstBlock = 0)));
    const { b, deliver } = treeLoad(newAssembler());
    const before = process.memoryUsage().heapUsed;
    expect(deliver(indexFrame(forged, S[5], codec, `<$2${parts}>`.repeat(slots))).accepted).toBe(true);
    // (40 arrays of 500,000 entries: over 100 MB)
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(32 << 20);
    expect(b.missingSlots).toBe(0); // (deferred text: no placeholders)
  });

  test('contradicting duplicates: the first copy is kept; a bad held copy is dropped and asked for again', () => {
    const bad = d0.slice();
    bad[bad.length - 1] ^= 0x20;
    // after its index frame: the good one is verified and kept
    expectRefused([d0, bad], REJECT.CONTRADICTING_DUPLICATE, [f0]);
    // before its index frame: the bad one is held, fails its block digest when the index frame arrives, is forgotten
    const h = honestLoad();
    h.deliver(bad);
    expect(h.deliver(d0).code).toBe(REJECT.CONTRADICTING_DUPLICATE);
    h.deliver(f0);
    expect(h.asm.counters()[REJECT.BLOCK_DIGEST]).toBe(1);
    const seq = P[0].blocks[0].seq;
    expect(h.asm.receiver.has(seq)).toBe(false);
    h.finish();
  });

  test('a corrupted index frame fails its own check: only that frame is dropped and asked for again; the others are shown', () => {
    const bad = page.frames[S[3]].slice();
    bad[HEADER_BYTES + 20] ^= 1;
    const h = honestLoad();
    for (let k = 0; k < IX; k++) h.deliver(k === 3 ? bad : page.frames[S[k]]);
    expect(h.asm.counters()[REJECT.INDEX_DIGEST]).toBe(1);
    expect(h.asm.receiver.has(S[3])).toBe(false);
    for (let k = 0; k < IX; k++) if (k !== 3) expect(h.asm.receiver.has(S[k])).toBe(true);
    expect(h.types.filter((t) => t === 'index-piece')).toHaveLength(IX - 1);
    expect(placeholders(h.b.root as Doc).index).toBe(1); // where piece 3 goes
    h.finish();
  });

  test('held data frames are bounded before the index frames that describe them arrive', () => {
    const h = honestLoad(newAssembler({ limits: { maxHeldBytes: 1000 } }));
    const data = page.frames.filter((f) => f[10] === FRAME_KIND.DATA);
    const res = data.map((f) => h.deliver(f));
    expect(res.filter((r) => r.code === REJECT.HOLD_FULL).length).toBeGreaterThan(0);
    // what was dropped is not marked received, so repair asks for it and the page still completes
    h.finish();
  });
});

describe('fuzz', () => {
  test('random bytes never throw and are refused', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1600 }), (b) => {
        const a = newAssembler();
        expect(a.receive(b, 0).accepted).toBe(false);
      }),
      { numRuns: 2000 },
    );
    // random payloads behind a valid header, index and data
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1400 }), fc.boolean(), (payload, idx) => {
        const h = honestLoad();
        const r = h.deliver(frame(idx ? FRAME_KIND.INDEX : FRAME_KIND.DATA, idx ? S[2] : P[2].blocks[0].seq, payload));
        if (idx) expect(r.accepted).toBe(false);
        h.finish();
      }),
      { numRuns: 300 },
    );
  });

  test('500 random mutations of real (compressed) frames: never throws, never a page-complete with a wrong tree', () => {
    const frames = zpage.frames;
    const zIX = zpage.indexFrames;
    expect(frames.some((f) => f[10] === FRAME_KIND.INDEX && f[HEADER_BYTES + 8] === 1)).toBe(true); // compressed index frames
    const outcomes: Record<string, number> = {};
    const codes: Record<string, number> = {};
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(), fc.nat(), fc.integer({ min: 1, max: 255 }), fc.integer({ min: 0, max: 9 })), { minLength: 1, maxLength: 6 }),
        fc.integer(),
        (muts, seed) => {
          const bad = new Map<number, Uint8Array>();
          for (const [fi, off, x, how] of muts) {
            const i = fi % frames.length;
            let c: Uint8Array = (bad.get(i) ?? frames[i]).slice();
            if (how === 0) c = c.subarray(0, off % c.length); // truncated
            else if (how === 1) c = concat(c, Uint8Array.of(x)); // a byte too many
            else if (how < 5) c[HEADER_BYTES + (off % Math.max(1, c.length - HEADER_BYTES))] ^= x; // payload
            else c[off % c.length] ^= x; // anywhere
            bad.set(i, c);
          }
          const a = newAssembler();
          const b = parse5TreeBuilder();
          const types: string[] = [];
          // the damaged frames in a random order, then every honest frame
          const order = [...shuffle([...bad.values()], rng(seed)), ...frames];
          for (const f of order) {
            let r;
            expect(() => (r = a.receive(f, 0))).not.toThrow();
            const rr = r as unknown as { accepted: boolean; code?: string };
            if (!rr.accepted && rr.code) codes[rr.code] = (codes[rr.code] ?? 0) + 1;
            for (const e of drain(a)) {
              types.push(e.type);
              expect(() => b.apply(e)).not.toThrow();
            }
          }
          const end = types.includes('page-complete') ? 'complete' : types.includes('page-corrupt') ? 'corrupt' : 'incomplete';
          outcomes[end] = (outcomes[end] ?? 0) + 1;
          if (end === 'complete') expect(parse5.serialize(b.root as Doc)).toBe(want);
          expect(a.counters().CATP_ERR_INTERNAL ?? 0).toBe(0);
        },
      ),
      { numRuns: 500 },
    );
    console.log(`fuzz (${frames.length} frames, ${zIX} index): outcomes ${JSON.stringify(outcomes)}; refusals ${JSON.stringify(codes)}`);
    expect(outcomes.complete).toBeGreaterThan(250);
  });
});

test('hostile reports never throw and are refused with a reason', () => {
  const id = new Uint8Array([0x80, 1, 2, 3, 4, 5, 6, 7]);
  const s = new RepairSender(page.frames, IX, { requestId: id });
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 1600 }), (b) => {
      expect(s.receiveReport(b, 0).accepted).toBe(false);
    }),
  );
  const rep = (o: Partial<Parameters<typeof encodeReport>[0]>): Uint8Array =>
    encodeReport({ id, otherPort: 5000, complete: false, truncated: false, pageId: page.pageId, reportNo: 1, total: TOTAL, received: 0, echoSeq: 0, echoDelayMs: 0, missing: [], ...o });
  expect(s.receiveReport(rep({ id: new Uint8Array(8) }), 0).code).toBe(REJECT.WRONG_ID);
  expect(s.receiveReport(rep({ pageId: other.pageId }), 0).code).toBe(REJECT.WRONG_PAGE);
  expect(s.receiveReport(rep({ total: 5 }), 0).code).toBe(REJECT.INCONSISTENT_HEADER);
  const pastEnd = rep({ missing: [[0, TOTAL + 10]], total: 0 });
  expect(s.receiveReport(pastEnd, 0).accepted).toBe(true); // total unknown: clipped to the page
  expect(s.receiveReport(rep({ reportNo: 1 }), 0).code).toBe('CATP_STALE_REPORT');
  const trunc = rep({ reportNo: 9, missing: [[0, 1]] });
  expect(s.receiveReport(trunc.subarray(0, trunc.length - 1), 0).code).toBe(REJECT.TRUNCATED);
});
