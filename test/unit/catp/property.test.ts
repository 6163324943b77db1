/** Property tests: any document, any arrival order / duplication / loss pattern + repair -> the same tree. */
import fc from 'fast-check';
import * as parse5 from 'parse5';
import { CatpAssembler, CatpEvent, encodeTree, parse5TreeBuilder, RepairSender } from '../../../protocol/catp';
import { htmlDocArb } from '../../helpers/catp-gen';
import { toHtml5libTree } from '../../helpers/html5lib';
import { sha256 } from '../../helpers/catp-util';

const LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const ID = new Uint8Array([0x81, 2, 3, 4, 5, 6, 7, 8]);

describe('CATP properties', () => {
  test('any permutation, duplication and loss pattern, then repair, gives parse5s tree', () => {
    fc.assert(
      fc.property(htmlDocArb, fc.integer({ min: 96, max: 1428 }), fc.array(fc.nat(), { minLength: 1, maxLength: 40 }), fc.array(fc.boolean(), { minLength: 1, maxLength: 64 }), (html, maxPayload, perm, drops) => {
        const doc = parse5.parse(html);
        const want = toHtml5libTree(doc);
        const page = encodeTree(doc, { sha256, maxPayload });
        const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, rateFramesPerSec: 1e12, initialRttMs: 1 });
        const asm = new CatpAssembler({ sha256, requestId: ID });
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
              if (e.type === 'page-complete') done = true;
            }
          }
          now += 100;
          for (let r = asm.nextReport(now); r; r = asm.nextReport(now)) sender.receiveReport(r, now);
        }
        expect(done).toBe(true);
        expect(toHtml5libTree(b.root as parse5.DefaultTreeAdapterMap['document'])).toBe(want);
        expect(asm.counters()['CATP_ERR_CONTRADICTING_DUPLICATE'] ?? 0).toBe(0);
      }),
      { numRuns: 150 },
    );
  });

  test('applying block-filled events to the skeleton in any order gives the same DOM', () => {
    fc.assert(
      fc.property(htmlDocArb, fc.integer({ min: 96, max: 600 }), fc.array(fc.nat(), { minLength: 1, maxLength: 50 }), (html, maxPayload, keys) => {
        const doc = parse5.parse(html);
        const page = encodeTree(doc, { sha256, maxPayload });
        const asm = new CatpAssembler({ sha256 });
        const events: CatpEvent[] = [];
        for (const f of page.frames) {
          asm.receive(f, 0);
          for (let e = asm.nextEvent(); e; e = asm.nextEvent()) events.push(e);
        }
        const skel = events.filter((e) => e.type === 'skeleton-ready');
        const fills = events.filter((e) => e.type === 'block-filled');
        const shuffled = fills.map((e, i) => ({ e, k: keys[i % keys.length] * 100 + i })).sort((x, y) => x.k - y.k).map((x) => x.e);
        const b1 = parse5TreeBuilder();
        const b2 = parse5TreeBuilder();
        [...skel, ...fills].forEach((e) => b1.apply(e));
        [...skel, ...shuffled].forEach((e) => b2.apply(e));
        const s1 = parse5.serialize(b1.root as parse5.DefaultTreeAdapterMap['document']);
        expect(parse5.serialize(b2.root as parse5.DefaultTreeAdapterMap['document'])).toBe(s1);
        expect(s1).toBe(parse5.serialize(doc));
      }),
      { numRuns: 150 },
    );
  });

  test('no encoded text piece is cut inside a UTF-8 sequence or a surrogate pair', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', minLength: 200, maxLength: 3000 }), fc.integer({ min: 96, max: 400 }), (s, maxPayload) => {
        const doc = parse5.parse(`<p>${s.replace(/[<&\r\0]/g, 'x')}</p>`);
        const page = encodeTree(doc, { sha256, maxPayload });
        const asm = new CatpAssembler({ sha256 });
        for (const f of page.frames) asm.receive(f, 0);
        for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
          if (e.type === 'block-filled') for (const fl of e.fills) expect(LONE.test(fl.text)).toBe(false);
          expect(e.type === 'page-corrupt').toBe(false);
        }
      }),
      { numRuns: 100 },
    );
  });
});
