// Opening the renderer in Debian's Chromium: a visible `--app=` window (the Chromium-window shell), or a
// headless page driven by playwright-core (`catp browse --headless`). Each launch gets a fresh temporary
// profile, removed when the browser exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHROMIUM_PATH = process.env.CATP_CHROMIUM ?? '/usr/bin/chromium';

/**
 * Flags every launch uses: no background traffic, no QUIC, no first-run UI; as root, no sandbox.
 * `disableFeatures` adds to the features turned off (the lab's measuring browser turns off more).
 */
export function chromiumFlags(disableFeatures: readonly string[] = []): string[] {
  const flags = [
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--no-default-browser-check',
    '--disable-quic',
    `--disable-features=${['Translate', 'MediaRouter', 'OptimizationHints', 'PreloadTopChromeWebUI', 'WebUIOmniboxPopup', ...disableFeatures].join(',')}`,
    '--password-store=basic',
    '--use-mock-keychain',
  ];
  if (typeof process.getuid === 'function' && process.getuid() === 0) flags.push('--no-sandbox');
  const extra = process.env.CATP_CHROMIUM_ARGS;
  if (extra) flags.push(...extra.split(/\s+/).filter(Boolean));
  return flags;
}

export function chromiumAvailable(): boolean {
  return existsSync(CHROMIUM_PATH);
}

export interface AppWindow {
  process: ChildProcess;
  /** Resolves with the exit code when the window's browser exits. */
  exited: Promise<number | null>;
  close(): Promise<void>;
}

/** Opens `url` in a Chromium `--app` window with a fresh profile. */
export function openAppWindow(url: string, opts: { width?: number; height?: number } = {}): AppWindow {
  if (!chromiumAvailable()) throw new Error(`Chromium not found at ${CHROMIUM_PATH} (apt-get install chromium)`);
  const profile = mkdtempSync(join(tmpdir(), 'catp-chromium-'));
  const args = [
    ...chromiumFlags(),
    `--user-data-dir=${profile}`,
    `--window-size=${opts.width ?? 1280},${opts.height ?? 900}`,
    `--app=${url}`,
  ];
  const child = spawn(CHROMIUM_PATH, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  child.stderr?.resume();
  const exited = new Promise<number | null>((ok) => {
    child.once('exit', (code) => {
      rmSync(profile, { recursive: true, force: true });
      ok(code);
    });
    child.once('error', () => {
      rmSync(profile, { recursive: true, force: true });
      ok(null);
    });
  });
  return {
    process: child,
    exited,
    close: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 3000);
        await exited;
        clearTimeout(t);
      } else {
        await exited;
      }
    },
  };
}

export interface HeadlessPage {
  // playwright-core types, kept loose here so app/ does not depend on them at type level
  page: import('playwright-core').Page;
  browser: import('playwright-core').Browser;
  close(): Promise<void>;
}

/** Opens `url` in headless Chromium through playwright-core. */
export async function openHeadless(url: string, opts: { width?: number; height?: number } = {}): Promise<HeadlessPage> {
  if (!chromiumAvailable()) throw new Error(`Chromium not found at ${CHROMIUM_PATH} (apt-get install chromium)`);
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: chromiumFlags() });
  const context = await browser.newContext({ viewport: { width: opts.width ?? 1280, height: opts.height ?? 900 } });
  const page = await context.newPage();
  // CATP_TRACE=FILE: a Chromium performance trace of the whole headless session (profiling the renderer).
  const trace = process.env.CATP_TRACE;
  if (trace) await browser.startTracing(page, { path: trace, screenshots: false, categories: (process.env.CATP_TRACE_CATEGORIES ?? 'devtools.timeline,disabled-by-default-devtools.timeline,blink,v8.execute').split(',') });
  await page.goto(url);
  return {
    page,
    browser,
    close: async () => {
      if (trace) await browser.stopTracing().catch(() => undefined);
      await browser.close().catch(() => undefined);
    },
  };
}
