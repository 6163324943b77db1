/**
 * Block reuse in the sans-IO layer: the frame flag and the exhaustive report flag on the wire (hostile input
 * included), the sender's hold and its dropping of held frames, the assembler's local fill, content-defined
 * block boundaries, and a whole transfer over the lossy in-memory pipe with half the blocks already held.
 */
import fc from 'fast-check';
import * as parse5 from 'parse5';
import * as fs from 'node:fs';
import {
  CatpAssembler,
  CatpEvent,
  decodeHeader,
  decodeReport,
  EncodedPage,
  encodePage,
  encodeReport,
  FRAME_FLAG_REUSE,
  FRAME_KIND,
  HEADER_BYTES,
  hex,
  MAX_BLOCK_PIECES,
  parse5TreeBuilder,
  REJECT,
  REPORT_FLAG_EXHAUSTIVE,
  RepairSender,
  Report,
  unpackPayload,
} from '../../../protocol/catp';
import { Reject } from '../../../protocol/catp/errors';
import { codec, newAssembler, runPipe, seqOf, serverCodec, sha256 } from '../../helpers/catp-util';
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
// Small frames without a codec: several index frames interleaved with the data frames (send order), and
// enough blocks to hold some and send others.
const page = encodePage(html(P), { sha256, maxPayload: 400 });
const ID = new Uint8Array([0x80, 1, 2, 3, 4, 5, 6, 7]);
const N = page.frames.length;
const IX = page.indexFrames;
/** Frame numbers of the index frames, and of the data frames, in send order. */
const INDEX_SEQS = page.frames.flatMap((f, i) => (f[10] === FRAME_KIND.INDEX ? [i] : []));
const DATA_SEQS = page.frames.flatMap((f, i) => (f[10] === FRAME_KIND.DATA ? [i] : []));
/** The frame carrying each block, and the block in each data frame (from the encoder's own pieces). */
function blockSeqs(p: EncodedPage): { seqOfBlock: number[]; blockOfSeq: Map<number, number> } {
  const seqOfBlock: number[] = [];
  const blockOfSeq = new Map<number, number>();
  for (const b of p.pieces.flatMap((x) => x.blocks)) {
    seqOfBlock[b.block] = b.seq;
    blockOfSeq.set(b.seq, b.block);
  }
  return { seqOfBlock, blockOfSeq };
}
const { seqOfBlock: SEQ_OF_BLOCK, blockOfSeq: BLOCK_OF_SEQ } = blockSeqs(page);
/** A block's decoded payload, as the client's store keeps it. */
const payloadOf = (b: number, p: EncodedPage = page, seqOf = SEQ_OF_BLOCK): Uint8Array => unpackPayload(p.frames[seqOf[b]].subarray(HEADER_BYTES), codec);
/** The digests of every block an encoded page describes. */
const digests = (p: EncodedPage): string[] => p.pieces.flatMap((x) => x.blocks).map((x) => hex(x.digest));

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
        b[12] = 2;
        b[13] = 4;
        b[14] = flags;
        const code = refusal(() => decodeReport(b));
        expect(code === null || code.startsWith('CATP_ERR_')).toBe(true);
        const s = new RepairSender(page.frames, IX, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e9, reuse: { holdMs: 100 } });
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
    expect(IX).toBeGreaterThan(2);
    // index frames interleave with data frames in send order (each followed by the blocks it introduces)
    expect(INDEX_SEQS).not.toEqual(Array.from({ length: IX }, (_, i) => i));
    expect(INDEX_SEQS[0]).toBe(0);
    const s = new RepairSender(page.frames, IX, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    expect(sent(s, 0)).toEqual(INDEX_SEQS);
    // nothing to do but wait: the timer is the hold's deadline, not a spin
    expect(s.nextTimerAt()).toBe(1000);
    expect(sent(s, 10)).toEqual([]);
    const [d1, d5, d6] = [DATA_SEQS[1], DATA_SEQS[5], DATA_SEQS[6]];
    const missing: Array<[number, number]> = [[d1, d1 + 1], [d5, d6 + 1]];
    expect(d6).toBe(d5 + 1); // consecutive data frames (no index frame between): one range
    expect(s.receiveReport(report({ exhaustive: true, missing, received: IX }), 20).accepted).toBe(true);
    expect(sent(s, 20)).toEqual([d1, d5, d6]);
    expect(s.reuse?.stats).toMatchObject({ holdExpired: false, held: N - 3 });
    expect(s.reuse?.stats.holdEndedAfterMs).toBe(20);
    expect(s.receiveReport(report({ complete: true, reportNo: 2 }), 30).accepted).toBe(true);
    expect(s.finished).toBe(true);
    expect(s.error).toBeNull();
  });

  test('without a report the hold ends by its deadline and everything goes', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e9, reuse: { holdMs: 300 } });
    sent(s, 0);
    s.handleTimer(299);
    expect(sent(s, 299)).toEqual([]);
    s.handleTimer(300);
    expect(sent(s, 300)).toEqual(DATA_SEQS);
    expect(s.reuse?.stats.holdExpired).toBe(true);
  });

  test('a frame claimed held and then asked for is sent after all; a truncated exhaustive report covers only its ranges', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    sent(s, 0);
    s.receiveReport(report({ exhaustive: true, missing: [] }), 5); // "I hold everything"
    expect(sent(s, 5)).toEqual([]);
    const d3 = DATA_SEQS[3];
    s.receiveReport(report({ reportNo: 2, missing: [[d3, d3 + 1]] }), 6); // changed its mind
    expect(sent(s, 6)).toEqual([d3]);

    const t = new RepairSender(page.frames, IX, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    sent(t, 0);
    // truncated: frames after the last listed range are not claimed, so they go (the index went already)
    const d1 = DATA_SEQS[1];
    t.receiveReport(report({ exhaustive: true, truncated: true, missing: [[d1, d1 + 1]] }), 5);
    expect(sent(t, 5)).toEqual(DATA_SEQS.filter((q) => q >= d1));
  });

  test('a sender without reuse ignores the flag: a plain client\'s world is unchanged', () => {
    const s = new RepairSender(page.frames, IX, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e9 });
    const first = [] as number[];
    for (let d = s.nextDatagram(0); d; d = s.nextDatagram(0)) {
      first.push(seqOf(d));
      expect(d[11]).toBe(0);
    }
    expect(first.length).toBe(N);
  });
});

