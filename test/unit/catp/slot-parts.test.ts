/**
 * A text whose data comes in many parts (a long inline script, a stylesheet, a <pre>) is built part by part: each
 * arriving part is inserted where it goes (insertText), never the whole text again. Setting the whole data per
 * part made a slot of n parts cost n^2: on a real 945 KB page, 49 MB of DOM operations for the renderer.
 */
import * as parse5 from 'parse5';
import { type BlockInfo, CatpTreeBuilder, encodeFrame, encodePage, encodePieceBody, GrowWriter, packPayload, parse5Sink, type CatpTreeSink } from '../../../protocol/catp';
import { DomOpRecorder } from '../../../app/browser/dom-recorder';
import { PageNames } from '../../../app/browser/page-names';
import { DOM_OP } from '../../../protocol/browser/api';
import { codec, newAssembler, rng, sha256, shuffle } from '../../helpers/catp-util';

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

/**
 * A page built frame by frame (every digest right, as a hostile server can) whose one <pre> slot has 1,428 parts a
 * block, its blocks' data frames in `order`; part i of the slot is the character `i % 10`.
 */
function manyPartsPage(blocks: number, order: (data: Uint8Array[]) => Uint8Array[]): Uint8Array[] {
  const per = 1428;
  const perIndex = 40; // block descriptions an index frame holds (their digests do not compress)
  const indexFrames = Math.ceil(blocks / perIndex);
  const total = indexFrames + blocks;
  const payloads = Array.from({ length: blocks }, (_, b) => {
    const w = new GrowWriter();
    w.varint(per);
    for (let i = 0; i < per; i++) {
      w.varint(1);
      w.u8(0x30 + ((b * per + i) % 10));
    }
    return w.result();
  });
  const infos: BlockInfo[] = payloads.map((p, b) => ({ block: b, stream: 1, firstPiece: per * b, pieces: per, digest: sha256(p).slice(0, 16), seq: indexFrames + b }));
  const body = (k: number, pageDigest: Uint8Array | null): Uint8Array =>
    encodePieceBody(
      { ordinal: k, fragment: false, mode: 'no-quirks', firstNode: k === 0 ? 1 : 6, nodeCount: k === 0 ? 5 : 0, firstSlot: k === 0 ? 0 : 1, slotCount: k === 0 ? 1 : 0,
        firstPieces: k === 0 ? [0, 0, 0] : [0, per * blocks, 0], chain: [], nodes: [], firstBlock: k * perIndex, blocks: infos.slice(k * perIndex, (k + 1) * perIndex), pageDigest },
      k === 0 ? `<html><head></><body><pre><$1${per * blocks}>` : '',
    );
  const bodies = Array.from({ length: indexFrames }, (_, k) => body(k, k === 0 ? new Uint8Array(32) : null));
  const canon = Buffer.concat([bodies[0].subarray(0, bodies[0].length - 32), ...bodies.slice(1), ...payloads]);
  const pageDigest = sha256(canon).slice(0, 32);
  bodies[0] = body(0, pageDigest);
  const frame = (kind: number, seq: number, payload: Uint8Array): Uint8Array =>
    encodeFrame({ id: new Uint8Array(8), kind: kind as 1 | 2, pageId: pageDigest.subarray(0, 8), seq, total, indexFrames }, payload);
  return [
    ...bodies.map((b, k) => frame(1, k, Buffer.concat([sha256(b).subarray(0, 8), packPayload(b, codec, 'final')]))),
    ...order(payloads.map((p, b) => frame(2, indexFrames + b, packPayload(p, codec, 'final')))),
  ];
}

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
