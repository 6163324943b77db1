/**
 * Blocks of several frames (protocol/README.md, "Blocks of several frames"): context text is compressed in blocks
 * of up to 64 KiB and cut into as many frames as that takes. The block is filled once all its frames are here, in
 * any order; every hostile variant of its description or its frames is refused with a named, counted reason, and
 * the honest load still completes with parse5's tree.
 */
import fc from 'fast-check';
import * as parse5 from 'parse5';
import {
  BlockInfo,
  blockFrames,
  decodeIndexPiece,
  DEFAULT_INDEX_LIMITS,
  encodeFrame,
  encodePage,
  encodePieceBody,
  FRAME_KIND,
  HEADER_BYTES,
  IndexPiece,
  MAX_BLOCK_FRAMES,
  packPayload,
  parse5TreeBuilder,
  REJECT,
  STREAM,
} from '../../../protocol/catp';
import { Reject } from '../../../protocol/catp/errors';
import { codec, drain, newAssembler, placeholders, rng, sha256, shuffle, treeLoad } from '../../helpers/catp-util';

type Doc = parse5.DefaultTreeAdapterMap['document'];

// A stylesheet of varied rules (~24 KB: it compresses, but not into one 400-byte frame), then a body with text.
const r = rng(7);
const CSS = Array.from({ length: 400 }, (_, i) => `.c${i} .k${Math.floor(r() * 1e6)}{margin:${i % 17}px ${Math.floor(r() * 90)}px;color:#${Math.floor(r() * 0xffffff).toString(16).padStart(6, '0')}}`).join('\n');
const HTML = `<!DOCTYPE html><html><head><title>Spanning</title><style>${CSS}</style></head><body>` +
  Array.from({ length: 12 }, (_, i) => `<p class="c${i}">paragraph ${i} ${'wörds '.repeat(30)}</p>`).join('') + '</body></html>';
const page = encodePage(HTML, { sha256, codec, maxPayload: 400 });
const want = parse5.serialize(parse5.parse(HTML, { scriptingEnabled: false }));
const TOTAL = page.frames.length;
const IX = page.indexFrames;
const infos: BlockInfo[] = page.pieces.flatMap((p) => p.blocks);
const spanning = infos.filter((b) => blockFrames(b) > 1);
const big = spanning[0]!;
/** The piece that describes `big`. */
const owner = page.pieces.find((p) => p.blocks.some((b) => b.block === big.block)) as IndexPiece;
const seqOfIndex = (ordinal: number): number => page.frames.findIndex((f, i) => f[10] === FRAME_KIND.INDEX && page.frames.slice(0, i + 1).filter((g) => g[10] === FRAME_KIND.INDEX).length === ordinal + 1);

const indexFrame = (p: IndexPiece): Uint8Array => {
  const body = encodePieceBody(p);
  const packed = packPayload(body, codec, 'final');
  const payload = new Uint8Array(8 + packed.length);
  payload.set(sha256(body).subarray(0, 8), 0);
  payload.set(packed, 8);
  return encodeFrame({ id: new Uint8Array(8), kind: FRAME_KIND.INDEX, pageId: page.pageId, seq: seqOfIndex(p.ordinal), total: TOTAL, indexFrames: IX }, payload);
};
const withBlock = (edit: (b: BlockInfo) => void): IndexPiece => {
  const p = structuredClone(owner);
  edit(p.blocks.find((b) => b.block === big.block) as BlockInfo);
  return p;
};

test('the encoder puts a long stylesheet in one block of several frames, sent in a row right after its index frame', () => {
  expect(spanning.length).toBeGreaterThan(0);
  expect(blockFrames(big)).toBeGreaterThan(2);
  expect(blockFrames(big)).toBeLessThanOrEqual(MAX_BLOCK_FRAMES);
  expect(big.stream).toBe(STREAM.CONTEXT);
  for (let k = 0; k < blockFrames(big); k++) expect(page.frames[big.seq + k][10]).toBe(FRAME_KIND.DATA);
  // visible text never spans frames: each of its frames paints alone
  for (const b of infos) if (b.stream === STREAM.VISIBLE) expect(blockFrames(b)).toBe(1);
  // every data frame in exactly one block
  expect(infos.reduce((n, b) => n + blockFrames(b), 0)).toBe(TOTAL - IX);
  // without spanning, the same page takes more bytes
  const single = encodePage(HTML, { sha256, codec, maxPayload: 400, spanning: [] });
  const bytes = (fs: Uint8Array[]) => fs.reduce((n, f) => n + f.length, 0);
  expect(bytes(page.frames)).toBeLessThan(bytes(single.frames));
});

