/**
 * Pieces that arrive before the index frame holding their slots wait in the assembler (verified against their
 * block's digest, their slot unknown), and each slot takes the ones its span covers when its index frame comes. A
 * page built piece by piece with the exported encoders: index frame 0 describes the data blocks and no slot, the
 * data frames come next (every piece waits), then index frames whose slots cover the waiting pieces across block
 * boundaries, or none of them. A slot declares any number of parts (the decoder bounds it by its frame's bytes), so
 * what it costs must follow what waits in its span, not what it declares.
 */
import {
  CatpAssembler,
  type BlockInfo,
  type CatpEvent,
  encodeFrame,
  encodePieceBody,
  FRAME_KIND,
  type IndexNode,
  type IndexPiece,
  NS_HTML,
  packPayload,
  type SlotFill,
  STREAM,
} from '../../../protocol/catp';
import { sha256 } from '../../helpers/catp-util';

const PAGE_ID = new Uint8Array(8).fill(7);
const varint = (n: number): number[] => (n < 128 ? [n] : [(n & 0x7f) | 0x80, n >> 7]);
const CHAIN = [{ n: 1, content: false, tagName: 'html', namespace: NS_HTML }, { n: 2, content: false, tagName: 'body', namespace: NS_HTML }];

/**
 * `blockTexts[d]`: the pieces of data block d (visible stream, numbered on from 0); `slotParts[k]`: the part counts
 * of the slots index frame k + 1 declares, numbered on after frame k's (from piece `firstPiece`). One index frame
 * more than these is never sent, so the page never completes (its digest is not checked).
 */
function craft(blockTexts: string[][], slotParts: number[][], firstPiece = 0) {
  const ix = 2 + slotParts.length;
  const total = ix + blockTexts.length;
  const frame = (kind: 1 | 2, seq: number, payload: Uint8Array) => encodeFrame({ id: new Uint8Array(8), kind, pageId: PAGE_ID, seq, total, indexFrames: ix }, payload);
  const indexFrame = (p: IndexPiece) => {
    const body = encodePieceBody(p);
    return frame(FRAME_KIND.INDEX, p.ordinal, Buffer.concat([sha256(body).subarray(0, 8), packPayload(body, undefined, 'final')]));
  };
  const blocks: BlockInfo[] = [];
  const data: Uint8Array[] = [];
  let piece = 0;
  blockTexts.forEach((texts, d) => {
    const enc = new TextEncoder();
    const payload = new Uint8Array([...varint(texts.length), ...texts.flatMap((t) => [...varint(enc.encode(t).length), ...enc.encode(t)])]);
    blocks.push({ block: d, stream: STREAM.VISIBLE, firstPiece: piece, pieces: texts.length, digest: sha256(payload).subarray(0, 16), seq: ix + d });
    data.push(frame(FRAME_KIND.DATA, ix + d, packPayload(payload, undefined, 'final')));
    piece += texts.length;
  });
  const pageDigest = new Uint8Array(32);
  pageDigest.set(PAGE_ID);
  const html: IndexNode = { kind: 'element', n: 1, parent: 0, tagName: 'html', namespace: NS_HTML, attrs: [] };
  const body: IndexNode = { kind: 'element', n: 2, parent: 1, tagName: 'body', namespace: NS_HTML, attrs: [] };
  const index = [indexFrame({ ordinal: 0, fragment: false, mode: 'no-quirks', firstNode: 1, nodeCount: 2, firstSlot: 0, slotCount: 0, firstPieces: [0, 0, 0], chain: [], nodes: [html, body], firstBlock: 0, blocks, pageDigest })];
  let node = 3;
  let slot = 0;
  piece = firstPiece;
  slotParts.forEach((parts, k) => {
    const first = { node, slot, piece };
    const nodes: IndexNode[] = parts.map((n) => {
      const nd: IndexNode = { kind: 'text-slot', n: node++, parent: 2, ref: { slot: slot++, stream: STREAM.VISIBLE, parts: n, firstPiece: piece } };
      piece += n;
      return nd;
    });
    index.push(indexFrame({ ordinal: k + 1, fragment: false, mode: 'no-quirks', firstNode: first.node, nodeCount: nodes.length, firstSlot: first.slot, slotCount: nodes.length, firstPieces: [0, first.piece, 0], chain: CHAIN, nodes, firstBlock: blocks.length, blocks: [], pageDigest: null }));
  });
  return { index, data };
}

