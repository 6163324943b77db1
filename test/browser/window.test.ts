// The real window: `catp browse URL` (the Chromium `--app` window shell, not headless) under xvfb-run, driven
// over the DevTools protocol only to read its state and take a screenshot (test-artifacts/browser-window.png).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

import { ROOT, artifact, buildRenderer, chromiumPresent, freePort, stopGroup, xvfbRunPresent, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const ready = chromiumPresent && xvfbRunPresent() && existsSync(join(ROOT, 'dist', 'cli', 'main.js'));
const maybe = describeIf(ready, 'Chromium, xvfb-run and the built CLI (apt-get install chromium xvfb xauth; npm run build)');
jest.setTimeout(90_000);


maybe('the Chromium --app window under Xvfb', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig(); // only its server is used; the window runs its own host
  });
  afterAll(async () => {
    await rig?.close();
  });

  test('opens the window, loads the page, and is screenshot', async () => {
    const debugPort = await freePort();
    const url = `dhttp://127.0.0.1:${rig.server.port}/layout.html`;
    const child = spawn('xvfb-run', ['-a', '-s', '-screen 0 1280x900x24', 'node', join(ROOT, 'bin', 'catp.js'), 'browse', '--shell', 'chromium', url], {
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
      for (let i = 0; i < 100 && !browser; i++) {
        browser = await chromium.connectOverCDP(`http://127.0.0.1:${debugPort}`).catch(() => null);
        if (!browser) await new Promise((r) => setTimeout(r, 200));
      }
      expect(browser).not.toBeNull();
      let page = null;
      for (let i = 0; i < 100 && !page; i++) {
        page = browser!.contexts().flatMap((c) => c.pages()).find((p) => p.url().includes('/__catp/app.html')) ?? null;
        if (!page) await new Promise((r) => setTimeout(r, 100));
      }
      expect(page).not.toBeNull();
      // (polled with evaluate: waitForFunction would need eval, which the app page's CSP forbids)
      for (let i = 0; i < 300; i++) {
        if (await page!.evaluate('!!(window.__catp && window.__catp.state() && window.__catp.state().finished)')) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      await page!.waitForTimeout(300);
      const state = (await page!.evaluate('window.__catp.state()')) as { url: string; record: { outcome: string } };
      expect(state.url).toBe(url);
      expect(state.record.outcome).toBe('complete');
      await page!.screenshot({ path: artifact('browser-window.png') });
      expect(out).toContain('shell = Chromium window');
      await browser!.close().catch(() => undefined);
    } finally {
      await stopGroup(child.pid!, exited);
    }
  });
});
