// Pages in legacy encodings in the app (headless Chromium on our renderer) over CATP, in-order UDP and TCP, and in
// stock Chromium straight from the reference server: the frame's DOM is parse5's tree of the correctly decoded
// text, and stock Chromium reads the same text (the server announces the charset it found).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import * as iconv from 'iconv-lite';
import { parse, serialize } from 'parse5';

import { openHeadless } from '../../app/browser';
import { chromiumPresent, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

const para = (t: string) => `<p>${t}</p>\n`.repeat(40);
const PAGES = [
  { file: 'enc-cp1252.html', encoding: 'windows-1252', text: 'Crème brûlée — “déjà vu”', html: (t: string) => `<!doctype html><meta charset="windows-1252"><title>cp1252</title>${para(t)}` },
  { file: 'enc-cp1252-none.html', encoding: 'windows-1252', text: 'Crème brûlée, naïve façade', html: (t: string) => `<!doctype html><title>none</title>${para(t)}` },
  { file: 'enc-latin2.html', encoding: 'iso-8859-2', text: 'Árvíztűrő tükörfúrógép', html: (t: string) => `<!doctype html><meta charset="iso-8859-2"><title>latin2</title>${para(t)}` },
  { file: 'enc-sjis.html', encoding: 'shift_jis', text: '吾輩は猫である。名前はまだ無い。', html: (t: string) => `<!doctype html><meta charset="Shift_JIS"><title>sjis</title>${para(t)}` },
  { file: 'enc-gbk.html', encoding: 'gbk', text: '天地玄黄，宇宙洪荒。', html: (t: string) => `<!doctype html><meta charset="gbk"><title>gbk</title>${para(t)}` },
];

maybe('pages in legacy encodings', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig();
    for (const p of PAGES) writeFileSync(join(rig.root, p.file), iconv.encode(p.html(p.text), p.encoding));
  });
  afterAll(async () => {
    await rig?.close();
  });

  test.each(PAGES.map((p) => [p.file, p] as const))('%s: CATP, in-order and TCP in the app give parse5\'s tree of the decoded page', async (_f, p) => {
    const want = serialize(parse(p.html(p.text), { scriptingEnabled: false }));
    for (const transport of ['catp', 'inorder'] as const) {
      expect((await rig.load(p.file, transport)).outcome).toBe('complete');
      expect(await rig.dump()).toBe(want);
    }
    expect((await rig.loadUrl(`http://127.0.0.1:${rig.server.port}/${p.file}`, 'tcp')).outcome).toBe('complete');
    expect(await rig.dump()).toBe(want);
  });

  test('stock Chromium reads the same text from the reference server', async () => {
    const head = await openHeadless(`http://127.0.0.1:${rig.server.port}/${PAGES[0]!.file}`);
    try {
      for (const p of PAGES) {
        await head.page.goto(`http://127.0.0.1:${rig.server.port}/${p.file}`);
        const seen = (await head.page.evaluate('({ cs: document.characterSet, p: document.querySelector("p").textContent })')) as { cs: string; p: string };
        expect(seen.p).toBe(p.text);
        expect(seen.cs.toLowerCase()).toBe(p.encoding);
      }
    } finally {
      await head.close();
    }
  });
});
