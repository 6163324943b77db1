// The silent-time meter's clock (renderer/meter.ts PaintClock) in Chromium: a change belongs to the frame whose
// animation callbacks ran after it. A task queued before a frame can run after the frame's rendering and before the
// task that stamps it (the DOM applier's next slice does: renderer/dom-ops.ts posts it at the end of a slice, the
// frame comes first, then the slice); what that task changes is the next frame's, and its update and `settled()` say
// so. The stamp itself is the first task after the frame, ahead of that slice.
import type { HeadlessPage } from '../../app/browser/chromium';
import { bundledPage, chromiumPresent } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

interface Outcome {
  updates: Array<{ what: string; count: number; atEpochMs: number }>;
  /** When each change's settled() resolved, and the last update's time then (what the frame agent reports). */
  settledA: number;
  settledB: number;
  paintedA: number;
  paintedB: number;
  /** The stamps and the task queued in A's frame, in the order they ran. */
  order: string[];
  /** Frames after the one that showed A, up to B's stamp (B's frame is one of them). */
  framesBetween: number;
}

maybe('PaintClock in Chromium', () => {
  let page: Awaited<ReturnType<typeof bundledPage>>;
  let head: HeadlessPage;
  beforeAll(async () => {
    page = await bundledPage(`import { PaintClock } from './renderer/meter'; Object.assign(window, { PaintClock });`, {
      '/': '<!DOCTYPE html><script src="/bundle.js"></script><p id="p">0</p>',
    });
    head = page.head;
    await head.page.waitForFunction('typeof window.PaintClock === "function"');
  });
  afterAll(async () => {
    await page?.close();
  });

  /**
   * Change A; in the frame that shows it, an animation callback that runs before the clock's queues a task (as a
   * slice posted before a frame and run after it is), and that task makes change B. B is not in that frame.
   */
  const run = (): Promise<Outcome> =>
    head.page.evaluate(`new Promise((done) => {
      const p = document.getElementById('p');
      const order = [];
      const clock = new window.PaintClock((u) => order.push('stamp ' + u.what));
      const out = { updates: clock.updates, framesBetween: 0, order };
      let counting = true;
      const count = () => { if (!counting) return; out.framesBetween++; requestAnimationFrame(count); };
      const slice = new MessageChannel();
      slice.port1.onmessage = () => {
        order.push('slice');
        p.textContent = 'B';
        clock.dirty('B');
        clock.settled().then(() => {
          out.settledB = performance.timeOrigin + performance.now();
          out.paintedB = clock.updates.at(-1).atEpochMs;
          counting = false;
          setTimeout(() => done(out), 50);
        });
      };
      setTimeout(() => {
        // the next frame's callbacks run in the order they were asked for: this one before the clock's
        requestAnimationFrame(() => {
          slice.port2.postMessage(0);
          requestAnimationFrame(count);
        });
        p.textContent = 'A';
        clock.dirty('A');
        clock.settled().then(() => {
          out.settledA = performance.timeOrigin + performance.now();
          out.paintedA = clock.updates.at(-1).atEpochMs;
        });
      }, 0);
    })`) as Promise<Outcome>;

  test('a change made after the frame took its changes is stamped with the next frame, and settles with it', async () => {
    const got = await run();
    // two updates, not one that holds both: A with its frame, B with the next
    expect(got.updates.map((u) => [u.what, u.count])).toEqual([
      ['A', 1],
      ['B', 1],
    ]);
    expect(got.updates[1]!.atEpochMs).toBeGreaterThan(got.updates[0]!.atEpochMs);
    // each settled() resolves at its own frame's stamp, and the frame agent's "painted at" is that stamp
    expect(got.paintedA).toBe(got.updates[0]!.atEpochMs);
    expect(got.paintedB).toBe(got.updates[1]!.atEpochMs);
    expect(got.settledB).toBeGreaterThan(got.settledA);
    // B was painted by a frame after A's: its animation callbacks ran at least once more
    expect(got.framesBetween).toBeGreaterThanOrEqual(1);
    // A's stamp is the first task after its frame, ahead of the task queued in it
    expect(got.order).toEqual(['stamp A', 'slice', 'stamp B']);
  });

  test('changes before one frame are one update; settled() with nothing pending resolves at once', async () => {
    const got = (await head.page.evaluate(`(async () => {
      const clock = new window.PaintClock();
      const before = await Promise.race([clock.settled().then(() => 'resolved'), new Promise((ok) => setTimeout(() => ok('pending'), 100))]);
      clock.dirty('skeleton', 3);
      clock.dirty('blocks', 2);
      await clock.settled();
      return { before, updates: clock.updates.map((u) => [u.what, u.count]) };
    })()`)) as { before: string; updates: Array<[string, number]> };
    expect(got).toEqual({ before: 'resolved', updates: [['skeleton+blocks', 5]] });
  });
});
