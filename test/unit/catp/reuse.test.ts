/**
 * Block reuse in the sans-IO layer: the frame flag and the exhaustive report flag on the wire (hostile input
 * included), the sender's hold and its dropping of held frames, the assembler's local fill, content-defined
 * block boundaries, and a whole transfer over the lossy in-memory pipe with half the blocks already held.
 */
import fc from 'fast-check';
import * as parse5 from 'parse5';
import {
  CatpAssembler,
  CatpEvent,
  decodeHeader,
  decodeReport,
  encodePage,
  encodeReport,
  FRAME_FLAG_REUSE,
  parse5TreeBuilder,
  REJECT,
  REPORT_FLAG_EXHAUSTIVE,
  RepairSender,
  Report,
} from '../../../protocol/catp';
import { Reject } from '../../../protocol/catp/errors';
import { runPipe, seqOf, sha256 } from '../../helpers/catp-util';
import { seededRng } from '../../../protocol/random';

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon'.split(' ');
function paras(n: number, seed: number): string[] {
  const r = seededRng(seed);
  return Array.from({ length: n }, () => {
    let p = '';
    while (p.length < 420) p += `${WORDS[Math.floor(r() * WORDS.length)]} `;
    return p;
  });
}
const P = paras(40, 3);
const html = (ps: string[]) => `<!DOCTYPE html><title>r</title><body>${ps.map((p) => `<p>${p}</p>`).join('\n')}</body>`;
const page = encodePage(html(P), { sha256 });
const ID = new Uint8Array([0x80, 1, 2, 3, 4, 5, 6, 7]);
const N = page.frames.length;
const IX = page.indexFrames;

function report(o: Partial<Report>): Uint8Array {
  return encodeReport({
    id: ID, otherPort: 40000, complete: false, truncated: false, pageId: page.pageId, reportNo: 1, total: N,
    received: 0, echoSeq: 0xffffffff, echoDelayMs: 0, missing: [], ...o,
  });
}

function refusal(f: () => unknown): string | null {
  try {
    f();
    return null;
  } catch (e) {
    return e instanceof Reject ? e.code : `THREW ${(e as Error).name}`;
  }
}

