/** Hostile frames: each is refused with its named, counted reason; nothing throws; memory stays bounded. */
import fc from 'fast-check';
import * as parse5 from 'parse5';
import {
  CatpAssembler,
  CatpEvent,
  decodeIndexBody,
  encodeFrame,
  encodePage,
  encodeReport,
  FRAME_KIND,
  GrowWriter,
  INDEX_META_BYTES,
  MAX_DATAGRAM_PAYLOAD,
  REJECT,
  RepairSender,
  Skeleton,
  encodeIndexBody,
} from '../../../protocol/catp';
import { sha256, assemble } from '../../helpers/catp-util';

const HTML = `<!DOCTYPE html><title>t</title><p>${'hello wörld 😀 '.repeat(300)}</p><ul>${'<li>item é</li>'.repeat(50)}</ul>`;
const page = encodePage(HTML, { sha256, maxPayload: 400 });
const other = encodePage(HTML + '<p>other</p>', { sha256, maxPayload: 400 });

function drain(a: CatpAssembler): CatpEvent[] {
  const out: CatpEvent[] = [];
  for (let e = a.nextEvent(); e; e = a.nextEvent()) out.push(e);
  return out;
}
const setU32 = (f: Uint8Array, off: number, v: number): Uint8Array => {
  const c = f.slice();
  new DataView(c.buffer).setUint32(off, v);
  return c;
};

/** Frames for an arbitrary index body (digests made consistent, so only the body itself is wrong). */
function forgeIndex(body: Uint8Array, payloads: Uint8Array[] = []): Uint8Array[] {
  const canon = new Uint8Array(body.length + payloads.reduce((n, p) => n + p.length, 0));
  canon.set(body);
  let o = body.length;
  for (const p of payloads) {
    canon.set(p, o);
    o += p.length;
  }
  const digest = sha256(canon);
  const pageId = digest.slice(0, 8);
  const meta = new Uint8Array(INDEX_META_BYTES);
  meta.set(digest, 0);
  new DataView(meta.buffer).setUint32(32, body.length);
  meta.set(sha256(body), 36);
  const chunks: Uint8Array[] = [];
  const firstLen = Math.min(body.length, 1428 - INDEX_META_BYTES);
  const c0 = new Uint8Array(INDEX_META_BYTES + firstLen);
  c0.set(meta);
  c0.set(body.subarray(0, firstLen), INDEX_META_BYTES);
  chunks.push(c0);
  for (let p = firstLen; p < body.length; p += 1428) chunks.push(body.subarray(p, p + 1428));
  const total = chunks.length + payloads.length;
  const id = new Uint8Array(8);
  return [
    ...chunks.map((c, i) => encodeFrame({ id, kind: FRAME_KIND.INDEX, pageId, seq: i, total, indexFrames: chunks.length }, c)),
    ...payloads.map((p, i) => encodeFrame({ id, kind: FRAME_KIND.DATA, pageId, seq: chunks.length + i, total, indexFrames: chunks.length }, p)),
  ];
}

function expectRefused(frames: Uint8Array[], code: string, setup: Uint8Array[] = []): CatpAssembler {
  const a = new CatpAssembler({ sha256 });
  for (const f of setup) a.receive(f, 0);
  let last;
  for (const f of frames) last = a.receive(f, 0);
  expect(last?.accepted).toBe(false);
  expect(last?.code).toBe(code);
  expect(a.counters()[code]).toBeGreaterThanOrEqual(1);
  return a;
}

