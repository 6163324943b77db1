// lab/silent-time/versus.ts: CATP against each other transport page by page, and a run against a baseline run load
// for load (the same page, transport, loss, repetition and seed).
import { type LoadResult } from '../../lab/silent-time/load-result';
import { summarize } from '../../lab/silent-time/report';
import { formatPaired, formatVersus, paired, versus } from '../../lab/silent-time/versus';

function load(over: Partial<LoadResult>): LoadResult {
  return {
    page: 'p', pageBytes: 10, transport: 'catp', loss: 0, rep: 0, seed: 1, ok: true,
    silentMs: 100, silentGap: null, firstPaintMs: 100, completionMs: 200, loadEventMs: null, updates: 1, updateTimesMs: [100],
    frames: 1, samplingMaxMs: null, samplingMedianMs: null, floorMs: null, floorGap: null, meanGapMs: null, expectedMs: null,
    usefulPackets: 1, duplicatePackets: 0, unmatchedPackets: 0, droppedToClient: { loss: 0, queue: 0, other: 0 },
    requestSource: 'link-log', navToRequestMs: null, warnings: [], ...over,
  };
}

describe('versus: the reference transport against each other one, page by page', () => {
  // per page and loss, the mean of two loads; tcp's loads on page c at 10% all failed
  const means: Record<string, Record<string, [number, number]>> = {
    a: { catp: [100, 120], tcp: [300, 400], inorder: [150, 105] },
    b: { catp: [200, 260], tcp: [460, 500], inorder: [240, 230] },
    c: { catp: [90, 300], tcp: [100, NaN], inorder: [80, 310] },
  };
  const loads: LoadResult[] = [];
  for (const [page, per] of Object.entries(means)) {
    for (const [transport, [at0, at10]] of Object.entries(per)) {
      for (const [loss, m] of [[0, at0], [0.1, at10]] as const) {
        for (const rep of [0, 1]) {
          if (Number.isNaN(m)) loads.push(load({ page, transport, loss, rep, ok: false, silentMs: null, error: 'timeout' }));
          else loads.push(load({ page, transport, loss, rep, silentMs: m + (rep === 0 ? -10 : 10) }));
        }
      }
    }
  }
  const rows = summarize(loads);

  test('counts the pages where both have a mean, and those at or below the other and below half of it', () => {
    const v = versus(rows);
    const at = (loss: number, other: string) => v.find((r) => r.loss === loss && r.other === other);
    expect(at(0, 'tcp')).toEqual({ loss: 0, other: 'tcp', pages: 3, referenceMean: 130, otherMean: 860 / 3, atOrBelow: 3, atOrBelowHalf: 2 });
    // page c's tcp point failed: two pages only, and the reference's mean is over the same two
    expect(at(0.1, 'tcp')).toEqual({ loss: 0.1, other: 'tcp', pages: 2, referenceMean: 190, otherMean: 450, atOrBelow: 2, atOrBelowHalf: 1 });
    expect(at(0, 'inorder')).toMatchObject({ pages: 3, atOrBelow: 2, atOrBelowHalf: 0 });
    expect(at(0.1, 'inorder')).toMatchObject({ pages: 3, atOrBelow: 1, atOrBelowHalf: 0 });
    expect(v.map((r) => r.other)).toEqual(['tcp', 'inorder', 'tcp', 'inorder']);
  });

  test('the text block: a line a loss and transport, then each transport over every loss', () => {
    const text = formatVersus(versus(rows));
    expect(text).toMatch(/catp against each other transport/);
    expect(text).toMatch(/^10%\s+tcp\s+2\s+190\s+450\s+0\.42\s+2 of 2\s+1 of 2$/m);
    expect(text).toMatch(/^all\s+tcp\s+5\s+5 of 5\s+3 of 5$/m);
    expect(text).toMatch(/^all\s+inorder\s+6\s+3 of 6\s+0 of 6$/m);
  });

  test('nothing to say without the reference or without another transport', () => {
    expect(versus(summarize(loads.filter((l) => l.transport === 'catp')))).toEqual([]);
    expect(versus(summarize(loads.filter((l) => l.transport !== 'catp')))).toEqual([]);
    expect(formatVersus([])).toBe('');
    expect(versus(rows, 'tcp').map((r) => r.other)).toEqual(['catp', 'inorder', 'catp', 'inorder']);
  });
});

