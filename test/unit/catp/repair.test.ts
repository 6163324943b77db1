/** Sender / receiver repair over a seeded lossy in-memory pipe with a fake clock; and the in-order raw mode. */
import * as parse5 from 'parse5';
import {
  CatpAssembler,
  CatpEvent,
  createSender,
  decodeReport,
  encodeReport,
  encodePage,
  encodeRaw,
  parse5TreeBuilder,
  RawAssembler,
  RawAssemblerEvent,
  RepairSender,
  CATP_ERR,
} from '../../../protocol/catp';
import { kindOf, runPipe, seqOf, sha256, FRAME_KIND } from '../../helpers/catp-util';

const HTML =
  '<!DOCTYPE html><html><head><title>Repair</title><style>p{color:red}</style></head><body>' +
  Array.from({ length: 120 }, (_, i) => `<h2>Section ${i}</h2><p class="c${i % 7}">${'Lorem ipsum dolor sit amet, é 中文 😀 '.repeat(12)}</p>`).join('') +
  '</body></html>';
const ID = new Uint8Array([0x80, 9, 8, 7, 6, 5, 4, 3]);
// Full frames (the layout these expectations were set with: e.g. the first pass ends before the first repair);
// the block layout is not what this file tests, and content-defined blocks double the frame count.
const page = encodePage(HTML, { sha256, blockCut: 'packed' });
const want = parse5.serialize(parse5.parse(HTML, { scriptingEnabled: false }));

function catpRun(loss: number, seed: number, extra: Partial<Parameters<typeof runPipe>[2]> = {}) {
  const sender = createSender(page, { requestId: ID, rateFramesPerSec: 2000, initialRttMs: 30 });
  const client = new CatpAssembler({ sha256, requestId: ID, otherPort: 40000, repair: { reportIntervalMs: 40 } });
  const res = runPipe<CatpEvent>(sender, client, { seed, loss, dup: 0.05, delayMs: 10, jitterMs: 6, ...extra });
  const b = parse5TreeBuilder();
  for (const { e } of res.events) b.apply(e);
  return { res, sender, client, tree: b.root ? parse5.serialize(b.root) : '' };
}

