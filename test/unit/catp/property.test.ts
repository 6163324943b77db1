/**
 * Property tests: any document, any arrival order of index and data frames alike (index pieces included), any
 * duplication and loss pattern + repair -> the same tree; and the tree builder gives the same tree whatever
 * order it is handed pieces and fills in.
 */
import fc from 'fast-check';
import * as parse5 from 'parse5';
import { CatpEvent, encodeTree, EncodedPage, EncodeOptions, parse5TreeBuilder, RepairSender } from '../../../protocol/catp';
import { htmlDocArb } from '../../helpers/catp-gen';
import { toHtml5libTree } from '../../helpers/html5lib';
import { codec, newAssembler, placeholders, sha256 } from '../../helpers/catp-util';

const LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const ID = new Uint8Array([0x81, 2, 3, 4, 5, 6, 7, 8]);
type Doc = parse5.DefaultTreeAdapterMap['document'];

const TOO_LARGE = /CATP_ERR_UNENCODABLE: (node \d+|a block description) does not fit/;
/** How often the encoder needed a larger setting than asked (reported, not failed). */
const fallbacks = { fullFrames: 0, codec: 0 };

/**
 * Encode with small frames (several index pieces) when the document allows. A node must fit one index frame
 * (every frame stands alone): a long doctype, an element with many attribute names, or (the generator makes
 * these: '<' followed by 3000 'x') a tag name of kilobytes does not fit a small frame, and without a codec
 * not even a full one. Then: full frames, then full frames with the codec (what the server always uses).
 */
function encodeSmall(doc: Doc, opts: Omit<EncodeOptions, 'sha256'>): EncodedPage {
  const attempts: Array<Omit<EncodeOptions, 'sha256'>> = [opts, { ...opts, maxPayload: undefined }, { ...opts, maxPayload: undefined, codec }];
  for (let i = 0; ; i++) {
    try {
      const page = encodeTree(doc, { sha256, ...attempts[i] });
      if (i >= 1) fallbacks.fullFrames++;
      if (i === 2 && opts.codec === undefined) fallbacks.codec++;
      return page;
    } catch (e) {
      if (i === attempts.length - 1 || !(e instanceof Error) || !TOO_LARGE.test(e.message)) throw e;
    }
  }
}

afterAll(() => console.log(`encoder fallbacks: ${JSON.stringify(fallbacks)}`));

