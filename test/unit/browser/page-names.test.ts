// What a page names (app/browser/page-names.ts): the only URLs the shell fetches for its frame.
import { HtmlNameScanner, MAX_PAGE_NAMES, PageNames, cssUrls, srcsetUrls } from '../../../app/browser/page-names';
import { DomOpRecorder } from '../../../app/browser/dom-recorder';
import { CatpAssembler, encodePage, CatpTreeBuilder } from '../../../protocol/catp';
import { sha256 } from '../../../platform/sha256';

const PAGE = 'dhttp://example.test:8080/dir/page.html';
const at = (path: string) => `dhttp://example.test:8080${path}`;

const MARKUP = `<!DOCTYPE html><html><head><title>a <img src="not-a-tag.png"></title>
<link rel="stylesheet" href="s.css"><link rel="preload" as="image" imagesrcset="p1.png 1x, p2.png 2x">
<style>body { background: url("bg.png") } @import 'imp.css';</style>
<script>if (a<b) document.write('<img src="from-script.png">')</script>
</head><body background="/root.png">
<img src="a.png#frag" srcset="s1.png 1x, s2.png 2x"><picture><source srcset="w,1.png 640w, w2.png 1280w"></picture>
<video poster="poster.jpg"><source src="v.mp4"><track src="t.vtt"></video>
<svg><image href="svg-img.png"/><use xlink:href="sprite.svg#x"/></svg>
<p style="background-image:url(inline.png)">text that says url(text.png)</p>
<a href="../up.html">up</a><input type="image" src="button.png">
</body></html>`;

const NAMED = ['/dir/s.css', '/dir/p1.png', '/dir/p2.png', '/dir/bg.png', '/dir/imp.css', '/root.png', '/dir/a.png', '/dir/s1.png',
  '/dir/s2.png', '/dir/w,1.png', '/dir/w2.png', '/dir/poster.jpg', '/dir/v.mp4', '/dir/t.vtt', '/dir/svg-img.png', '/dir/sprite.svg',
  '/dir/inline.png', '/dir/text.png', '/up.html', '/dir/button.png', '/dir/page.html'];

/** Named, but not as an image, stylesheet, font or media: another origin never serves these to the frame. */
const NOT_SUBRESOURCES = ['/up.html', '/dir/page.html'];
const SUBRESOURCES = NAMED.filter((p) => !NOT_SUBRESOURCES.includes(p));

