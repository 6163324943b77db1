// The silent-time tool (lab/silent-time): pixel comparison, statistics, the network floor from a synthetic
// emulator log, and a short end-to-end run through the real link with real Chromium.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';

import { PNG } from 'pngjs';

import { silentTime } from '../../cli/commands/silent-time';
import { type LinkLog, type LogEvent } from '../../lab/link';
import { type CapturedPacket } from '../../lab/silent-time/capture';
import { chartSvg } from '../../lab/silent-time/chart';
import { addRange, firstDeliveryNs, networkFloor } from '../../lab/silent-time/floor';
import { diffPixels, frameChanges, type RawImage } from '../../lab/silent-time/frames';
import { generatePage, parseSize } from '../../lab/silent-time/pages';
import { CSV_COLUMNS, summarize, type JsonReport } from '../../lab/silent-time/report';
import { crossCheck, type LoadResult } from '../../lab/silent-time/run';
import { framesAnalysis } from '../../lab/silent-time/transports';
import { longestGap, mean, p95, quantile } from '../../lab/silent-time/stats';
import { traceFileName, type LoadTrace } from '../../lab/silent-time/trace';
import { analyzeUpdates, monotoneFrames, type RecordedFrame } from '../../lab/silent-time/updates';
import { requireLab } from './helpers';

function image(width: number, height: number, squares: Array<{ x: number; y: number; size: number; rgb: [number, number, number] }>): RawImage {
  const data = new Uint8Array(width * height * 4).fill(255);
  for (const s of squares) {
    for (let y = s.y; y < s.y + s.size; y++) {
      for (let x = s.x; x < s.x + s.size; x++) {
        const i = (y * width + x) * 4;
        data.set([...s.rgb, 255], i);
      }
    }
  }
  return { width, height, data };
}

function histogram(img: RawImage): Map<number, number> {
  const h = new Map<number, number>();
  for (let i = 0; i < img.data.length; i += 4) {
    const k = (img.data[i]! << 16) | (img.data[i + 1]! << 8) | img.data[i + 2]!;
    h.set(k, (h.get(k) ?? 0) + 1);
  }
  return h;
}

function png(img: RawImage): Buffer {
  const p = new PNG({ width: img.width, height: img.height });
  p.data.set(img.data);
  return PNG.sync.write(p);
}