describe('CATP properties', () => {
  test('any permutation (index frames too), duplication and loss pattern, then repair, gives parse5s tree', () => {
    let multiIndex = 0;
    fc.assert(
      fc.property(
        htmlDocArb,
        // mostly small frames, so that the index comes in several pieces
        fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 160, max: 260 }) }, { weight: 1, arbitrary: fc.integer({ min: 160, max: 1428 }) }),
        fc.boolean(),
        fc.array(fc.nat(), { minLength: 1, maxLength: 40 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 64 }),
        (html, maxPayload, compress, perm, drops) => {
          const doc = parse5.parse(html);
          const want = toHtml5libTree(doc);
          const page = encodeSmall(doc, { maxPayload, codec: compress ? codec : undefined });
          if (page.indexFrames > 1) multiIndex++;
          const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e12, initialRttMs: 1 });
          const asm = newAssembler({ requestId: ID });
          asm.start(0);
          const b = parse5TreeBuilder();
          let now = 0;
          let k = 0;
          let done = false;
          for (let round = 0; round < 40 && !done; round++) {
            const batch: Uint8Array[] = [];
            for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) batch.push(d);
            // permute by the generated keys, duplicate every third, drop by the generated pattern
            const keyed = batch.map((f, i) => ({ f, key: perm[(i + round) % perm.length] * 1000 + i }));
            for (const x of keyed.filter((_, i) => i % 3 === 0)) keyed.push({ f: x.f, key: x.key + 7 });
            keyed.sort((x, y) => x.key - y.key);
            for (const { f } of keyed) {
              if (drops[k++ % drops.length] && round < 30) continue;
              asm.receive(f, now);
              for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
                b.apply(e);
                expect(e.type === 'page-corrupt' || e.type === 'error').toBe(false);
                if (e.type === 'page-complete') done = true;
              }
            }
            now += 100;
            for (let r = asm.nextReport(now); r; r = asm.nextReport(now)) sender.receiveReport(r, now);
          }
          expect(done).toBe(true);
          expect(toHtml5libTree(b.root as Doc)).toBe(want);
          expect(placeholders(b.root as Doc)).toEqual({ slot: 0, index: 0 });
          expect(b.missingSlots).toBe(0);
          expect(asm.counters()['CATP_ERR_CONTRADICTING_DUPLICATE'] ?? 0).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
    // the property is about pieces in any order: most runs must have had several
    expect(multiIndex).toBeGreaterThan(50);
    console.log(`${multiIndex} of 300 runs had several index frames`);
  });

  test('the tree builder gives the same DOM whatever order it gets pieces and fills in', () => {
    fc.assert(
      fc.property(htmlDocArb, fc.integer({ min: 160, max: 600 }), fc.array(fc.nat(), { minLength: 1, maxLength: 50 }), (html, maxPayload, keys) => {
        const doc = parse5.parse(html);
        const page = encodeSmall(doc, { maxPayload });
        // every index frame first, so every block-filled event carries all of its fills
        const asm = newAssembler();
        const events: CatpEvent[] = [];
        const order = [...page.frames.filter((f) => f[10] === 1), ...page.frames.filter((f) => f[10] !== 1)];
        for (const f of order) {
          asm.receive(f, 0);
          for (let e = asm.nextEvent(); e; e = asm.nextEvent()) events.push(e);
        }
        const pieces = events.filter((e): e is Extract<CatpEvent, { type: 'index-piece' }> => e.type === 'index-piece');
        const fills = events.filter((e): e is Extract<CatpEvent, { type: 'block-filled' }> => e.type === 'block-filled');
        expect(pieces.length).toBe(page.indexFrames);
        expect(fills.length).toBe(page.blocks);
        // A random interleaving: pieces in any order; a fill event after the pieces holding its slots (the
        // assembler guarantees that much: fills for slots it does not know yet wait for their piece).
        const key = (i: number): number => keys[i % keys.length] * 1000 + i;
        const pieceKey = new Map<number, number>();
        const slotPiece: number[] = [];
        pieces.forEach((e, i) => {
          pieceKey.set(e.piece.ordinal, key(i));
          for (let s = e.piece.firstSlot; s < e.piece.firstSlot + e.piece.slotCount; s++) slotPiece[s] = e.piece.ordinal;
        });
        const keyed: Array<{ e: CatpEvent; k: number }> = pieces.map((e, i) => ({ e, k: key(i) }));
        fills.forEach((e, i) => {
          let k = key(pieces.length + i);
          for (const f of e.fills) k = Math.max(k, (pieceKey.get(slotPiece[f.slot]) as number) + 0.5);
          keyed.push({ e, k });
        });
        keyed.sort((x, y) => x.k - y.k);
        const b1 = parse5TreeBuilder();
        const b2 = parse5TreeBuilder();
        events.forEach((e) => b1.apply(e));
        keyed.forEach(({ e }) => b2.apply(e));
        const s1 = parse5.serialize(b1.root as Doc);
        expect(parse5.serialize(b2.root as Doc)).toBe(s1);
        expect(s1).toBe(parse5.serialize(doc));
        expect(toHtml5libTree(b2.root as Doc)).toBe(toHtml5libTree(doc));
        expect(placeholders(b2.root as Doc)).toEqual({ slot: 0, index: 0 });
      }),
      { numRuns: 150 },
    );
  });

  test('no encoded text piece is cut inside a UTF-8 sequence or a surrogate pair', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', minLength: 200, maxLength: 3000 }), fc.integer({ min: 96, max: 400 }), fc.boolean(), (s, maxPayload, compress) => {
        const doc = parse5.parse(`<p>${s.replace(/[<&\r\0]/g, 'x')}</p>`);
        const page = encodeSmall(doc, { maxPayload, codec: compress ? codec : undefined });
        const asm = newAssembler();
        for (const f of page.frames) asm.receive(f, 0);
        for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
          if (e.type === 'block-filled' || e.type === 'index-piece') for (const fl of e.fills) expect(LONE.test(fl.text)).toBe(false);
          expect(e.type === 'page-corrupt').toBe(false);
        }
      }),
      { numRuns: 100 },
    );
  });
});
