// A page built by CATP's DOM operations looks exactly as the same page read by Chromium's own parser (the in-order
// transport writes the page's markup into the frame's document): the same pixels once both have settled. The DOM
// tests compare trees; this compares what the user sees, which a tree cannot show: CATP pages were laid out in
// quirks mode whatever their doctype (the frame's emptied document), with the same tree as the parser's.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { PNG } from 'pngjs';

import { artifact, chromiumPresent, CORPUS_DIR, pageFrame, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(180_000);

// one page in each mode, lists and a broken image with a size (heise), tables (keep-tabular-data), another script,
// MathML (laid out by Chromium from the children a token element had when first laid out: dom-ops.ts mathChanged)
const PAGES = ['heise.html', 'daringfireball-1.html', 'keep-tabular-data.html', 'hukumusume.html', 'mathjax.html'];
/**
 * Pixels the two loads of one page may differ in: a few, seen in about one run in four on some pages (a form
 * control's edge, a link's underline skipping a bracket's descender or not; not traced). A page laid out in the wrong
 * mode differs in tens of thousands (heise: 44,237 of the 903,680), stale MathML in about ten thousand.
 */
const NOISE_PIXELS = 32;

/**
 * Counts the host's fetches under way (the page's sub-resources on other origins: here each fails at DNS, at once or
 * after the resolver's 5 s retry when its query is lost, so a page's broken images come at different times).
 */
function fetchesUnderWay(rig: Rig): () => number {
  const host = rig.session.service.host;
  const fetch = host.fetch.bind(host);
  let n = 0;
  host.fetch = async (...args: Parameters<typeof fetch>) => {
    n++;
    try {
      return await fetch(...args);
    } finally {
      n--;
    }
  };
  return () => n;
}

/**
 * The page frame's pixels once the page has settled: no fetch of the host under way, every image complete (loaded or
 * broken), and two screenshots 300 ms apart the same.
 */
async function settledShot(rig: Rig, underWay: () => number): Promise<Buffer> {
  const frame = rig.page.frameLocator('#page').locator('#page');
  const until = Date.now() + 30_000;
  const pendingImages = () => pageFrame(rig.page).locator('img').evaluateAll((els) => els.filter((e) => !(e as unknown as { complete: boolean }).complete).length);
  while (Date.now() < until && (underWay() > 0 || (await pendingImages()) > 0)) await rig.page.waitForTimeout(100);
  let last = await frame.screenshot();
  for (let i = 0; i < 20; i++) {
    await rig.page.waitForTimeout(300);
    const next = await frame.screenshot();
    if (next.equals(last)) return next;
    last = next;
  }
  return last;
}

/** Pixels that differ between two screenshots of one size. */
function differing(a: Buffer, b: Buffer): number {
  const pa = PNG.sync.read(a);
  const pb = PNG.sync.read(b);
  if (pa.width !== pb.width || pa.height !== pb.height) return Infinity;
  let n = 0;
  for (let i = 0; i < pa.data.length; i += 4) {
    if (pa.data[i] !== pb.data[i] || pa.data[i + 1] !== pb.data[i + 1] || pa.data[i + 2] !== pb.data[i + 2]) n++;
  }
  return n;
}

maybe('a CATP page looks as the same page through Chromium’s parser', () => {
  let rig: Rig;
  let underWay: () => number;
  beforeAll(async () => {
    rig = await startRig({ extraFiles: Object.fromEntries(PAGES.map((p) => [`fidelity-${p}`, readFileSync(join(CORPUS_DIR, 'real-pages', p))])) });
    underWay = fetchesUnderWay(rig);
  });
  afterAll(async () => {
    await rig?.close();
  });

  test.each(PAGES)('%s', async (page) => {
    const shots: Buffer[] = [];
    for (const transport of ['inorder', 'catp'] as const) {
      const record = await rig.load(`fidelity-${page}`, transport);
      expect(record.outcome).toBe('complete');
      shots.push(await settledShot(rig, underWay));
    }
    const diff = differing(shots[0]!, shots[1]!);
    if (diff !== 0) for (const [k, t] of ['inorder', 'catp'].entries()) writeFileSync(artifact(`fidelity-${page}-${t}.png`), shots[k]!);
    expect([page, diff <= NOISE_PIXELS ? 'the same' : `${diff} pixels differ`]).toEqual([page, 'the same']);
  });
});