describe('pixel comparison', () => {
  test('finds content that moved without changing the colour mix (a histogram does not)', () => {
    const red: [number, number, number] = [200, 0, 0];
    const blue: [number, number, number] = [0, 0, 200];
    const a = image(64, 48, [{ x: 4, y: 4, size: 8, rgb: red }, { x: 30, y: 20, size: 8, rgb: blue }]);
    // the same two squares, swapped: same colours, same counts, different picture
    const b = image(64, 48, [{ x: 4, y: 4, size: 8, rgb: blue }, { x: 30, y: 20, size: 8, rgb: red }]);
    // and one moved by a pixel
    const c = image(64, 48, [{ x: 5, y: 4, size: 8, rgb: red }, { x: 30, y: 20, size: 8, rgb: blue }]);
    expect(histogram(b)).toEqual(histogram(a));
    expect(histogram(c)).toEqual(histogram(a));
    expect(diffPixels(a, b).changed).toBe(128);
    expect(diffPixels(a, c)).toEqual({ changed: 16, box: { x: 4, y: 4, width: 9, height: 8 }, resized: false });
    expect(diffPixels(a, a).changed).toBe(0);
    // a masked region is ignored
    expect(diffPixels(a, c, [{ x: 0, y: 0, width: 20, height: 20 }]).changed).toBe(0);
  });

  test('frameChanges: decodes only frames whose bytes differ and reports each change with its interval', () => {
    const a = png(image(32, 32, []));
    const b = png(image(32, 32, [{ x: 1, y: 1, size: 2, rgb: [0, 0, 0] }]));
    const c = png(image(32, 32, [{ x: 2, y: 1, size: 2, rgb: [0, 0, 0] }]));
    const frames = [a, a, b, b, b, c, c].map((p, i) => ({ tNs: BigInt(i) * 16_666_667n, png: p }));
    const ch = frameChanges(frames);
    expect(ch.map((x) => x.index)).toEqual([2, 5]);
    expect(ch[1]!.prevNs).toBe(frames[4]!.tNs);
  });

  test('a clip: only pixels inside the rectangle count (the page area of our app page, not its HUD)', () => {
    const a = image(64, 48, []);
    const hud = image(64, 48, [{ x: 0, y: 0, size: 8, rgb: [0, 0, 0] }]); // outside the clip
    const page = image(64, 48, [{ x: 20, y: 20, size: 4, rgb: [0, 0, 0] }]); // inside
    const clip = { x: 10, y: 10, width: 40.5, height: 100 }; // clamped to the image, edges rounded outwards
    expect(diffPixels(a, hud, [], clip).changed).toBe(0);
    expect(diffPixels(a, page, [], clip)).toEqual({ changed: 16, box: { x: 20, y: 20, width: 4, height: 4 }, resized: false });
    const frames = [a, hud, page, page].map((img, i) => ({ tNs: BigInt(i) * 16_666_667n, png: png(img) }));
    expect(frameChanges(frames, [], 0, clip).map((c) => c.index)).toEqual([2]);
  });

  test('page-area frames (catp browse --frames) are analysed like chromium frames; cross-check against markers', () => {
    const a = png(image(32, 32, []));
    const b = png(image(32, 32, [{ x: 1, y: 1, size: 2, rgb: [0, 0, 0] }]));
    const c = png(image(32, 32, [{ x: 9, y: 9, size: 2, rgb: [0, 0, 0] }]));
    const MS = 1_000_000n;
    const pngs = [a, a, b, b, c, c];
    const stamps = [0, 17, 33, 50, 117, 133]; // a 67 ms gap before the last change
    const rec: RecordedFrame[] = pngs.map((p, i) => ({ tNs: BigInt(stamps[i]!) * MS, recvNs: BigInt(stamps[i]! + 5) * MS, png: p }));
    const direct = analyzeUpdates(rec, 10n * MS, []);
    const ch = frameChanges(rec);
    const file = {
      version: 1 as const, method: 'compositor-screencast' as const, clip: { x: 0, y: 0, width: 32, height: 32 }, clipAtStart: { x: 0, y: 0, width: 32, height: 32 },
      clipAtEnd: null, frameSize: { width: 32, height: 32 }, heartbeat: true as const, sampling: null, analysisMs: 0,
      // epoch ms = monotonic + 1000 s
      frames: rec.map((f, i) => ({ tEpochMs: Number(f.tNs / MS) + 1e6, recvEpochMs: Number(f.recvNs / MS) + 1e6, changed: ch.find((x) => x.index === i)?.changed ?? 0 })),
    };
    const viaFile = framesAnalysis(file, 1_000_000n * MS).reanalyze(10n * MS);
    expect(viaFile.updates.map((u) => u.tNs)).toEqual(direct.updates.map((u) => u.tNs));
    expect(viaFile).toMatchObject({ silentMs: direct.silentMs, firstPaintMs: 23, lastUpdateMs: 107, sampling: direct.sampling, frames: 5 });
    expect(direct.sampling!.maxMs).toBe(67);
    expect(crossCheck([23, 107], [20, 90, 100])).toBe(7);
    expect(crossCheck([23], [])).toBeNull();
  });

  test('frame stamps are made non-decreasing in capture order', () => {
    const f = (t: number): RecordedFrame => ({ tNs: BigInt(t), recvNs: BigInt(t + 5), png: Buffer.alloc(0) });
    expect(monotoneFrames([f(10), f(30), f(20), f(40)]).map((x) => Number(x.tNs))).toEqual([10, 20, 20, 40]);
  });
});

describe('statistics', () => {
  test('mean, p95 (nearest rank), longest gap', () => {
    expect(mean([1, 2, 3, 4])).toBe(2.5);
    expect(mean([])).toBeNaN();
    const xs = Array.from({ length: 20 }, (_, i) => 20 - i); // 20..1
    expect(p95(xs)).toBe(19);
    expect(quantile(xs, 1)).toBe(20);
    expect(quantile([7], 0.95)).toBe(7);
    expect(p95([])).toBeNaN();
    expect(longestGap(0, [100, 150, 400, 420])).toEqual({ ms: 250, from: 150, to: 400 });
    expect(longestGap(10, [300])).toEqual({ ms: 290, from: 10, to: 300 });
    expect(longestGap(0, [])).toBeNull();
  });
});

