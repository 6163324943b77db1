// Which of the head's nodes a first paint needs. A real page's head is mostly markup nothing paints: `<meta>`
// for search engines and social sites, `<script src>` (CATP's tree is the parse of a browser without scripting),
// icons, feeds, preloads. Heise's head holds 133 nodes before its body, four stylesheets and a `<style>` among
// them; sent in document order they are most of the bytes before the page's first text (protocol/README.md, "The
// head's unpainted markup after the first text").
import { NS_HTML } from './index-piece';
import type { IndexNode } from './index-piece';

/** A node's part in the first paint (headPaint). */
export const HEAD_PAINT = {
  /** Outside the head, or in it and needed to paint: `<title>`, `<style>`, stylesheets, `<base>`, `<noscript>`. */
  NEEDED: 0,
  /** A child of the head (and all under it) that no paint needs: see unpaintedHeadChild. */
  UNPAINTED: 1,
  /** Whitespace and comments directly in the head: they go with whatever is around them. */
  EITHER: 2,
} as const;
export type HeadPaint = (typeof HEAD_PAINT)[keyof typeof HEAD_PAINT];

/**
 * Whether a child element of the head is one no paint needs. `<meta>` except `http-equiv` (a refresh, a default
 * style, a content policy) and `name="color-scheme"` (it changes the page's colours); `<script>` (never run here);
 * `<link>` unless its `rel` names a stylesheet; `<template>` (its content never renders). Everything else is
 * needed, unknown elements included.
 */
export function unpaintedHeadChild(tagName: string, namespace: string, attrs: ReadonlyArray<{ name: string; value: string }>): boolean {
  if (namespace !== NS_HTML) return false;
  const attr = (name: string): string | undefined => attrs.find((a) => a.name === name)?.value;
  switch (tagName) {
    case 'meta':
      return attr('http-equiv') === undefined && (attr('name') ?? '').trim().toLowerCase() !== 'color-scheme';
    case 'script':
    case 'template':
      return true;
    case 'link':
      return !(attr('rel') ?? '').toLowerCase().split(/[\t\n\f\r ]+/).includes('stylesheet');
    default:
      return false;
  }
}

/**
 * Each node's part in the first paint (indexed by node number − 1): the document's `<head>`'s children classified
 * by unpaintedHeadChild, their descendants as they are, whitespace text and comments directly in the head EITHER,
 * every other node NEEDED. An attribute whose value is a slot (`value` '' until its data comes) reads as empty.
 * The head's last child is NEEDED whatever it is: a piece still missing stands as a placeholder before the next
 * piece's first node (tree.ts), a block on screen unless that node is in the head; one missing at the head's end
 * would stand before `<body>`, and the whole page would move up when it came (a lab load did, session 49).
 */
export function headPaint(nodes: readonly IndexNode[]): Uint8Array {
  const out = new Uint8Array(nodes.length);
  let html = -1;
  let head = -1;
  for (const nd of nodes) {
    if (nd.kind !== 'element' || nd.namespace !== NS_HTML) continue;
    if (html < 0 && nd.parent === 0 && nd.tagName === 'html') html = nd.n;
    else if (html > 0 && nd.parent === html && nd.tagName === 'head') {
      head = nd.n;
      break;
    }
  }
  if (head < 0) return out;
  let last = -1;
  let end = nodes.length;
  for (let i = head; i < nodes.length; i++) {
    const nd = nodes[i];
    if (nd.parent === head) {
      last = i;
      if (nd.kind === 'element') out[i] = unpaintedHeadChild(nd.tagName, nd.namespace, nd.attrs) ? HEAD_PAINT.UNPAINTED : HEAD_PAINT.NEEDED;
      else if (nd.kind === 'text' ? /^[\t\n\f\r ]*$/.test(nd.value) : nd.kind === 'comment' || nd.kind === 'comment-slot') out[i] = HEAD_PAINT.EITHER;
      else out[i] = HEAD_PAINT.NEEDED;
    } else if (nd.parent > head) {
      // below a child of the head (pre-order: every node between the head and this one is under the head): as its parent
      out[i] = out[nd.parent - 1];
    } else {
      end = i; // pre-order: the first node not under the head ends it
      break;
    }
  }
  if (last >= 0) out.fill(HEAD_PAINT.NEEDED, last, end);
  return out;
}