describe('wire: FRAME_FLAG_REUSE and REPORT_FLAG_EXHAUSTIVE', () => {
  test('an exhaustive report round-trips; so does a truncated one', () => {
    const r = decodeReport(report({ exhaustive: true, missing: [[IX + 2, IX + 4], [IX + 9, IX + 10]] }));
    expect(r.exhaustive).toBe(true);
    expect(r.missing).toEqual([[IX + 2, IX + 4], [IX + 9, IX + 10]]);
    // more ranges than a datagram holds: cut, and flagged, so the sender trusts it up to the last range only
    const many: Array<[number, number]> = Array.from({ length: 700 }, (_, i) => [200 * i, 200 * i + 1]);
    const t = decodeReport(encodeReport({
      id: ID, otherPort: 1, complete: false, truncated: false, exhaustive: true, pageId: page.pageId, reportNo: 1, total: 200_000,
      received: 0, echoSeq: 0, echoDelayMs: 0, missing: many,
    }));
    expect(t.exhaustive).toBe(true);
    expect(t.truncated).toBe(true);
    expect(t.missing.length).toBeLessThan(700);
    expect(decodeReport(report({})).exhaustive).toBe(false);
  });

  test('hostile reports: unknown flag bits, exhaustive without a total / page id, or with complete, are refused by name', () => {
    const good = report({ exhaustive: true, missing: [[IX, IX + 1]] });
    const withFlags = (bits: number, patch: (b: Uint8Array) => void = () => {}) => {
      const b = good.slice();
      b[14] = bits;
      patch(b);
      return b;
    };
    expect(refusal(() => decodeReport(withFlags(8)))).toBe(REJECT.BAD_FLAGS);
    expect(refusal(() => decodeReport(withFlags(0x80 | REPORT_FLAG_EXHAUSTIVE)))).toBe(REJECT.BAD_FLAGS);
    expect(refusal(() => decodeReport(withFlags(REPORT_FLAG_EXHAUSTIVE | 1)))).toBe(REJECT.BAD_REPORT); // + complete
    expect(refusal(() => decodeReport(withFlags(REPORT_FLAG_EXHAUSTIVE, (b) => b.fill(0, 27, 31))))).toBe(REJECT.BAD_REPORT); // total 0
    expect(refusal(() => decodeReport(withFlags(REPORT_FLAG_EXHAUSTIVE, (b) => b.fill(0, 15, 23))))).toBe(REJECT.BAD_REPORT); // page id 0
    expect(() => report({ exhaustive: true, total: 0 })).toThrow(RangeError);
    expect(() => report({ exhaustive: true, complete: true })).toThrow(RangeError);
  });

  test('frame flags: bit 0 (reuse) is accepted and reported; any other bit is refused', () => {
    const f = page.frames[0].slice();
    f[11] = FRAME_FLAG_REUSE;
    expect(decodeHeader(f).flags).toBe(FRAME_FLAG_REUSE);
    for (let bits = 2; bits < 256; bits++) {
      const g = page.frames[0].slice();
      g[11] = bits;
      expect(refusal(() => decodeHeader(g))).toBe(REJECT.BAD_FLAGS);
    }
  });

  test('fuzz: report bytes with any flags never throw anything but a named refusal, and a reuse sender survives them', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 200 }), fc.integer({ min: 0, max: 255 }), (bytes, flags) => {
        const b = new Uint8Array(Math.max(43, bytes.length));
        b.set(bytes.subarray(0, b.length));
        b.set(ID, 0);
        b[10] = 0;
        b[11] = 0xca;
        b[12] = 1;
        b[13] = 4;
        b[14] = flags;
        const code = refusal(() => decodeReport(b));
        expect(code === null || code.startsWith('CATP_ERR_')).toBe(true);
        const s = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 1e9, reuse: { holdMs: 100 } });
        expect(() => s.receiveReport(b, 1)).not.toThrow();
        // whatever it did, every frame is still deliverable: a report asking for everything gets everything
        s.receiveReport(report({ reportNo: 0xfffffffe, missing: [[0, N]] }), 2);
        let n = 0;
        for (let t = 2; t < 400 && !s.finished; t += 50) for (let d = s.nextDatagram(t); d; d = s.nextDatagram(t)) n++;
        expect(n).toBeGreaterThanOrEqual(N - IX);
      }),
      { numRuns: 300 },
    );
  });
});

describe('sender: hold and held frames', () => {
  const sent = (s: RepairSender, now: number): number[] => {
    const out: number[] = [];
    for (let d = s.nextDatagram(now); d; d = s.nextDatagram(now)) {
      out.push(seqOf(d));
      expect(d[11]).toBe(FRAME_FLAG_REUSE);
    }
    return out;
  };

  test('the index goes at once, data waits for the exhaustive report, held frames are never sent', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    expect(sent(s, 0)).toEqual(Array.from({ length: IX }, (_, i) => i));
    // nothing to do but wait: the timer is the hold's deadline, not a spin
    expect(s.nextTimerAt()).toBe(1000);
    expect(sent(s, 10)).toEqual([]);
    const missing: Array<[number, number]> = [[IX + 1, IX + 2], [IX + 5, IX + 7]];
    expect(s.receiveReport(report({ exhaustive: true, missing, received: IX }), 20).accepted).toBe(true);
    expect(sent(s, 20)).toEqual([IX + 1, IX + 5, IX + 6]);
    expect(s.reuse?.stats).toMatchObject({ holdExpired: false, held: N - 3 });
    expect(s.reuse?.stats.holdEndedAfterMs).toBe(20);
    expect(s.receiveReport(report({ complete: true, reportNo: 2 }), 30).accepted).toBe(true);
    expect(s.finished).toBe(true);
    expect(s.error).toBeNull();
  });

  test('without a report the hold ends by its deadline and everything goes', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 1e9, reuse: { holdMs: 300 } });
    sent(s, 0);
    s.handleTimer(299);
    expect(sent(s, 299)).toEqual([]);
    s.handleTimer(300);
    expect(sent(s, 300)).toEqual(Array.from({ length: N - IX }, (_, i) => IX + i));
    expect(s.reuse?.stats.holdExpired).toBe(true);
  });

  test('a frame claimed held and then asked for is sent after all; a truncated exhaustive report covers only its ranges', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    sent(s, 0);
    s.receiveReport(report({ exhaustive: true, missing: [] }), 5); // "I hold everything"
    expect(sent(s, 5)).toEqual([]);
    s.receiveReport(report({ reportNo: 2, missing: [[IX + 3, IX + 4]] }), 6); // changed its mind
    expect(sent(s, 6)).toEqual([IX + 3]);

    const t = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    sent(t, 0);
    // truncated: frames after the last listed range are not claimed, so they go
    t.receiveReport(report({ exhaustive: true, truncated: true, missing: [[IX + 1, IX + 2]] }), 5);
    expect(sent(t, 5)).toEqual([IX + 1, ...Array.from({ length: N - IX - 2 }, (_, i) => IX + 2 + i)]);
  });

  test('a sender without reuse ignores the flag: a plain client\'s world is unchanged', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 1e9 });
    const first = [] as number[];
    for (let d = s.nextDatagram(0); d; d = s.nextDatagram(0)) {
      first.push(seqOf(d));
      expect(d[11]).toBe(0);
    }
    expect(first.length).toBe(N);
  });
});

