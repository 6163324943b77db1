// The pure half of bench/render: pairing a load record's useful frames with the paints of its `dom` events, and
// splitting each frame's receive-to-paint time into host, ipc, apply and paint; and reading Blink's rendering updates
// from a trace (blink-floor.ts).
import { analyse, parseArgs } from '../../bench/render/run';
import { renderingUpdatesMs, UPDATE_EVENT, type TraceEvent } from '../../bench/render/blink-floor';
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

describe('bench/render options', () => {
  test('through the lab\'s link by default (50,000 B/s, 40 ms), any links asked for, or none', () => {
    const opts = (argv: string[]) => {
      const o = parseArgs(argv);
      if (o === 'help') throw new Error('help');
      return o;
    };
    expect(opts([]).links).toEqual([{ rate: 50_000, delayMs: 40 }]);
    expect(opts(['--link', 'none']).links).toEqual([]);
    expect(opts(['--link=10000/10,50000/40']).links).toEqual([{ rate: 10_000, delayMs: 10 }, { rate: 50_000, delayMs: 40 }]);
    expect(opts(['--link', '1000000/2.5', '--rate', '50000']).links).toEqual([{ rate: 1_000_000, delayMs: 2.5 }]);
    for (const bad of ['50000', '0/40', '50000/x', '50000/40/1']) expect(() => parseArgs(['--link', bad])).toThrow(/--link needs B\/S\/MS/);
  });
});

describe('bench/render blink-floor: the rendering updates of a trace', () => {
  const meta = (pid: number, tid: number, name: string): TraceEvent => ({ name: 'thread_name', ph: 'M', pid, tid, ts: 0, args: { name } });
  const update = (pid: number, tid: number, ts: number, durUs: number): TraceEvent => ({ name: UPDATE_EVENT, ph: 'X', pid, tid, ts, dur: durUs });

  test('updates that did work on the busiest renderer main thread, in ms, sorted; idle frames, other threads and other events left out', () => {
    const events: TraceEvent[] = [
      meta(1, 1, 'CrRendererMain'), meta(1, 2, 'Compositor'), meta(2, 5, 'CrRendererMain'), meta(3, 3, 'CrBrowserMain'),
      update(1, 1, 100, 9000), update(1, 1, 200, 8000), update(1, 1, 300, 400 /* nothing to do */), update(1, 1, 400, 12_500),
      update(1, 2, 100, 50_000), // not a main thread
      update(2, 5, 100, 70_000), // another renderer, fewer updates
      update(3, 3, 100, 20_000), // the browser process
      { name: 'Paint', ph: 'X', pid: 1, tid: 1, ts: 150, dur: 5000 },
      { name: UPDATE_EVENT, ph: 'B', pid: 1, tid: 1, ts: 500 },
    ];
    expect(renderingUpdatesMs(events)).toEqual([8, 9, 12.5]);
  });

  test('no renderer main thread: no updates', () => {
    expect(renderingUpdatesMs([update(1, 1, 100, 9000)])).toEqual([]);
  });
});
