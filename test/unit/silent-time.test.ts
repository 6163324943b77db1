// One silent-time metric (protocol/silent-time.ts): the renderer's load record (HUD) and the lab's measurement
// compute it with the same function, so the same visible updates give the same silent time on both paths.
import fc from 'fast-check';

import { longestGap } from '../../protocol/silent-time';
import { buildRecord } from '../../renderer/silent-time';
import { summarizeUpdates } from '../../lab/silent-time/updates';

const REQUEST_EPOCH_MS = 1_795_000_000_000;

/** The renderer's path: a finished load's record from its paint-stamped updates (epoch ms). */
function rendererSilent(offsetsMs: readonly number[]): { silent: number; from: number; to: number } {
  const r = buildRecord({
    version: 1, url: 'dhttp://x/', transport: 'catp', loadId: 1, requestAtEpochMs: REQUEST_EPOCH_MS,
    updates: offsetsMs.map((o) => ({ atEpochMs: REQUEST_EPOCH_MS + o, what: 'blocks', count: 1 })),
    arrivals: [], hostCompleteMs: null, outcome: 'complete',
  });
  return { silent: r.silentTimeMs, from: r.silentGap.from - REQUEST_EPOCH_MS, to: r.silentGap.to - REQUEST_EPOCH_MS };
}

/** The lab's path: compositor frames that changed pixels (CLOCK_MONOTONIC ns), relative to the request. */
function labSilent(offsetsMs: readonly number[]): { silent: number; from: number; to: number } | null {
  const requestNs = 5_000_000_000n;
  const ns = (ms: number) => requestNs + BigInt(Math.round(ms * 1e6));
  const changes = offsetsMs.map((o, index) => ({ index, tNs: ns(o), prevNs: ns(o) - 1n, changed: 1, box: null }));
  const frames = offsetsMs.map((o) => ({ tNs: ns(o), recvNs: ns(o) }));
  const s = summarizeUpdates(frames, changes, requestNs);
  return s.silentMs === null || s.silentGap === null ? null : { silent: s.silentMs, from: s.silentGap.fromMs, to: s.silentGap.toMs };
}

const close = (a: number, b: number) => Math.abs(a - b) < 1e-3;

test('the same updates give the same silent time and gap in the renderer and in the lab', () => {
  for (const updates of [[120, 180, 900, 950], [40], [300, 300, 310], [100, 90, 400] /* a stamp that goes backwards */]) {
    const r = rendererSilent(updates);
    const l = labSilent(updates)!;
    expect(close(r.silent, l.silent) && close(r.from, l.from) && close(r.to, l.to)).toBe(true);
  }
  expect(rendererSilent([120, 180, 900, 950])).toEqual({ silent: 720, from: 180, to: 900 });
  // a backwards stamp counts from the latest time before it: 100 → 400, not 90 → 400
  expect(rendererSilent([100, 90, 400])).toEqual({ silent: 300, from: 100, to: 400 });
});

test('property: any updates after the request, in any order, agree on both paths', () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: 60_000 }), { minLength: 1, maxLength: 60 }), (updates) => {
      const r = rendererSilent(updates);
      const l = labSilent(updates)!;
      return close(r.silent, l.silent) && close(r.from, l.from) && close(r.to, l.to);
    }),
    { numRuns: 300 },
  );
});

test('no update: null from the metric; the record says 0 ms from the request', () => {
  expect(longestGap(0, [])).toBeNull();
  expect(labSilent([])).toBeNull();
  expect(rendererSilent([]).silent).toBe(0);
});
