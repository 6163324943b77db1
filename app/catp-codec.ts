// The CATP frame codec the host uses: brotli (protocol/catp/payload-codec.ts brotliCodec; protocol/ is Node-free, so
// the zlib module is passed in), each frame decoded by libbrotli through the native addon when it was built with it:
// Node's brotliDecompressSync builds a stream object per call, most of what a frame cost the assembler (bench:catp).
import * as zlib from 'node:zlib';

import { nativeBrotliDecode } from '../native';
import { brotliCodec, type BrotliCodecOptions, type FrameCodec } from '../protocol/catp';

/** Which decoder a codec from `hostCodec` uses for frames. */
export type FrameDecoder = 'libbrotli' | 'node-zlib';

/** Brotli for CATP frames: Node's encoder, and the native decoder when there is one. */
export function hostCodec(opts: BrotliCodecOptions = {}): FrameCodec & { decoder: FrameDecoder } {
  const codec = brotliCodec(zlib, opts);
  const decode = nativeBrotliDecode();
  return decode === null ? { ...codec, decoder: 'node-zlib' } : { ...codec, decompress: decode, decoder: 'libbrotli' };
}

export const catpCodec: FrameCodec = hostCodec();
