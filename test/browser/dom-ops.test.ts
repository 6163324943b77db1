// The renderer's DOM-operation applier (renderer/dom-ops.ts) in Chromium, against parse5: a page's frames arrive in
// reverse order (every index piece before the one it follows: placeholders that later go), one `dom` batch per
// frame, and after EVERY batch the live document is exactly the tree the host's builder holds (parse5's sink fed the
// same events). The applier holds inserts into the live document to the end of a slice; this checks that holding
// them never changes what the document holds when a batch is done.
import { serialize } from 'parse5';

import type { HeadlessPage } from '../../app/browser/chromium';
import { DomOpRecorder } from '../../app/browser/dom-recorder';
import { serializeDump } from '../../app/browser/wire';
import { CatpAssembler, CatpTreeBuilder, encodePage, parse5TreeBuilder } from '../../protocol/catp';
import { DOM_OP, type DomOps, type DumpNode } from '../../protocol/browser/api';
import { sha256 } from '../../platform/sha256';
import { manyPartsPage, newAssembler, rng, shuffle } from '../helpers/catp-util';
import { bundledPage, chromiumPresent } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

const rows = Array.from({ length: 30 }, (_, i) => `<tr><td>${i}</td><td>cell <b>${i}</b></td></tr>`).join('');
const HTML = `<!DOCTYPE html><html><head><title>ops</title><style>td{padding:2px}</style></head><body>
<h1 id=top>Held inserts</h1>${Array.from({ length: 12 }, (_, i) => `<section><h2>S${i}</h2><p>Para ${i} with <a href="#top">a link</a> and <em>words</em>. ${'lorem ipsum '.repeat(20)}</p><ul><li>a${i}</li><li>b${i}</li></ul></section>`).join('\n')}
<table>${rows}</table><template><i>t</i></template><svg viewBox="0 0 1 1"><circle r="1"/></svg><pre>${'line\n'.repeat(200)}</pre></body></html>`;

/**
 * The frames, in this order, through an assembler, the host's recorder and parse5's builder fed the same events:
 * each `dom` batch with parse5's tree when it was taken, and the tree at the end.
 */
function record(frames: readonly Uint8Array[]): { steps: Array<{ ops: DomOps; expected: string }>; finished: boolean; final: string } {
  const asm = new CatpAssembler({ sha256 });
  asm.start(0);
  const recorder = new DomOpRecorder();
  const tree = new CatpTreeBuilder(recorder);
  const model = parse5TreeBuilder();
  const steps: Array<{ ops: DomOps; expected: string }> = [];
  for (const f of frames) {
    asm.receive(f, 0);
    for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) {
      tree.apply(ev);
      model.apply(ev);
    }
    const ops = recorder.take();
    if (ops.length > 0) steps.push({ ops, expected: serialize(model.root!) });
  }
  return { steps, finished: asm.finished, final: serialize(model.root!) };
}

