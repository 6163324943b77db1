// Which of the head's nodes a first paint needs (protocol/catp/head-paint.ts): the encoder sends the rest after the
// first text (standalone.test.ts, "the head's unpainted markup").
import * as fs from 'node:fs';
import * as path from 'node:path';
import { encodePage, FIRST_FLIGHT, type FirstFlight, STREAM } from '../../../protocol/catp';
import { HEAD_PAINT, headPaint, unpaintedHeadChild } from '../../../protocol/catp/head-paint';
import { realPages } from '../../helpers/catp-real-pages';
import { codec, seqOf, serverCodec, sha256 } from '../../helpers/catp-util';
import { testIf } from '../../helpers/requires';

const NS = 'http://www.w3.org/1999/xhtml';
const a = (pairs: Record<string, string>) => Object.entries(pairs).map(([name, value]) => ({ name, value }));

describe('unpaintedHeadChild', () => {
  test.each([
    ['meta', { name: 'description', content: 'x' }, true],
    ['meta', { charset: 'utf-8' }, true],
    ['meta', { property: 'og:image', content: 'x' }, true],
    ['meta', { 'http-equiv': 'refresh', content: '0; url=/' }, false],
    ['meta', { name: ' Color-Scheme ', content: 'dark light' }, false],
    ['script', { src: '/a.js' }, true],
    ['template', {}, true],
    ['link', { rel: 'icon', href: '/f.png' }, true],
    ['link', { rel: 'preload', as: 'style', href: '/a.css' }, true],
    ['link', {}, true],
    ['link', { rel: 'stylesheet', href: '/a.css' }, false],
    ['link', { rel: 'Alternate\tStyleSheet', href: '/a.css' }, false],
    ['title', {}, false],
    ['style', {}, false],
    ['base', { href: '/x/' }, false],
    ['noscript', {}, false],
    ['my-element', {}, false],
  ] as Array<[string, Record<string, string>, boolean]>)('<%s %j>: unpainted %s', (tag, attrs, unpainted) => {
    expect(unpaintedHeadChild(tag, NS, a(attrs))).toBe(unpainted);
  });

  test('an element of another namespace is needed', () => {
    expect(unpaintedHeadChild('script', 'http://www.w3.org/2000/svg', [])).toBe(false);
  });
});

describe('headPaint', () => {
  const classes = (html: string) => {
    const page = encodePage(html, { sha256, codec, firstFlight: false });
    const nodes = page.pieces.flatMap((p) => p.nodes);
    const paint = headPaint(nodes);
    return nodes.map((n, i) => {
      const what = n.kind === 'element' ? n.tagName : n.kind === 'text' ? JSON.stringify(n.value) : n.kind;
      return `${what}:${['needed', 'unpainted', 'either'][paint[i]]}`;
    });
  };

  test("the head's children, what is under them, the body", () => {
    const html =
      '<!DOCTYPE html><html><head><title>T</title>\n<meta name="a" content="b"><!--c--><script>var x = "<p>";</script>' +
      '<link rel="stylesheet" href="/s.css"><noscript><link rel="icon" href="/i.png"></noscript></head><body><script src="/b.js"></script><p>Hi</p></body></html>';
    expect(classes(html)).toEqual([
      'doctype:needed',
      'html:needed',
      'head:needed',
      'title:needed',
      '"T":needed',
      '"\\n":either',
      'meta:unpainted',
      'comment:either',
      'script:unpainted',
      'text-slot:unpainted', // the script's text
      'link:needed',
      'noscript:needed', // its markup (scripting off) is shown, and could hold a stylesheet
      'link:needed',
      'body:needed',
      'script:needed', // the body's: left in place
      'p:needed',
      'text-slot:needed', // "Hi"
    ]);
  });

  test("the head's last child is needed whatever it is: a piece missing at the head's end would leave its placeholder before <body>, on screen", () => {
    expect(classes('<!DOCTYPE html><html><head><title>T</title><meta name="a" content="b"><script src="/a.js"></script></head><body><p>Hi</p></body></html>')).toEqual([
      'doctype:needed',
      'html:needed',
      'head:needed',
      'title:needed',
      '"T":needed',
      'meta:unpainted',
      'script:needed',
      'body:needed',
      'p:needed',
      'text-slot:needed',
    ]);
  });

  test('no head element in the tree (a fragment) leaves every node needed', () => {
    const paint = headPaint([{ kind: 'element', n: 1, parent: 0, tagName: 'meta', namespace: NS, attrs: [] }]);
    expect([...paint]).toEqual([HEAD_PAINT.NEEDED]);
  });
});

describe('on real pages', () => {
  const corpus = realPages();
  const pages = ['heise.html', 'ehow-2.html', 'lemonde-1.html'];
  testIf(corpus !== null, 'the real-pages corpus (../shared/corpus/real-pages)')(`${pages.join(', ')}: the first visible block goes out after at most three quarters of the bytes it took in document order (0.68, 0.52, 0.72)`, () => {
    const { dir } = corpus as NonNullable<typeof corpus>;
    for (const name of pages) {
      const html = fs.readFileSync(path.join(dir, name));
      const bytesTo = (firstFlight: FirstFlight) => {
        const page = encodePage(html, { sha256, codec: serverCodec, firstFlight });
        const visible = new Set(page.pieces.flatMap((p) => p.blocks).filter((b) => b.stream === STREAM.VISIBLE).map((b) => b.seq));
        const at = page.frames.findIndex((f) => visible.has(seqOf(f)));
        return page.frames.slice(0, at + 1).reduce((n, f) => n + f.length + 28, 0);
      };
      const now = bytesTo(FIRST_FLIGHT);
      const inOrder = bytesTo({ ...FIRST_FLIGHT, unpaintedHead: 0 });
      expect([name, now, now <= inOrder * 0.75]).toEqual([name, now, true]);
    }
  });
});
