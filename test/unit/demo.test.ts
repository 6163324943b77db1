// `catp demo`'s parts that need no window: settings from an untrusted page, the filmstrip's ticks, what a page
// name resolves to, and the command's errors (bad settings, no browser, no display, no lab).
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { filmstripInterval, filmstripTicks } from '../../lab/demo/window';
import { corpusPagesDir, DemoPageError, resolvePage } from '../../lab/demo/pages';
import { checkSettings, DemoSettingsError } from '../../protocol/demo/api';

const CATP = join(__dirname, '..', '..', 'bin', 'catp.js');
const good = { page: 'article.html', loss: 0.15, delayMs: 40, rate: 50_000, burst: 1, seed: 7 };

describe('checkSettings: what the demo page sends is checked like any input', () => {
  test('good settings pass unchanged, without extra fields', () => {
    expect(checkSettings({ ...good, extra: 'ignored' })).toEqual(good);
  });

  test.each([
    ['loss above 30%', { loss: 0.5 }, /loss must be a number from 0 to 0.3/],
    ['loss NaN', { loss: Number.NaN }, /loss/],
    ['loss as a string', { loss: '0.1' }, /loss/],
    ['negative delay', { delayMs: -1 }, /delayMs/],
    ['fractional rate', { rate: 1000.5 }, /rate must be a whole number/],
    ['rate 0', { rate: 0 }, /rate/],
    ['burst 0', { burst: 0 }, /burst/],
    ['seed past 2^31', { seed: 2 ** 31 }, /seed/],
    ['no page', { page: undefined }, /page must be a string/],
    ['a page name of 1 MB', { page: 'x'.repeat(1_000_000) }, /page must be a string/],
  ])('refused: %s', (_name, patch, message) => {
    const bad = () => checkSettings({ ...good, ...patch });
    expect(bad).toThrow(DemoSettingsError);
    expect(bad).toThrow(message);
  });

  test('not an object at all', () => {
    for (const v of [null, 42, 'run', [1, 2]]) expect(() => checkSettings(v)).toThrow(DemoSettingsError);
  });
});

describe('the filmstrip', () => {
  test('each tick shows the latest frame at or before it; -1 before the first', () => {
    expect(filmstripTicks([1050, 1120, 1125, 1400], 1000, 1500, 100)).toEqual([-1, 0, 2, 2, 3, 3]);
    expect(filmstripTicks([], 0, 300, 100)).toEqual([-1, -1, -1, -1]);
    // a frame exactly on a tick counts for it
    expect(filmstripTicks([1000, 1100], 1000, 1100, 100)).toEqual([0, 1]);
  });

  test('100 ms for a normal load, coarser so a long one stays near 100 thumbnails', () => {
    expect(filmstripInterval(3_000)).toBe(100);
    expect(filmstripInterval(10_000)).toBe(100);
    expect(filmstripInterval(15_000)).toBe(200);
    expect(filmstripInterval(40_000)).toBe(500);
    expect(filmstripInterval(90_000)).toBe(1000);
    expect(filmstripInterval(1_000_000)).toBe(2000);
  });
});