describe('repair over a lossy pipe', () => {
  test.each([0, 0.1, 0.3])('completes under %p loss (several seeds)', (loss) => {
    for (let seed = 1; seed <= 5; seed++) {
      const { res, sender, tree } = catpRun(loss, seed);
      expect(res.completeAt).not.toBeNull();
      expect(tree).toBe(want);
      expect(res.events.filter((x) => x.e.type === 'page-corrupt' || x.e.type === 'error')).toEqual([]);
      // jitter reorders frames: a reordered frame looks like a gap; the RTT guard keeps spurious resends rare
      if (loss === 0) expect(sender.stats.resent).toBeLessThanOrEqual(page.frames.length * 0.1);
      // random loss is not congestion: the rate controller seldom mistakes it for that (a short page: a few rounds)
      expect(sender.stats.control?.congestionCaps).toBeLessThanOrEqual(3);
    }
  });

  test('a slow loss-free link: frames still on the wire are not taken for lost (no resends, no rate cut)', () => {
    // 10 kB/s, as in the CATP paper's experiment: a full frame spends ~146 ms being serialized, longer than
    // the RTT measured from the small index frame, while the receiver's 50 ms timer reports list every frame
    // not yet arrived as missing. Only RACK's rule (overtaken by a delivered frame) or the RTO may call it lost.
    for (let seed = 1; seed <= 3; seed++) {
      const sender = createSender(page, { requestId: ID, rateBytesPerSec: 9500 });
      const client = new CatpAssembler({ sha256, requestId: ID, otherPort: 40000 });
      const res = runPipe<CatpEvent>(sender, client, { seed, loss: 0, delayMs: 10, jitterMs: 0, downBytesPerMs: 10 });
      expect(res.completeAt).not.toBeNull();
      expect(res.reports).toBeGreaterThan(10);
      expect(sender.stats.resent).toBe(0);
      expect(sender.stats.control?.stalls).toBe(0);
    }
  });

  /** A sender that has sent its first eight frames (an initial window, within a few ms), and reports to it by hand. */
  function afterBurst() {
    const sender = createSender(page, { requestId: ID });
    const sent: number[] = [];
    for (let t = 0; t < 100 && sent.length < 8; t += 1) {
      for (let d = sender.nextDatagram(t); d; d = sender.nextDatagram(t)) sent.push(seqOf(d));
    }
    expect(sent.slice(0, 8)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const report = (reportNo: number, echoSeq: number, received: number, missing: Array<[number, number]>, echoDelayMs = 0) =>
      encodeReport({
        id: ID, otherPort: 40000, complete: false, truncated: false, pageId: page.frames[0].subarray(12, 20), reportNo,
        total: page.frames.length, received, echoSeq, echoDelayMs, missing,
      });
    /** The resends among what the sender sends at `now`. */
    const resends = (now: number) => {
      const out: number[] = [];
      for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) if (sent.includes(seqOf(d))) out.push(seqOf(d));
      return out;
    };
    return { sender, report, resends };
  }

  test('a frame lost inside a burst is resent once three frames sent after it have arrived (packet threshold), not a queue later', () => {
    // An initial window goes out within a few tens of ms; on a slow link its frames then sit in the bottleneck's queue. The
    // time rule (overtaken by a frame sent ¼ RTT later) cannot see a loss among frames sent 1 ms apart.
    const { sender, report, resends } = afterBurst();
    // frames 3 and 4 arrived (a full frame's serialization apart on a 10 kB/s link): two overtook frame 2, not yet lost
    expect(sender.receiveReport(report(1, 3, 3, [[2, 3]]), 300).accepted).toBe(true);
    expect(sender.receiveReport(report(2, 4, 4, [[2, 3]]), 440).accepted).toBe(true);
    expect(resends(440)).toEqual([]);
    // a third: lost, and it goes next (before the RTO, and before any frame sent ¼ RTT after it could arrive)
    expect(sender.receiveReport(report(3, 5, 5, [[2, 3]]), 580).accepted).toBe(true);
    expect(resends(580)).toContain(2);
    expect(sender.stats.resent).toBe(1);
  });

  test('a frame overtaken by only the send right after it is lost 9/8 of an RTT after it went (time threshold), not an RTO later', () => {
    // The end of an initial window (or a resend near the end of a page) on a slow link: the frame after it arrives, and
    // nothing else was sent after it. Neither the packet threshold (three) nor the send-time gap (¼ RTT) can call it lost;
    // RFC 9002's time threshold can, once 9/8 of the larger of srtt and the latest RTT (and RACK's reordering window)
    // has passed since it went.
    const { sender, report, resends } = afterBurst();
    // the window's frames come out of a slow link's queue one by one: RTTs of 300 ms and more
    expect(sender.receiveReport(report(1, 3, 4, []), 300).accepted).toBe(true);
    expect(sender.receiveReport(report(2, 4, 5, []), 440).accepted).toBe(true);
    expect(sender.receiveReport(report(3, 5, 6, []), 580).accepted).toBe(true);
    // frame 6 never comes; frame 7, sent right after it, arrives at 860 (RTT ~860 ms): not yet 9/8 of it
    expect(sender.receiveReport(report(4, 7, 7, [[6, 7]]), 860).accepted).toBe(true);
    expect(resends(860)).toEqual([]);
    // a timer report 140 ms later: 9/8 × 860 ms have passed, not yet the reordering window (¼ of the least RTT, 75 ms)
    expect(sender.receiveReport(report(5, 7, 7, [[6, 7]], 140), 1000).accepted).toBe(true);
    expect(resends(1000)).toEqual([]);
    // the next, 60 ms later: both have (1,043 ms), well inside the RTO (srtt + 4 rttvar: ~1.4 s here)
    expect(sender.receiveReport(report(6, 7, 7, [[6, 7]], 200), 1060).accepted).toBe(true);
    expect(resends(1060)).toEqual([6]);
    expect(sender.stats.resent).toBe(1);
  });

  test('in a tail (every frame sent once) a resend goes twice, the copy after one other send or at once; before it, once', () => {
    const n = page.frames.length;
    expect(page.indexFrames).toBeGreaterThan(1);
    const run = (repeatTailRepairs: boolean | undefined, sendUntilMs: number, missing: Array<[number, number]>) => {
      // 'fixed' pacing at a frame a ms: no window, so the first pass goes out on the clock alone
      const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1000, ...(repeatTailRepairs === undefined ? {} : { repeatTailRepairs }) });
      const order: number[] = [];
      let t = 0;
      for (; t <= sendUntilMs; t += 1) for (let d = sender.nextDatagram(t); d; d = sender.nextDatagram(t)) order.push(seqOf(d));
      const last = order[order.length - 1];
      // every frame sent up to `last` arrived but those listed; the echo (the last one) makes them lost (packet threshold)
      const report = encodeReport({
        id: ID, otherPort: 40000, complete: false, truncated: false, pageId: page.frames[0].subarray(12, 20), reportNo: 1,
        total: n, received: order.length - missing.reduce((a, [s, e]) => a + e - s, 0), echoSeq: last, echoDelayMs: 0, missing,
      });
      expect(sender.receiveReport(report, t).accepted).toBe(true);
      const after: number[] = [];
      for (let u = t; u <= t + 40; u += 1) for (let d = sender.nextDatagram(u); d; d = sender.nextDatagram(u)) after.push(seqOf(d));
      return { sender, order, after };
    };
    // the whole page gone once: index frame 1 lost alone, its resend and the copy back to back (nothing else waits)
    const one = run(undefined, n + 5, [[1, 2]]);
    expect(one.order).toHaveLength(n);
    expect(one.after).toEqual([1, 1]);
    expect(one.sender.stats).toMatchObject({ resent: 2, copies: 1 });
    // two lost: each copy one send after its resend
    const two = run(undefined, n + 5, [[1, 2], [n - 5, n - 4]]);
    expect(two.after).toEqual([1, n - 5, 1, n - 5]);
    // turned off: once each
    expect(run(false, n + 5, [[1, 2], [n - 5, n - 4]]).after).toEqual([1, n - 5]);
    // mid-page (new frames still to send): once, the copy would take a new frame's place
    const mid = run(undefined, 12, [[1, 2], [5, 6]]);
    expect(mid.order.length).toBeLessThan(n - 10);
    expect(mid.after.filter((q) => q === 1)).toEqual([1]);
    expect(mid.after.filter((q) => q === 5)).toEqual([5]);
    expect(mid.sender.stats.copies).toBe(0);
  });

  test('lost index frames are resent before lost data frames sent after them, and reports carry ranges', () => {
    expect(page.indexFrames).toBeGreaterThan(1);
    // lose every index frame and a burst of data frames on the first pass
    let widest = 0;
    const firstSend = new Set<number>();
    const res = catpRun(0, 7, {
      drop: (dir, bytes) => {
        if (dir === 'up') {
          for (const [a, b] of decodeReport(bytes).missing) widest = Math.max(widest, b - a);
          return undefined;
        }
        const seq = seqOf(bytes);
        if (firstSend.has(seq)) return undefined;
        firstSend.add(seq);
        return kindOf(bytes) === FRAME_KIND.INDEX || (seq > 20 && seq < 40);
      },
    });
    expect(res.res.completeAt).not.toBeNull();
    // resends: sends of a frame sent before (with the window, repair may begin before the first pass ends)
    const seen = new Set<number>();
    const resends = res.res.sent.filter((f) => {
      const again = seen.has(seqOf(f));
      seen.add(seqOf(f));
      return again;
    });
    // every index frame was resent, once (twice where the resend came in the tail: its copy, `repeatTailRepairs`); and
    // no data frame was resent while an index frame sent before it was still waiting for its resend (an index frame
    // sent after it may be found lost later: that is when, not what, goes first)
    const indexResends = resends.filter((f) => kindOf(f) === FRAME_KIND.INDEX).map(seqOf);
    expect(new Set(indexResends).size).toBe(page.indexFrames);
    for (const ix of new Set(indexResends)) expect(indexResends.filter((q) => q === ix).length).toBeLessThanOrEqual(2);
    expect(indexResends.length - page.indexFrames).toBeLessThanOrEqual(res.sender.stats.copies);
    const firstSent = (seq: number): number => res.res.sent.findIndex((f) => seqOf(f) === seq);
    const resentAt = (seq: number): number => resends.findIndex((f) => seqOf(f) === seq);
    const indexSeqs = page.frames.flatMap((f, i) => (kindOf(f) === FRAME_KIND.INDEX ? [i] : []));
    let dataResends = 0;
    resends.forEach((f, at) => {
      if (kindOf(f) !== FRAME_KIND.DATA) return;
      dataResends++;
      for (const ix of indexSeqs) if (firstSent(ix) < firstSent(seqOf(f))) expect(resentAt(ix)).toBeLessThan(at);
    });
    expect(dataResends).toBeGreaterThanOrEqual(page.frames.filter((f, i) => i > 20 && i < 40 && kindOf(f) === FRAME_KIND.DATA).length);
    // the burst of 19 lost data frames was reported as one range
    expect(widest).toBeGreaterThanOrEqual(19);
  });

  test('a gap is reported at once (ranges below the highest frame), before the timer', () => {
    const client = new CatpAssembler({ sha256, repair: { reportIntervalMs: 1000, minReportGapMs: 0, ackEveryFrames: 100, ackDelayMs: 1e6 } });
    client.start(0);
    for (const f of page.frames.slice(0, 5)) client.receive(f, 1);
    expect(client.nextReport(1)).toBeNull(); // no gap yet
    client.receive(page.frames[9], 2);
    client.receive(page.frames[12], 2);
    const r = decodeReport(client.nextReport(2) as Uint8Array);
    expect(r.missing).toEqual([
      [5, 9],
      [10, 12],
    ]);
    expect(r.complete).toBe(false);
    // the timer report lists the tail as well
    expect(client.nextTimerAt()).toBe(1002);
    const t = decodeReport(client.nextReport(1002) as Uint8Array);
    expect(t.missing).toEqual([
      [5, 9],
      [10, 12],
      [13, page.frames.length],
    ]);
  });

  test('the first "complete" report goes at once, even right after an acknowledgement (a client may close after it)', () => {
    const client = new CatpAssembler({ sha256, repair: { minReportGapMs: 5, ackEveryFrames: 1 } });
    client.start(0);
    for (const [i, f] of page.frames.slice(0, -1).entries()) {
      client.receive(f, 10 + i * 0.01);
      client.nextReport(10 + i * 0.01);
    }
    const at = 10 + page.frames.length * 0.01;
    expect(client.nextReport(at)).toBeNull(); // an acknowledgement went out under 5 ms ago: the next one waits
    client.receive(page.frames[page.frames.length - 1], at);
    expect(client.nextTimerAt()).toBeLessThanOrEqual(at);
    const r = client.nextReport(at);
    expect(r).not.toBeNull();
    expect(decodeReport(r as Uint8Array).complete).toBe(true);
  });

  test('bounded: a sender whose client is gone gives up; a client whose sender is gone stalls', () => {
    const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, rateFramesPerSec: 5000, idleTimeoutMs: 2000, giveUpAfterMs: 5000 });
    const client = new CatpAssembler({ sha256, requestId: ID, repair: { reportIntervalMs: 50, maxSilentReports: 10 } });
    const res = runPipe<CatpEvent>(sender, client, { seed: 3, loss: 0, drop: () => true, maxMs: 60_000 });
    let t = 0;
    while (sender.error === null) {
      t = sender.nextTimerAt() as number;
      expect(t).toBeLessThanOrEqual(2000);
      sender.handleTimer(t);
      while (sender.nextDatagram(t) !== null);
    }
    expect(sender.error?.code).toBe(CATP_ERR.GAVE_UP);
    // a peer that never answers got the initial window and a few backed-off probes, not the page
    expect(sender.stats.sent).toBeLessThanOrEqual(20);
    expect(sender.stats.sent).toBeLessThan(page.frames.length);
    expect(sender.nextDatagram(t + 1)).toBeNull();
    expect(res.events.map((x) => x.e.type)).toEqual(['error']);
    expect((res.events[0].e as { code: string }).code).toBe(CATP_ERR.STALLED);
  });

  test('a slow page keeps coming past giveUpAfterMs while reports show progress; a stream that stops progressing gives up', () => {
    // 2,000 B/s (a link shared with a TCP download, or a slow one): the page needs about twice giveUpAfterMs
    const body = new Uint8Array(60_000).map((_, i) => 97 + ((i * 7) % 26));
    const raw = encodeRaw(body, { sha256 });
    const slow = new RepairSender(raw.frames, 0, { requestId: ID, giveUpAfterMs: 15_000 });
    const res = runPipe<RawAssemblerEvent>(slow, new RawAssembler({ sha256, requestId: ID }), { seed: 5, loss: 0, jitterMs: 0, downBytesPerMs: 2, maxMs: 120_000 });
    expect(slow.error).toBeNull();
    expect(res.completeAt).toBeGreaterThan(15_000);
    expect(slow.done).toBe(true);

    // frames stop arriving after the fifth datagram; the client keeps reporting (it would wait long)
    const stuck = new RepairSender(raw.frames, 0, { requestId: ID, giveUpAfterMs: 5_000 });
    const client = new RawAssembler({ sha256, requestId: ID, repair: { maxSilentReports: 100_000 } });
    runPipe<RawAssemblerEvent>(stuck, client, { seed: 5, loss: 0, jitterMs: 0, drop: (dir, _b, n) => dir === 'down' && n >= 5, maxMs: 30_000 });
    expect(stuck.error?.code).toBe(CATP_ERR.GAVE_UP);
    expect(stuck.error?.message).toContain('no frame newly received for 5000 ms');
    expect(stuck.stats.reports).toBeGreaterThan(50); // reports came all along: the idle timeout was not what ended it
  });

  test('no loss and no reordering: nothing is resent', () => {
    const { res, sender, tree } = catpRun(0, 1, { jitterMs: 0, dup: 0 });
    expect(res.completeAt).not.toBeNull();
    expect(tree).toBe(want);
    expect(sender.stats.resent).toBe(0);
    expect(sender.done).toBe(true);
  });

  test('pacing: the sender never exceeds its rate (burst of 1 ms)', () => {
    const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, pacing: 'fixed', rateBytesPerSec: 1_000_000 });
    let bytes = 0;
    for (let t = 0; t <= 50; t += 0.5) for (let d = sender.nextDatagram(t); d; d = sender.nextDatagram(t)) bytes += d.length;
    expect(bytes).toBeLessThanOrEqual(1_000_000 * 0.051 + 1460 * 2);
    expect(bytes).toBeGreaterThan(1_000_000 * 0.045);
  });
});