test('in any order, the block is filled once, when its last frame arrives; the tree is parse5\'s', () => {
  for (let seed = 1; seed <= 20; seed++) {
    const order = shuffle([...page.frames.keys()], rng(seed));
    const a = newAssembler();
    const b = parse5TreeBuilder();
    const framesOfBig = new Set(Array.from({ length: blockFrames(big) }, (_, k) => big.seq + k));
    let seen = 0;
    let fills = 0;
    for (const s of order) {
      expect(a.receive(page.frames[s], 0).accepted).toBe(true);
      if (framesOfBig.has(s)) seen++;
      for (const e of drain(a)) {
        b.apply(e);
        if (e.type === 'block-filled' && e.block === big.block) {
          fills++;
          expect(seen).toBe(framesOfBig.size); // not before its last frame
        }
      }
    }
    expect(fills).toBe(1);
    expect(a.finished).toBe(true);
    expect(parse5.serialize(b.root as Doc)).toBe(want);
    expect(placeholders(b.root as Doc)).toEqual({ slot: 0, index: 0 });
  }
});

test('the decoder refuses a description of several frames that cannot be: too many, visible text, past the last frame', () => {
  const reason = (p: IndexPiece): string => {
    try {
      decodeIndexPiece(encodePieceBody(p), DEFAULT_INDEX_LIMITS, TOTAL - IX, TOTAL);
      return 'accepted';
    } catch (e) {
      return e instanceof Reject ? e.message : `THREW ${String(e)}`;
    }
  };
  expect(reason(owner)).toBe('accepted');
  expect(reason(withBlock((b) => (b.frames = MAX_BLOCK_FRAMES + 1)))).toBe('CATP_ERR_BAD_INDEX: block frames');
  expect(reason(withBlock((b) => (b.stream = STREAM.VISIBLE)))).toBe('CATP_ERR_BAD_INDEX: block frames');
  expect(reason(withBlock((b) => (b.seq = TOTAL - 1)))).toBe('CATP_ERR_BAD_INDEX: block frame number');
  // the flag with a count under 2 (encodeBlockInfo never writes it): find the count byte right after the frame number
  const body = encodePieceBody(owner);
  const at = body.findIndex((_, i) => i >= 3 && body[i - 3] === ((big.seq >>> 16) & 0xff) && body[i - 2] === ((big.seq >>> 8) & 0xff) && body[i - 1] === (big.seq & 0xff) && body[i] === blockFrames(big));
  expect(at).toBeGreaterThan(0);
  const forged = body.slice();
  forged[at] = 1;
  expect(() => decodeIndexPiece(forged, DEFAULT_INDEX_LIMITS, TOTAL - IX, TOTAL)).toThrow('CATP_ERR_BAD_INDEX: block frames');
});