describe('resolvePage: a demo page, corpus:NAME, a file, a URL', () => {
  let tmp: string;
  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'catp-demo-pages-'));
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  test('nothing: the default page of the demo site', async () => {
    const p = await resolvePage('', tmp);
    expect(p.name).toBe('article.html');
    expect(p.urlPath).toBe('/article.html');
    expect(p.bytes).toBeGreaterThan(10_000);
  });

  test('a file anywhere is served from its own directory', async () => {
    mkdirSync(join(tmp, 'site'));
    writeFileSync(join(tmp, 'site', 'my page.html'), '<p>hello');
    const p = await resolvePage(join(tmp, 'site', 'my page.html'), tmp);
    expect(p).toMatchObject({ name: 'my page.html', root: join(tmp, 'site'), urlPath: '/my%20page.html', bytes: 8 });
  });

  test('unknown names and paths out of the corpus are refused with what the demo accepts', async () => {
    await expect(resolvePage('no-such-page.html', tmp)).rejects.toThrow(DemoPageError);
    await expect(resolvePage('no-such-page.html', tmp)).rejects.toThrow(/corpus:NAME/);
    await expect(resolvePage('corpus:../../../../etc/passwd', tmp)).rejects.toThrow(/no corpus page/);
    await expect(resolvePage('corpus:', tmp)).rejects.toThrow(DemoPageError);
  });

  test('corpus:NAME is a page of the real-pages corpus', async () => {
    const p = await resolvePage('corpus:wikipedia.html', tmp).catch(() => null);
    // the corpus sits beside the repository (../shared); CI has it
    if (process.env.CATP_NO_SKIP === '1' || p !== null) expect(p).toMatchObject({ name: 'wikipedia.html', root: corpusPagesDir() });
  });

  test('corpus:NAME without .html is that .html page (as the corpus lists them)', async () => {
    const p = await resolvePage('corpus:wikipedia', tmp).catch(() => null);
    if (process.env.CATP_NO_SKIP === '1' || p !== null) expect(p).toMatchObject({ name: 'wikipedia.html', urlPath: '/wikipedia.html', root: corpusPagesDir() });
    await expect(resolvePage('corpus:no-such-page', tmp)).rejects.toThrow(/no corpus page no-such-page/);
  });

  test('an http:// URL is fetched once (redirects followed) and served as a file; errors say what failed', async () => {
    const server: Server = createServer((req, res) => {
      if (req.url === '/old') res.writeHead(301, { location: '/page' }).end();
      else if (req.url === '/page') res.writeHead(200, { 'content-type': 'text/html' }).end('<h1>fetched</h1>');
      else res.writeHead(404).end();
    });
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const p = await resolvePage(`${base}/old`, tmp);
      expect(p.bytes).toBe('<h1>fetched</h1>'.length);
      expect(readFileSync(join(p.root, 'index.html'), 'utf8')).toBe('<h1>fetched</h1>');
      expect(p.urlPath).toBe('/index.html');
      await expect(resolvePage(`${base}/gone`, tmp)).rejects.toThrow(/404/);
    } finally {
      server.close();
    }
    await expect(resolvePage('http://127.0.0.1:1/', tmp)).rejects.toThrow(/could not fetch/);
  });
});

describe('catp demo: what is missing, and what to do', () => {
  const run = (args: string[], patch: Record<string, string | undefined>) => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const [k, v] of Object.entries(patch)) {
      if (v === undefined) delete env[k];
      else env[k] = v;
    }
    return spawnSync(process.execPath, [CATP, 'demo', ...args], { encoding: 'utf8', timeout: 20_000, env });
  };

  test('--help explains it; bad settings are usage errors (exit 2)', () => {
    const h = run(['--help'], {});
    expect(h.status).toBe(0);
    expect(h.stdout).toMatch(/^usage: catp demo/);
    expect(h.stdout).toContain('Replay');
    const bad = run(['--loss', '0.5', '--headless'], {});
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('--loss must be a number from 0 to 0.3');
    expect(run(['a.html', 'b.html'], {}).status).toBe(2);
    expect(run(['--screenshot', 'x.png'], {}).stderr).toContain('--screenshot needs --headless');
  });

  test('no browser: says what to install, exit 1', () => {
    const r = run(['--headless'], { CHROME_PATH: '/nonexistent/chrome', CATP_CHROMIUM: undefined });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('CHROME_PATH=/nonexistent/chrome is not an executable file');
    expect(r.stderr).toContain('BROWSE_ERR_NO_BROWSER');
  });

  test('no display for the window: says so, suggests --headless or xvfb-run', () => {
    const r = run([], { DISPLAY: undefined, WAYLAND_DISPLAY: undefined });
    // (where Chromium is missing, that is what it says first)
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/BROWSE_ERR_NO_DISPLAY|BROWSE_ERR_NO_BROWSER/);
  });

  test('no lab (here: no emulator binary): a clear message, exit 1, nothing started', () => {
    const r = run(['--headless'], { CATP_LINKEMU: '/nonexistent/catp-linkemu' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/the demo's emulated links cannot run here: .*catp-linkemu is missing|BROWSE_ERR_NO_BROWSER/);
    expect(r.stderr).toMatch(/DEMO_ERR_LAB|BROWSE_ERR_NO_BROWSER/);
  });
});
