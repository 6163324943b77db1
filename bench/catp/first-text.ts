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

/**
 * The real assembler and tree builder fed `frames` in send order: after each frame, its index, the assembled tree (null
 * before any node), whether the frame changed it, and whether the page has completed.
 */
function* assembled(frames: readonly Uint8Array[], sha256: (b: Uint8Array) => Uint8Array, codec: FrameCodec): Generator<{ k: number; root: Node | null; changed: boolean; complete: boolean }> {
  const asm = new CatpAssembler({ sha256, codec });
  const tree = parse5TreeBuilder();
  let complete = false;
  for (let k = 0; k < frames.length; k++) {
    asm.receive(frames[k], 0);
    let changed = false;
    for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
      tree.apply(e);
      changed = true;
      if (e.type === 'page-complete') complete = true;
    }
    yield { k, root: tree.root as Node | null, changed, complete };
  }
}

/** Bytes and frames of `frames` up to and with frame `k`. */
function sentThrough(frames: readonly Uint8Array[], k: number): { bytes: number; frames: number } {
  let bytes = 0;
  for (let i = 0; i <= k; i++) bytes += frames[i].length;
  return { bytes, frames: k + 1 };
}

/** CATP: bytes and frames sent, in send order, until `done` holds for the assembled tree after a frame (null: never). */
export function catpBytesUntil(frames: readonly Uint8Array[], sha256: (b: Uint8Array) => Uint8Array, codec: FrameCodec, done: (root: Node) => boolean): { bytes: number; frames: number } | null {
  for (const { k, root, changed } of assembled(frames, sha256, codec)) {
    if (changed && root !== null && done(root)) return sentThrough(frames, k);
  }
  return null;
}

/** The document's nodes in pre-order (the document is 0), as a browser's DOM walk numbers them. */
export function preorder(root: Node): Node[] {
  const out: Node[] = [];
  const stack: Node[] = [root];
  while (stack.length > 0) {
    const n = stack.pop() as Node;
    out.push(n);
    const kids = 'childNodes' in n ? (n.childNodes as Node[]) : [];
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
  return out;
}

/**
 * CATP: bytes and frames sent, in send order, until each of the text nodes `targets` names (pre-order numbers in the
 * finished tree) holds its final text (null: the frames never finish the page). Numbers are those of the finished
 * tree: while a piece is missing, the assembled tree lacks its nodes and holds a placeholder instead, so a node's
 * position moves as frames come (the head's unpainted pieces come after the top of the body). Each text node is
 * followed instead: the frame that last changed it.
 */
export function catpBytesUntilSettled(frames: readonly Uint8Array[], sha256: (b: Uint8Array) => Uint8Array, codec: FrameCodec, targets: readonly number[]): { bytes: number; frames: number } | null {
  const last = new Map<Text, { value: string; frame: number }>();
  let end: { root: Node | null; complete: boolean } = { root: null, complete: false };
  for (const step of assembled(frames, sha256, codec)) {
    end = step;
    if (!step.changed || step.root === null) continue;
    for (const n of preorder(step.root)) {
      if (n.nodeName !== '#text') continue;
      const t = n as Text;
      const seen = last.get(t);
      if (seen === undefined || seen.value !== t.value) last.set(t, { value: t.value, frame: step.k });
    }
  }
  if (!end.complete || end.root === null) return null;
  const nodes = preorder(end.root);
  let upTo = -1;
  for (const n of targets) {
    const seen = nodes[n]?.nodeName === '#text' ? last.get(nodes[n] as Text) : undefined;
    if (seen === undefined) return null;
    upTo = Math.max(upTo, seen.frame);
  }
  return sentThrough(frames, upTo);
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
