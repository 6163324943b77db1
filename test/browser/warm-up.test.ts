// The renderer's warm-up (renderer/frame-agent.ts): a browser whose renderer is ready before any load gets the host's
// warm-up page as DOM operations and builds it, a few times, in a document that is never shown, so that the first
// page's operations meet compiled code. The page frame shows none of it, and the pages loaded after it (or during it:
// a load's first content ends it) are parse5's trees.
import { join } from 'node:path';

import { warmUpLoadPath } from '../../app/browser/warm-up';
import { chromiumPresent, parse5Of, pageFrame, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

/** How many times the agent builds the warm-up page (frame-agent.ts WARM_UP_ROUNDS). */
const ROUNDS = 3;

maybe('the renderer warms up before the first load', () => {
  let rig: Rig;
  const warmedUp = async () => (await rig.page.evaluate('window.__catp.warmedUp()')) as number | null;

  afterEach(async () => {
    await rig?.close();
  });

  test('it builds the warm-up page in full out of sight; the page frame stays empty; the next page is parse5\'s', async () => {
    rig = await startRig();
    const until = Date.now() + 20_000;
    while ((await warmedUp()) === null && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    expect(await warmedUp()).toBe(ROUNDS * warmUpLoadPath(1).catp.domEvents);
    // nothing of it reached the page frame: still the shell's empty view document
    expect(await pageFrame(rig.page).locator('body').evaluate((b) => ({ children: b.childElementCount, text: b.textContent }))).toEqual({ children: 0, text: '' });
    const record = await rig.load('corpus-0.html');
    expect(record.outcome).toBe('complete');
    expect(await rig.dump()).toBe(parse5Of(join(rig.root, 'corpus-0.html')));
  });

  test('a page loaded as soon as the renderer is ready (the warm-up may still be running) is parse5\'s tree', async () => {
    rig = await startRig();
    const record = await rig.load('corpus-1.html');
    expect(record.outcome).toBe('complete');
    expect(await rig.dump()).toBe(parse5Of(join(rig.root, 'corpus-1.html')));
    // when it has ended, it built at most all its rounds (fewer when the page's first operations came first)
    const built = await warmedUp();
    if (built !== null) expect(built).toBeLessThanOrEqual(ROUNDS * warmUpLoadPath(1).catp.domEvents);
    expect((await rig.state())?.missingSlots).toBe(0);
  });
});