function fillsOf(asm: CatpAssembler): SlotFill[] {
  const out: SlotFill[] = [];
  for (let e: CatpEvent | null = asm.nextEvent(); e; e = asm.nextEvent()) {
    expect(e.type === 'error' || e.type === 'page-corrupt').toBe(false);
    if (e.type === 'index-piece' || e.type === 'block-filled') out.push(...e.fills);
  }
  return out;
}

describe('pieces waiting for the index frame that holds their slots', () => {
  test('each slot takes the waiting pieces its span covers, across blocks and in any order of its index frames', () => {
    // three blocks of seven pieces: 0-6, 7-13, 14-20; slots 0-2, 3-9 (across the first boundary), 10, 11-20 (across
    // the second), then a slot of 79 parts of which none has come
    const texts = Array.from({ length: 3 }, (_, d) => Array.from({ length: 7 }, (_, i) => `t${d * 7 + i}`));
    const { index, data } = craft(texts, [[3, 7], [1, 10, 79]]);
    for (const order of [[1, 2], [2, 1]]) {
      const asm = new CatpAssembler({ sha256 });
      asm.receive(index[0], 0);
      for (const f of data) asm.receive(f, 0);
      expect(fillsOf(asm)).toEqual([]); // every piece waits
      const fills: SlotFill[] = [];
      for (const k of order) {
        asm.receive(index[k], 0);
        fills.push(...fillsOf(asm));
      }
      const starts = [0, 3, 10, 11, 21];
      const got = fills.map((f) => `${f.slot}:${f.part}/${f.parts}=${f.text}`).sort();
      const want = Array.from({ length: 21 }, (_, p) => {
        const slot = starts.filter((s) => s <= p).length - 1;
        return `${slot}:${p - starts[slot]}/${[3, 7, 1, 10, 79][slot]}=t${p}`;
      }).sort();
      expect(got).toEqual(want);
    }
  });

  test('a piece that comes after its slot is filled by the block, not kept waiting', () => {
    const texts = [['a', 'b'], ['c', 'd']];
    const { index, data } = craft(texts, [[3], [1]]);
    const asm = new CatpAssembler({ sha256 });
    asm.receive(index[0], 0);
    asm.receive(data[0], 0); // a, b wait
    asm.receive(index[1], 0); // slot 0 = pieces 0-2: takes a, b
    expect(fillsOf(asm).map((f) => f.text)).toEqual(['a', 'b']);
    asm.receive(data[1], 0); // c is slot 0's third part, at once; d waits for slot 1
    expect(fillsOf(asm).map((f) => `${f.slot}:${f.part}=${f.text}`)).toEqual(['0:2=c']);
    asm.receive(index[2], 0);
    expect(fillsOf(asm).map((f) => `${f.slot}:${f.part}=${f.text}`)).toEqual(['1:0=d']);
  });

  test('thousands of slots of more parts than are waiting, covering none of them: each finds nothing, none fails', () => {
    // 20,000 pieces waiting; 40 index frames of 50 slots of 20,001 parts each, past them. A slot of more parts than
    // pieces waiting scanned every waiting piece (and one of fewer looked each of its parts up): 2,000 such slots took
    // 0.6–1.3 s, 20,000 of them 5.3 s (docs/fuzzing.md); now a slot meets only the runs in its span.
    const texts = Array.from({ length: 40 }, () => Array.from({ length: 500 }, () => 'x'));
    const { index, data } = craft(texts, Array.from({ length: 40 }, () => Array.from({ length: 50 }, () => 20_001)), 20_010);
    const asm = new CatpAssembler({ sha256 });
    asm.receive(index[0], 0);
    for (const f of data) asm.receive(f, 0);
    for (const f of index.slice(1)) asm.receive(f, 0);
    expect(fillsOf(asm)).toEqual([]);
    expect(asm.progress()).toMatchObject({ blocksFilled: 40, indexPieces: 41, indexReady: false });
  });
});
