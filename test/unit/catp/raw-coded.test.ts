/**
 * In-order mode with the stream brotli-coded (FRAME_FLAG_BROTLI, protocol/catp/raw.ts): the baseline carries what
 * TCP carries. The prefix decodes as it grows, in any arrival order the page is rebuilt exactly, and a hostile
 * stream is refused with a counted reason.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  decodeHeader,
  encodeRaw,
  FRAME_FLAG_BROTLI,
  FRAME_KIND,
  HEADER_BYTES,
  RAW_MAX_EXPANSION,
  RAW_META_BYTES,
  RawAssembler,
  REJECT,
  type FrameCodec,
  type RawAssemblerEvent,
} from '../../../protocol/catp';
import { encodeFrame, writeHeader } from '../../../protocol/catp/wire';
import { codec, rng, scramble, sha256 } from '../../helpers/catp-util';
import { realPages } from '../../helpers/catp-real-pages';
import { describeIf } from '../../helpers/requires';

const pages = realPages();
const page = (name: string): Uint8Array => new Uint8Array(fs.readFileSync(path.join((pages as { dir: string }).dir, name)));

/** Feed frames; the events, and the page bytes the prefix events carried, in order. */
function feed(frames: readonly Uint8Array[], asm: RawAssembler): { events: RawAssemblerEvent[]; bytes: Uint8Array; lengths: number[] } {
  const events: RawAssemblerEvent[] = [];
  const parts: Uint8Array[] = [];
  const lengths: number[] = [];
  let at = asm.prefixLength;
  for (const f of frames) {
    asm.receive(f, 0);
    for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
      events.push(e);
      if (e.type === 'prefix-extended') {
        expect(e.offset).toBe(at);
        at = e.length;
        parts.push(e.bytes);
        lengths.push(e.length);
      }
    }
  }
  return { events, bytes: Buffer.concat(parts), lengths };
}

const coded = (bytes: Uint8Array, maxPayload?: number) => encodeRaw(bytes, { sha256, codec, ...(maxPayload ? { maxPayload } : {}) });
const newRaw = (c: FrameCodec | null = codec) => new RawAssembler({ sha256, ...(c !== null ? { codec: c } : {}) });
/** A copy of `frame` with its payload replaced (header kept). */
const withPayload = (frame: Uint8Array, payload: Uint8Array): Uint8Array => {
  const out = new Uint8Array(HEADER_BYTES + payload.length);
  out.set(frame.subarray(0, HEADER_BYTES));
  out.set(payload, HEADER_BYTES);
  return out;
};

describeIf(pages !== null, 'the real-pages corpus (../shared/corpus/real-pages)')('a brotli-coded in-order stream', () => {
  test('fewer frames than the page as it is; every frame flagged; in send order the page shows from the first frame on', () => {
    const bytes = page('medium-2.html');
    const plain = encodeRaw(bytes, { sha256 });
    const enc = coded(bytes);
    expect(enc.compressed).toBe(true);
    expect(plain.compressed).toBe(false);
    expect(enc.frames.length * 3).toBeLessThan(plain.frames.length);
    for (const f of enc.frames) expect(decodeHeader(f).flags).toBe(FRAME_FLAG_BROTLI);
    for (const f of plain.frames) expect(decodeHeader(f).flags).toBe(0);
    const asm = newRaw();
    const seen: number[] = [];
    for (const f of enc.frames) {
      asm.receive(f, 0);
      seen.push(asm.prefixLength);
    }
    // the first frame alone already gives more of the page than an uncoded frame carries
    expect(seen[0]).toBeGreaterThan(plain.frames[0].length - HEADER_BYTES - RAW_META_BYTES);
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1]);
    expect(seen[seen.length - 1]).toBe(bytes.length);
  });

  test.each(['daringfireball-1.html', 'heise.html', 'liberation-1.html'])('%s: 20 random orders with duplicates and a third lost then resent: exact bytes', (name) => {
    const bytes = page(name);
    const enc = coded(bytes, 600); // small frames: many of them
    for (let seed = 1; seed <= 20; seed++) {
      const r = rng(seed);
      const first = scramble(enc.frames, r).filter(() => r() > 1 / 3);
      const asm = newRaw();
      const a = feed(first, asm);
      const b = feed(scramble(enc.frames, r), asm);
      const events = [...a.events, ...b.events];
      expect(events.filter((e) => e.type === 'page-complete')).toHaveLength(1);
      expect(events.some((e) => e.type === 'page-corrupt')).toBe(false);
      expect(Buffer.from(Buffer.concat([a.bytes, b.bytes])).equals(Buffer.from(bytes))).toBe(true);
      expect(asm.counters()['CATP_ERR_BAD_CODEC'] ?? 0).toBe(0);
    }
  });

  test('a 1 MB page: the prefix is decoded again a bounded number of times (every frame up to 64 KiB of stream, then by eighths)', () => {
    const bytes = page('wikipedia-2.html');
    const enc = coded(bytes);
    let calls = 0;
    let decoded = 0;
    const counting: FrameCodec = {
      ...codec,
      decodeStreamPrefix(prefix, maxBytes, end) {
        calls++;
        const out = (codec.decodeStreamPrefix as NonNullable<FrameCodec['decodeStreamPrefix']>)(prefix, maxBytes, end);
        decoded += out.length;
        return out;
      },
    };
    const { bytes: got, lengths } = feed(enc.frames, newRaw(counting));
    expect(Buffer.from(got).equals(Buffer.from(bytes))).toBe(true);
    const streamBytes = enc.frames.reduce((n, f) => n + f.length - HEADER_BYTES, 0) - RAW_META_BYTES;
    const perFrame = Math.ceil((64 * 1024) / (enc.frames[1].length - HEADER_BYTES));
    expect(calls).toBeLessThanOrEqual(perFrame + 2 + Math.ceil(Math.log(streamBytes / (64 * 1024)) / Math.log(9 / 8)));
    expect(calls).toBeLessThan(enc.frames.length);
    // what the repeated decodes cost, in page bytes decoded per page byte
    expect(decoded / bytes.length).toBeLessThan(40);
    expect(lengths.length).toBe(calls);
  });
});