describe('assembler: local fill', () => {
  function withIndex(): CatpAssembler {
    const a = new CatpAssembler({ sha256 });
    const flagged = page.frames.map((f) => {
      const g = f.slice();
      g.set(ID, 0);
      g[11] = FRAME_FLAG_REUSE;
      return g;
    });
    for (const f of flagged.slice(0, IX)) a.receive(f, 0);
    return a;
  }
  const payloadOf = (b: number) => page.frames[IX + b].subarray(32);

  test('a verified block fills locally; a wrong one is refused and stays missing; the exhaustive report lists exactly the rest', () => {
    const a = withIndex();
    expect(a.reuseAcked).toBe(true);
    for (let e = a.nextEvent(); e; e = a.nextEvent());
    const wrong = payloadOf(1).slice();
    wrong[wrong.length - 1] ^= 1;
    expect(a.fillLocal(1, wrong)).toBe(false);
    expect(a.counters().CATP_REUSE_REFUSED).toBe(1);
    expect(a.fillLocal(0, payloadOf(1))).toBe(false); // another block's bytes: digest mismatch
    expect(a.fillLocal(2, payloadOf(2))).toBe(true);
    expect(a.fillLocal(2, payloadOf(2))).toBe(false); // once
    const ev = a.nextEvent();
    expect(ev).toMatchObject({ type: 'block-filled', block: 2, local: true });
    expect(a.reuseReady()).toBe(true);
    const r = decodeReport(a.nextReport(1) as Uint8Array);
    expect(r.exhaustive).toBe(true);
    expect(r.received).toBe(IX); // local fills are not deliveries
    const wantMissing: Array<[number, number]> = [[IX, IX + 2], [IX + 3, N]];
    expect(r.missing).toEqual(wantMissing);
    // a network copy of the local block later is a duplicate
    const dup = page.frames[IX + 2].slice();
    dup.set(ID, 0);
    dup[11] = FRAME_FLAG_REUSE;
    expect(a.receive(dup, 2).code).toBe(REJECT.DUPLICATE);
  });

  test('without the sender\'s acknowledgement there is no exhaustive report (an old server would refuse it)', () => {
    const a = new CatpAssembler({ sha256 });
    for (const f of page.frames.slice(0, IX)) a.receive(f, 0);
    expect(a.reuseAcked).toBe(false);
    expect(a.fillLocal(0, payloadOf(0))).toBe(true);
    expect(a.reuseReady()).toBe(false);
    for (let t = 0; t < 500; t += 25) {
      for (let r = a.nextReport(t); r; r = a.nextReport(t)) expect(decodeReport(r).exhaustive).toBe(false);
    }
  });
});

