// `catp demo`: the real window (Chromium `--app`, under xvfb-run) with three panes loading the same page through
// three copies of the same emulated link, driven over the DevTools protocol like a user: wait for the first
// run, read the silent times it shows, click Replay, and check the emulators dropped the same packets. The
// screenshots (mid-load, after) go to test-artifacts/ (docs/demo-*.png are copies of them).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { chromium, type Page } from 'playwright-core';

import { labSupport } from '../../lab/link';
import type { DemoRun } from '../../protocol/demo/api';
import { describeIf } from '../helpers/requires';
import { ROOT, artifact, buildRenderer, chromiumPresent, freePort, stopGroup, xvfbRunPresent } from './helpers';

const built = existsSync(join(ROOT, 'dist', 'cli', 'main.js')) && existsSync(join(ROOT, 'dist', 'renderer', 'demo.js'));
const maybe = describeIf(chromiumPresent && xvfbRunPresent() && built, 'Chromium, xvfb-run and the built CLI (apt-get install chromium xvfb xauth; npm run build)');
jest.setTimeout(180_000);


async function poll<T>(page: Page, expr: string, until: (v: T) => boolean, timeoutMs: number, what: string): Promise<T> {
  // (evaluate, not waitForFunction: the demo page's CSP forbids eval)
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = (await page.evaluate(expr)) as T;
    if (until(v)) return v;
    if (Date.now() > end) throw new Error(`${what}: still ${JSON.stringify(v)} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Indices below the shorter run's packet count: what both runs had the chance to drop. */
function common(a: { lost: number[]; n: number }, b: { lost: number[]; n: number }): [number[], number[]] {
  const n = Math.min(a.n, b.n);
  return [a.lost.filter((i) => i < n), b.lost.filter((i) => i < n)];
}

maybe('catp demo: three panes, one link each, the same losses', () => {
  test('the window loads the page three ways at 15% loss; CATP is silent for less than TCP; Replay drops the same packets', async () => {
    const s = labSupport();
    if (!s.ok) throw new Error(`the demo needs the lab: ${s.reason}`);
    const debugPort = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'catp-demo-test-'));
    const log = join(dir, 'runs.jsonl');
    // article.html at seed 2: the losses fall where TCP has to wait for a retransmission timeout
    const child = spawn('xvfb-run', ['-a', '-s', '-screen 0 1600x1100x24', 'node', join(ROOT, 'bin', 'catp.js'), 'demo', 'article.html', '--loss', '0.15', '--seed', '2', '--log', log], {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, CATP_RENDERER_DIR: await buildRenderer(), CATP_CHROMIUM_ARGS: `--remote-debugging-port=${debugPort}` },
    });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<void>((ok) => child.once('exit', () => ok()));
    try {
      let browser = null;
      for (let i = 0; i < 150 && !browser; i++) {
        browser = await chromium.connectOverCDP(`http://127.0.0.1:${debugPort}`).catch(() => null);
        if (!browser) await new Promise((r) => setTimeout(r, 200));
      }
      if (!browser) throw new Error(`the demo window did not open:\n${out}`);
      let page: Page | null = null;
      for (let i = 0; i < 100 && !page; i++) {
        page = browser.contexts().flatMap((c) => c.pages()).find((p) => p.url().includes('/demo.html')) ?? null;
        if (!page) await new Promise((r) => setTimeout(r, 100));
      }
      expect(page).not.toBeNull();
      const p = page!;
      // mid-load: the three panes are painting
      await poll<string>(p, "document.querySelector('#status').textContent", (v) => /loading/.test(v), 60_000, 'the first run starting');
      await p.waitForTimeout(150);
      await p.screenshot({ path: artifact('demo-mid-load.png') });
      await poll<string | undefined>(p, 'document.body.dataset.filmstrip', (v) => v === '1', 90_000, 'the first run and its filmstrip');
      await p.screenshot({ path: artifact('demo-after.png'), fullPage: true });

      // each pane's page frame is on a frame origin of its own: the pane's address, another port than its app's
      const frames = p.frames().map((f) => f.url());
      const views = frames.filter((u) => u.includes('/view/')).map((u) => new URL(u));
      const apps = frames.filter((u) => u.includes('/__catp/app.html')).map((u) => new URL(u));
      expect(views).toHaveLength(3);
      expect(apps).toHaveLength(3);
      for (const v of views) {
        const app = apps.find((a) => a.hostname === v.hostname);
        expect(app).toBeDefined();
        expect(v.port).not.toBe(app!.port);
      }

      // what the window shows: three panes, three silent times, three filmstrips
      const shown = (await p.evaluate(`[...document.querySelectorAll('.bar-row')].map((r) => [r.dataset.transport, Number(r.dataset.silentMs)])`)) as [string, number][];
      expect(shown.map((r) => r[0])).toEqual(['catp', 'inorder', 'tcp']);
      const silent = Object.fromEntries(shown);
      for (const t of ['catp', 'inorder', 'tcp']) expect(silent[t]).toBeGreaterThan(0);
      expect(silent.catp).toBeLessThan(silent.tcp!);
      const strips = (await p.evaluate(`[...document.querySelectorAll('.strip')].map((s) => [s.dataset.transport, s.querySelectorAll('canvas').length, s.querySelectorAll('figure.changed').length])`)) as [string, number, number][];
      expect(strips.map((s) => s[0])).toEqual(['catp', 'inorder', 'tcp']);
      for (const [, thumbs, changed] of strips) {
        expect(thumbs).toBeGreaterThanOrEqual(3);
        expect(changed).toBeGreaterThanOrEqual(1); // the page appeared in every pane's strip
      }

      // Replay: the same settings and seed, through three fresh links
      await p.click('#replay');
      await poll<string | undefined>(p, 'document.body.dataset.filmstrip', (v) => v === '2', 90_000, 'the replay and its filmstrip');
      const runs = readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as DemoRun);
      expect(runs).toHaveLength(2);
      const [first, replay] = runs as [DemoRun, DemoRun];
      expect(replay.settings).toEqual(first.settings);
      expect(first.settings).toMatchObject({ loss: 0.15, seed: 2, page: 'article.html' });
      for (const r of runs) {
        expect(r.panes.map((x) => x.outcome)).toEqual(['complete', 'complete', 'complete']);
        // the page shown in the window is the one in the log
        expect(r.page.name).toBe('article.html');
      }
      for (let i = 0; i < 3; i++) {
        const a = first.panes[i]!;
        const b = replay.panes[i]!;
        expect(b.transport).toBe(a.transport);
        for (const dir of ['c2s', 's2c'] as const) {
          const [la, lb] = common({ lost: a.lost[dir], n: a.packets[dir] }, { lost: b.lost[dir], n: b.packets[dir] });
          expect(lb).toEqual(la);
        }
      }
      // at 15% loss over a few dozen packets the links dropped something (seed 2 does), and all three links the same
      const lostToBrowser = first.panes.map((x) => x.lost.s2c.length + x.lost.c2s.length);
      expect(Math.max(...lostToBrowser)).toBeGreaterThan(0);
      const [c, io, t] = first.panes.map((x) => x.lost.s2c);
      const upTo = Math.min(...first.panes.map((x) => x.packets.s2c));
      expect(io!.filter((k) => k < upTo)).toEqual(c!.filter((k) => k < upTo));
      expect(t!.filter((k) => k < upTo)).toEqual(c!.filter((k) => k < upTo));
      expect(out).toContain('window open');
      await browser.close().catch(() => undefined);
    } finally {
      await stopGroup(child.pid!, exited);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
