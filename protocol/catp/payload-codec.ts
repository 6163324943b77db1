/**
 * Frame payload compression. Every CATP frame is compressed on its own, so it still decodes alone, in any
 * order. The codec is injected (as sha256 is): protocol/ stays free of Node; the host passes Node's brotli
 * (app/catp-codec.ts), whose built-in dictionary was made from web content, so even one frame of markup or
 * text compresses well.
 *
 * A packed payload is `u8 method | bytes`: method 0 = stored (the bytes as they are), 1 = compressed with the
 * codec. The encoder stores whatever is smaller. The decoder bounds the output (MAX_DECODED_PAYLOAD): a frame
 * that would inflate past it is refused, so a 1.4 kB datagram can never become a memory bomb.
 *
 * In-order mode (raw.ts) codes the whole page as one stream instead, as an HTTP server would (compressStream,
 * decodeStreamPrefix): usable only in order, which is all that mode can use anyway.
 */
import { REJECT, Reject } from './errors';

export interface FrameCodec {
  /**
   * Compress. `effort` 'search' is called many times while the encoder looks for where to cut a frame (fast,
   * roughly the final size or a little more); 'final' once per frame that goes on the wire (best ratio).
   */
  compress(bytes: Uint8Array, effort: 'search' | 'final'): Uint8Array;
  /**
   * Decompress; throw anything on corrupt input or when the output would exceed `maxBytes`. The assembler keeps what
   * this returns as it is when it spans its whole buffer (so never hand out a view of a buffer reused later), and
   * copies any other view.
   */
  decompress(bytes: Uint8Array, maxBytes: number): Uint8Array;
  /**
   * In-order mode (raw.ts): the whole page as one compressed stream, as an HTTP server's `Content-Encoding`
   * would send it. Optional: a codec without it sends in-order pages as they are.
   */
  compressStream?(bytes: Uint8Array): Uint8Array;
  /**
   * What a prefix of such a stream decodes to so far (at most `maxBytes`; throw anything past that or on a
   * corrupt stream). `end`: the prefix is the whole stream, which must then be complete.
   */
  decodeStreamPrefix?(prefix: Uint8Array, maxBytes: number, end: boolean): Uint8Array;
}

export const METHOD_STORED = 0;
export const METHOD_COMPRESSED = 1;
/** Largest decoded payload of one frame (64 KiB). */
export const MAX_DECODED_PAYLOAD = 64 * 1024;

/** `u8 method | bytes`, whichever of stored / compressed is smaller. */
export function packPayload(body: Uint8Array, codec: FrameCodec | undefined, effort: 'search' | 'final'): Uint8Array {
  if (codec !== undefined && body.length > 16) {
    const c = codec.compress(body, effort);
    if (c.length < body.length) {
      const out = new Uint8Array(1 + c.length);
      out[0] = METHOD_COMPRESSED;
      out.set(c, 1);
      return out;
    }
  }
  const out = new Uint8Array(1 + body.length);
  out[0] = METHOD_STORED;
  out.set(body, 1);
  return out;
}

/** The decoded bytes of a packed payload. Throws Reject(BAD_CODEC) on an unknown method or a codec failure. */
export function unpackPayload(packed: Uint8Array, codec: FrameCodec | undefined, maxBytes = MAX_DECODED_PAYLOAD): Uint8Array {
  if (packed.length < 1) throw new Reject(REJECT.TRUNCATED, 'empty payload');
  const method = packed[0];
  const rest = packed.subarray(1);
  if (method === METHOD_STORED) return rest;
  if (method !== METHOD_COMPRESSED) throw new Reject(REJECT.BAD_CODEC, `method ${method}`);
  if (codec === undefined) throw new Reject(REJECT.BAD_CODEC, 'compressed frame, no codec');
  let out: Uint8Array;
  try {
    out = codec.decompress(rest, maxBytes);
  } catch (e) {
    throw new Reject(REJECT.BAD_CODEC, e instanceof Error ? e.message : 'decompress failed');
  }
  if (!(out instanceof Uint8Array) || out.length > maxBytes) throw new Reject(REJECT.BAD_CODEC, 'output too large');
  return out;
}

/** The part of Node's zlib module the brotli codec uses (passed in: protocol/ imports nothing of Node). */
export interface BrotliModule {
  brotliCompressSync(buf: Uint8Array, options: { params: Record<number, number> }): Uint8Array;
  brotliDecompressSync(buf: Uint8Array, options: { maxOutputLength: number; finishFlush?: number }): Uint8Array;
  constants: {
    BROTLI_OPERATION_FLUSH: number;
    BROTLI_OPERATION_FINISH: number;
    BROTLI_PARAM_QUALITY: number;
    BROTLI_PARAM_MODE: number;
    BROTLI_MODE_TEXT: number;
    BROTLI_PARAM_SIZE_HINT: number;
    BROTLI_PARAM_LGWIN: number;
  };
}

export interface BrotliCodecOptions {
  /**
   * Quality of the frames that go on the wire (default 11, brotli's best: the server caches encoded pages, so
   * this is paid once per page version). The search for where to cut a frame uses quality 5 (fast).
   */
  finalQuality?: number;
}

/**
 * Brotli as the frame codec (`brotliCodec(require('node:zlib'))`): its built-in dictionary was built from web
 * content, so a single frame of markup or text compresses well on its own.
 */
export function brotliCodec(zlib: BrotliModule, opts: BrotliCodecOptions = {}): FrameCodec {
  const c = zlib.constants;
  const finalQuality = opts.finalQuality ?? 11;
  const run = (quality: number, bytes: Uint8Array): Uint8Array => {
    const out = zlib.brotliCompressSync(bytes, {
      params: {
        [c.BROTLI_PARAM_QUALITY]: quality,
        [c.BROTLI_PARAM_MODE]: c.BROTLI_MODE_TEXT,
        [c.BROTLI_PARAM_SIZE_HINT]: bytes.length,
        // a frame decodes to at most 64 KiB: a larger window buys nothing
        [c.BROTLI_PARAM_LGWIN]: 16,
      },
    });
    return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  };
  const view = (out: Uint8Array): Uint8Array => new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  return {
    compress: (bytes, effort) => run(effort === 'final' ? finalQuality : Math.min(5, finalQuality), bytes),
    decompress: (bytes, maxBytes) => view(zlib.brotliDecompressSync(bytes, { maxOutputLength: maxBytes })),
    compressStream: (bytes) =>
      // what the HTTP/1.1 side sends TCP and stock Chromium (server/content-coding.ts): the page's own window
      view(zlib.brotliCompressSync(bytes, {
        params: { [c.BROTLI_PARAM_QUALITY]: finalQuality, [c.BROTLI_PARAM_MODE]: c.BROTLI_MODE_TEXT, [c.BROTLI_PARAM_SIZE_HINT]: bytes.length },
      })),
    decodeStreamPrefix: (prefix, maxBytes, end) =>
      // a flush, not a finish: a cut stream gives what it holds so far instead of an error
      view(zlib.brotliDecompressSync(prefix, { maxOutputLength: maxBytes, finishFlush: end ? c.BROTLI_OPERATION_FINISH : c.BROTLI_OPERATION_FLUSH })),
  };
}
