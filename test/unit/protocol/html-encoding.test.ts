// HTML encoding sniffing (protocol/html-encoding.ts): BOM, then the transport's charset, then the <meta> prescan,
// then a default (whole document: UTF-8 if valid, else windows-1252; a stream's prefix: UTF-8); and a streaming
// decoder whose text equals a one-shot decode wherever the chunks are cut.
import * as iconv from 'iconv-lite';

import { charsetParam, decodeHtml, PRESCAN_BYTES, sniffHtmlEncoding, StreamingHtmlDecoder, textDecoderFor, textEncoding } from '../../../protocol/html-encoding';
import { seededRng } from '../../../protocol/random';

const enc = (s: string, e: string) => new Uint8Array(iconv.encode(s, e));

describe('sniffHtmlEncoding', () => {
  const meta = (cs: string, body: string) => `<!doctype html><meta charset="${cs}"><title>t</title><p>${body}</p>`;
  test.each([
    ['a UTF-8 BOM beats the label and the meta', new Uint8Array([0xef, 0xbb, 0xbf, ...enc(meta('windows-1252', 'é'), 'utf-8')]), 'text/html; charset=iso-8859-2', 'UTF-8', 'bom'],
    ['a UTF-16LE BOM', new Uint8Array([0xff, 0xfe, ...enc('<p>é</p>', 'utf-16le')]), undefined, 'UTF-16LE', 'bom'],
    ['the label beats the meta', enc(meta('windows-1252', 'ő'), 'iso-8859-2'), 'text/html; charset="ISO-8859-2"', 'ISO-8859-2', 'transport'],
    ['an unknown label counts as none', enc(meta('Shift_JIS', '日本'), 'shift_jis'), 'text/html; charset=x-nonsense', 'Shift_JIS', 'meta'],
    ['meta charset', enc(meta('gbk', '中文'), 'gbk'), undefined, 'GBK', 'meta'],
    ['meta http-equiv', enc('<meta http-equiv="Content-Type" content="text/html; charset=windows-1252"><p>Crème brûlée</p>', 'windows-1252'), 'text/html', 'windows-1252', 'meta'],
    ['nothing, valid UTF-8', enc('<p>Crème brûlée</p>', 'utf-8'), 'text/html', 'UTF-8', 'utf-8-valid'],
    ['nothing, not UTF-8', enc('<p>Crème brûlée</p>', 'windows-1252'), undefined, 'windows-1252', 'default'],
  ])('%s', (_name, bytes, contentType, encoding, source) => {
    expect(sniffHtmlEncoding(bytes, { contentType, complete: true })).toEqual({ encoding, source });
  });

  test('a meta past the first 1,024 bytes is not seen; the whole page falls back on its bytes, a prefix on what it has', () => {
    const late = enc(`<!doctype html><!--${'x'.repeat(1100)}--><meta charset="windows-1252"><p>Crème</p>`, 'windows-1252');
    expect(sniffHtmlEncoding(late, { complete: true })).toEqual({ encoding: 'windows-1252', source: 'default' });
    expect(sniffHtmlEncoding(late.subarray(0, 1024), { complete: false })).toEqual({ encoding: "UTF-8", source: "utf-8-valid" }); // ASCII so far
    expect(sniffHtmlEncoding(enc("<p>Crème</p>", "windows-1252"), { complete: false })).toEqual({ encoding: "windows-1252", source: "default" });
    expect(sniffHtmlEncoding(enc("<p>日本</p>", "utf-8").subarray(0, 5), { complete: false })).toEqual({ encoding: "UTF-8", source: "utf-8-valid" }); // a character cut at the end
  });

  test('charset parameters and text encodings', () => {
    expect(charsetParam('text/html;charset=UTF-8')).toBe('UTF-8');
    expect(charsetParam('text/html; foo=bar; charset="gbk"')).toBe('gbk');
    expect(charsetParam('text/html')).toBeUndefined();
    expect(textEncoding('text/css; charset=latin1')).toBe('windows-1252');
    expect(textEncoding('text/css; charset=bogus')).toBe('UTF-8');
    expect(textEncoding(null)).toBe('UTF-8');
  });
});