describe('assembler: local fill', () => {
  const flagged = page.frames.map((f) => {
    const g = f.slice();
    g.set(ID, 0);
    g[11] = FRAME_FLAG_REUSE;
    return g;
  });
  function withIndex(): CatpAssembler {
    const a = newAssembler();
    for (const q of INDEX_SEQS) a.receive(flagged[q], 0);
    return a;
  }

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
    // missing: every data frame but block 2's, as ranges
    const want = DATA_SEQS.filter((q) => q !== SEQ_OF_BLOCK[2]);
    const ranges: Array<[number, number]> = [];
    for (const q of want) {
      const last = ranges[ranges.length - 1];
      if (last && last[1] === q) last[1] = q + 1;
      else ranges.push([q, q + 1]);
    }
    expect(r.missing).toEqual(ranges);
  });

  // A network copy that arrives anyway (the hold expired, a sender that did not acknowledge reuse) must not
  // count the block twice (it did: progress() said 13 of 12 blocks, maybeFinish() threw on the missing block's
  // null payload, CATP_ERR_INTERNAL, and the page never completed); the stream load (protocol/catp/stream-load.ts)
  // counts `arrivedAnyway` from this CATP_DUPLICATE.
  test('a network copy of a block filled from the store is a duplicate, and the page still completes', () => {
    const a = withIndex();
    expect(a.fillLocal(2, payloadOf(2))).toBe(true);
    expect(a.receive(flagged[SEQ_OF_BLOCK[2]], 2).code).toBe(REJECT.DUPLICATE);
    for (const f of flagged) a.receive(f, 3);
    const types: string[] = [];
    for (let e = a.nextEvent(); e; e = a.nextEvent()) types.push(e.type);
    expect(a.counters().CATP_ERR_INTERNAL ?? 0).toBe(0);
    expect(types).toContain('page-complete');
  });

  test('a block is looked up the moment its index frame arrives: fillLocal before the rest of the index', () => {
    const a = newAssembler();
    // only the last index frame: the blocks it introduces are known, the others are not yet
    const last = page.pieces[IX - 1];
    expect(last.blocks.length).toBeGreaterThan(0);
    a.receive(flagged[INDEX_SEQS[IX - 1]], 0);
    expect(a.knownBlocks().map((b) => b.block)).toEqual(last.blocks.map((b) => b.block));
    const b = last.blocks[0].block;
    expect(a.blockInfo(b)?.seq).toBe(SEQ_OF_BLOCK[b]);
    expect(a.blockAtSeq(SEQ_OF_BLOCK[b])).toBe(b);
    expect(a.fillLocal(0, payloadOf(0))).toBe(b === 0); // block 0's index frame is not here
    expect(a.fillLocal(b, payloadOf(b))).toBe(true);
    const types: string[] = [];
    for (let e = a.nextEvent(); e; e = a.nextEvent()) types.push(e.type);
    expect(types).toEqual(['index-piece', 'block-filled']);
  });

  test('without the sender\'s acknowledgement there is no exhaustive report (an old server would refuse it)', () => {
    const a = newAssembler();
    for (const q of INDEX_SEQS) a.receive(page.frames[q], 0);
    expect(a.reuseAcked).toBe(false);
    expect(a.fillLocal(0, payloadOf(0))).toBe(true);
    expect(a.reuseReady()).toBe(false);
    for (let t = 0; t < 500; t += 25) {
      for (let r = a.nextReport(t); r; r = a.nextReport(t)) expect(decodeReport(r).exhaustive).toBe(false);
    }
  });
});