maybe('DOM operations applied in Chromium', () => {
  let page: Awaited<ReturnType<typeof bundledPage>>;
  let head: HeadlessPage;
  beforeAll(async () => {
    page = await bundledPage(`import { DomOpApplier } from './renderer/dom-ops'; import { dumpDocument } from './renderer/dump'; Object.assign(window, { DomOpApplier, dumpDocument });`, {
      '/': '<!DOCTYPE html><script src="/bundle.js"></script><iframe id="f" src="/frame.html" sandbox="allow-same-origin" style="width:800px;height:600px"></iframe>',
      '/frame.html': '<!DOCTYPE html><html><head></head><body></body></html>',
    });
    head = page.head;
    await head.page.waitForFunction('document.getElementById("f").contentDocument?.readyState === "complete"');
  });
  afterAll(async () => {
    await page?.close();
  });

  test('frames in reverse order: after every batch the live document is the builder’s tree', async () => {
    const page = encodePage(HTML, { sha256, maxPayload: 300 });
    expect(page.indexFrames).toBeGreaterThan(3);
    const { steps, finished } = record([...page.frames].reverse());
    expect(finished).toBe(true);
    expect(steps.length).toBeGreaterThanOrEqual(page.indexFrames);
    // index placeholders were there mid-way, and went
    expect(steps.some((s) => s.expected.includes('data-catp-kind="index"'))).toBe(true);
    expect(steps.at(-1)!.expected).not.toContain('catp-missing');

    await head.page.evaluate('window.applier = new window.DomOpApplier(document.getElementById("f").contentDocument)');
    for (const [k, s] of steps.entries()) {
      // pushed as the frame agent does: applied in slices, `done` once all of it is in the document
      const got = (await head.page.evaluate(
        `new Promise((ok) => window.applier.push(${JSON.stringify(s.ops)}, () => ok({ tree: window.dumpDocument(document.getElementById('f').contentDocument, 'no-quirks'), bad: window.applier.bad })))`,
      )) as { tree: DumpNode; bad: number };
      expect(got.bad).toBe(0);
      expect([k, serializeDump(got.tree)]).toEqual([k, s.expected]);
    }
  });

  test('batches queued faster than they are built: placeholders whose text is queued are never built, the tree is the same', async () => {
    const page = encodePage(HTML, { sha256, maxPayload: 300 });
    // reverse order (every index piece before the one it follows) and a shuffled one: fills arrive before and after
    // their placeholders, and later pieces go in before nodes whose placeholders were never built
    for (const order of [[...page.frames].reverse(), shuffle([...page.frames], rng(7)), page.frames]) {
      const { steps, finished, final } = record(order);
      const batches = steps.map((st) => st.ops);
      expect(finished).toBe(true);
      const got = (await head.page.evaluate(`(async () => {
        const doc = document.getElementById('f').contentDocument;
        const applier = new window.DomOpApplier(doc);
        const all = ${JSON.stringify(batches)};
        await Promise.all(all.map((b) => new Promise((ok) => applier.push(b, ok))));
        return { tree: window.dumpDocument(doc, 'no-quirks'), bad: applier.bad, skipped: applier.skipped, placeholders: applier.placeholders };
      })()`)) as { tree: DumpNode; bad: number; skipped: number; placeholders: number };
      expect({ bad: got.bad, placeholders: got.placeholders }).toEqual({ bad: 0, placeholders: 0 });
      expect(got.skipped).toBeGreaterThan(0);
      expect(serializeDump(got.tree)).toBe(final);
    }
  });

  test('frames a page nests go in two a slice (each makes a document), and the tree is the same', async () => {
    const html = `<!DOCTYPE html><html><head><title>frames</title></head><body>${Array.from({ length: 20 }, (_, i) => `<p>ad ${i}</p><iframe title="f${i}"></iframe>`).join('')}<p>end</p></body></html>`;
    const { steps, final } = record(encodePage(html, { sha256 }).frames);
    const got = (await head.page.evaluate(`(async () => {
      const doc = document.getElementById('f').contentDocument;
      const applier = new window.DomOpApplier(doc);
      // what each task put in the document: a MutationObserver's records come after each task that made them
      let most = 0;
      const mo = new MutationObserver((records) => {
        let n = 0;
        for (const r of records) for (const a of r.addedNodes) n += a.nodeName === 'IFRAME' ? 1 : a.querySelectorAll ? a.querySelectorAll('iframe').length : 0;
        most = Math.max(most, n);
      });
      mo.observe(doc, { childList: true, subtree: true });
      for (const b of ${JSON.stringify(steps.map((st) => st.ops))}) applier.push(b);
      await applier.whenIdle();
      await new Promise((ok) => setTimeout(ok, 0));
      mo.disconnect();
      return { tree: window.dumpDocument(doc, 'no-quirks'), bad: applier.bad, most, frames: doc.querySelectorAll('iframe').length };
    })()`)) as { tree: DumpNode; bad: number; most: number; frames: number };
    expect({ bad: got.bad, frames: got.frames }).toEqual({ bad: 0, frames: 20 });
    expect(got.most).toBeGreaterThan(0);
    expect(got.most).toBeLessThanOrEqual(2);
    expect(serializeDump(got.tree)).toBe(final);
  });

  test('stopped (another load took the document), nothing queued is applied and its waiters are let go', async () => {
    const page = encodePage(HTML, { sha256, maxPayload: 300 });
    const { steps } = record(page.frames);
    const got = (await head.page.evaluate(`(async () => {
      const doc = document.getElementById('f').contentDocument;
      while (doc.firstChild) doc.removeChild(doc.firstChild);
      const applier = new window.DomOpApplier(doc);
      for (const b of ${JSON.stringify(steps.map((st) => st.ops))}) applier.push(b);
      applier.stop();
      await applier.whenIdle();
      await new Promise((ok) => setTimeout(ok, 50));
      return { children: doc.childNodes.length, idle: applier.idle };
    })()`)) as { children: number; idle: boolean };
    expect(got).toEqual({ children: 0, idle: true });
  });

  test('a hostile page of one <pre> in blocks of 1,428 one-character parts: each block changes the text once', async () => {
    // Chromium's insertData copies the text: a change per part made the blocks quadratic in the page (300 blocks 6.9 s)
    const blocks = 30;
    const asm = newAssembler();
    const recorder = new DomOpRecorder();
    const tree = new CatpTreeBuilder(recorder);
    const batches: DomOps[] = [];
    for (const f of manyPartsPage(blocks, (d) => shuffle(d, rng(3)))) {
      asm.receive(f, 0);
      for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
      const ops = recorder.take();
      if (ops.length > 0) batches.push(ops);
    }
    expect(asm.finished).toBe(true);
    const got = (await head.page.evaluate(`(async () => {
      const doc = document.getElementById('f').contentDocument;
      const applier = new window.DomOpApplier(doc);
      let changes = 0;
      const mo = new MutationObserver((records) => { for (const r of records) if (r.type === 'characterData') changes++; });
      mo.observe(doc, { characterData: true, subtree: true });
      for (const b of ${JSON.stringify(batches)}) await new Promise((ok) => applier.push(b, ok));
      await new Promise((ok) => setTimeout(ok, 0));
      mo.disconnect();
      return { text: doc.querySelector('pre')?.textContent ?? null, bad: applier.bad, changes };
    })()`)) as { text: string | null; bad: number; changes: number };
    expect(got.bad).toBe(0);
    expect(got.text).toBe('0123456789'.repeat((blocks * 1428) / 10 + 1).slice(0, blocks * 1428));
    expect(got.changes).toBe(blocks);
  });

  test('a MathML token element whose text came after its placeholder was painted is laid out as one built whole', async () => {
    // an <mi> holding an empty text and a slot's placeholder, painted; then its text, and the placeholder goes.
    // Chromium kept the <mi>'s layout from when the placeholder stood in it (20 px tall, not 9): the applier lays
    // the <math> out again. Beside it, the same <mi> built with its text.
    const { RESET, ELEMENT: E, TEXT, PLACEHOLDER, INSERT, REMOVE, SET_TEXT, APPEND_NEW } = DOM_OP;
    const first = [1, RESET, 0, 0, E, 'html', 0, 0, APPEND_NEW, 0, E, 'body', 0, 0, APPEND_NEW, 1, E, 'p', 0, 0, APPEND_NEW, 2,
      E, 'math', 2, 0, APPEND_NEW, 3, E, 'mi', 2, 0, APPEND_NEW, 4, TEXT, '', APPEND_NEW, 5, PLACEHOLDER, 0, 1, INSERT, 5, 7, 6,
      E, 'math', 2, 0, APPEND_NEW, 3, E, 'mi', 2, 0, APPEND_NEW, 8, TEXT, 'x', APPEND_NEW, 9];
    const then = [11, SET_TEXT, 6, 'x', REMOVE, 7];
    const got = (await head.page.evaluate(`(async () => {
      const doc = document.getElementById('f').contentDocument;
      const applier = new window.DomOpApplier(doc);
      const frame = () => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
      await new Promise((ok) => applier.push(${JSON.stringify(first)}, ok));
      await frame();
      const before = doc.querySelector('mi').getBoundingClientRect().height;
      await new Promise((ok) => applier.push(${JSON.stringify(then)}, ok));
      await frame();
      const [late, whole] = [...doc.querySelectorAll('mi')].map((m) => Math.round(m.getBoundingClientRect().height));
      return { html: doc.body.innerHTML, bad: applier.bad, before: Math.round(before), late, whole };
    })()`)) as { html: string; bad: number; before: number; late: number; whole: number };
    expect(got.html).toBe('<p><math><mi>x</mi></math><math><mi>x</mi></math></p>');
    expect(got.bad).toBe(0);
    expect(got.before).toBeGreaterThan(got.whole); // the placeholder made it taller
    expect(got.late).toBe(got.whole);
  });

  test('a batch the applier cannot read is counted, and the batches after it keep their handles', async () => {
    const E = 1, TEXT = 2, RESET = 0, APPEND_NEW = 12;
    const batches = [
      [1, RESET, 0, 0, E, 'html', 0, 0, APPEND_NEW, 0],
      ['x', E, 'head', 0, 0], // no handle count: refused whole
      [2, E, 'body', 0, 5, 'a'], // five attributes announced, half of one there: refused from there on
      [3, APPEND_NEW, 1], // nothing created yet in this batch: nothing to append
      [3, E, 'body', 0, 1, 'class', 'x', APPEND_NEW, 1, TEXT, 'hi', APPEND_NEW, 3],
    ];
    const got = (await head.page.evaluate(`(async () => {
      const doc = document.getElementById('f').contentDocument;
      const applier = new window.DomOpApplier(doc);
      for (const b of ${JSON.stringify(batches)}) await new Promise((ok) => applier.push(b, ok));
      return { html: doc.documentElement.outerHTML, bad: applier.bad };
    })()`)) as { html: string; bad: number };
    expect(got).toEqual({ html: '<html><body class="x">hi</body></html>', bad: 3 });
  });
});
