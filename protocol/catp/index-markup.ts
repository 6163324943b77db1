/**
 * The node list of an index piece, written as markup (index-piece.ts carries it as one UTF-8 string). Each frame is
 * compressed on its own with brotli, whose built-in dictionary was made from web pages: spelled out as `<div
 * class="nav">…</>` the nodes compress to ~0.81 of the binary records they replaced (type byte, parent number,
 * name codes and length-prefixed strings: the numbers between the strings broke brotli's matches), measured over the
 * 87 corpus pages' index pieces (protocol/README.md, "The index as markup").
 *
 * Tokens, in pre-order; a node's parent is the open element (or template content) on top of the stack, which starts
 * as the root and the piece's chain:
 *
 *   <NAME ATTRS>        element, pushed (`<^dNAME`: namespace d, when it is not the parent's; see NS_MARK)
 *   </>                 closes the top of the stack (not a node)
 *   TEXT                text up to the next `<` (never empty, never right after another text)
 *   <'TEXT>             text, written so when it is empty or follows another text
 *   <!DATA>             comment                  <#>          a template's content fragment, pushed
 *   <$SP>               text slot: stream digit S, parts P (decimal)   <!$SP>  comment slot
 *   <%NAME"PUBLIC"SYSTEM>  doctype
 *   ATTRS = ( ' ' [^d[NS^][PREFIX:]]NAME [="VALUE" | =$SP] )*   (no `=`: the empty value)
 *
 * Escapes are `&amp; &lt; &gt; &quot;` and `&#N;` (decimal): names escape controls, space, `& < > = "` and a first
 * character that would start another token; values escape `& "`, raw text `& <`, the rest `& < > "`.
 * The decoder treats every character as hostile: a token it cannot read, an unknown escape, a close past the
 * chain, a node count that does not match, are refused (BAD_INDEX / BAD_ATTACH); nothing recurses.
 */
import { REJECT, Reject } from './errors';
import type { ChainEntry, IndexAttr, IndexLimits, IndexNode, SlotRef, Stream } from './index-piece';

export const NS_HTML = 'http://www.w3.org/1999/xhtml';
export const NS_SVG = 'http://www.w3.org/2000/svg';
export const NS_MATHML = 'http://www.w3.org/1998/Math/MathML';
export const NS_XLINK = 'http://www.w3.org/1999/xlink';
export const NS_XML = 'http://www.w3.org/XML/1998/namespace';
export const NS_XMLNS = 'http://www.w3.org/2000/xmlns/';

/** Element namespaces by digit after `^` (3: the namespace follows, escaped, up to the next `^`). */
const EL_NS = [NS_HTML, NS_SVG, NS_MATHML];
/** Attribute namespaces by digit after `^` (mod 5; 5 and up: a prefix follows); 4: literal, up to the next `^`. */
const ATTR_NS = ['', NS_XLINK, NS_XML, NS_XMLNS];

export const CLOSE_MARKUP = '</>';

const NAMED: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' };
const escapeChar = (c: string): string => NAMED[c] ?? `&#${c.charCodeAt(0)};`;