describe('content-defined blocks', () => {
  const changed = P.map((p, i) => (i === 20 ? 'a new paragraph, much shorter than the one it replaces.' : p));
  /** Blocks of `b` whose digest `a` does not have, and the bytes of their frames. */
  const fresh = (a: EncodedPage, b: EncodedPage): { blocks: number; bytes: number } => {
    const have = new Set(digests(a));
    const news = b.pieces.flatMap((x) => x.blocks).filter((x) => !have.has(hex(x.digest)));
    return { blocks: news.length, bytes: news.reduce((n, x) => n + b.frames[x.seq].length, 0) };
  };

  test('one paragraph changed: about its own blocks change; the rest keep their digests (frame-sized blocks, no codec)', () => {
    const a = encodePage(html(P), { sha256 });
    const b = encodePage(html(changed), { sha256 });
    const f = fresh(a, b);
    expect(a.blocks).toBeGreaterThan(15);
    expect(f.blocks).toBeGreaterThanOrEqual(1);
    expect(f.blocks).toBeLessThanOrEqual(3);
    // the digests are over the decoded block payloads, and the digest in the index is what the frame carries
    for (const x of a.pieces.flatMap((p) => p.blocks)) expect(hex(sha256(unpackPayload(a.frames[x.seq].subarray(HEADER_BYTES), undefined)).subarray(0, 16))).toBe(hex(x.digest));
    // the packed layout shifts everything after the edit
    const pa = encodePage(html(P), { sha256, blockCut: 'packed' });
    const pb = encodePage(html(changed), { sha256, blockCut: 'packed' });
    expect(fresh(pa, pb).blocks).toBeGreaterThan(f.blocks + 3);
  });

  test('with the server\'s codec (8 KB text blocks, brotli 11): one new block, under 1 KB on the wire', () => {
    const a = encodePage(html(P), { sha256, codec: serverCodec });
    const b = encodePage(html(changed), { sha256, codec: serverCodec });
    const f = fresh(a, b);
    expect(a.blocks).toBeGreaterThanOrEqual(4);
    expect(f.blocks).toBe(1);
    expect(f.bytes).toBeLessThan(1024);
    // digests do not depend on the codec: the decoded payloads are the same with or without compression
    const q5 = encodePage(html(P), { sha256, codec });
    expect(digests(q5)).toEqual(digests(a));
    // the packed layout: more of the page changes
    const pa = encodePage(html(P), { sha256, codec: serverCodec, blockCut: 'packed' });
    const pb = encodePage(html(changed), { sha256, codec: serverCodec, blockCut: 'packed' });
    expect(fresh(pa, pb).blocks).toBeGreaterThan(f.blocks);
    console.log(`content-defined blocks, one paragraph of 40 changed: no codec ${JSON.stringify(fresh(encodePage(html(P), { sha256 }), encodePage(html(changed), { sha256 })))}, ` +
      `brotli 11 ${JSON.stringify(f)} of ${a.blocks} blocks; packed + brotli 11 ${JSON.stringify(fresh(pa, pb))}`);
  });

  test.each(['content', 'packed'] as const)('many short texts (%s): no block holds more pieces than the index allows, and the page assembles', (blockCut) => {
    // 4,000 one-letter table cells: their pieces compress into one frame, and a block of more than MAX_BLOCK_PIECES
    // had every index frame describing one refused (CATP_ERR_BAD_INDEX: block pieces): the page never completed
    const table = `<!DOCTYPE html><table>${'<tr><td>1</td><td>2</td></tr>'.repeat(2000)}</table>`;
    const page = encodePage(table, { sha256, codec, blockCut });
    const blocks = page.pieces.flatMap((p) => p.blocks);
    expect(blocks.reduce((n, b) => n + b.pieces, 0)).toBe(4000);
    for (const b of blocks) expect(b.pieces).toBeLessThanOrEqual(MAX_BLOCK_PIECES);
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    for (const f of page.frames) {
      expect(asm.receive(f, 0).accepted).toBe(true);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
    }
    expect(asm.finished).toBe(true);
    expect(parse5.serialize(b.root as parse5.DefaultTreeAdapterMap['document'])).toBe(parse5.serialize(parse5.parse(table)));
  });
});

