// bench/catp's first-text measure: which text counts as shown, and the bytes before it is on hand for CATP (the real
// assembler and tree builder, frames in send order) and for one brotli stream of the page; and its baseline, another
// build's host path run beside this one's.
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import * as parse5 from 'parse5';

import { catpFirstText, firstShownText, streamFirstText } from '../../bench/catp/first-text';
import { baselineModules, hostPath, type HostModules } from '../../bench/catp/run';
import { PageNames } from '../../app/browser/page-names';
import { StreamLoadEvents } from '../../app/browser/stream-events';
import { encodePage, StreamLoad } from '../../protocol/catp';
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

describe('bench/catp baseline (CATP_BENCH_BASELINE)', () => {
  // the project's own build stands in for another checkout's: `npm test` builds dist/ first
  const ROOT = join(__dirname, '..', '..');

  test("a built checkout's host path runs on the same frames and makes DOM operations of the same size", () => {
    const page = encodePage(PAGE, { sha256, codec });
    const base = baselineModules(ROOT, 11);
    const here: HostModules = { StreamLoad, StreamLoadEvents, PageNames, sha256, codec };
    const a = hostPath(here, page.frames);
    const b = hostPath(base, page.frames);
    // the same operations; the events' times may differ by a digit
    expect(Math.abs(b.json - a.json)).toBeLessThan(a.json / 100);
    expect(a.json).toBeGreaterThan(PAGE.length / 2);
    expect(b.ms).toBeGreaterThan(0);
  });

  test('a directory that holds no build is refused by name', () => {
    expect(() => baselineModules(join(ROOT, 'test'), 11)).toThrow(expect.objectContaining({ code: 'BENCH_ERR_USAGE' }));
  });
});
