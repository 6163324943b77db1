import fc from 'fast-check';

import { CHUNK_MAX, OrderedList } from '../../../protocol/catp/ordered-list';

/** The reference: a sorted array, searched the slow way. */
function floorOf(xs: number[], k: number): number | undefined {
  let r: number | undefined;
  for (const x of xs) if (x <= k) r = x;
  return r;
}
function higherOf(xs: number[], k: number): number | undefined {
  return xs.find((x) => x > k);
}

describe('OrderedList', () => {
  test('any inserts in any order: the items in order, floor, higher and from as a sorted array says', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -50, max: 3000 }), { maxLength: 1500 }), fc.array(fc.integer({ min: -60, max: 3010 }), { maxLength: 40 }), (xs, probes) => {
        const list = new OrderedList<number>((n) => n);
        const ref: number[] = [];
        for (const x of xs) {
          list.insert(x);
          ref.push(x);
        }
        ref.sort((a, b) => a - b);
        expect(list.toArray()).toEqual(ref);
        expect(list.size).toBe(ref.length);
        for (const k of probes) {
          expect(list.floor(k)).toBe(floorOf(ref, k));
          expect(list.higher(k)).toBe(higherOf(ref, k));
          expect([...list.from(k)]).toEqual(ref.filter((x) => x >= k));
        }
      }),
      { numRuns: 60 },
    );
  });

  test('equal keys keep the order they came in (an item goes after those with its key)', () => {
    const list = new OrderedList<{ k: number; tag: string }>((x) => x.k);
    for (const [k, tag] of [[5, 'a'], [1, 'b'], [5, 'c'], [3, 'd'], [5, 'e']] as const) list.insert({ k, tag });
    expect(list.toArray().map((x) => x.tag).join('')).toBe('bdace');
    expect(list.floor(5)?.tag).toBe('e');
    expect(list.higher(3)?.tag).toBe('a');
  });

  test('from(k) starts at the first item of key k even when its equal keys run over a chunk boundary', () => {
    const list = new OrderedList<{ k: number; i: number }>((x) => x.k);
    for (let i = 0; i < 600; i++) list.insert({ k: i < 300 ? 1 : 5, i }); // the first split puts 300 fives before it
    for (let i = 600; i < 900; i++) list.insert({ k: 5, i });
    expect([...list.from(5)].map((x) => x.i)).toEqual(Array.from({ length: 600 }, (_, j) => 300 + j));
  });

  test('inserts before everything (an index in reverse) never let a chunk grow past CHUNK_MAX: an insert moves at most a chunk', () => {
    const list = new OrderedList<number>((n) => n);
    const n = 20 * CHUNK_MAX;
    for (let i = n; i > 0; i--) list.insert(i);
    const chunks = (list as unknown as { chunks: number[][] }).chunks; // (the private field: what bounds the cost)
    expect(chunks.length).toBeGreaterThan(20);
    expect(Math.max(...chunks.map((c) => c.length))).toBeLessThanOrEqual(CHUNK_MAX);
    expect(list.toArray()).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(list.floor(0)).toBeUndefined();
    expect(list.higher(n)).toBeUndefined();
    expect(list.higher(CHUNK_MAX)).toBe(CHUNK_MAX + 1);
  });
});
