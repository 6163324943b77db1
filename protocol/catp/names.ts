/**
 * The static tag-name table of the CATP index's chains (index-piece.ts): the tag names real pages use most, each
 * written as one byte instead of its letters. Every index frame stands alone, so a frame cannot refer to names
 * another frame spelled out; a fixed table shared by every encoder and decoder costs nothing on the wire. (The nodes
 * themselves are markup since version 3, index-markup.ts: brotli's own dictionary knows their names. Version 2 had
 * an attribute-name table as well.)
 *
 * Chosen from the real-pages corpus (the most frequent tag names by bytes spent on them) plus the rest of HTML's
 * common vocabulary. The table is part of the wire format: append only, never reorder. A name code is a varint:
 * 0 = a literal name follows (varint length, UTF-8), k ≥ 1 = table entry k-1.
 */
export const TAG_NAMES: readonly string[] = [
  'html', 'head', 'body', 'div', 'span', 'a', 'p', 'li', 'ul', 'ol', 'img', 'script', 'style', 'link', 'meta',
  'title', 'br', 'hr', 'table', 'tbody', 'thead', 'tfoot', 'tr', 'td', 'th', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6',
  'section', 'article', 'nav', 'header', 'footer', 'main', 'aside', 'figure', 'figcaption', 'picture', 'source',
  'svg', 'path', 'g', 'use', 'button', 'input', 'form', 'label', 'select', 'option', 'textarea', 'noscript',
  'iframe', 'strong', 'em', 'b', 'i', 'u', 's', 'small', 'sup', 'sub', 'code', 'pre', 'blockquote', 'time', 'abbr',
  'cite', 'dl', 'dt', 'dd', 'caption', 'col', 'colgroup', 'template', 'video', 'audio', 'canvas', 'circle', 'rect',
  'line', 'polyline', 'polygon', 'defs', 'symbol', 'clipPath', 'mask', 'linearGradient', 'radialGradient', 'stop',
  'ellipse', 'text', 'tspan', 'title', 'desc', 'base', 'center', 'font', 'mark', 'q', 'wbr', 'details', 'summary',
  'fieldset', 'legend', 'optgroup', 'object', 'embed', 'param', 'track', 'map', 'area', 'address', 'kbd', 'var',
  'samp', 'ins', 'del', 'dfn', 'bdi', 'bdo', 'ruby', 'rt', 'rp', 'data', 'output', 'progress', 'meter', 'menu',
  'dialog', 'slot', 'math', 'mi', 'mo', 'mn', 'mrow', 'big', 'tt', 'strike', 'nobr', 'frame', 'frameset',
];

function indexOf(table: readonly string[]): Map<string, number> {
  const m = new Map<string, number>();
  table.forEach((n, i) => {
    if (!m.has(n)) m.set(n, i);
  });
  return m;
}

export const TAG_CODE: ReadonlyMap<string, number> = indexOf(TAG_NAMES);
