// Encoding a page for a CATP mode: the same code on the server's thread (tests, a missing worker script) and in
// its encode worker (catp-encode-worker.ts). CATP frames are compressed one by one with brotli, an in-order stream
// (for a client that offered br) as a whole: at its best quality for the cached copy a busy origin serves, or a
// fast one for a page's first request (catp-encoder.ts).
import * as zlib from 'node:zlib';

import { brotliCodec, encodePage, encodeRaw, type FrameCodec } from '../protocol/catp';
import { textDecoderFor } from '../protocol/html-encoding';
import { sha256 } from '../platform/sha256';

export type CatpMode = 'catp' | 'inorder';
/** How an in-order stream is coded: 'br' when the request offered it (Accept-Encoding), else as it is. */
export type StreamCoding = 'br' | null;
/** 'best': brotli quality 11 per frame; 'fast': quality 5 (about 4× faster to encode, about 9% more bytes). */
export type EncodeQuality = 'best' | 'fast';

/** What a session needs of an encoded page (the skeleton is not kept: it would pin the parsed tree). */
export interface Encoded {
  frames: Uint8Array[];
  indexFrames: number;
  bytes: number;
  quality: EncodeQuality;
}

const codecs: Record<EncodeQuality, FrameCodec> = {
  best: brotliCodec(zlib),
  fast: brotliCodec(zlib, { finalQuality: 5 }),
};

/** The stable code of an encoder error (CATP_ERR_UNENCODABLE...), or UNKNOWN. */
export function errorCode(err: unknown): string {
  return err && typeof err === 'object' && 'code' in err ? String((err as { code: unknown }).code) : 'UNKNOWN';
}

/** Rough bytes an encoded page holds (frames plus per-array overhead), for the cache's budget. */
export function encodedBytes(frames: readonly Uint8Array[]): number {
  let bytes = 0;
  for (const f of frames) bytes += f.length + 64;
  return bytes;
}

/**
 * Encode a body for a mode; for CATP, its bytes are decoded as `encoding` (a WHATWG name: what the server found for
 * the page, protocol/html-encoding.ts). Throws what the encoder throws (CATP_ERR_UNENCODABLE...).
 */
export function encodeForMode(
  mode: CatpMode,
  body: Uint8Array,
  blockCut: 'content' | 'packed' = 'content',
  quality: EncodeQuality = 'best',
  encoding = 'UTF-8',
  coding: StreamCoding = null,
): Encoded {
  let frames: Uint8Array[];
  let indexFrames: number;
  if (mode === 'catp') {
    const p = encodePage(textDecoderFor(encoding).decode(body), { sha256, codec: codecs[quality], blockCut });
    frames = p.frames;
    indexFrames = p.indexFrames;
  } else {
    frames = encodeRaw(body, { sha256, codec: coding === 'br' ? codecs[quality] : undefined }).frames;
    indexFrames = 0;
  }
  return { frames, indexFrames, bytes: encodedBytes(frames), quality: mode === 'catp' || coding !== null ? quality : 'best' };
}

/** A job for the encode worker, and its reply. */
export interface EncodeJob {
  id: number;
  mode: CatpMode;
  body: Uint8Array;
  blockCut: 'content' | 'packed';
  quality: EncodeQuality;
  encoding: string;
  coding: StreamCoding;
}
export type EncodeReply = { id: number; ok: true; frames: Uint8Array[]; indexFrames: number } | { id: number; ok: false; code: string };
