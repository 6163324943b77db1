// Block reuse in the app: with a payload store (a temp dir), a reload of a page paints its blocks from the store,
// the server sends none of them, the DOM is still parse5's tree, and the HUD and the load record show what
// that saved (blocks, bytes, an estimate of the time).
import { join } from 'node:path';

import { artifact, chromiumPresent, parse5Of, startRig, type Rig } from './helpers';
import { tempDir } from '../dtd/helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

maybe('block reuse in the app', () => {
  let rig: Rig;
  let store: ReturnType<typeof tempDir>;
  beforeAll(async () => {
    store = tempDir('catp-browser-store-');
    rig = await startRig({ storeDir: store.dir });
  });
  afterAll(async () => {
    await rig?.close();
    store?.cleanup();
  });

  test('a reload paints every block from the store; the HUD and the record show the reuse and the bytes saved', async () => {
    const first = await rig.load('article.html');
    expect(first.outcome).toBe('complete');
    expect(first.savings?.blocksReused).toBe(0);
    expect(first.savings?.bytesSaved).toBe(0);
    await rig.session.service.host.flushStore(); // the blocks are on disk before the reload looks them up

    const before = rig.server.counters();
    await rig.page.click('#reload');
    const until = Date.now() + 30_000;
    let state = await rig.state();
    while (!(state.finished && state.loadId > first.loadId) && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 25));
      state = await rig.state();
    }
    const record = state.record;
    expect(record?.outcome).toBe('complete');
    expect(await rig.dump()).toBe(parse5Of(join(rig.root, 'article.html')));
    const blocks = state.blockCount;
    expect(blocks).toBeGreaterThan(0);
    expect(record?.savings?.blocks).toBe(blocks);
    expect(record?.savings?.blocksReused).toBe(blocks);
    expect(record?.savings?.bytesSaved).toBeGreaterThan(0);
    expect(record?.savings?.savedMs).toBeGreaterThan(0);
    expect(record?.savings?.estimate).toMatch(/CATP \d+ B \//);
    // the HUD says so
    expect(state.hudReuse).toBe(`${blocks}/${blocks} blocks`);
    expect(state.hudSaved).toMatch(/^[\d.]+ (B|kB|MB) ≈ [\d.]+ ms$/);
    expect(await rig.page.textContent('#hud-reuse')).toBe(state.hudReuse);
    await rig.page.screenshot({ path: artifact('reuse-hud.png'), clip: { x: 0, y: 0, width: 1280, height: 120 } });
    // and the server sent no data frame for the reload
    const wait = Date.now() + 5000;
    while (rig.server.counters().catpActive > 0 && Date.now() < wait) await new Promise((r) => setTimeout(r, 20));
    expect(rig.server.counters().catpDataFramesSent - before.catpDataFramesSent).toBe(0);
    // the record the host keeps (what --record writes) carries the same figures
    const kept = await rig.session.service.recordOf(state.loadId);
    expect(kept.savings?.blocksReused).toBe(blocks);
  });
});
