/**
 * Static name tables for the CATP index: the tag and attribute names real pages use most, each written as one
 * byte instead of its letters. Every index frame stands alone, so a frame cannot refer to names another frame
 * spelled out; a fixed table shared by every encoder and decoder costs nothing on the wire.
 *
 * Chosen from the real-pages corpus (the most frequent tag and attribute names by bytes spent on them) plus the
 * rest of HTML's common vocabulary. The tables are part of the wire format (version 2): append only, never
 * reorder. A name code is a varint: 0 = a literal name follows (varint length, UTF-8), k ≥ 1 = table entry k-1.
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

export const ATTR_NAMES: readonly string[] = [
  'class', 'id', 'href', 'src', 'style', 'rel', 'type', 'content', 'name', 'alt', 'title', 'width', 'height',
  'data-src', 'srcset', 'sizes', 'lang', 'charset', 'property', 'target', 'role', 'aria-label', 'aria-hidden',
  'tabindex', 'value', 'action', 'method', 'for', 'd', 'fill', 'viewBox', 'xmlns', 'stroke', 'media', 'crossorigin',
  'async', 'defer', 'integrity', 'loading', 'itemprop', 'itemscope', 'itemtype', 'datetime', 'colspan', 'rowspan',
  'dir', 'hidden', 'placeholder', 'onclick', 'border', 'align', 'valign', 'cellpadding', 'cellspacing', 'bgcolor',
  'color', 'size', 'face', 'http-equiv', 'data-id', 'data-type', 'data-url', 'data-srcset', 'data-original',
  'data-lazy-src', 'data-href', 'data-ga', 'data-track', 'data-testid', 'aria-expanded', 'aria-controls',
  'aria-labelledby', 'aria-describedby', 'aria-current', 'aria-haspopup', 'focusable', 'xmlns:xlink', 'xlink:href',
  'href', 'version', 'x', 'y', 'cx', 'cy', 'r', 'rx', 'ry', 'x1', 'x2', 'y1', 'y2', 'points', 'transform',
  'fill-rule', 'clip-rule', 'stroke-width', 'stroke-linecap', 'stroke-linejoin', 'opacity', 'fill-opacity',
  'offset', 'stop-color', 'preserveAspectRatio', 'decoding', 'fetchpriority', 'referrerpolicy', 'nonce', 'autocomplete',
  'checked', 'disabled', 'selected', 'readonly', 'required', 'multiple', 'maxlength', 'pattern', 'min', 'max',
  'step', 'accept', 'enctype', 'novalidate', 'frameborder', 'allowfullscreen', 'allow', 'scrolling', 'poster',
  'preload', 'controls', 'autoplay', 'muted', 'loop', 'playsinline', 'start', 'reversed', 'cite', 'headers', 'scope',
  'span', 'label', 'list', 'form', 'download', 'ping', 'hreflang', 'usemap', 'ismap', 'coords', 'shape',
  'translate', 'spellcheck', 'contenteditable', 'draggable', 'accesskey', 'slot', 'is', 'part', 'itemid', 'itemref',
  'prefix', 'about', 'resource', 'typeof', 'vocab', 'datatype', 'rev', 'onload', 'onerror', 'onmouseover',
  'onmouseout', 'onsubmit', 'onchange', 'data-toggle', 'data-target', 'data-name', 'data-value', 'data-index',
];

function indexOf(table: readonly string[]): Map<string, number> {
  const m = new Map<string, number>();
  table.forEach((n, i) => {
    if (!m.has(n)) m.set(n, i);
  });
  return m;
}

export const TAG_CODE: ReadonlyMap<string, number> = indexOf(TAG_NAMES);
export const ATTR_CODE: ReadonlyMap<string, number> = indexOf(ATTR_NAMES);