describe('network floor from a synthetic emulator log', () => {
  const S = '10.77.0.2';
  const C = '10.77.0.1';
  const MS = 1_000_000n;
  // server → client TCP flow 8080 → 40000; ISN 1000; MSS 1000 payload; 20 + 32 header bytes
  const segs: Array<{ t: number; ev: LogEvent['ev']; seq: number; payload: number; flags?: number; reason?: 'loss' }> = [
    { t: 40, ev: 'depart', seq: 1000, payload: 0, flags: 0x12 }, // SYN-ACK
    { t: 100, ev: 'depart', seq: 1001, payload: 1000 },
    { t: 200, ev: 'drop', seq: 2001, payload: 1000, reason: 'loss' }, // lost
    { t: 300, ev: 'depart', seq: 3001, payload: 1000 }, // out of order but new
    { t: 350, ev: 'depart', seq: 1001, payload: 1000 }, // spurious retransmission: not useful
    { t: 700, ev: 'depart', seq: 2001, payload: 1000 }, // the lost one retransmitted: new for the client
    { t: 800, ev: 'depart', seq: 4001, payload: 500, flags: 0x19 }, // last data + FIN
    { t: 900, ev: 'depart', seq: 4502, payload: 0, flags: 0x10 }, // pure ACK
  ];
  const events: LogEvent[] = [];
  const capture: CapturedPacket[] = [];
  segs.forEach((s, i) => {
    const len = 52 + s.payload;
    const e: LogEvent = { tNs: BigInt(s.t) * MS, dir: 's2c', ev: s.ev, idx: i, len, proto: 6, src: S, sport: 8080, dst: C, dport: 40000, ipId: 100 + i };
    if (s.reason) e.reason = s.reason;
    events.push(e);
    if (s.ev === 'depart') {
      capture.push({ tNs: BigInt(s.t) * MS + 50_000n, pktType: 0, proto: 6, src: S, sport: 8080, dst: C, dport: 40000, ipId: 100 + i, len, seq: s.seq, payload: s.payload, flags: s.flags ?? 0x10, digest: '-' });
    }
  });
  // client → server packets and a packet of another flow must not count
  events.push({ tNs: 5n * MS, dir: 'c2s', ev: 'arrive', idx: 0, len: 60, proto: 6, src: C, sport: 40000, dst: S, dport: 8080, ipId: 1 });
  events.push({ tNs: 500n * MS, dir: 's2c', ev: 'depart', idx: 99, len: 1052, proto: 6, src: S, sport: 9999, dst: C, dport: 40001, ipId: 7 });
  const log: LinkLog = { realtimeMinusMonotonicNs: 0n, seed: '1', events };

  test('useful = TCP bytes not delivered before (a hole-filling retransmission counts); floor and D/(1-p)', () => {
    const f = networkFloor(log, capture, { serverAddress: S, clientAddress: C, serverPort: 8080, startNs: 10n * MS, endNs: 1000n * MS, loss: 0.2 });
    expect(f.useful.map((u) => Number(u.tNs / MS))).toEqual([100, 300, 700, 800]);
    expect(f.useful.map((u) => u.newBytes)).toEqual([1000, 1000, 1000, 500]);
    expect(f.duplicates).toBe(1);
    expect(f.unmatched).toBe(0);
    expect(f.dropped).toEqual({ loss: 1, queue: 0, other: 0 });
    expect(f.floorMs).toBe(400); // 300 → 700
    expect(f.floorGap).toEqual({ fromNs: 300n * MS, toNs: 700n * MS });
    expect(f.meanGapMs).toBeCloseTo((800 - 100) / 3, 9);
    expect(f.expectedMs).toBeCloseTo((800 - 100) / 3 / 0.8, 9);
  });

  test('the first gap starts at the request; departures outside the window do not count', () => {
    const f = networkFloor(log, capture, { serverAddress: S, clientAddress: C, serverPort: 8080, startNs: 0n, endNs: 750n * MS, loss: 0 });
    expect(f.useful.map((u) => Number(u.tNs / MS))).toEqual([100, 300, 700]);
    expect(f.floorMs).toBe(400);
    const g = networkFloor(log, capture, { serverAddress: S, clientAddress: C, serverPort: 8080, startNs: 0n, endNs: 250n * MS, loss: 0 });
    expect(g.floorMs).toBe(100);
    expect(g.meanGapMs).toBeNull();
  });

  test('the first packet from the server to reach the client (visible changes count from it): its flow only, delivered, after the time given', () => {
    const o = { serverAddress: S, clientAddress: C, serverPort: 8080 };
    expect(firstDeliveryNs(log, { ...o, afterNs: 0n })).toBe(40n * MS); // the SYN-ACK
    expect(firstDeliveryNs(log, { ...o, afterNs: 150n * MS })).toBe(300n * MS); // not the drop at 200
    expect(firstDeliveryNs(log, { ...o, afterNs: 450n * MS })).toBe(700n * MS); // not the other flow's packet at 500
    expect(firstDeliveryNs(log, { ...o, afterNs: 900n * MS })).toBeNull();
    expect(firstDeliveryNs(log, { ...o, serverPort: 9999, afterNs: 0n })).toBe(500n * MS);
  });

  test('byte ranges: overlaps count only their new bytes', () => {
    const cov: Array<[number, number]> = [];
    expect(addRange(cov, 0, 100)).toBe(100);
    expect(addRange(cov, 200, 300)).toBe(100);
    expect(addRange(cov, 50, 250)).toBe(100); // re-packetized: 50 old + 100 new + 50 old
    expect(cov).toEqual([[0, 300]]);
    expect(addRange(cov, 0, 300)).toBe(0);
    expect(addRange(cov, 300, 301)).toBe(1);
  });

  test('without the capture, packets are classified by length and counted as unmatched', () => {
    const f = networkFloor(log, [], { serverAddress: S, clientAddress: C, serverPort: 8080, startNs: 0n, endNs: 1000n * MS, loss: 0 });
    expect(f.unmatched).toBe(7);
    expect(f.useful.length).toBe(5); // the spurious retransmission cannot be told apart
  });
});