describe('content-defined blocks', () => {
  test('one paragraph changed: about its own blocks change; the rest keep their digests', () => {
    const changed = P.map((p, i) => (i === 20 ? 'a new paragraph, much shorter than the one it replaces.' : p));
    const a = encodePage(html(P), { sha256 });
    const b = encodePage(html(changed), { sha256 });
    const have = new Set(a.skeleton.blocks.map((x) => Buffer.from(x.digest).toString('hex')));
    const fresh = b.skeleton.blocks.filter((x) => !have.has(Buffer.from(x.digest).toString('hex')));
    expect(a.blocks).toBeGreaterThan(15);
    expect(fresh.length).toBeGreaterThanOrEqual(1);
    expect(fresh.length).toBeLessThanOrEqual(3);
    // the packed layout shifts everything after the edit
    const pa = encodePage(html(P), { sha256, blockCut: 'packed' });
    const pb = encodePage(html(changed), { sha256, blockCut: 'packed' });
    const phave = new Set(pa.skeleton.blocks.map((x) => Buffer.from(x.digest).toString('hex')));
    expect(pb.skeleton.blocks.filter((x) => !phave.has(Buffer.from(x.digest).toString('hex'))).length).toBeGreaterThan(fresh.length + 3);
  });
});

describe('a whole transfer over a lossy pipe with half the blocks held', () => {
  test.each([0, 0.2])('loss %p: the page completes, equals parse5, and no held block crosses the pipe', (loss) => {
    for (let seed = 1; seed <= 4; seed++) {
      const sender = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 2000, initialRttMs: 20, reuse: { holdMs: 2000 } });
      const client = new CatpAssembler({ sha256, requestId: ID, otherPort: 40000, repair: { reportIntervalMs: 30 } });
      const held = new Set<number>();
      for (let b = 0; b < N - IX; b += 2) held.add(b);
      const res = runPipe<CatpEvent>(sender, client, {
        seed, loss, delayMs: 10, jitterMs: 4,
        onEvent: (e) => {
          if (e.type !== 'skeleton-ready') return;
          for (const b of held) client.fillLocal(b, page.frames[IX + b].subarray(32));
          client.reuseReady();
        },
      });
      expect(res.completeAt).not.toBeNull();
      const tree = parse5TreeBuilder();
      for (const { e } of res.events) tree.apply(e);
      expect(parse5.serialize(tree.root!)).toBe(parse5.serialize(parse5.parse(html(P))));
      const dataSent = res.sent.map(seqOf).filter((q) => q >= IX).map((q) => q - IX);
      if (loss === 0) expect(dataSent.filter((b) => held.has(b))).toEqual([]);
      // under loss the exhaustive report itself may be lost: then the hold's deadline (2 s) lets data go;
      // either way, every block the client lacked arrived
      expect(new Set(dataSent.filter((b) => !held.has(b))).size).toBe(Math.floor((N - IX) / 2));
      expect(sender.reuse?.stats.skipped ?? 0).toBeGreaterThan(0);
    }
  });
});

describe('protocol/README.md worked example', () => {
  test('the unchanged reload of the example page: block 0 from the store, one complete report, the data frame never sent', () => {
    const id = Uint8Array.from([0x80, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07]);
    const ex = encodePage('<!DOCTYPE html><title>Hi</title><p>Hello, wörld!</p>', { sha256 });
    expect(Buffer.from(ex.pageId).toString('hex')).toBe('6f5b2ad45bb1c812');
    const s = new RepairSender(ex.frames, ex.indexFrames, { requestId: id, rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    const a = new CatpAssembler({ sha256, requestId: id, otherPort: 40000 });
    a.start(0);
    const sentFrames: Uint8Array[] = [];
    for (let d = s.nextDatagram(0); d; d = s.nextDatagram(0)) sentFrames.push(d);
    expect(sentFrames).toHaveLength(1);
    expect(sentFrames[0][11]).toBe(0x01);
    a.receive(sentFrames[0], 1);
    expect(a.nextEvent()?.type).toBe('skeleton-ready');
    expect(a.fillLocal(0, ex.frames[1].subarray(32))).toBe(true);
    a.reuseReady();
    const rep = a.nextReport(2) as Uint8Array;
    expect(Buffer.from(rep.subarray(11, 35)).toString('hex')).toBe('ca010401' + '6f5b2ad45bb1c812' + '00000001' + '00000002' + '00000001');
    expect(s.receiveReport(rep, 3).accepted).toBe(true);
    expect(s.finished).toBe(true);
    expect(s.stats.sent).toBe(1);
  });
});
