// The addon's brotli frame decoder (native/src/brotli.cc), which the host's frame codec uses (app/catp-codec.ts):
// it decodes every compressed frame of real pages exactly as Node's decoder does, and hostile input — corrupt, cut
// short, too large, trailing bytes, wrong arguments — is refused with a named error, never a crash or an overrun.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';

import { hostCodec } from '../../app/catp-codec';
import { NativeError, nativeBrotliDecode } from '../../native';
import { blockFrames, CatpAssembler, CHECK_BYTES, decodeHeader, encodePage, FRAME_KIND, HEADER_BYTES, METHOD_COMPRESSED } from '../../protocol/catp';
import { sha256 } from '../../platform/sha256';
import { seededRng } from '../../protocol/random';
import { zlibCodec } from '../helpers/catp-util';
import { realPages } from '../helpers/catp-real-pages';
import { describeIf } from '../helpers/requires';

const decode = nativeBrotliDecode();
const pages = realPages();

function refused(f: () => unknown, message: RegExp): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(NativeError);
  expect((err as NativeError).code).toBe('NATIVE_ERR_BROTLI');
  expect((err as NativeError).message).toMatch(message);
}

describeIf(decode !== null, 'the addon built with libbrotli (apt-get install libbrotli-dev, then npm install)')('native brotli decoder', () => {
  const d = decode as (bytes: Uint8Array, maxBytes: number) => Uint8Array;
  const text = new TextEncoder().encode('<p>The quick brown fox jumps over the lazy dog. '.repeat(40));
  const packed = new Uint8Array(zlib.brotliCompressSync(text));

  test('the host codec decodes with it', () => {
    expect(hostCodec().decoder).toBe('libbrotli');
  });

  test('round trip, and a stream of exactly maxBytes is accepted', () => {
    expect(Buffer.from(d(packed, 64 * 1024)).equals(Buffer.from(text))).toBe(true);
    expect(d(packed, text.length)).toHaveLength(text.length);
    expect(d(new Uint8Array(zlib.brotliCompressSync(new Uint8Array(0))), 0)).toHaveLength(0);
  });

  test('hostile streams are refused by name', () => {
    refused(() => d(packed, text.length - 1), /output larger than/);
    refused(() => d(new Uint8Array(0), 100), /cut short/);
    for (const cut of [1, 5, packed.length >> 1, packed.length - 1]) refused(() => d(packed.subarray(0, cut), 1 << 16), /cut short|corrupt/);
    const trailing = new Uint8Array(packed.length + 3);
    trailing.set(packed);
    refused(() => d(trailing, 1 << 16), /after the end/);
    // a memory bomb: 10 MB of one byte in a few bytes of stream, against a frame's 64 KiB
    const bomb = new Uint8Array(zlib.brotliCompressSync(new Uint8Array(10 << 20)));
    expect(bomb.length).toBeLessThan(100);
    refused(() => d(bomb, 64 * 1024), /output larger than 65536/);
  });

  test('random bytes and bit flips: refused or bounded, never a crash', () => {
    const r = seededRng(7);
    let refusals = 0;
    for (let i = 0; i < 3000; i++) {
      let input: Uint8Array;
      if (i % 2 === 0) {
        input = new Uint8Array(1 + Math.floor(r() * 200)).map(() => Math.floor(r() * 256));
      } else {
        input = packed.slice();
        input[Math.floor(r() * input.length)] ^= 1 << Math.floor(r() * 8);
      }
      try {
        expect(d(input, 4096).length).toBeLessThanOrEqual(4096);
      } catch (e) {
        expect((e as NativeError).code).toBe('NATIVE_ERR_BROTLI');
        refusals++;
      }
    }
    expect(refusals).toBeGreaterThan(1500);
  });

  test('wrong arguments are refused, not trusted', () => {
    const bad = d as unknown as (...a: unknown[]) => unknown;
    for (const args of [[], ['text', 10], [packed], [packed, 'ten'], [new Uint16Array(4), 10], [packed, -1], [packed, 17 << 20], [packed, NaN]]) {
      let code: string | undefined;
      try {
        bad(...args);
      } catch (e) {
        code = (e as NativeError).code;
      }
      expect(code).toBe('NATIVE_ERR_INVALID_ARG');
    }
  });

  describeIf(pages !== null, 'the real pages (../shared/corpus)')('on real pages', () => {
    const files = pages ? pages.files.filter((_, i) => i % 8 === 0) : [];
    test.each(files)('%s: every frame (every block of several frames) decodes as Node decodes it, and the page assembles', (file) => {
      const bytes = new Uint8Array(fs.readFileSync(path.join((pages as { dir: string }).dir, file)));
      const page = encodePage(bytes, { sha256, codec: zlibCodec });
      let compressed = 0;
      // each index frame alone, each block alone (a block of several frames: its frames' payloads joined)
      const bodies = page.frames.flatMap((fr) => (decodeHeader(fr).kind === FRAME_KIND.INDEX ? [fr.subarray(HEADER_BYTES + CHECK_BYTES)] : []));
      for (const b of page.pieces.flatMap((pc) => pc.blocks)) bodies.push(Buffer.concat(page.frames.slice(b.seq, b.seq + blockFrames(b)).map((fr) => fr.subarray(HEADER_BYTES))));
      for (const body of bodies) {
        if (body[0] !== METHOD_COMPRESSED) continue;
        compressed++;
        const want = zlib.brotliDecompressSync(body.subarray(1));
        expect(Buffer.from(d(body.subarray(1), 64 * 1024)).equals(want)).toBe(true);
      }
      expect(compressed).toBeGreaterThan(0);
      const asm = new CatpAssembler({ sha256, codec: hostCodec() });
      const types: string[] = [];
      for (let k = page.frames.length - 1; k >= 0; k--) {
        asm.receive(page.frames[k], 0);
        for (let e = asm.nextEvent(); e; e = asm.nextEvent()) types.push(e.type);
      }
      expect(types[types.length - 1]).toBe('page-complete');
    });
  });
});