describe('a whole transfer over a lossy pipe with half the blocks held', () => {
  test.each([0, 0.2])('loss %p: the page completes, equals parse5, and no held block crosses the pipe', (loss) => {
    for (let seed = 1; seed <= 4; seed++) {
      const sender = new RepairSender(page.frames, IX, { requestId: ID, rateFramesPerSec: 2000, initialRttMs: 20, reuse: { holdMs: 2000 } });
      const client = newAssembler({ requestId: ID, otherPort: 40000, repair: { reportIntervalMs: 30 } });
      const held = new Set<number>();
      for (let b = 0; b < N - IX; b += 2) held.add(b);
      const res = runPipe<CatpEvent>(sender, client, {
        seed, loss, delayMs: 10, jitterMs: 4,
        onEvent: (e) => {
          if (e.type !== 'index-complete') return;
          for (const b of held) client.fillLocal(b, payloadOf(b));
          client.reuseReady();
        },
      });
      expect(res.completeAt).not.toBeNull();
      const tree = parse5TreeBuilder();
      for (const { e } of res.events) tree.apply(e);
      expect(parse5.serialize(tree.root!)).toBe(parse5.serialize(parse5.parse(html(P), { scriptingEnabled: false })));
      const dataSent = res.sent.map(seqOf).filter((q) => BLOCK_OF_SEQ.has(q)).map((q) => BLOCK_OF_SEQ.get(q) as number);
      if (loss === 0) expect(dataSent.filter((b) => held.has(b))).toEqual([]);
      // under loss the exhaustive report itself may be lost: then the hold's deadline (2 s) lets data go;
      // either way, every block the client lacked arrived
      expect(new Set(dataSent.filter((b) => !held.has(b))).size).toBe(Math.floor((N - IX) / 2));
      expect(sender.reuse?.stats.skipped ?? 0).toBeGreaterThan(0);
    }
  });
});