describe('hostile frames', () => {
  const f0 = page.frames[0];
  const d0 = page.frames[page.indexFrames];

  test('truncated, oversized, not CATP, wrong version, wrong kind, bad flags', () => {
    expectRefused([f0.subarray(0, 20)], REJECT.TRUNCATED);
    expectRefused([new Uint8Array(MAX_DATAGRAM_PAYLOAD + 1)], REJECT.OVERSIZED);
    const http = new TextEncoder().encode('\x80\x01\x02\x03\x04\x05\x06\x07HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
    expectRefused([http], REJECT.BAD_MAGIC);
    const v = f0.slice();
    v[9] = 2;
    expectRefused([v], REJECT.BAD_VERSION);
    const k = f0.slice();
    k[10] = 9;
    expectRefused([k], REJECT.WRONG_KIND);
    const dk = d0.slice();
    dk[10] = FRAME_KIND.INDEX; // an index frame number beyond indexFrames
    expectRefused([dk], REJECT.WRONG_KIND);
    const raw = encodeFrame({ id: new Uint8Array(8), kind: FRAME_KIND.RAW, pageId: page.pageId, seq: 0, total: 1, indexFrames: 0 }, new Uint8Array(40));
    expectRefused([raw], REJECT.WRONG_KIND);
    // bit 0 is FRAME_FLAG_REUSE (block reuse); every other flag bit is still refused
    for (const bits of [2, 4, 0x80, 0xfe]) {
      const fl = f0.slice();
      fl[11] = bits;
      expectRefused([fl], REJECT.BAD_FLAGS);
    }
  });

  test('wrong page, wrong request id, inconsistent header, out-of-range numbers, absurd counts', () => {
    expectRefused([other.frames[1]], REJECT.WRONG_PAGE, [f0]);
    const a = new CatpAssembler({ sha256, pageId: page.pageId });
    expect(a.receive(other.frames[0], 0).code).toBe(REJECT.WRONG_PAGE);
    const id = f0.slice();
    id[3] ^= 1;
    expectRefused([id], REJECT.WRONG_ID, [f0]);
    expectRefused([setU32(d0, 24, page.frames.length + 1)], REJECT.INCONSISTENT_HEADER, [f0]);
    expectRefused([setU32(d0, 20, page.frames.length)], REJECT.SEQ_OUT_OF_RANGE);
    expectRefused([setU32(d0, 24, 0xffffffff)], REJECT.ABSURD_COUNT);
    expectRefused([setU32(setU32(d0, 24, 1_000_000), 20, 999_999)], REJECT.ABSURD_COUNT);
    expectRefused([setU32(d0, 28, 0)], REJECT.INCONSISTENT_HEADER);
    expectRefused([setU32(d0, 28, page.frames.length + 5)], REJECT.INCONSISTENT_HEADER);
  });

  test('contradicting duplicates: the first copy is kept; a bad held copy is dropped and asked for again', () => {
    const bad = d0.slice();
    bad[bad.length - 1] ^= 0x20;
    // after the index: the good one is verified and kept
    expectRefused([d0, bad], REJECT.CONTRADICTING_DUPLICATE, page.frames.slice(0, page.indexFrames));
    // before the index: the bad one is held, fails its block digest when the index arrives, is forgotten
    const a = new CatpAssembler({ sha256 });
    a.receive(bad, 0);
    expect(a.receive(d0, 0).code).toBe(REJECT.CONTRADICTING_DUPLICATE);
    for (const f of page.frames.slice(0, page.indexFrames)) a.receive(f, 0);
    expect(a.counters()[REJECT.BLOCK_DIGEST]).toBe(1);
    expect(a.receiver.has(page.indexFrames)).toBe(false);
    for (const f of page.frames) a.receive(f, 0);
    expect(drain(a).some((e) => e.type === 'page-complete')).toBe(true);
  });

  test('a corrupted index frame fails the index digest: all index frames are dropped and re-requested', () => {
    const bad = page.frames[1].slice();
    bad[40] ^= 1;
    const a = new CatpAssembler({ sha256 });
    a.receive(f0, 0);
    a.receive(bad, 0);
    for (const f of page.frames.slice(2, page.indexFrames)) a.receive(f, 0);
    expect(a.counters()[REJECT.INDEX_DIGEST]).toBe(1);
    expect(a.receiver.has(0)).toBe(false);
    for (const f of page.frames) a.receive(f, 0);
    expect(drain(a).map((e) => e.type)).toContain('page-complete');
  });

  const goodSk = page.skeleton;
  const skWith = (patch: Partial<Skeleton>): Uint8Array => encodeIndexBody({ ...goodSk, ...patch });

  test('an index whose slots point at nothing / whose blocks overlap / that lies about counts is refused', () => {
    const cases: Array<[string, Uint8Array]> = [
      ['slots point past the pieces', skWith({ pieceCount: goodSk.pieceCount - 1 })],
      ['a piece nobody points at', skWith({ pieceCount: goodSk.pieceCount + 1, blocks: [...goodSk.blocks.slice(0, -1), { ...goodSk.blocks[goodSk.blocks.length - 1], pieces: goodSk.blocks[goodSk.blocks.length - 1].pieces + 1 }] })],
      ['two blocks claim the same piece', skWith({ blocks: [{ ...goodSk.blocks[0], pieces: goodSk.blocks[0].pieces + 1 }, ...goodSk.blocks.slice(1)] })],
      ['more nodes declared', skWith({ nodeCount: goodSk.nodeCount + 1 })],
      ['absurd node count', skWith({ nodeCount: 0xffffffff })],
      ['absurd block count', skWith({ blocks: new Array(100000).fill(goodSk.blocks[0]) })],
    ];
    for (const [why, body] of cases) {
      expect(() => decodeIndexBody(body)).toThrow(/CATP_ERR_BAD_INDEX/);
      const frames = forgeIndex(body, []);
      const a = new CatpAssembler({ sha256 });
      const results = frames.map((f) => a.receive(f, 0));
      const ev = drain(a);
      expect([why, results.some((r) => r.code === REJECT.BAD_INDEX)]).toEqual([why, true]);
      expect(ev.map((e) => e.type)).toEqual(['page-corrupt']);
    }
  });

  test('an index that would nest a million levels is refused at the depth limit, without recursion', () => {
    const w = new GrowWriter();
    const N = 1_000_000;
    w.u8(0);
    w.u8(0);
    w.varint(N);
    w.varint(0);
    w.varint(0);
    w.varint(0);
    w.varint(1);
    w.u8(1); // element
    w.u8(0);
    w.varint(0); // new name
    w.varint(3);
    w.bytes(new TextEncoder().encode('div'));
    w.varint(0); // attrs
    w.varint(1); // one child
    for (let i = 1; i < N; i++) {
      w.u8(1);
      w.u8(0);
      w.varint(1); // name ref 0
      w.varint(0);
      w.varint(i === N - 1 ? 0 : 1);
    }
    const body = w.result();
    expect(() => decodeIndexBody(body)).toThrow(/CATP_ERR_BAD_INDEX: too deep/);
    // the same through frames (a 5 MB index: ~3500 index frames), refused with a counted reason
    const frames = forgeIndex(body);
    const a = new CatpAssembler({ sha256 });
    for (const f of frames) a.receive(f, 0);
    expect(a.counters()[REJECT.BAD_INDEX]).toBe(1);
    expect(drain(a).map((e) => e.type)).toEqual(['page-corrupt']);
    // and an index too large for the configured limit is refused by its frame count
    const small = new CatpAssembler({ sha256, limits: { maxIndexFrames: 100 } });
    expect(small.receive(frames[0], 0).code).toBe(REJECT.ABSURD_COUNT);
  });

  test('held data frames are bounded before the index arrives', () => {
    const a = new CatpAssembler({ sha256, limits: { maxHeldBytes: 1000 } });
    const res = page.frames.slice(page.indexFrames).map((f) => a.receive(f, 0));
    expect(res.filter((r) => r.code === REJECT.HOLD_FULL).length).toBeGreaterThan(0);
    // what was dropped is not marked received, so repair asks for it and the page still completes
    for (const f of page.frames) a.receive(f, 0);
    expect(drain(a).map((e) => e.type)).toContain('page-complete');
  });

  test('random bytes and random mutations never throw, and never complete a wrong page', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1600 }), (b) => {
        const a = new CatpAssembler({ sha256 });
        expect(a.receive(b, 0).accepted).toBe(false);
      }),
      { numRuns: 2000 },
    );
    const want = parse5.serialize(parse5.parse(HTML));
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.nat(), fc.nat(), fc.integer({ min: 1, max: 255 })), { maxLength: 6 }), (muts) => {
        const frames = page.frames.map((f) => f);
        for (const [fi, off, x] of muts) {
          const i = fi % frames.length;
          const c = frames[i].slice();
          c[off % c.length] ^= x;
          frames[i] = c;
        }
        const { builder, events } = assemble([...frames, ...page.frames]);
        const last = events[events.length - 1];
        if (last?.type === 'page-complete') expect(parse5.serialize(builder.root as parse5.DefaultTreeAdapterMap['document'])).toBe(want);
      }),
      { numRuns: 300 },
    );
  });

  test('hostile reports never throw and are refused with a reason', () => {
    const id = new Uint8Array([0x80, 1, 2, 3, 4, 5, 6, 7]);
    const s = new RepairSender(page.frames, page.indexFrames, { requestId: id });
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1600 }), (b) => {
        expect(s.receiveReport(b, 0).accepted).toBe(false);
      }),
    );
    const rep = (o: Partial<Parameters<typeof encodeReport>[0]>): Uint8Array =>
      encodeReport({ id, otherPort: 5000, complete: false, truncated: false, pageId: page.pageId, reportNo: 1, total: page.frames.length, received: 0, echoSeq: 0, echoDelayMs: 0, missing: [], ...o });
    expect(s.receiveReport(rep({ id: new Uint8Array(8) }), 0).code).toBe(REJECT.WRONG_ID);
    expect(s.receiveReport(rep({ pageId: other.pageId }), 0).code).toBe(REJECT.WRONG_PAGE);
    expect(s.receiveReport(rep({ total: 5 }), 0).code).toBe(REJECT.INCONSISTENT_HEADER);
    const pastEnd = rep({ missing: [[0, page.frames.length + 10]], total: 0 });
    expect(s.receiveReport(pastEnd, 0).accepted).toBe(true); // total unknown: clipped to the page
    expect(s.receiveReport(rep({ reportNo: 1 }), 0).code).toBe('CATP_STALE_REPORT');
    const trunc = rep({ reportNo: 9, missing: [[0, 1]] });
    expect(s.receiveReport(trunc.subarray(0, trunc.length - 1), 0).code).toBe(REJECT.TRUNCATED);
  });
});
