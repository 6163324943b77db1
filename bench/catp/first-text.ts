// How soon the top of a page can paint: the bytes sent before the first text the body shows is on hand, for CATP
// (frames in send order through the real assembler and tree builder) and for one brotli stream of the page (in-order
// UDP and TCP carry the page so: at least the compressed prefix up to the end of that text).
//
// "Shown": a non-blank text node under <body>, not inside <head>, <script>, <style>, <template>, <title> or
// <noscript>, nor under an element its own markup hides (`hidden`, an inline display: none or visibility: hidden).
// The same definition as the encoder's first-text cut (protocol/catp/encoder.ts hidesText), read from the assembled
// tree itself, so the measure also checks that cut.
import * as zlib from 'node:zlib';
import * as parse5 from 'parse5';
import type { DefaultTreeAdapterMap } from 'parse5';

import { CatpAssembler, type FrameCodec, hidesText, parse5TreeBuilder } from '../../protocol/catp';

type Node = DefaultTreeAdapterMap['node'];
type Text = DefaultTreeAdapterMap['textNode'];

/** The first shown text node of a parse5 tree, in document order, or null. */
export function firstShownText(root: Node): Text | null {
  const walk = (n: Node, inBody: boolean): Text | null => {
    if (n.nodeName === '#text') return inBody && /\S/.test((n as Text).value) ? (n as Text) : null;
    if ('tagName' in n) {
      if (hidesText(n.tagName, n.attrs)) return null;
      if (n.tagName === 'body') inBody = true;
    }
    for (const c of ('childNodes' in n ? n.childNodes : []) as Node[]) {
      const t = walk(c, inBody);
      if (t) return t;
    }
    return null;
  };
  return walk(root, false);
}

/** CATP: bytes and frames sent, in send order, until `done` holds for the assembled tree after a frame (null: never). */
export function catpBytesUntil(frames: readonly Uint8Array[], sha256: (b: Uint8Array) => Uint8Array, codec: FrameCodec, done: (root: Node) => boolean): { bytes: number; frames: number } | null {
  const asm = new CatpAssembler({ sha256, codec });
  const tree = parse5TreeBuilder();
  let bytes = 0;
  for (let k = 0; k < frames.length; k++) {
    bytes += frames[k].length;
    asm.receive(frames[k], 0);
    let changed = false;
    for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
      tree.apply(e);
      changed = true;
    }
    if (changed && tree.root && done(tree.root as Node)) return { bytes, frames: k + 1 };
  }
  return null;
}

/** CATP: bytes and frames sent, in send order, until the first shown text is in the assembled tree (null: never). */
export function catpFirstText(frames: readonly Uint8Array[], sha256: (b: Uint8Array) => Uint8Array, codec: FrameCodec): { bytes: number; frames: number } | null {
  return catpBytesUntil(frames, sha256, codec, (root) => firstShownText(root) !== null);
}

/** One brotli stream of the page: its compressed size up to the end of the first shown text (null: none). */
export function streamFirstText(html: string): number | null {
  const doc = parse5.parse(html, { sourceCodeLocationInfo: true, scriptingEnabled: false });
  const t = firstShownText(doc as Node);
  const end = t?.sourceCodeLocation?.endOffset;
  if (end === undefined) return null;
  return zlib.brotliCompressSync(Buffer.from(html.slice(0, end))).length;
}