describe('page names', () => {
  test('srcset candidates, commas inside URLs and descriptors', () => {
    expect(srcsetUrls('a.png 1x, b.png 2x')).toEqual(['a.png', 'b.png']);
    expect(srcsetUrls('  a,b.png 640w,c.png')).toEqual(['a,b.png', 'c.png']);
    expect(srcsetUrls('x.png, y.png,, z.png 1.5x')).toEqual(['x.png', 'y.png', 'z.png']);
    expect(srcsetUrls('data:image/png;base64,AAA= 1x, q.png (a, b) 2x, r.png')).toEqual(['data:image/png;base64,AAA=', 'q.png', 'r.png']);
    expect(srcsetUrls('')).toEqual([]);
  });

  test('CSS url() in every quoting, @import with a string', () => {
    expect(cssUrls(`a{b:url(x.png)} c{d:url( "y.png" )} e{f:URL('z.png')} @import "i.css"; @import url(j.css);`))
      .toEqual(['x.png', 'y.png', 'z.png', 'i.css', 'j.css']);
    expect(cssUrls('nothing here')).toEqual([]);
  });

  test('resolved against the page, fragments ignored, nothing else allowed', () => {
    const n = new PageNames(PAGE);
    n.element('img', [{ name: 'src', value: 'a.png#x' }, { name: 'alt', value: 'b.png' }]);
    expect(n.allows(at('/dir/a.png'))).toBe(true);
    expect(n.allows(at('/dir/a.png#other'))).toBe(true);
    expect(n.allows(at('/dir/b.png'))).toBe(false); // alt is not a URL
    expect(n.allows(at('/dir/a.png?x'))).toBe(false);
    expect(n.allows('not a url')).toBe(false);
    expect(n.allows(PAGE)).toBe(true); // a page that is an image is shown by loading it
  });

  test('a <base> that arrives after the URLs re-resolves them (out-of-order CATP pieces)', () => {
    const n = new PageNames(PAGE);
    n.element('img', [{ name: 'src', value: 'late.png' }]);
    expect(n.allows(at('/assets/late.png'))).toBe(false);
    n.element('base', [{ name: 'href', value: '/assets/' }]);
    expect(n.allows(at('/assets/late.png'))).toBe(true);
    n.element('img', [{ name: 'src', value: 'later.png' }]);
    expect(n.allows(at('/assets/later.png'))).toBe(true);
  });

  test('a stylesheet names what it uses, relative to itself', () => {
    const n = new PageNames(PAGE);
    n.stylesheet('@import "more.css"; .x { background: url(../img/x.png) }', at('/css/site.css'));
    expect(n.allows(at('/css/more.css'))).toBe(true);
    expect(n.allows(at('/img/x.png'))).toBe(true);
    expect(n.allows(at('/dir/more.css'))).toBe(false);
  });

  test('bounded: a page cannot name more than MAX_PAGE_NAMES URLs', () => {
    const n = new PageNames(PAGE);
    for (let i = 0; i < MAX_PAGE_NAMES + 10; i++) n.add(`u${i}.png`);
    expect(n.size).toBeLessThanOrEqual(MAX_PAGE_NAMES);
    expect(n.dropped).toBeGreaterThan(0);
    expect(n.allows(at(`/dir/u${MAX_PAGE_NAMES + 5}.png`))).toBe(false);
  });

  test('streamed markup, one character at a time: the same names as all at once', () => {
    const whole = new PageNames(PAGE);
    new HtmlNameScanner(whole).write(MARKUP, true);
    const streamed = new PageNames(PAGE);
    const s = new HtmlNameScanner(streamed);
    for (const ch of MARKUP) s.write(ch);
    s.write('', true);
    for (const p of NAMED) {
      expect([p, whole.allows(at(p))]).toEqual([p, true]);
      expect([p, streamed.allows(at(p))]).toEqual([p, true]);
    }
    // a title's and a script's text are not markup: what they spell is not named (script text is not CSS either)
    expect(whole.allows(at('/dir/not-a-tag.png'))).toBe(false);
    expect(whole.allows(at('/dir/from-script.png'))).toBe(false);
    expect(whole.size).toBe(streamed.size);
    for (const p of SUBRESOURCES) expect([p, whole.allowsSubresource(at(p)), streamed.allowsSubresource(at(p))]).toEqual([p, true, true]);
    for (const p of NOT_SUBRESOURCES) expect([p, whole.allowsSubresource(at(p))]).toEqual([p, false]);
  });

  test('another origin serves only what the page loads as an image, stylesheet, font or media', () => {
    const n = new PageNames(PAGE);
    const other = (path: string) => `https://cdn.test${path}`;
    new HtmlNameScanner(n).write(`<link rel="stylesheet" href="${other('/s.css')}"><link rel="prefetch" href="${other('/prefetch')}">
<link rel="preconnect" href="${other('/')}"><link rel="manifest" href="${other('/m.json')}"><link rel="Shortcut Icon" href="${other('/fav.ico')}">
<script src="${other('/x.js')}"></script><iframe src="${other('/frame')}"></iframe><object data="${other('/obj')}"></object>
<a href="${other('/link')}">a</a><form action="${other('/post')}"></form><img src="${other('/i.png')}" srcset="${other('/i2.png')} 2x">
<div style="background:url(${other('/bg.png')})"></div><embed src="${other('/embed')}"><area href="${other('/area')}">`, true);
    for (const p of ['/s.css', '/fav.ico', '/i.png', '/i2.png', '/bg.png']) expect([p, n.allowsSubresource(other(p))]).toEqual([p, true]);
    for (const p of ['/prefetch', '/', '/m.json', '/x.js', '/frame', '/obj', '/link', '/post', '/embed', '/area']) {
      expect([p, n.allowsSubresource(other(p))]).toEqual([p, false]);
    }
    expect(n.namesSubresourcesOn('https://cdn.test')).toBe(true);
    expect(n.namesSubresourcesOn('dhttp://example.test:8080')).toBe(false);
    // a stylesheet on that origin: what it uses is a sub-resource, relative to the stylesheet
    n.stylesheet('@font-face { src: url(fonts/f.woff2) }', other('/css/site.css'));
    expect(n.allowsSubresource(other('/css/fonts/f.woff2'))).toBe(true);
    // named as a link first, then as an image: the image makes it a sub-resource
    n.element('a', [{ name: 'href', value: other('/both.png') }]);
    expect(n.allowsSubresource(other('/both.png'))).toBe(false);
    n.element('img', [{ name: 'src', value: other('/both.png') }]);
    expect(n.allowsSubresource(other('/both.png'))).toBe(true);
  });

  test('the origins of the frames a page nests (a tunnel answers their navigation), not sub-resources', () => {
    const n = new PageNames(PAGE);
    new HtmlNameScanner(n).write(`<iframe src="https://ads.test/slot.html"></iframe><frameset><frame src="https://player.test/p"></frameset>
<a href="https://link.test/x">a</a><img src="https://cdn.test/i.png">`, true);
    expect(n.namesFramesOn('https://ads.test')).toBe(true);
    expect(n.namesFramesOn('https://player.test')).toBe(true);
    for (const o of ['https://link.test', 'https://cdn.test', 'https://example.test']) expect([o, n.namesFramesOn(o)]).toEqual([o, false]);
    expect(n.allowsSubresource('https://ads.test/slot.html')).toBe(false);
    expect(n.namesSubresourcesOn('https://ads.test')).toBe(false);
    // a relative frame resolves against a <base> that comes later too
    n.element('iframe', [{ name: 'src', value: 'embed/1' }]);
    n.addBase('https://base.test/');
    expect(n.namesFramesOn('https://base.test')).toBe(true);
    // a frame's src that a CATP slot fills later is read with its tag
    const rec = new DomOpRecorder(n);
    rec.reset(false, 'no-quirks');
    const f = rec.element('iframe', 'http://www.w3.org/1999/xhtml', []);
    rec.setAttrs(f, [{ name: 'src', value: 'https://late.test/' + 'x'.repeat(300) }]);
    expect(n.namesFramesOn('https://late.test')).toBe(true);
  });

  test('an attribute a CATP slot fills later is read with its element\'s tag and rel', () => {
    const names = new PageNames(PAGE);
    const rec = new DomOpRecorder(names);
    rec.reset(false, 'no-quirks');
    const link = rec.element('link', 'http://www.w3.org/1999/xhtml', [{ name: 'rel', value: 'stylesheet' }]);
    const a = rec.element('a', 'http://www.w3.org/1999/xhtml', []);
    rec.setAttrs(link, [{ name: 'rel', value: 'stylesheet' }, { name: 'href', value: 'https://cdn.test/late.css' }]);
    rec.setAttrs(a, [{ name: 'href', value: 'https://cdn.test/late.html' }]);
    expect(names.allowsSubresource('https://cdn.test/late.css')).toBe(true);
    expect(names.allowsSubresource('https://cdn.test/late.html')).toBe(false);
    expect(names.allows('https://cdn.test/late.html')).toBe(true);
  });

  test('a <style> is named as its text arrives, before its end tag', () => {
    const n = new PageNames(PAGE);
    const s = new HtmlNameScanner(n);
    s.write('<style>@import "first.css"; body{background:url(');
    expect(n.allows(at('/dir/first.css'))).toBe(true);
    s.write('second.png)}');
    expect(n.allows(at('/dir/second.png'))).toBe(true);
  });

  test('the CATP tree names the same URLs as the markup, frames arriving in reverse order', () => {
    const bytes = new TextEncoder().encode(MARKUP);
    const page = encodePage(bytes, { sha256, maxPayload: 200 });
    const names = new PageNames(PAGE);
    const tree = new CatpTreeBuilder(new DomOpRecorder(names));
    const a = new CatpAssembler({ sha256 });
    for (let k = page.frames.length - 1; k >= 0; k--) {
      a.receive(page.frames[k]!, 0);
      for (let e = a.nextEvent(); e; e = a.nextEvent()) if (e.type === 'index-piece' || e.type === 'block-filled') tree.apply(e);
    }
    expect(page.frames.length).toBeGreaterThan(3);
    for (const p of NAMED) expect([p, names.allows(at(p))]).toEqual([p, true]);
    for (const p of SUBRESOURCES) expect([p, names.allowsSubresource(at(p))]).toEqual([p, true]);
    for (const p of NOT_SUBRESOURCES) expect([p, names.allowsSubresource(at(p))]).toEqual([p, false]);
  });
});