describe('pages', () => {
  test('generated pages have exactly the size asked for', () => {
    for (const n of [600, 10_000, 50_000]) expect(Buffer.byteLength(generatePage(n))).toBe(n);
    expect(parseSize('10k')).toBe(10_000);
    expect(parseSize('50K')).toBe(50_000);
    expect(() => parseSize('ten')).toThrow(RangeError);
  });
});

describe('--capture', () => {
  test('an unknown mode is a usage error, before any lab is needed', async () => {
    await expect(silentTime(['--sizes', '10k', '--capture', 'sometimes'], { stdout: new PassThrough(), stderr: new PassThrough() })).rejects.toThrow(/--capture must be vsync or damage, got 'sometimes'/);
  });
});

describe('end to end: catp silent-time through the link with stock Chromium and our browser', () => {
  jest.setTimeout(240_000);
  beforeAll(() => requireLab());

  test('--capture damage (the default): frames only where something changed, for stock Chromium and our page area alike; fewer frames than every vsync, the same answers', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-test-'));
    try {
      const out = new PassThrough();
      let stdout = '';
      out.on('data', (d: Buffer) => (stdout += d.toString()));
      const json = path.join(dir, 'r.json');
      // damage without the option: the default
      const run = async (capture: string, file: string) =>
        silentTime(['--sizes', '10k', '--loss', '0', '--reps', '1', '--transports', 'chromium,catp', '--delay', '10', '--rate', '10000', '--seed', '7',
          '--settle', '600', ...(capture === 'damage' ? [] : ['--capture', capture]), '--json', file, '--trace', path.join(dir, `trace-${capture}`), '-q'], { stdout: out, stderr: new PassThrough() });
      expect(await run('damage', json)).toBe(0);
      expect(stdout).toMatch(/frames captured on change \(--capture damage\)/);
      const report = JSON.parse(fs.readFileSync(json, 'utf8')) as JsonReport & { settings: { capture?: string } };
      expect(report.settings.capture).toBe('damage');
      expect(report.loads).toHaveLength(2);
      const vsyncJson = path.join(dir, 'v.json');
      expect(await run('vsync', vsyncJson)).toBe(0);
      const vsync = JSON.parse(fs.readFileSync(vsyncJson, 'utf8')) as JsonReport & { settings: { capture?: string } };
      expect(vsync.settings.capture).toBe('vsync'); // recorded whichever it is
      for (const r of report.loads as LoadResult[]) {
        const ctx = JSON.stringify({ transport: r.transport, error: r.error, warnings: r.warnings });
        expect({ ok: r.ok, ctx }).toEqual({ ok: true, ctx });
        // the 10 kB page fits the viewport: first paint and completion are seen, after the request, in order
        expect(r.firstPaintMs!).toBeGreaterThan(0);
        expect(r.completionMs!).toBeGreaterThanOrEqual(r.firstPaintMs!);
        expect(r.silentMs!).toBeGreaterThanOrEqual(r.floorMs! - r.samplingMaxMs!);
        // without the heartbeat a still screen makes no frames: fewer frames than the vsync run's same load
        const v = (vsync.loads as LoadResult[]).find((x) => x.transport === r.transport)!;
        expect(v.ok).toBe(true);
        expect(r.frames!).toBeLessThan(v.frames!);
        if (r.transport === 'catp') {
          // the renderer's paint stamps agree with the frames taken on change
          expect(r.markerTimesMs!.length).toBeGreaterThan(0);
          expect(r.crossCheckMs!).toBeLessThan(250);
        }
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('1 page × loss {0, 0.1} × 1 rep × all four transports: every load measured from compositor frames, numbers consistent, outputs written, report again from the load log', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-test-'));
    try {
      const out = new PassThrough();
      const err = new PassThrough();
      let stdout = '';
      let stderr = '';
      out.on('data', (d: Buffer) => (stdout += d.toString()));
      err.on('data', (d: Buffer) => (stderr += d.toString()));
      const files = { json: path.join(dir, 'r.json'), csv: path.join(dir, 'r.csv'), chart: path.join(dir, 'r.svg'), log: path.join(dir, 'r.jsonl'), again: path.join(dir, 'again.json') };
      const code = await silentTime(
        ['--sizes', '10k', '--loss', '0,0.1', '--reps', '1', '--transports', 'chromium,catp,inorder,tcp', '--delay', '10', '--rate', '10000', '--seed', '5',
          '--settle', '600', '--json', files.json, '--csv', files.csv, '--chart', files.chart, '--log', files.log, '--trace', path.join(dir, 'trace')],
        { stdout: out, stderr: err },
      );
      console.log(stdout);
      expect(code).toBe(0);
      // not a terminal: one plain progress line per load
      expect(stderr.split('\n').filter((l) => l.startsWith('silent-time: '))).toHaveLength(8);

      const report = JSON.parse(fs.readFileSync(files.json, 'utf8')) as JsonReport;
      expect(report.loads).toHaveLength(8);
      const seeds = new Set<number>();
      for (const r of report.loads as LoadResult[]) {
        const ctx = JSON.stringify({ transport: r.transport, loss: r.loss, rep: r.rep, error: r.error, warnings: r.warnings });
        expect({ ok: r.ok, ctx }).toEqual({ ok: true, ctx });
        seeds.add(r.seed);
        // the same method for both: compositor frames, pixel by pixel (ours: the page area only)
        expect(r.method).toBe(r.transport === 'chromium' ? 'compositor-screencast' : 'compositor');
        if (r.transport !== 'chromium') {
          // the cross-check against the renderer's paint markers is reported
          expect(r.markerTimesMs!.length).toBeGreaterThan(0);
          expect(r.crossCheckMs).toEqual(expect.any(Number));
        }
        // our page area has chromium's viewport size (800 px high): the page's height is known and fits
        expect(r.pageHeight!).toBeLessThanOrEqual(800);
        expect(r.requestSource).toBe('link-log');
        const silent = r.silentMs!;
        const floor = r.floorMs!;
        const sample = r.samplingMaxMs!;
        const completion = r.completionMs!;
        const firstPaint = r.firstPaintMs!;
        expect(sample).toBeGreaterThan(0);
        expect(silent).toBeGreaterThanOrEqual(0);
        expect(silent).toBeGreaterThanOrEqual(floor - sample);
        expect(completion).toBeGreaterThanOrEqual(silent);
        expect(firstPaint).toBeLessThanOrEqual(completion);
        expect(firstPaint).toBeGreaterThan(0);
        // 10 kB of HTML, compressed by every transport (CATP's frames one by one, the in-order stream and the
        // server's gzip / br over HTTP as a whole): at least 2 packets; in-order's coded stream, in full frames,
        // fewer than the 7 the page as it is would take; and their gaps cannot be shorter than serialization at
        // 10 kB/s allows on average
        expect(r.usefulPackets).toBeGreaterThanOrEqual(2);
        if (r.transport === 'inorder' && r.loss === 0) expect(r.usefulPackets).toBeLessThan(7);
        expect(r.meanGapMs!).toBeGreaterThan(50);
        expect(r.expectedMs!).toBeCloseTo(r.meanGapMs! / (1 - r.loss), 6);
        expect(r.unmatchedPackets).toBe(0);
        // every update lies within the load; the list is sorted
        expect([...r.updateTimesMs].sort((a, b) => a - b)).toEqual(r.updateTimesMs);
      }
      expect(seeds.size).toBe(2); // (loss, rep) → its own seed, shared by the transports

      // --trace: per load, the packets the emulator saw beside the load's updates
      for (const r of report.loads as LoadResult[]) {
        const trace = JSON.parse(fs.readFileSync(path.join(dir, 'trace', traceFileName(r)), 'utf8')) as LoadTrace;
        expect(trace.load.updateTimesMs).toEqual(r.updateTimesMs);
        // each update with where it changed the screen: pixels that differ, inside the 1280 × 800 viewport
        expect(trace.updates).toHaveLength(r.updateTimesMs.length);
        trace.updates.forEach((u, i) => {
          expect(u.t).toBeCloseTo(r.updateTimesMs[i]!, 1);
          expect(u.changed!).toBeGreaterThan(0);
          const b = u.box!;
          expect(Math.min(b.x, b.y, b.width - 1, b.height - 1)).toBeGreaterThanOrEqual(0);
          expect([b.x + b.width, b.y + b.height]).toEqual([Math.min(b.x + b.width, 1280), Math.min(b.y + b.height, 800)]);
          expect(u.changed!).toBeLessThanOrEqual(b.width * b.height);
        });
        const toServer = trace.packets.filter((p) => p.serverSide && p.dir === 'c2s' && p.ev === 'arrive');
        // the request is the first packet toward the server at or after t = 0 (how requestSource 'link-log' finds it)
        expect(toServer.find((p) => p.t >= 0)?.t).toBe(0);
        const delivered = trace.packets.filter((p) => p.serverSide && p.dir === 's2c' && p.ev === 'depart');
        expect(delivered.length).toBeGreaterThanOrEqual(r.usefulPackets);
        // visible updates count from the first packet that reached the client (nothing of the page is there before)
        expect(r.updateTimesMs[0]!).toBeGreaterThan(delivered[0]!.t);
        if (r.loss === 0) expect(trace.packets.filter((p) => p.ev === 'drop' && p.reason === 'loss')).toHaveLength(0);
        // our browser's own account on the same clock: its frames after the request, and for CATP each `dom` event's
        // stages in order (sent by the host, received by the renderer, applied, painted)
        if (r.transport === 'chromium') {
          expect(trace.browser).toBeUndefined();
          continue;
        }
        const b = trace.browser!;
        expect(b.arrivals.length).toBeGreaterThan(0);
        for (const a of b.arrivals) expect(a.t).toBeGreaterThan(0);
        expect(b.arrivals.filter((a) => a.useful).length).toBeGreaterThanOrEqual(1);
        if (r.transport !== 'catp') {
          expect(b.dom).toEqual([]);
          continue;
        }
        expect(b.arrivals.every((a) => a.kind === 'index' || a.kind === 'data')).toBe(true);
        expect(b.dom.length).toBeGreaterThan(0);
        const firstUseful = b.arrivals.find((a) => a.useful)!.t;
        for (const d of b.dom) {
          expect(d.sent!).toBeGreaterThanOrEqual(firstUseful);
          expect(d.received!).toBeGreaterThanOrEqual(d.sent! - 1); // two processes' reads of one clock
          expect(d.applied!).toBeGreaterThanOrEqual(d.received!);
          expect(d.painted!).toBeGreaterThanOrEqual(d.applied!);
        }
      }

      const ts = ['chromium', 'catp', 'inorder', 'tcp'];
      expect(report.summary.map((s) => [s.transport, s.loss, s.loads])).toEqual([...ts.map((t) => [t, 0, 1]), ...ts.map((t) => [t, 0.1, 1])]);
      const csv = fs.readFileSync(files.csv, 'utf8').trim().split('\n').map((l) => l.split(','));
      expect(csv[0]).toEqual(CSV_COLUMNS);
      expect(csv).toHaveLength(9);
      expect(Number(csv[1]![CSV_COLUMNS.indexOf('silentMean')])).toBeCloseTo(report.summary[0]!.silentMean, 2);
      const svg = fs.readFileSync(files.chart, 'utf8');
      expect(svg.startsWith('<svg')).toBe(true);
      expect(svg).toContain('chromium');
      expect(svg).toContain('stroke-dasharray');
      expect(svg).toContain('catp');
      expect((svg.match(/<polyline/g) ?? []).length).toBe(8); // silent time and floor of each transport
      expect(stdout).toMatch(/gen-10k\s+chromium\s+0%\s+1/);
      expect(stdout).toMatch(/gen-10k\s+tcp\s+10%\s+1/);

      // the load log holds every load; --from reports it again without measuring
      const code2 = await silentTime(['--from', files.log, '--json', files.again], { stdout: new PassThrough(), stderr: new PassThrough() });
      expect(code2).toBe(0);
      const again = JSON.parse(fs.readFileSync(files.again, 'utf8')) as JsonReport;
      expect(again.summary).toEqual(report.summary);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('report', () => {
  // a synthetic load's fields that no test here looks at
  const base = { page: 'p', pageBytes: 1, ok: true, rep: 0, seed: 1, silentGap: null, loadEventMs: null, updates: 1, updateTimesMs: [], frames: 1, samplingMedianMs: 16, floorGap: null, meanGapMs: 100, usefulPackets: 1, duplicatePackets: 0, unmatchedPackets: 0, droppedToClient: { loss: 0, queue: 0, other: 0 }, requestSource: 'link-log' as const, navToRequestMs: 1, warnings: [] };

  test('summary and chart from synthetic loads', () => {
    const loads: LoadResult[] = [
      { ...base, transport: 'tcp', loss: 0, silentMs: 100, firstPaintMs: 50, completionMs: 900, floorMs: 90, expectedMs: 100, samplingMaxMs: 17 },
      { ...base, transport: 'tcp', loss: 0, silentMs: 300, firstPaintMs: 70, completionMs: 1100, floorMs: 110, expectedMs: 100, samplingMaxMs: 33 },
      { ...base, transport: 'tcp', loss: 0.1, ok: false, error: 'boom', silentMs: null, firstPaintMs: null, completionMs: null, floorMs: null, expectedMs: null, samplingMaxMs: null },
    ];
    const rows = summarize(loads);
    expect(rows[0]).toMatchObject({ loads: 2, failed: 0, silentMean: 200, silentP95: 300, completionMean: 1000, firstPaintMean: 60, floorMean: 100, samplingMax: 33, excessMean: 100 });
    expect(rows[1]).toMatchObject({ loads: 0, failed: 1, errors: ['boom'] });
    expect(chartSvg(rows)).toContain('<svg');
  });

  test('the chart scales each page on its own (one slow page does not flatten the others)', () => {
    const load = (page: string, silentMs: number): LoadResult => ({ ...base, transport: 'catp', loss: 0, firstPaintMs: 50, completionMs: 900, expectedMs: 100, samplingMaxMs: 17, page, silentMs, floorMs: silentMs / 2 });
    const svg = chartSvg(summarize([load('fast', 180), load('slow', 8600)]));
    // the top tick of each panel: 200 for the fast page, 10000 for the slow one
    const ticks = [...svg.matchAll(/text-anchor="end">(\d+)</g)].map((m) => Number(m[1]));
    expect(ticks.slice(0, 6)).toEqual([0, 40, 80, 120, 160, 200]);
    expect(ticks.slice(6, 12)).toEqual([0, 2000, 4000, 6000, 8000, 10000]);
  });
});