describe('StreamingHtmlDecoder', () => {
  const pages: [string, string, string | undefined][] = [
    ['Shift_JIS', `<!doctype html><meta charset="shift_jis"><title>日本語</title>${'<p>吾輩は猫である。名前はまだ無い。</p>'.repeat(80)}`, undefined],
    ['GBK', `<!doctype html><meta charset="gbk"><title>中文</title>${'<p>天地玄黄，宇宙洪荒。</p>'.repeat(80)}`, undefined],
    ['ISO-8859-2', `<!doctype html><title>ő</title>${'<p>Árvíztűrő tükörfúrógép</p>'.repeat(80)}`, 'text/html; charset=iso-8859-2'],
    ['windows-1252', `<!doctype html><meta charset=windows-1252><p>${'Crème brûlée, déjà vu. '.repeat(80)}</p>`, undefined],
  ];
  test.each(pages)('%s: the text is the same wherever the chunks are cut', (encoding, html, contentType) => {
    const bytes = enc(html, encoding);
    const whole = decodeHtml(bytes, contentType);
    expect(whole.encoding.toLowerCase()).toBe(encoding.toLowerCase());
    expect(whole.text).toBe(html);
    const r = seededRng(7);
    for (let trial = 0; trial < 20; trial++) {
      const d = new StreamingHtmlDecoder(contentType);
      let out = '';
      for (let off = 0; off < bytes.length; ) {
        const n = 1 + Math.floor(r() * 300);
        out += d.push(bytes.subarray(off, off + n), off + n >= bytes.length);
        off += n;
      }
      expect(out).toBe(html);
      expect(d.encoding?.toLowerCase()).toBe(encoding.toLowerCase());
    }
  });

  test('the same bytes give the same text wherever the first chunks are cut: a BOM cut, a first chunk past 1,024 bytes (fuzz s58)', () => {
    const decode = (contentType: string | undefined, bytes: Uint8Array, cuts: number[], lastWithData = false) => {
      const d = new StreamingHtmlDecoder(contentType);
      let out = '';
      let at = 0;
      for (const [i, c] of cuts.entries()) {
        out += d.push(bytes.subarray(at, c), lastWithData && i === cuts.length - 1);
        at = c;
      }
      if (!lastWithData) out += d.push(new Uint8Array(0), true);
      return { out, encoding: d.encoding };
    };
    // A BOM beats the label: a label used to decide on a first chunk that held only the BOM's first byte.
    const bom = new Uint8Array([0xef, 0xbb, 0xbf, ...enc('<p>é</p>', 'utf-8')]);
    for (const cuts of [[bom.length], [1, bom.length], [2, bom.length], [1, 2, 3, bom.length]]) {
      expect(decode('text/html; charset=gbk', bom, cuts)).toEqual({ out: '<p>é</p>', encoding: 'UTF-8' });
    }
    // No label, no meta: the UTF-8 check sees the first 1,024 bytes, however many the first chunk brought (it saw
    // them all, and a windows-1252 byte past 1,024 turned a page UTF-8 or not by where TCP cut it).
    const late = new Uint8Array([...enc(`<p>${'a'.repeat(1100)}`, 'utf-8'), 0xe9, ...enc('</p>', 'utf-8')]);
    const want = decode(undefined, late, [1024, late.length]);
    expect(want.encoding).toBe('UTF-8');
    for (const cuts of [[late.length], [1, late.length], [1030, late.length]]) expect(decode(undefined, late, cuts)).toEqual(want);
    expect(decode(undefined, late, [late.length], true)).toEqual(want);
    expect(decode(undefined, late, [600, late.length], true)).toEqual(want);
  });

  test('without a label it holds its text until the prescan has 1,024 bytes (or the end); with one it does not', () => {
    const bytes = enc(`<!doctype html><meta charset="windows-1252"><p>${'é'.repeat(2000)}</p>`, 'windows-1252');
    const d = new StreamingHtmlDecoder('text/html');
    expect(d.push(bytes.subarray(0, PRESCAN_BYTES - 1))).toBe('');
    expect(d.push(bytes.subarray(PRESCAN_BYTES - 1, PRESCAN_BYTES + 10)).length).toBe(PRESCAN_BYTES + 10);
    expect(d.encoding).toBe('windows-1252');
    const labelled = new StreamingHtmlDecoder('text/html; charset=windows-1252');
    expect(labelled.push(bytes.subarray(0, 10))).toBe('<!doctype ');
    const short = new StreamingHtmlDecoder();
    expect(short.push(enc('<p>é</p>', 'utf-8'), true)).toBe('<p>é</p>');
  });
});

test('windows-1252 is decoded from the spec\'s index, 0x80-0x9F included (Node\'s own TextDecoder reads them as C1 controls)', () => {
  const all = new Uint8Array(256).map((_, i) => i);
  const text = decodeHtml(all, 'text/html; charset=windows-1252').text;
  // the spec's index: 0x81, 0x8D, 0x8F, 0x90 and 0x9D stay the C1 code points (iconv-lite makes them U+FFFD)
  expect(text.slice(0x80, 0xa0)).toBe('€\u0081‚ƒ„…†‡ˆ‰Š‹Œ\u008dŽ\u008f\u0090‘’“”•–—˜™š›œ\u009džŸ');
  expect(text.slice(0, 0x80) + text.slice(0xa0)).toBe(String.fromCharCode(...all.subarray(0, 0x80), ...all.subarray(0xa0)));
  expect(textDecoderFor('Windows-1252').decode(enc('“Crème” — 100€', 'windows-1252'))).toBe('“Crème” — 100€');
});