const RE_VALUE = /[&"]/g;
const RE_TEXT = /[&<]/g;
const RE_OTHER = /[&<>"]/g;
// (controls and space: everything below `!`)
const RE_NAME = /[^!-\uffff]|[&<>="]/g;
const RE_PREFIX = /[^!-\uffff]|[&<>="^:]/g;
/** Characters an element name may not start with (after `<` they start other tokens). */
const ELEMENT_LEAD = new Set(['/', "'", '!', '#', '$', '%', '^']);

function escapeWith(s: string, re: RegExp): string {
  re.lastIndex = 0;
  return re.test(s) ? s.replace(re, escapeChar) : s;
}

function escapeName(s: string, lead: ReadonlySet<string> | null): string {
  const e = escapeWith(s, RE_NAME);
  return lead !== null && e.length > 0 && lead.has(e[0]) ? escapeChar(e[0]) + e.slice(1) : e;
}

const ATTR_LEAD = new Set(['^']);

function attrMarkup(a: IndexAttr): string {
  let out = ' ';
  if (a.namespace !== undefined || a.prefix !== undefined) {
    let ns = a.namespace === undefined ? 0 : ATTR_NS.indexOf(a.namespace);
    if (ns <= 0 && a.namespace !== undefined) ns = 4;
    out += `^${ns + (a.prefix !== undefined ? 5 : 0)}`;
    if (ns === 4) out += `${escapeWith(a.namespace as string, RE_PREFIX)}^`;
    if (a.prefix !== undefined) out += `${escapeWith(a.prefix, RE_PREFIX)}:`;
    out += escapeName(a.name, null);
  } else out += escapeName(a.name, ATTR_LEAD);
  if (a.slot) return `${out}=$${a.slot.stream}${a.slot.parts}`;
  return a.value === '' ? out : `${out}="${escapeWith(a.value, RE_VALUE)}"`;
}

/**
 * One node's markup (no closes before it). `parentNs`: the namespace of its parent (HTML under the root or a
 * template's content); `afterText`: a text node comes right before it, so a text is written `<'…>` (parse5 never
 * makes two texts side by side; a raw one would run into the other).
 */
export function nodeMarkup(node: IndexNode, parentNs: string, afterText: boolean): string {
  switch (node.kind) {
    case 'element': {
      let out = '<';
      if (node.namespace !== parentNs) {
        const ns = EL_NS.indexOf(node.namespace);
        out += ns < 0 ? `^3${escapeWith(node.namespace, RE_PREFIX)}^` : `^${ns}`;
      }
      out += escapeName(node.tagName, ELEMENT_LEAD);
      for (const a of node.attrs) out += attrMarkup(a);
      return `${out}>`;
    }
    case 'text':
      return node.value === '' || afterText ? `<'${escapeWith(node.value, RE_OTHER)}>` : escapeWith(node.value, RE_TEXT);
    case 'comment': {
      const d = escapeWith(node.data, RE_OTHER);
      return `<!${d.startsWith('$') ? `&#36;${d.slice(1)}` : d}>`;
    }
    case 'text-slot':
      return `<$${node.ref.stream}${node.ref.parts}>`;
    case 'comment-slot':
      return `<!$${node.ref.stream}${node.ref.parts}>`;
    case 'doctype':
      return `<%${escapeWith(node.name, RE_OTHER)}"${escapeWith(node.publicId, RE_OTHER)}"${escapeWith(node.systemId, RE_OTHER)}>`;
    case 'content':
      return '<#>';
  }
}

/**
 * Per node of a whole page (or of `nodes` under `chain`), in pre-order (node n at n - 1 for a page): how many
 * closes come before it in a piece where it is not the first node, and its markup there (`mid`) and as a piece's first node (`first`, where nothing precedes it).
 * A piece's node section is first[k] + Σ (closes × `</>` + mid) over the nodes after it: a piece's chain is all of
 * its first node's ancestors, so its stack is the page's at that point.
 */
export function pageNodeMarkup(nodes: readonly IndexNode[], chain: readonly ChainEntry[] = []): Array<{ closes: number; mid: string; first: string }> {
  const nsOf = new Map<number, string>([[0, NS_HTML]]);
  const open: number[] = [0];
  for (const c of chain) {
    nsOf.set(c.n, c.content ? NS_HTML : c.namespace);
    open.push(c.n);
  }
  const out: Array<{ closes: number; mid: string; first: string }> = new Array(nodes.length);
  let prevText = false;
  for (let i = 0; i < nodes.length; i++) {
    const node = nodes[i];
    let closes = 0;
    while (open.length > 1 && open[open.length - 1] !== node.parent) {
      open.pop();
      closes++;
    }
    const parentNs = nsOf.get(node.parent) ?? NS_HTML;
    const mid = nodeMarkup(node, parentNs, prevText && closes === 0);
    const first = prevText && closes === 0 && node.kind === 'text' ? nodeMarkup(node, parentNs, false) : mid;
    out[i] = { closes, mid, first };
    prevText = node.kind === 'text';
    if (node.kind === 'element' || node.kind === 'content') {
      nsOf.set(node.n, node.kind === 'element' ? node.namespace : NS_HTML);
      open.push(node.n);
    }
  }
  return out;
}

/**
 * The node section of one piece (its nodes in pre-order, under its chain). Written as the nodes say, closes before
 * the first node included: a forged piece (tests) whose first node is not the chain's child shows as such.
 */
export function nodeSectionMarkup(nodes: readonly IndexNode[], chain: readonly ChainEntry[]): string {
  return pageNodeMarkup(nodes, chain).map((m) => CLOSE_MARKUP.repeat(m.closes) + m.mid).join('');
}

/** An open ancestor while decoding: the root, a chain entry, or an element / content of the piece. */
export interface OpenNode {
  n: number;
  /** The namespace its element children inherit (HTML under the root and a template's content). */
  ns: string;
  /** An HTML <template> (may hold one content node). */
  isTemplate: boolean;
  hasContent: boolean;
}

const bad = (why: string): Reject => new Reject(REJECT.BAD_INDEX, why);
const SPACE = 0x20;
const QUOTE = 0x22;
const EQUALS = 0x3d;
const GT = 0x3e;

function unescapeText(s: string): string {
  if (s.indexOf('&') < 0) return s;
  let out = '';
  let i = 0;
  for (;;) {
    const amp = s.indexOf('&', i);
    if (amp < 0) return out + s.slice(i);
    out += s.slice(i, amp);
    const semi = s.indexOf(';', amp + 1);
    if (semi < 0 || semi - amp > 9) throw bad('escape');
    const name = s.slice(amp + 1, semi);
    if (name === 'amp') out += '&';
    else if (name === 'lt') out += '<';
    else if (name === 'gt') out += '>';
    else if (name === 'quot') out += '"';
    else if (/^#[0-9]{1,7}$/.test(name)) {
      const cp = Number(name.slice(1));
      // a lone surrogate never comes from UTF-8, and the encoder never writes one
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw bad('escape');
      out += String.fromCodePoint(cp);
    } else throw bad('escape');
    i = semi + 1;
  }
}

/**
 * Decode a piece's node section. `stack` holds the root and the chain (it is left as the piece leaves it);
 * `slotRef(stream, parts)` numbers each slot. Throws {@link Reject} only.
 */
export function decodeNodeSection(
  s: string,
  firstNode: number,
  nodeCount: number,
  limits: IndexLimits,
  stack: OpenNode[],
  slotRef: (stream: number, parts: number) => SlotRef,
): IndexNode[] {
  const nodes: IndexNode[] = new Array(nodeCount);
  const len = s.length;
  let i = 0;
  let k = 0;
  /** The index of `stop` at or after `from` (throws when none: a token cut short). */
  const until = (from: number, stop: string): number => {
    const j = s.indexOf(stop, from);
    if (j < 0) throw bad('token cut short');
    return j;
  };
  /** The index of the first of two (or three) character codes at or after `from`: names and values end at a
   * handful of characters, so a scan of char codes (no one-character strings made per step). */
  const untilCode = (from: number, a: number, b: number, c = a): number => {
    for (let j = from; j < len; j++) {
      const x = s.charCodeAt(j);
      if (x === a || x === b || x === c) return j;
    }
    throw bad('token cut short');
  };
  /** Stream digit and decimal parts of a slot at `from` (up to `end`): `[0-2][1-9][0-9]{0,9}`. */
  const slotAt = (from: number, end: number): SlotRef => {
    const stream = s.charCodeAt(from) - 0x30;
    if (!(stream >= 0 && stream <= 2) || end - from < 2 || end - from > 11) throw bad('slot');
    let parts = 0;
    for (let j = from + 1; j < end; j++) {
      const d = s.charCodeAt(j) - 0x30;
      if (!(d >= 0 && d <= 9) || (d === 0 && j === from + 1)) throw bad('slot');
      parts = parts * 10 + d;
    }
    return slotRef(stream as Stream, parts);
  };
  const add = (node: IndexNode): void => {
    if (k >= nodeCount) throw bad('more nodes than counted');
    nodes[k++] = node;
  };
  const push = (open: OpenNode): void => {
    if (stack.length >= limits.maxDepth + 1) throw new Reject(REJECT.TOO_DEEP);
    stack.push(open);
  };
  while (i < len) {
    const n = firstNode + k;
    const top = stack[stack.length - 1];
    const parent = top.n;
    if (s.charCodeAt(i) !== 0x3c /* < */) {
      let j = s.indexOf('<', i);
      if (j < 0) j = len;
      add({ kind: 'text', n, parent, value: unescapeText(s.slice(i, j)) });
      i = j;
      continue;
    }
    const c = s[i + 1];
    if (c === '/') {
      if (s[i + 2] !== '>') throw bad('close');
      // the first node is a child of the chain's last entry, and nothing follows the last node
      if (k === 0 || k === nodeCount) throw new Reject(REJECT.BAD_ATTACH, 'a close before the first node or after the last');
      if (stack.length <= 1) throw new Reject(REJECT.BAD_ATTACH, 'a close past the root');
      stack.pop();
      i += 3;
      continue;
    }
    if (c === "'") {
      const j = until(i + 2, '>');
      add({ kind: 'text', n, parent, value: unescapeText(s.slice(i + 2, j)) });
      i = j + 1;
    } else if (c === '!') {
      const j = until(i + 2, '>');
      if (s[i + 2] === '$') add({ kind: 'comment-slot', n, parent, ref: slotAt(i + 3, j) });
      else add({ kind: 'comment', n, parent, data: unescapeText(s.slice(i + 2, j)) });
      i = j + 1;
    } else if (c === '$') {
      const j = until(i + 2, '>');
      add({ kind: 'text-slot', n, parent, ref: slotAt(i + 2, j) });
      i = j + 1;
    } else if (c === '%') {
      if (parent !== 0) throw new Reject(REJECT.BAD_ATTACH, 'doctype below the root');
      const a = untilCode(i + 2, QUOTE, GT);
      const b = s.charCodeAt(a) === QUOTE ? untilCode(a + 1, QUOTE, GT) : -1;
      const j = b >= 0 && s.charCodeAt(b) === QUOTE ? untilCode(b + 1, QUOTE, GT) : -1;
      if (j < 0 || s.charCodeAt(j) !== GT) throw bad('doctype');
      add({ kind: 'doctype', n, parent, name: unescapeText(s.slice(i + 2, a)), publicId: unescapeText(s.slice(a + 1, b)), systemId: unescapeText(s.slice(b + 1, j)) });
      i = j + 1;
    } else if (c === '#') {
      if (s[i + 2] !== '>') throw bad('content');
      if (!top.isTemplate || top.hasContent) throw new Reject(REJECT.BAD_ATTACH, 'content outside a template');
      top.hasContent = true;
      add({ kind: 'content', n, parent });
      push({ n, ns: NS_HTML, isTemplate: false, hasContent: false });
      i += 3;
    } else {
      // an element
      let p = i + 1;
      let namespace = top.ns;
      if (s[p] === '^') {
        const d = s.charCodeAt(p + 1) - 0x30;
        if (d >= 0 && d <= 2) {
          namespace = EL_NS[d];
          p += 2;
        } else if (d === 3) {
          const e = until(p + 2, '^');
          namespace = unescapeText(s.slice(p + 2, e));
          p = e + 1;
        } else throw bad('element namespace');
      }
      let e = untilCode(p, SPACE, GT);
      const tagName = unescapeText(s.slice(p, e));
      const attrs: IndexAttr[] = [];
      while (s.charCodeAt(e) === SPACE) {
        if (attrs.length >= limits.maxAttrs) throw bad('attr count');
        let q = e + 1;
        const attr: IndexAttr = { name: '', value: '' };
        if (s[q] === '^') {
          const d = s.charCodeAt(q + 1) - 0x30;
          if (!(d >= 0 && d <= 9)) throw bad('attr namespace');
          q += 2;
          const ns = d % 5;
          if (ns === 4) {
            const f = until(q, '^');
            attr.namespace = unescapeText(s.slice(q, f));
            q = f + 1;
          } else if (ns > 0) attr.namespace = ATTR_NS[ns];
          if (d >= 5) {
            const f = until(q, ':');
            attr.prefix = unescapeText(s.slice(q, f));
            q = f + 1;
          }
        }
        const f = untilCode(q, EQUALS, SPACE, GT);
        attr.name = unescapeText(s.slice(q, f));
        e = f;
        if (s.charCodeAt(f) === EQUALS) {
          if (s[f + 1] === '"') {
            const g = until(f + 2, '"');
            attr.value = unescapeText(s.slice(f + 2, g));
            e = g + 1;
          } else if (s[f + 1] === '$') {
            const g = untilCode(f + 2, SPACE, GT);
            attr.slot = slotAt(f + 2, g);
            e = g;
          } else throw bad('attr value');
        }
        attrs.push(attr);
      }
      if (s.charCodeAt(e) !== GT) throw bad('element');
      add({ kind: 'element', n, parent, tagName, namespace, attrs });
      push({ n, ns: namespace, isTemplate: namespace === NS_HTML && tagName === 'template', hasContent: false });
      i = e + 1;
    }
  }
  if (k !== nodeCount) throw bad('fewer nodes than counted');
  return nodes;
}