describe('a send budget (an unproven address: its first flight only)', () => {
  test('only frames that fit go, in order; blocked, the sender asks for no send timer; lifted, it sends the rest, once each', () => {
    const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, initialRttMs: 50 });
    const budget = 3600 - 160;
    sender.setSendBudget(budget);
    const first: Uint8Array[] = [];
    for (let t = 0; t <= 20; t += 1) for (let d = sender.nextDatagram(t); d; d = sender.nextDatagram(t)) first.push(d);
    expect(first.length).toBeGreaterThanOrEqual(2);
    expect(first.reduce((n, d) => n + d.length, 0)).toBeLessThanOrEqual(budget);
    expect(first.map(seqOf)).toEqual(first.map((_, i) => i));
    expect(sender.budgetBlocked).toBe(true);
    // no send is due: only the deadlines (idle, give-up), seconds away
    expect(sender.nextTimerAt()!).toBeGreaterThan(5000);
    // the budget grows (a report came): the frame that waited goes first
    sender.setSendBudget(page.frames[first.length].length);
    const next = sender.nextDatagram(21);
    expect(next && seqOf(next)).toBe(first.length);
    expect(sender.nextDatagram(22)).toBeNull();
    // proven (within the round trip): no limit; the first pass goes on in order up to the initial window
    sender.setSendBudget(null);
    expect(sender.budgetBlocked).toBe(false);
    const seqs = [...first, next!].map(seqOf);
    for (let t = 22; t <= 60; t += 1) for (let d = sender.nextDatagram(t); d; d = sender.nextDatagram(t)) seqs.push(seqOf(d));
    expect(seqs.length).toBeGreaterThanOrEqual(10);
    expect(seqs).toEqual(seqs.map((_, i) => i));
    expect(sender.stats.resent).toBe(0);
  });

  test("over a lossy pipe, a budget lifted when the client's first report goes (about when its proof would): the page completes exactly", () => {
    for (let seed = 1; seed <= 3; seed++) {
      const sender = createSender(page, { requestId: ID, rateFramesPerSec: 2000, initialRttMs: 30 });
      sender.setSendBudget(3000);
      const client = new CatpAssembler({ sha256, requestId: ID, otherPort: 40000, repair: { reportIntervalMs: 40 } });
      const res = runPipe<CatpEvent>(sender, client, {
        seed, loss: 0.1, dup: 0, delayMs: 10, jitterMs: 0,
        drop: (dir) => {
          if (dir === 'up') sender.setSendBudget(null);
          return undefined;
        },
      });
      expect(res.completeAt).not.toBeNull();
      const b = parse5TreeBuilder();
      for (const { e } of res.events) b.apply(e);
      expect(parse5.serialize(b.root!)).toBe(want);
    }
  });
});