describe('protocol/README.md worked example', () => {
  const HTML = '<!DOCTYPE html><title>Hi</title><p>Hello, wörld!</p>';
  const id = Uint8Array.from([0x80, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07]);
  // The frames byte for byte (request ID zero: the sender stamps the real one), as protocol/README.md shows them.
  const INDEX_FRAME =
    '0000000000000000' + 'ca030100' + 'ee9e972eeb74e4f0' + '00000000' + '00000002' + '00000001' +
    '4382b4caed936861' + '00' +
    '08' + '00010800000000' + '00' +
    // the nodes as markup (index-markup.ts), 50 bytes: <%html""><html><head><title>Hi</></><body><p><$11>
    '32' + Buffer.from('<%html""><html><head><title>Hi</></><body><p><$11>').toString('hex') +
    '0001' + '0100' + '01' + 'fc03d1ad76cd4a660d412937a0b76866' + '000001' +
    'ee9e972eeb74e4f087a7f8e186a446b1a132c528f5d2ef3443d0ea290a64d50a';
  const DATA_FRAME = '0000000000000000' + 'ca030200' + 'ee9e972eeb74e4f0' + '00000001' + '00000002' + '00000001' + '00' + '01' + '0e' + '48656c6c6f2c2077c3b6726c6421';

  test('the example page encodes to the documented bytes (with or without the codec: brotli does not shrink frames this small)', () => {
    const ex = encodePage(HTML, { sha256 });
    expect(hex(ex.pageId)).toBe('ee9e972eeb74e4f0');
    expect(ex.frames.map(hex)).toEqual([INDEX_FRAME, DATA_FRAME]);
    expect(ex.frames.map((f) => f.length)).toEqual([157, 49]);
    const wire = encodePage(HTML, { sha256, codec: serverCodec });
    expect(wire.frames.map(hex)).toEqual([INDEX_FRAME, DATA_FRAME]);
    // it assembles
    const a = newAssembler();
    for (const f of ex.frames) a.receive(f, 0);
    const types: string[] = [];
    for (let e = a.nextEvent(); e; e = a.nextEvent()) types.push(e.type);
    expect(types).toEqual(['index-piece', 'index-complete', 'block-filled', 'page-complete']);
    // data before index: the held block fills once the index arrives, still after index-complete
    const b = newAssembler();
    for (const f of [...ex.frames].reverse()) b.receive(f, 0);
    const late: string[] = [];
    for (let e = b.nextEvent(); e; e = b.nextEvent()) late.push(e.type);
    expect(late).toEqual(['index-piece', 'index-complete', 'block-filled', 'page-complete']);
    if (process.env.CATP_WORKED_EXAMPLE) fs.writeFileSync(process.env.CATP_WORKED_EXAMPLE, workedExample());
  });

  test('the unchanged reload of the example page: block 0 from the store, one complete report, the data frame never sent', () => {
    const ex = encodePage(HTML, { sha256, codec: serverCodec });
    const s = new RepairSender(ex.frames, ex.indexFrames, { requestId: id, pacing: 'fixed', rateFramesPerSec: 1e9, reuse: { holdMs: 1000 } });
    const a = newAssembler({ requestId: id, otherPort: 40000 });
    a.start(0);
    const sentFrames: Uint8Array[] = [];
    for (let d = s.nextDatagram(0); d; d = s.nextDatagram(0)) sentFrames.push(d);
    expect(sentFrames).toHaveLength(1);
    expect(sentFrames[0][11]).toBe(0x01);
    a.receive(sentFrames[0], 1);
    expect(a.nextEvent()?.type).toBe('index-piece');
    expect(a.nextEvent()?.type).toBe('index-complete');
    // the store keeps decoded payloads: the data frame's payload after its method byte
    expect(a.fillLocal(0, unpackPayload(ex.frames[1].subarray(HEADER_BYTES), serverCodec))).toBe(true);
    a.reuseReady();
    const rep = a.nextReport(2) as Uint8Array;
    expect(hex(rep.subarray(11, 35))).toBe('ca030401' + 'ee9e972eeb74e4f0' + '00000001' + '00000002' + '00000001');
    expect(s.receiveReport(rep, 3).accepted).toBe(true);
    expect(s.finished).toBe(true);
    expect(s.stats.sent).toBe(1);
  });
});

