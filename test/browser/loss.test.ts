// With datagrams lost on the way (the in-process relay), the page is seen partially filled OUT OF ORDER — a
// later block in the DOM while an earlier one is still a placeholder — before it completes, and it still
// completes equal to parse5's tree. Screenshots of the window mid-load and complete go to test-artifacts/.
import { join } from 'node:path';

import { DEMO, artifact, chromiumPresent, parse5Of, startRig, type Rig, pageFrame } from './helpers';
import { describeIf } from '../helpers/requires';
import { networkFloor } from '../../renderer/silent-time';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

// Blocks are numbered in document order; a placeholder (<catp-missing>) stands for content still to come.
const PROBE = `(() => {
  const s = window.__catp.state();
  // (null until the app has heard that the load started)
  return s ? { filled: s.filledBlocks, finished: s.finished, blockCount: s.blockCount } : { filled: [], finished: false, blockCount: 0 };
})()`;

maybe('loading under loss', () => {
  let rig: Rig;
  beforeAll(async () => {
    // random loss both ways, and for certain: the first copy of the 2nd and 3rd data frames of each page is lost.
    // Index frames always pass: a lost one holds every block it places until its repair, by which time the lost data
    // frames' repairs may have come too, and nothing is ever seen out of order (1 run in 4 failed so).
    const dropped = new Set<string>();
    const dataSeen = new Map<string, Set<number>>();
    rig = await startRig({
      loss: 0.1,
      seed: 11,
      rate: 20_000,
      delayMs: 60,
      drop: (direction, data) => {
        if (direction === 'toClient' && data.length >= 32 && data[8] === 0xca && data[10] === 1) return false;
        if (direction !== "toClient" || data.length < 32 || data[8] !== 0xca || data[10] !== 2) return undefined;
        const page = data.subarray(12, 20).toString('hex');
        const key = `${page}:${data.readUInt32BE(20)}`;
        const seen = dataSeen.get(page) ?? new Set<number>();
        dataSeen.set(page, seen);
        seen.add(data.readUInt32BE(20));
        if ((seen.size === 2 || seen.size === 3) && !dropped.has(key)) {
          dropped.add(key);
          return true;
        }
        return undefined;
      },
    });
  });
  afterAll(async () => {
    await rig?.close();
  });

  test('the DOM is filled out of order before completion, then equals parse5', async () => {
    let seen: { filled: number[]; placeholders: number } | null = null;
    let shot = false;
    const done = rig.load('article.html');
    let finished = false;
    void done.then(() => (finished = true), () => (finished = true));
    while (!finished) {
      const state = (await rig.page.evaluate(PROBE)) as { filled: number[]; finished: boolean };
      // (the frame is another origin: its document is read through the browser's own frame API)
      const p = { ...state, placeholders: await pageFrame(rig.page).locator('catp-missing').count() };
      // a later block painted while an earlier one is still missing (and shown as missing)
      const later = p.placeholders > 0 ? p.filled.find((b) => Array.from({ length: b }, (_, a) => a).some((a) => !p.filled.includes(a))) : undefined;
      if (later !== undefined && !p.finished && !seen) {
        seen = p;
        await rig.page.screenshot({ path: artifact('browser-mid-load.png') });
        shot = true;
      }
      await new Promise((r) => setTimeout(r, 15));
    }
    const record = await done;
    expect(record.outcome).toBe('complete');
    expect(seen).not.toBeNull();
    expect(shot).toBe(true);
    await rig.page.waitForTimeout(200);
    await rig.page.screenshot({ path: artifact('browser-complete.png') });
    expect(await rig.dump()).toBe(parse5Of(join(DEMO, 'article.html')));
    const last = record.arrivals[record.arrivals.length - 1]!;
    expect(record.arrivals.some((f) => f.repaired > 0)).toBe(true);
    expect(last.missing).toBe(0);
    expect(rig.relay!.counts.dropped).toBeGreaterThan(0);
    // Silent time is not below the network floor by more than the renderer delayed the paints that open the floor's
    // gap: the gap's closing frame cannot be painted before it arrives (at `to`), so the paint gap is at least
    // `to` minus the last paint of a frame that arrived by `from`. A fixed allowance (one vsync, then 20 ms) was
    // flaky: this test polls the page and takes a screenshot mid-load, which on a busy 2-core machine can hold a
    // paint back by more than a frame (CI: 21.3 ms below the floor). The k-th useful index/data frame is shown by
    // the k-th dom event's paint (bench/render's pairing); 2 ms covers the two processes' clocks.
    const floor = networkFloor(record.requestAtEpochMs, record.arrivals);
    expect(floor.ms).toBeCloseTo(record.networkFloorMs, 2);
    const shown = record.arrivals.filter((f) => f.useful && (f.kind === 'data' || f.kind === 'index'));
    const painted = record.domPaintedAtEpochMs ?? [];
    expect(painted).toHaveLength(shown.length);
    let lastPaintBeforeGap = floor.from;
    shown.forEach((f, k) => {
      if (f.atEpochMs <= floor.from && Number.isFinite(painted[k])) lastPaintBeforeGap = Math.max(lastPaintBeforeGap, painted[k]!);
    });
    const held = lastPaintBeforeGap - floor.from;
    expect(record.silentTimeMs).toBeGreaterThanOrEqual(record.networkFloorMs - held - 2);
  });

  test('the page area does not move when the HUD\'s figures grow (a wrapped HUD pushed the page down mid-load)', async () => {
    const top = `document.getElementById('page').getBoundingClientRect().top`;
    const before = (await rig.page.evaluate(top)) as number;
    const saved = (await rig.page.evaluate(`(() => {
      const outs = [...document.querySelectorAll('#hud output')];
      const old = outs.map((o) => o.textContent);
      outs.forEach((o) => { o.textContent = '1234567 ms (99999 repaired)'; });
      return old;
    })()`)) as string[];
    const after = (await rig.page.evaluate(top)) as number;
    const hudScrolls = (await rig.page.evaluate(`(() => { const h = document.getElementById('hud'); return h.scrollHeight > h.clientHeight; })()`)) as boolean;
    await rig.page.evaluate(`(${JSON.stringify(saved)}).forEach((t, i) => { document.querySelectorAll('#hud output')[i].textContent = t; })`);
    expect(after).toBe(before);
    expect(hudScrolls).toBe(false);
  });

  test('in-order transport under the same loss also completes (painted only up to the first gap)', async () => {
    const record = await rig.load('table.html', 'inorder');
    expect(record.outcome).toBe('complete');
    expect(record.transport).toBe('inorder');
    expect(await rig.dump()).toBe(parse5Of(join(DEMO, 'table.html')));
  });
});