describe('paired: a run against a baseline run, load for load', () => {
  const base = [
    load({ rep: 0, seed: 1, silentMs: 100, firstPaintMs: 50, completionMs: 400 }),
    load({ rep: 1, seed: 2, silentMs: 200, firstPaintMs: 50, completionMs: 400 }),
    load({ rep: 2, seed: 3, silentMs: 400, firstPaintMs: 50, completionMs: 400 }),
    load({ rep: 3, seed: 4, ok: false, silentMs: null, error: 'timeout' }),
    load({ rep: 0, seed: 1, transport: 'tcp', silentMs: 300 }),
  ];
  const cur = [
    load({ rep: 0, seed: 1, silentMs: 50, firstPaintMs: 25, completionMs: 400 }),
    load({ rep: 1, seed: 2, silentMs: 400, firstPaintMs: 100, completionMs: 400 }),
    load({ rep: 2, seed: 3, silentMs: 200, firstPaintMs: 50, completionMs: 400 }),
    load({ rep: 3, seed: 4, silentMs: 100 }), // the baseline's failed: no pair
    load({ rep: 4, seed: 5, silentMs: 100 }), // not in the baseline
    load({ rep: 0, seed: 99, transport: 'tcp', silentMs: 300 }), // another seed: another drop pattern, no pair
    load({ rep: 0, seed: 1, transport: 'tcp', loss: 0.1, silentMs: 300 }), // another loss
  ];

  test('pairs the same page, transport, loss, repetition and seed, ok in both; geometric means, lower in, difference ± se', () => {
    const p = paired(cur, base);
    expect(p).toHaveLength(1);
    const r = p[0]!;
    expect(r).toMatchObject({ transport: 'catp', loss: 0, pairs: 3, lower: 2 });
    // ratios 0.5, 2, 0.5
    expect(r.silentRatio).toBeCloseTo(Math.cbrt(0.5 * 2 * 0.5), 12);
    expect(r.firstPaintRatio).toBeCloseTo(Math.cbrt(0.5 * 2 * 1), 12);
    expect(r.completionRatio).toBeCloseTo(1, 12);
    // differences −50, +200, −200: mean −50/3, sample sd over n − 1, se = sd / √3
    const d = [-50, 200, -200];
    const m = -50 / 3;
    expect(r.silentDiffMean).toBeCloseTo(m, 9);
    expect(r.silentDiffSe).toBeCloseTo(Math.sqrt(d.reduce((s, x) => s + (x - m) ** 2, 0) / 2) / Math.sqrt(3), 9);
  });

  test('the text block, in the order the transports first come, and what it says when nothing pairs', () => {
    const two = paired([...cur, load({ rep: 0, seed: 1, transport: 'tcp', silentMs: 240 })], base);
    expect(two.map((r) => r.transport)).toEqual(['catp', 'tcp']);
    const text = formatPaired(two, 'old.jsonl');
    expect(text).toMatch(/^against old\.jsonl, load for load/);
    expect(text).toMatch(/^catp\s+0%\s+3\s+0\.794\s+2 of 3\s+−17 ± 117\s+1\.000\s+1\.000$/m);
    expect(text).toMatch(/^tcp\s+0%\s+1\s+0\.800\s+1 of 1\s+−60 ± -/m);
    expect(formatPaired(paired(cur, []), 'old.jsonl')).toMatch(/no load pairs up/);
  });
});