describe('a hostile coded stream is refused with a counted reason', () => {
  /** A page of seeded random words: it compresses, but not into one frame. */
  const wordsPage = (seed: number): Uint8Array => {
    const r = rng(seed);
    const words = Array.from({ length: 2500 }, () => Array.from({ length: 2 + Math.floor(r() * 7) }, () => String.fromCharCode(97 + Math.floor(r() * 26))).join(''));
    return new TextEncoder().encode(`<!doctype html><title>t</title><p>${words.join(' ')}</p>`);
  };
  const html = wordsPage(1);
  const enc = coded(html, 300);
  test('the hostile page spans many coded frames', () => expect(enc.frames.length).toBeGreaterThan(10));

  test('the BROTLI flag on a CATP frame is refused at the header', () => {
    const f = enc.frames[1].slice();
    f[10] = FRAME_KIND.DATA;
    f[28 + 3] = 1; // indexFrames = 1, so only the flag is wrong
    expect(() => decodeHeader(f)).toThrow(expect.objectContaining({ code: REJECT.BAD_FLAGS }));
  });

  test('frames that disagree on the flag: the odd one is refused, the page still completes', () => {
    const odd = enc.frames[2].slice();
    odd[11] = 0;
    const asm = newRaw();
    const { events, bytes } = feed([enc.frames[0], enc.frames[1], odd, ...enc.frames.slice(2)], asm);
    expect(asm.counters()[REJECT.INCONSISTENT_HEADER]).toBe(1);
    expect(events.filter((e) => e.type === 'page-complete')).toHaveLength(1);
    expect(Buffer.from(bytes).equals(Buffer.from(html))).toBe(true);
  });

  test('a coded stream to a client without the codec: every frame refused (BAD_CODEC), nothing handed on', () => {
    const asm = newRaw(null);
    const { events } = feed(enc.frames, asm);
    expect(events).toHaveLength(0);
    expect(asm.counters()[REJECT.BAD_CODEC]).toBe(enc.frames.length);
  });

  test('a stream that does not decode: page-corrupt BAD_CODEC, once, and nothing after it', () => {
    const bad = enc.frames.map((f, i) => (i === 1 ? withPayload(f, new Uint8Array(f.length - HEADER_BYTES).fill(0xff)) : f));
    const asm = newRaw();
    const { events } = feed(bad, asm);
    const corrupt = events.filter((e) => e.type === 'page-corrupt');
    expect(corrupt).toHaveLength(1);
    expect(corrupt[0]).toMatchObject({ code: REJECT.BAD_CODEC });
    expect(events.some((e) => e.type === 'page-complete')).toBe(false);
    expect(asm.finished).toBe(true);
  });

  test('a length past the expansion bound is refused before anything is decoded (ABSURD_COUNT)', () => {
    const f0 = enc.frames[0].slice();
    new DataView(f0.buffer).setUint32(HEADER_BYTES + 32, enc.frames.length * 1428 * RAW_MAX_EXPANSION + 1);
    const asm = newRaw();
    asm.receive(f0, 0);
    expect(asm.counters()[REJECT.ABSURD_COUNT]).toBe(1);
    expect(asm.prefixLength).toBe(0);
  });

  test('a stream that decodes to more than the page length: page-corrupt BAD_CODEC (the decoder is bounded by the length)', () => {
    const f0 = enc.frames[0].slice();
    new DataView(f0.buffer).setUint32(HEADER_BYTES + 32, 1000);
    const asm = newRaw();
    const { events } = feed([f0, ...enc.frames.slice(1)], asm);
    expect(events.filter((e) => e.type === 'page-corrupt')).toEqual([expect.objectContaining({ code: REJECT.BAD_CODEC })]);
    expect(asm.prefixLength).toBeLessThanOrEqual(1000);
  });

  test('a stream cut short (a sender claiming fewer frames): page-corrupt at the end, not a short page passed as whole', () => {
    const cut = enc.frames.slice(0, 3).map((f) => {
      const g = f.slice();
      const h = decodeHeader(g);
      writeHeader(g, { ...h, id: h.id.slice(), pageId: h.pageId.slice(), total: 3 });
      return g;
    });
    const { events } = feed(cut, newRaw());
    expect(events.filter((e) => e.type === 'page-corrupt')).toEqual([expect.objectContaining({ code: REJECT.BAD_CODEC })]);
    expect(events.some((e) => e.type === 'page-complete')).toBe(false);
  });

  test('a stream that decodes whole but to another page: page-corrupt (the digest is of the decoded page)', () => {
    const other = coded(wordsPage(2), 300);
    const h0 = decodeHeader(enc.frames[0]);
    // the other page's stream under this page's header and digest
    const forged = other.frames.map((f, i) => {
      const h = decodeHeader(f);
      const payload = f.slice(HEADER_BYTES);
      if (i === 0) payload.set(enc.frames[0].subarray(HEADER_BYTES, HEADER_BYTES + 32), 0);
      return encodeFrame({ ...h, id: h.id.slice(), flags: FRAME_FLAG_BROTLI, pageId: h0.pageId.slice() }, payload);
    });
    const { events } = feed(forged, newRaw());
    expect(events.filter((e) => e.type === 'page-corrupt')).toEqual([expect.objectContaining({ code: 'CATP_ERR_PAGE_DIGEST' })]);
  });
});