describe('in-order UDP mode (raw)', () => {
  const bytes = new TextEncoder().encode(HTML);
  const raw = encodeRaw(bytes, { sha256 });

  test.each([0, 0.1, 0.3])('completes under %p loss and only ever extends a contiguous prefix', (loss) => {
    for (let seed = 1; seed <= 3; seed++) {
      const sender = createSender(raw, { requestId: ID, rateFramesPerSec: 2000 });
      const client = new RawAssembler({ sha256, requestId: ID });
      const res = runPipe<RawAssemblerEvent>(sender, client, { seed, loss, dup: 0.05, delayMs: 10, jitterMs: 6 });
      expect(res.completeAt).not.toBeNull();
      let len = 0;
      const parts: Uint8Array[] = [];
      for (const { e } of res.events) {
        if (e.type !== 'prefix-extended') continue;
        expect(e.offset).toBe(len);
        len = e.length;
        parts.push(e.bytes);
      }
      expect(Buffer.concat(parts).equals(Buffer.from(bytes))).toBe(true);
    }
  });

  test('nothing past a gap is usable', () => {
    const a = new RawAssembler({ sha256 });
    a.receive(raw.frames[1], 0);
    a.receive(raw.frames[2], 0);
    expect(a.nextEvent()).toBeNull();
    a.receive(raw.frames[0], 0);
    const e = a.nextEvent() as RawAssemblerEvent & { type: 'prefix-extended' };
    expect(e.type).toBe('prefix-extended');
    expect(e.offset).toBe(0);
    expect(a.prefixLength).toBe(raw.frames[0].length - 32 - 36 + raw.frames[1].length - 32 + raw.frames[2].length - 32);
  });
});
