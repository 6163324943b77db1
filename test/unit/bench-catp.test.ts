// bench/catp's first-text measure: which text counts as shown, and the bytes before it is on hand for CATP (the real
// assembler and tree builder, frames in send order) and for one brotli stream of the page.
import * as zlib from 'node:zlib';
import * as parse5 from 'parse5';

import { catpFirstText, firstShownText, streamFirstText } from '../../bench/catp/first-text';
import { encodePage } from '../../protocol/catp';
import { codec, sha256 } from '../helpers/catp-util';

const para = (i: number) => `<p>Paragraph ${i}: ${'lorem ipsum dolor sit amet '.repeat(12)}</p>`;
const PAGE =
  '<!DOCTYPE html><html><head><title>Title text</title><style>p{margin:0}</style><script>var x = "script text";</script></head>' +
  '<body>\n  <div hidden>Hidden banner</div><div style="color:red; display : none">Styled away</div>' +
  `<noscript>Enable scripts</noscript><h1>Shown heading</h1>${Array.from({ length: 60 }, (_, i) => para(i)).join('')}</body></html>`;

describe('bench/catp first text', () => {
  test('the first shown text skips the head, scripts, <noscript>, whitespace and what the markup hides', () => {
    expect(firstShownText(parse5.parse(PAGE))?.value).toBe('Shown heading');
    expect(firstShownText(parse5.parse('<p hidden>a</p><div style="visibility:hidden">b</div>'))).toBeNull();
  });

  test('CATP: the heading is on hand after the first few frames in send order, not after the whole page', () => {
    const page = encodePage(PAGE, { sha256, codec });
    const first = catpFirstText(page.frames, sha256, codec);
    expect(first).not.toBeNull();
    expect(first!.frames).toBeLessThan(page.frames.length / 2);
    expect(first!.bytes).toBe(page.frames.slice(0, first!.frames).reduce((n, f) => n + f.length, 0));
    // one frame fewer and it is not there yet
    expect(catpFirstText(page.frames.slice(0, first!.frames - 1), sha256, codec)).toBeNull();
  });

  test('one brotli stream: the compressed prefix up to the heading, far less than the whole page', () => {
    const bytes = streamFirstText(PAGE)!;
    expect(bytes).toBeGreaterThan(50);
    expect(bytes).toBeLessThan(zlib.brotliCompressSync(Buffer.from(PAGE)).length / 2);
    expect(streamFirstText('<!DOCTYPE html><body><script>only script</script></body>')).toBeNull();
  });
});
