// The pure half of bench/render: pairing a load record's useful frames with the paints of its `dom` events, and
// splitting each frame's receive-to-paint time into host, ipc, apply and paint.
import { analyse } from '../../bench/render/run';
import type { LoadRecord, WireFrame } from '../../protocol/browser/api';

const frame = (seq: number, atEpochMs: number, useful = true, kind: WireFrame['kind'] = 'data'): WireFrame =>
  ({ atEpochMs, seq, kind, bytes: 1000, accepted: true, useful, missing: 0, repaired: 0, received: seq + 1 });

function record(extra: Partial<LoadRecord>): LoadRecord {
  return {
    version: 1, url: 'dhttp://h/p', transport: 'catp', loadId: 1, requestAtEpochMs: 0, updates: [],
    arrivals: [frame(0, 100, true, 'index'), frame(1, 110, false), frame(2, 120), frame(3, 130)],
    hostCompleteMs: null, outcome: 'complete', silentTimeMs: 0, silentGap: { from: 0, to: 0 }, networkFloorMs: 0,
    firstPaintMs: null, completeMs: null, ...extra,
  } as LoadRecord;
}

describe('bench/render analyse', () => {
  test('the k-th useful frame is shown by the k-th dom paint; stages add up to the latency', () => {
    const a = analyse(record({
      domSentAtEpochMs: [102, 121, 131],
      domReceivedAtEpochMs: [104, 125, 133],
      domAppliedAtEpochMs: [105, 130, 134],
      domPaintedAtEpochMs: [116, 140, 150],
    }));
    expect(a.latencies).toEqual([16, 20, 20]);
    expect(a.blocks).toBe(3);
    expect(a.stages.host).toEqual([1, 1, 2]);
    expect(a.stages.ipc).toEqual([2, 2, 4]);
    expect(a.stages.apply).toEqual([1, 1, 5]);
    expect(a.stages.paint).toEqual([10, 11, 16]);
    expect(a.fillPerSec).toBeCloseTo(3 / 0.034);
  });

  test('frames split at the load\'s first paint: the first flight before it, the streaming page after it', () => {
    // frames 0 and 2 arrive before the first paint (116), frame 3 after it
    const a = analyse(record({ arrivals: [frame(0, 100, true, 'index'), frame(1, 110, false), frame(2, 112), frame(3, 130)], domPaintedAtEpochMs: [116, 140, 150] }));
    expect(a.latencies).toEqual([16, 20, 28]);
    expect(a.beforeFirstPaint).toEqual([16, 28]);
    expect(a.afterFirstPaint).toEqual([20]);
    // a paint never stamped is in neither
    const b = analyse(record({ domPaintedAtEpochMs: [NaN, 125, 150] }));
    expect(b.beforeFirstPaint).toEqual([5]);
    expect(b.afterFirstPaint).toEqual([20]);
  });

  test('a paint never stamped is left out, and a record without the stamps has latencies only', () => {
    const a = analyse(record({ domPaintedAtEpochMs: [116, NaN, 150] }));
    expect(a.latencies).toEqual([16, 20]);
    expect(a.stages.host).toEqual([]);
  });
});
