// How `catp browse` finds a browser and tells a newcomer what is missing (app/browser/chromium.ts).
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

import { BrowserUnavailableError, findChromium, hasDisplay, NoDisplayError } from '../../../app/browser/chromium';

let dir: string;
const fake = (sub: string, name: string, mode = 0o755): string => {
  mkdirSync(join(dir, sub), { recursive: true });
  const p = join(dir, sub, name);
  writeFileSync(p, '#!/bin/sh\n');
  chmodSync(p, mode);
  return p;
};

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'catp-find-chromium-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('CATP_CHROMIUM, then CHROME_PATH, then chromium, chromium-browser, google-chrome on PATH, in PATH order', () => {
  const chrome = fake('a', 'google-chrome');
  const chromium = fake('b', 'chromium');
  const PATH = [join(dir, 'none'), join(dir, 'a'), join(dir, 'b')].join(delimiter);
  expect(findChromium({ PATH })).toBe(chrome); // the first PATH directory that has one wins
  expect(findChromium({ PATH: [join(dir, 'b'), join(dir, 'a')].join(delimiter) })).toBe(chromium);
  const browser = fake('c', 'chromium-browser');
  fake('c', 'google-chrome');
  expect(findChromium({ PATH: join(dir, 'c') })).toBe(browser); // within a directory, in BROWSER_NAMES order
  expect(findChromium({ PATH, CHROME_PATH: '/opt/x/chrome' })).toBe('/opt/x/chrome');
  expect(findChromium({ PATH, CHROME_PATH: '/opt/x/chrome', CATP_CHROMIUM: '/opt/y/chromium' })).toBe('/opt/y/chromium');
});

test('nothing found: null; files that are not executable, directories and relative PATH entries do not count', () => {
  fake('a', 'chromium', 0o644);
  mkdirSync(join(dir, 'b', 'chromium'), { recursive: true });
  expect(findChromium({ PATH: [join(dir, 'a'), join(dir, 'b'), 'relative', ''].join(delimiter) })).toBeNull();
  expect(findChromium({})).toBeNull();
});

test('the errors say what to install or do, with stable codes', () => {
  const none = new BrowserUnavailableError(false, {});
  expect(none.code).toBe('BROWSE_ERR_NO_BROWSER');
  expect(none.message).toContain('sudo apt-get install chromium');
  expect(none.message).toContain('node node_modules/electron/install.js');
  expect(none.message).toContain('CHROME_PATH');
  const headless = new BrowserUnavailableError(true, {});
  expect(headless.message).not.toContain('electron');
  expect(new BrowserUnavailableError(false, { CHROME_PATH: '/opt/nope' }).message).toContain('CHROME_PATH=/opt/nope is not an executable file');
  const nd = new NoDisplayError();
  expect(nd.code).toBe('BROWSE_ERR_NO_DISPLAY');
  expect(nd.message).toMatch(/--headless/);
  expect(nd.message).toMatch(/xvfb-run -a npm start/);
});

test('a display is DISPLAY or WAYLAND_DISPLAY on Linux; other platforms always have one', () => {
  expect(hasDisplay({}, 'linux')).toBe(false);
  expect(hasDisplay({ DISPLAY: ':0' }, 'linux')).toBe(true);
  expect(hasDisplay({ WAYLAND_DISPLAY: 'wayland-0' }, 'linux')).toBe(true);
  expect(hasDisplay({}, 'darwin')).toBe(true);
});