/** An annotated hex dump of the example's frames (CATP_WORKED_EXAMPLE=/tmp/worked-example.txt writes it). */
function workedExample(): string {
  const ex = encodePage(HTML_EXAMPLE, { sha256, codec: serverCodec });
  const spaced = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join(' ');
  const dump = (b: Uint8Array): string => {
    const lines: string[] = [];
    for (let o = 0; o < b.length; o += 16) {
      const row = b.subarray(o, o + 16);
      const ascii = Array.from(row, (x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
      lines.push(`${o.toString(16).padStart(4, '0')}  ${spaced(row).padEnd(47)}  ${ascii}`);
    }
    return lines.join('\n');
  };
  const out: string[] = [];
  out.push(`CATP v3 worked example, generated by test/unit/catp/reuse.test.ts from the current encoder`);
  out.push(`page: ${HTML_EXAMPLE}`);
  out.push(`encodePage(html, { sha256, codec: brotliCodec(zlib) }) -> ${ex.indexFrames} index frame(s), ${ex.blocks} block(s), ${ex.frames.length} frames`);
  out.push(`page digest ${hex(ex.pageDigest)}, page id ${hex(ex.pageId)}`);
  out.push(`(brotli does not make either frame smaller, so both are stored, method 00, with the server's codec too)`);
  ex.frames.forEach((f, i) => {
    out.push('');
    out.push(`frame ${i} (${f[10] === FRAME_KIND.INDEX ? 'index' : 'data'}, ${f.length} bytes; request ID zero: the sender stamps the real one):`);
    out.push(dump(f));
    out.push(`header  ${spaced(f.subarray(0, 8))} | ${spaced(f.subarray(8, 12))} | ${spaced(f.subarray(12, 20))} | ${spaced(f.subarray(20, 24))} | ${spaced(f.subarray(24, 28))} | ${spaced(f.subarray(28, 32))}`);
    if (f[10] === FRAME_KIND.INDEX) {
      out.push(`check   ${spaced(f.subarray(32, 40))}`);
      out.push(`method  ${spaced(f.subarray(40, 41))}`);
      out.push(`body    ${spaced(f.subarray(41))}`);
    } else {
      out.push(`method  ${spaced(f.subarray(32, 33))}`);
      out.push(`block   ${spaced(f.subarray(33))}`);
    }
  });
  // A frame that does compress: the same page with a longer paragraph.
  const longer = encodePage(HTML_EXAMPLE.replace('Hello, wörld!', 'Hello, wörld! '.repeat(40)), { sha256, codec: serverCodec });
  const d = longer.frames.find((f) => f[10] === FRAME_KIND.DATA) as Uint8Array;
  out.push('');
  out.push(`A data frame that compresses: the same page with "Hello, wörld! " x 40 (560 bytes of text): ${d.length} bytes, method ${d[32].toString(16).padStart(2, '0')} (brotli)`);
  out.push(dump(d));
  return out.join('\n') + '\n';
}
const HTML_EXAMPLE = '<!DOCTYPE html><title>Hi</title><p>Hello, wörld!</p>';
