/** fast-check generator of arbitrary HTML documents (nested elements, attributes, multi-byte text, entities, comments, long text). */
import fc from 'fast-check';

const TAGS = ['p', 'div', 'span', 'b', 'i', 'a', 'table', 'tr', 'td', 'ul', 'li', 'svg', 'math', 'template', 'textarea', 'pre', 'script', 'style', 'title', 'select', 'option', 'h1', 'head', 'body', 'noscript', 'foreignObject', 'mi', 'desc'];
const ATTRS = ['id', 'class', 'href', 'xlink:href', 'xml:lang', 'xmlns', 'title', 'data-x', 'style', 'definitionURL'];
const PIECES = ['a', ' ', '\n', 'é', 'ß', '中文', '😀', '𝄞', '&amp;', '&lt;', '&eacute;', '&#x1F600;', '&#169;', '&notin', '<', '>', '"', "'", '\u00a0', '\ufeff', '\r\n', '\0'];

const textArb = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.constantFrom(...PIECES), { maxLength: 12 }).map((a) => a.join('')) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
  // long text: split over several pieces / blocks
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('x', 'é', '😀', 'ab ', '中'), fc.integer({ min: 100, max: 3000 })).map(([s, n]) => s.repeat(n)) },
);

const attrArb = fc.tuple(fc.constantFrom(...ATTRS), fc.array(fc.constantFrom(...PIECES), { maxLength: 6 }).map((a) => a.join('').replace(/"/g, '&quot;')));

const { node } = fc.letrec<{ node: string }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    textArb,
    fc.constantFrom('<!--c-->', '<!-- é😀 -->', '<br>', '<img src=x>', '</p>', '<hr/>'),
    fc
      .tuple(fc.constantFrom(...TAGS), fc.array(attrArb, { maxLength: 3 }), fc.array(tie('node'), { maxLength: 5 }), fc.boolean())
      .map(([t, attrs, kids, close]) => `<${t}${attrs.map(([k, v]) => ` ${k}="${v}"`).join('')}>${kids.join('')}${close ? `</${t}>` : ''}`),
  ),
}));

export const htmlDocArb: fc.Arbitrary<string> = fc
  .tuple(fc.constantFrom('', '<!DOCTYPE html>', '<!doctype html public "-//W3C//DTD HTML 4.01//EN">'), fc.array(node, { maxLength: 8 }))
  .map(([d, kids]) => d + kids.join(''));
