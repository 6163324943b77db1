// Every page of the real-pages corpus through the whole browser under loss: the reference server, a lossy link
// (the in-process relay: 10% of datagrams lost each way, 20 ms each way), the host, and the renderer's DOM operations
// in headless Chromium. Once complete, the page frame's DOM equals parse5's tree of the page as a browser decodes it
// (encoding sniffed, a byte order mark taken off). The protocol suites check the same trees without a browser
// (catp/real-pages-*.test.ts) and pages.test.ts three pages through it; this puts all 87 through the renderer.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { chromiumPresent, parse5Of, startRig, type Rig } from './helpers';
import { realPages } from '../helpers/catp-real-pages';
import { describeIf } from '../helpers/requires';

const corpus = realPages();
const maybe = describeIf(chromiumPresent && corpus !== null, 'Chromium (apt-get install chromium) and ../shared/corpus/real-pages');
jest.setTimeout(120_000);

maybe('the real-pages corpus in the browser, under loss', () => {
  const { dir, files } = corpus ?? { dir: '', files: [] };
  let rig: Rig;
  beforeAll(async () => {
    const extraFiles: Record<string, Uint8Array> = {};
    for (const f of files) extraFiles[`real/${f}`] = readFileSync(join(dir, f)); // the bytes as they are
    rig = await startRig({ loss: 0.1, seed: 62, rate: 200_000, delayMs: 20, extraFiles });
  });
  afterAll(async () => {
    await rig?.close();
  });

  test('the corpus is all there', () => {
    expect(files.length).toBeGreaterThanOrEqual(80);
  });

  test.each(files)('%s: complete, and the DOM is parse5\'s tree', async (f) => {
    const record = await rig.load(`real/${f}`, 'catp', 60_000);
    expect(record.outcome).toBe('complete');
    expect(await rig.dump()).toBe(parse5Of(join(dir, f)));
    expect((await rig.state()).missingSlots).toBe(0);
  });
});
