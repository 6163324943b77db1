// Every demo page and three corpus pages load in the app (CATP, headless Chromium): once complete, the frame's
// DOM equals parse5's tree of the original, and the HUD shows the silent time of the saved load record.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

import { CORPUS_PAGES, DEMO, chromiumPresent, parse5Of, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

maybe('pages in the app', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig();
  });
  afterAll(async () => {
    await rig?.close();
  });

  const demoPages = readdirSync(DEMO).filter((f) => f.endsWith('.html')).sort();

  test.each(demoPages)('demo %s: DOM equals parse5, HUD silent time equals the record', async (page) => {
    const record = await rig.load(page);
    expect(record.outcome).toBe('complete');
    expect(await rig.dump()).toBe(parse5Of(join(DEMO, page)));
    const state = await rig.state();
    expect(state.missingSlots).toBe(0);
    expect(state.hudSilent).toBe(`${record.silentTimeMs.toFixed(1)} ms`);
    expect(record.silentTimeMs).toBeGreaterThan(0);
    expect(record.updates.length).toBeGreaterThan(0);
    expect(record.arrivals.length).toBeGreaterThan(0);
    // the HUD's timeline is drawn at its box's size, which it learns without reading layout while it draws
    const tl = (await rig.page.evaluate(`(() => {
      const svg = document.getElementById('timeline');
      const [, , w, h] = (svg.getAttribute('viewBox') || '').split(' ').map(Number);
      return { w, h, boxW: svg.clientWidth, boxH: svg.clientHeight, marks: svg.childElementCount };
    })()`)) as { w: number; h: number; boxW: number; boxH: number; marks: number };
    expect(tl.w).toBe(Math.max(200, tl.boxW));
    expect(tl.h).toBe(Math.max(80, tl.boxH));
    expect(tl.marks).toBeGreaterThan(3);
  });

  test('corpus pages: DOM equals parse5', async () => {
    expect(CORPUS_PAGES.length).toBeGreaterThanOrEqual(3);
    for (let i = 0; i < CORPUS_PAGES.length; i++) {
      const record = await rig.load(`corpus-${i}.html`);
      expect(record.outcome).toBe('complete');
      expect(await rig.dump()).toBe(parse5Of(join(rig.root, `corpus-${i}.html`)));
      expect((await rig.state()).hudSilent).toBe(`${record.silentTimeMs.toFixed(1)} ms`);
    }
  });
});
