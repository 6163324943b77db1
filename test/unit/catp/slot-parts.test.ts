/**
 * A text whose data comes in many parts (a long inline script, a stylesheet, a <pre>) is built part by part: each
 * arriving part is inserted where it goes (insertText), never the whole text again. Setting the whole data per
 * part made a slot of n parts cost n^2: on a real 945 KB page, 49 MB of DOM operations for the renderer.
 */
import * as parse5 from 'parse5';
import { CatpTreeBuilder, encodePage, FRAME_KIND, parse5Sink, type CatpTreeSink } from '../../../protocol/catp';
import { DomOpRecorder } from '../../../app/browser/dom-recorder';
import { PageNames } from '../../../app/browser/page-names';
import { DOM_OP } from '../../../protocol/browser/api';
import { codec, kindOf, manyPartsPage, newAssembler, rng, sha256, shuffle } from '../../helpers/catp-util';

type P5Node = parse5.DefaultTreeAdapterMap['node'];

/** The parse5 sink, counting the characters every text call hands over, and checking what insertText says. */
function countingSink(): { sink: CatpTreeSink<P5Node>; chars: { set: number; inserted: number }; completions: string[] } {
  const chars = { set: 0, inserted: 0 };
  const completions: string[] = [];
  const sink: CatpTreeSink<P5Node> = {
    ...parse5Sink,
    setText(node, value) {
      chars.set += value.length;
      parse5Sink.setText(node, value);
    },
    insertText(node, offset, text, around) {
      chars.inserted += text.length;
      expect(around.includes(text)).toBe(true);
      parse5Sink.insertText(node, offset, text, around);
      const data = node.nodeName === '#comment' ? (node as parse5.DefaultTreeAdapterMap['commentNode']).data : (node as parse5.DefaultTreeAdapterMap['textNode']).value;
      // the part landed at its offset; when it completes the text, `around` is all of it
      expect(data.slice(offset, offset + text.length)).toBe(text);
      if (around.length === data.length && around === data) completions.push(around);
    },
  };
  return { sink, chars, completions };
}

// Text of many blocks in three kinds of slot: a script (raw text), a <pre> (visible), a comment.
const script = Array.from({ length: 400 }, (_, i) => `window.d${i} = { id: ${i}, name: "item ${i} ü", tags: ["a${i % 7}", "b${i % 11}"] };`).join('\n');
const pre = Array.from({ length: 300 }, (_, i) => `line ${i}: ${'lorem ipsum dolor sit amet '.repeat(1 + (i % 3))}€`).join('\n');
const note = Array.from({ length: 200 }, (_, i) => `note ${i} ${'x'.repeat(i % 13)}`).join(' ');
const html = `<!DOCTYPE html><html><head><title>parts</title><script>${script}</script></head><body><pre>${pre}</pre><!--${note}--><p>end</p></body></html>`;

test.each([
  ['in order', 0],
  ['reversed', 1],
  ['shuffled', 2],
])('a text of many parts arriving %s is inserted part by part: each character handed over once, the tree parse5’s', (_name, how) => {
  const page = encodePage(html, { sha256, codec, maxPayload: 600 });
  const frames = how === 0 ? page.frames : how === 1 ? [...page.frames].reverse() : shuffle([...page.frames], rng(11));
  const asm = newAssembler();
  const { sink, chars, completions } = countingSink();
  const tree = new CatpTreeBuilder(sink);
  for (const f of frames) {
    asm.receive(f, 0);
    for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
  }
  expect(asm.finished).toBe(true);
  expect(parse5.serialize(tree.root as parse5.DefaultTreeAdapterMap['document'])).toBe(parse5.serialize(parse5.parse(html)));
  // every slot text went in once: no character was handed over twice (the page's text slots hold the three texts)
  const slotText = script.length + pre.length + note.length;
  expect(chars.inserted).toBeGreaterThan(0);
  expect(chars.set + chars.inserted).toBeLessThanOrEqual(slotText + 200);
  // the three long texts each completed through an insert whose `around` was the whole text
  for (const t of [script, pre, note]) expect(completions.some((c) => c === t || c === `\n${t}`)).toBe(true);
});