describe('hostile descriptions and frames of a block of several frames', () => {
  /** Delivers `first`, then every honest frame; returns the events' types and the tree. */
  function run(first: Uint8Array[]) {
    const { asm: a, b, types, deliver } = treeLoad();
    const results = [...first, ...page.frames].map(deliver);
    return { a, types, tree: parse5.serialize(b.root as Doc), results };
  }

  // Each lie comes first (after the honest piece of the same ordinal it would be refused as a second piece). The frame
  // before the block is the index frame that describes it, so `seq - 1` puts the block on its own describer.
  test.each([
    ['its frames run over another block\'s frame', (b: BlockInfo) => (b.frames = blockFrames(big) + 1)],
    ['its frames cover an index frame (the one describing it)', (b: BlockInfo) => (b.seq -= 1)],
  ] as const)('a description where %s: refused (INDEX_CONFLICT), the page completes', (_name, edit) => {
    expect(seqOfIndex(owner.ordinal)).toBe(big.seq - 1);
    const { a, types, tree, results } = run([indexFrame(withBlock(edit))]);
    expect(results[0]).toMatchObject({ accepted: false, code: REJECT.INDEX_CONFLICT });
    expect(a.counters()[REJECT.INDEX_CONFLICT]).toBe(1);
    expect(types).toContain('page-complete');
    expect(tree).toBe(want);
  });

  test('a block described one frame short leaves a data frame in no block: page-corrupt at the whole index, never page-complete', () => {
    const lie = withBlock((b) => (b.frames = blockFrames(big) - 1));
    const a = newAssembler();
    const types: string[] = [];
    for (const f of [indexFrame(lie), ...page.frames]) {
      expect(() => a.receive(f, 0)).not.toThrow();
      for (const e of drain(a)) types.push(e.type);
    }
    expect(types).not.toContain('page-complete');
    expect(types[types.length - 1]).toBe('page-corrupt');
  });

  test('a forged frame inside the block: the block is refused when complete (counted), all its frames asked for again, then filled from honest copies', () => {
    const n = blockFrames(big);
    const { asm: a, b, types, deliver } = treeLoad();
    deliver(page.frames[seqOfIndex(owner.ordinal)]);
    const forged = page.frames[big.seq + 1].slice();
    forged[HEADER_BYTES + 3] ^= 0x5a;
    for (let k = 0; k < n; k++) {
      const res = deliver(k === 1 ? forged : page.frames[big.seq + k]);
      if (k < n - 1) expect(res.accepted).toBe(true);
      else expect(res.accepted).toBe(false); // the frame that completed a block that does not check out
    }
    expect(types.filter((t) => t === 'block-filled')).toHaveLength(0);
    const refused = (a.counters()[REJECT.BLOCK_DIGEST] ?? 0) + (a.counters()[REJECT.BAD_CODEC] ?? 0) + (a.counters()[REJECT.BAD_BLOCK] ?? 0);
    expect(refused).toBe(1);
    // every frame of the block is missing again: the honest copies are taken, not refused as duplicates
    for (let k = 0; k < n; k++) expect(deliver(page.frames[big.seq + k]).accepted).toBe(true);
    for (const f of page.frames) deliver(f);
    expect(types).toContain('page-complete');
    expect(parse5.serialize(b.root as Doc)).toBe(want);
  });
});

test('300 random mutations of its frames, in random orders with the honest frames: never throws, never a wrong tree', () => {
  const outcomes: Record<string, number> = {};
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.nat(), fc.nat(), fc.integer({ min: 1, max: 255 }), fc.integer({ min: 0, max: 4 })), { minLength: 1, maxLength: 5 }),
      fc.integer(),
      (muts, seed) => {
        // aim most mutations at the block of several frames
        const bad = new Map<number, Uint8Array>();
        for (const [fi, off, x, how] of muts) {
          const i = how < 3 ? big.seq + (fi % blockFrames(big)) : fi % TOTAL;
          let c: Uint8Array = (bad.get(i) ?? page.frames[i]).slice();
          if (how === 0) c = c.subarray(0, Math.max(HEADER_BYTES, off % c.length)); // truncated
          else if (how === 4) c[off % c.length] ^= x; // anywhere, the header too
          else c[HEADER_BYTES + (off % Math.max(1, c.length - HEADER_BYTES))] ^= x; // payload
          bad.set(i, c);
        }
        const a = newAssembler();
        const b = parse5TreeBuilder();
        const types: string[] = [];
        const honest = shuffle([...page.frames], rng(seed ^ 0x5bd1));
        for (const f of [...shuffle([...bad.values()], rng(seed)), ...honest, ...honest]) {
          expect(() => a.receive(f, 0)).not.toThrow();
          for (const e of drain(a)) {
            types.push(e.type);
            expect(() => b.apply(e)).not.toThrow();
          }
        }
        const end = types.includes('page-complete') ? 'complete' : types.includes('page-corrupt') ? 'corrupt' : 'incomplete';
        outcomes[end] = (outcomes[end] ?? 0) + 1;
        if (end === 'complete') expect(parse5.serialize(b.root as Doc)).toBe(want);
        expect(types.filter((t) => t === 'page-complete').length).toBeLessThanOrEqual(1);
        expect(a.counters().CATP_ERR_INTERNAL ?? 0).toBe(0);
      },
    ),
    { numRuns: 300 },
  );
  // a damaged frame of the block is refused with the block and asked for again: the honest copies complete the page
  expect(outcomes.complete).toBeGreaterThan(150);
});