test('the recorder carries a part as INSERT_TEXT with its offset, and scans the text around it for CSS URLs', () => {
  const css = Array.from({ length: 300 }, (_, i) => `.c${i}{background:url(/img/p${i}.png);margin:${i}px}`).join('\n');
  // one frame a block (spanning: []), so the stylesheet comes in many parts (a block of several frames would hold it whole)
  const page = encodePage(`<!DOCTYPE html><style>${css}</style><p>x</p>`, { sha256, codec, maxPayload: 500, spanning: [] });
  const asm = newAssembler();
  const names = new PageNames('http://example.test/dir/page.html');
  const recorder = new DomOpRecorder(names);
  const tree = new CatpTreeBuilder(recorder);
  let inserts = 0;
  for (const f of [...page.frames].reverse()) {
    asm.receive(f, 0);
    for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
    const ops = recorder.take();
    for (let i = 0; i < ops.length; i++) if (ops[i] === DOM_OP.INSERT_TEXT && typeof ops[i + 1] === 'number' && typeof ops[i + 2] === 'number' && typeof ops[i + 3] === 'string') inserts++;
  }
  expect(inserts).toBeGreaterThan(2);
  // every url() of the stylesheet is named, a token cut between two parts too (it is scanned with both)
  for (let i = 0; i < 300; i++) expect(names.allows(`http://example.test/img/p${i}.png`)).toBe(true);
});

describe('a slot of very many parts (a hostile page: 1,428 parts a block into one slot)', () => {
  test.each([
    ['in order', (d: Uint8Array[]) => d],
    ['reversed', (d: Uint8Array[]) => d.reverse()],
    ['shuffled', (d: Uint8Array[]) => shuffle(d, rng(5))],
  ])('arriving %s, each part lands at its offset', (_name, order) => {
    const asm = newAssembler();
    const tree = new CatpTreeBuilder(parse5Sink);
    for (const f of manyPartsPage(8, order)) {
      expect(asm.receive(f, 0).accepted).toBe(true);
      for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
    }
    expect(asm.finished).toBe(true);
    const html = parse5.serialize(tree.root as parse5.DefaultTreeAdapterMap['document']);
    expect(html).toBe(`<html><head></head><body><pre>${'0123456789'.repeat((8 * 1428) / 10 + 1).slice(0, 8 * 1428)}</pre></body></html>`);
  });

  test.each([
    ['in order', (d: Uint8Array[]) => d],
    ['shuffled', (d: Uint8Array[]) => shuffle(d, rng(7))],
  ])('arriving %s, a block\'s 1,428 parts go to the sink as one insert (the DOM copies the text on each)', (_name, order) => {
    const inserts: Array<{ offset: number; length: number }> = [];
    const sink: CatpTreeSink<P5Node> = {
      ...parse5Sink,
      insertText(node, offset, text, around) {
        inserts.push({ offset, length: text.length });
        parse5Sink.insertText(node, offset, text, around);
      },
    };
    const asm = newAssembler();
    const tree = new CatpTreeBuilder(sink);
    const blocks = 12;
    let dataFrames = 0;
    for (const f of manyPartsPage(blocks, order)) {
      const before = inserts.length;
      asm.receive(f, 0);
      for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
      if (kindOf(f) === FRAME_KIND.DATA) {
        // a data frame: its block's run of parts, once, whole
        dataFrames++;
        expect(inserts.length - before).toBe(1);
        expect(inserts.at(-1)!.length).toBe(1428);
      }
    }
    expect(dataFrames).toBe(blocks);
    expect(asm.finished).toBe(true);
    const html = parse5.serialize(tree.root as parse5.DefaultTreeAdapterMap['document']);
    expect(html).toBe(`<html><head></head><body><pre>${'0123456789'.repeat((blocks * 1428) / 10 + 1).slice(0, blocks * 1428)}</pre></body></html>`);
  });

  test('100 of its data frames take well under a second: a part\'s offset is not a walk over every part below it', () => {
    // 100 data frames of 49 bytes, shuffled, into the browser's sink (operations recorded for the renderer): a walk over
    // the parts below each part took 20 s in all, the last frames 0.4 s each (with parse5's sink 64 s, 1.3 s)
    const frames = manyPartsPage(100, (d) => shuffle(d, rng(9)));
    const asm = newAssembler();
    const recorder = new DomOpRecorder(new PageNames('http://example.test/'));
    const tree = new CatpTreeBuilder(recorder);
    const started = performance.now();
    for (const f of frames) {
      asm.receive(f, 0);
      for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
      recorder.take();
    }
    expect(asm.finished).toBe(true);
    expect(performance.now() - started).toBeLessThan(5000); // (about 0.2 s)
  });
});
