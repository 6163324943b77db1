// Opening the renderer in Debian's Chromium: a visible `--app=` window (the Chromium-window shell), or a
// headless page driven by playwright-core (`catp browse --headless`). Each launch gets a fresh temporary
// profile, removed when the browser exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import { HostError } from '../errors';

/** Browser names looked up on PATH, in this order (Debian's package, Ubuntu's older one, Google's builds). */
export const BROWSER_NAMES = ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'] as const;

function executable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/**
 * The Chromium-family browser to drive, the way users expect it to be found: CATP_CHROMIUM or CHROME_PATH when
 * set (an explicit choice: returned even when it does not exist, so the error can name it), else the first of
 * BROWSER_NAMES in the first PATH directory that has one. Null when there is none.
 */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | null {
  const explicit = env.CATP_CHROMIUM || env.CHROME_PATH;
  if (explicit) return explicit;
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue;
    for (const name of BROWSER_NAMES) {
      const p = join(dir, name);
      if (executable(p)) return p;
    }
  }
  return null;
}

const FOUND = findChromium();
/** The browser found at start-up; Debian's path stands in (for messages) when there is none. */
export const CHROMIUM_PATH = FOUND ?? '/usr/bin/chromium';

/**
 * Browser UI we never show, turned off so that it takes no CPU from the page. `WebUIOmniboxAimPopup`: Chromium 156
 * builds its omnibox's "AI mode" popup (chrome://omnibox-popup.top-chrome/omnibox_popup_aim.html) in a renderer
 * of its own with every tabbed window, headless ones too (ours, the lab's, the benches'; an --app window has no
 * omnibox): about 0.5 s of CPU in the first seconds (browser and that renderer, from /proc), just while the first
 * page loads, on a machine of two cores.
 */
export const UNUSED_BROWSER_UI = ['PreloadTopChromeWebUI', 'WebUIOmniboxPopup', 'WebUIOmniboxAimPopup'];

/**
 * Flags every launch uses: no background traffic, no QUIC, no first-run UI, no browser UI we never show; as root,
 * no sandbox. `disableFeatures` adds to the features turned off (the lab's measuring browser turns off more).
 */
export function chromiumFlags(disableFeatures: readonly string[] = []): string[] {
  const flags = [
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--no-default-browser-check',
    '--disable-quic',
    `--disable-features=${['Translate', 'MediaRouter', 'OptimizationHints', ...UNUSED_BROWSER_UI, ...disableFeatures].join(',')}`,
    '--password-store=basic',
    '--use-mock-keychain',
  ];
  if (typeof process.getuid === 'function' && process.getuid() === 0) flags.push('--no-sandbox');
  const extra = process.env.CATP_CHROMIUM_ARGS;
  if (extra) flags.push(...extra.split(/\s+/).filter(Boolean));
  return flags;
}

/**
 * Flags that let a browser connect to `origins` (http://host:port, loopback) and nowhere else: everything goes to a
 * proxy — the first origin, our own shell server, which refuses and counts it — except those origins. `<-loopback>`
 * drops Chromium's implicit bypass for loopback, so a page cannot reach other local ports either. A page's `<iframe
 * src="http://elsewhere/">`, a preconnect or a prefetch then opens no connection to elsewhere.
 */
export function onlyToFlags(origins: readonly string[]): string[] {
  const hostPorts = origins.map((o) => new URL(o).host);
  if (hostPorts.length === 0) return [];
  return [`--proxy-server=http://${hostPorts[0]}`, `--proxy-bypass-list=<-loopback>;${hostPorts.join(';')}`];
}

/**
 * The flag that makes a browser trust the shell's own certificate (by its key's hash) for the https:// tunnels the
 * shell answers as its proxy (shell-server.ts); the shell's host checks the real origin's certificate itself.
 */
export function tunnelFlags(spki: string | undefined): string[] {
  return spki === undefined ? [] : [`--ignore-certificate-errors-spki-list=${spki}`];
}

export function chromiumAvailable(): boolean {
  return FOUND !== null && executable(FOUND);
}

/** No browser to show pages in (BROWSE_ERR_NO_BROWSER); the message says what to install. */
export class BrowserUnavailableError extends Error {
  readonly code = 'BROWSE_ERR_NO_BROWSER';
  constructor(headless: boolean, env: NodeJS.ProcessEnv = process.env) {
    const named = env.CATP_CHROMIUM ? `CATP_CHROMIUM=${env.CATP_CHROMIUM}` : env.CHROME_PATH ? `CHROME_PATH=${env.CHROME_PATH}` : null;
    super(
      `no browser to ${headless ? 'load pages in' : 'show pages in'}: ${headless ? '' : "Electron's binary is not installed and "}` +
        (named !== null
          ? `${named} is not an executable file.\n`
          : `no Chromium or Chrome was found (looked at CATP_CHROMIUM, CHROME_PATH, then ${BROWSER_NAMES.join(', ')} on PATH).\n`) +
        'Install one:\n' +
        '  Debian/Ubuntu:  sudo apt-get install chromium\n' +
        (headless ? '' : "  or Electron's own binary (needs internet):  node node_modules/electron/install.js\n") +
        '  or point CHROME_PATH at a Chrome or Chromium you have',
    );
    this.name = 'BrowserUnavailableError';
  }
}

/** A window was asked for where there is no display (BROWSE_ERR_NO_DISPLAY); the message says what to do instead. */
export class NoDisplayError extends Error {
  readonly code = 'BROWSE_ERR_NO_DISPLAY';
  constructor() {
    super(
      'no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset). Run it from a desktop session, or:\n' +
        '  without a window:         npx catp browse --headless --record rec.json URL\n' +
        '  on a virtual display:     xvfb-run -a npm start   (Debian: apt-get install xvfb xauth)',
    );
    this.name = 'NoDisplayError';
  }
}

/** A window needs a display: an X server (DISPLAY) or a Wayland compositor (WAYLAND_DISPLAY). Linux only. */
export function hasDisplay(env: NodeJS.ProcessEnv = process.env, platform: NodeJS.Platform = process.platform): boolean {
  if (platform !== 'linux' && platform !== 'freebsd' && platform !== 'openbsd') return true;
  return Boolean(env.DISPLAY || env.WAYLAND_DISPLAY);
}

export interface AppWindow {
  process: ChildProcess;
  /** Resolves with the exit code when the window's browser exits. */
  exited: Promise<number | null>;
  /** The last lines the browser wrote to stderr (why it could not start, when it exits at once). */
  stderrTail(): string;
  close(): Promise<void>;
}

/**
 * Opens `url` in a Chromium `--app` window with a fresh profile. `alsoOrigins`: origins besides the URL's it may
 * reach (the shell's frame origin); `tunnelSpki`: the shell's tunnel certificate (tunnelFlags). `headless`: the same
 * browser with no window (`--headless`, a window of `width` × `height`, scrollbars hidden as playwright-core's headless
 * pages have them) and, like the window, no DevTools client attached: a headless load that only needs what the host
 * records (catp browse --headless --record) then costs what a window costs. Driven through playwright-core
 * (openHeadless), Chromium copies every message the page's socket receives into a DevTools event (playwright turns
 * the Network domain on for every page), work a window never does.
 */
export function openAppWindow(url: string, opts: { width?: number; height?: number; tunnelSpki?: string; alsoOrigins?: readonly string[]; headless?: boolean } = {}): AppWindow {
  if (!chromiumAvailable()) throw new HostError('HOST_ERR_NO_CHROMIUM', `Chromium not found at ${CHROMIUM_PATH} (apt-get install chromium, or set CHROME_PATH)`);
  const profile = mkdtempSync(join(tmpdir(), 'catp-chromium-'));
  const args = [
    ...chromiumFlags(),
    ...onlyToFlags([new URL(url).origin, ...(opts.alsoOrigins ?? [])]),
    ...tunnelFlags(opts.tunnelSpki),
    `--user-data-dir=${profile}`,
    `--window-size=${opts.width ?? 1280},${opts.height ?? 900}`,
    ...(opts.headless ? ['--headless', '--hide-scrollbars', url] : [`--app=${url}`]),
  ];
  const child = spawn(CHROMIUM_PATH, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let tail = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    tail = (tail + d).slice(-2048);
  });
  // The profile goes once the browser's helper processes (renderers, GPU, network) have exited too: they write there
  // after the browser itself exits, and each holds the stderr it inherited, so the pipe's 'close' says they are gone
  // (or, should one linger, HELPERS_GRACE_MS after the browser's exit).
  const exited = new Promise<number | null>((ok) => {
    let code: number | null = null;
    let done = false;
    let grace: NodeJS.Timeout | undefined;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(grace);
      removeProfile(profile);
      ok(code);
    };
    child.once('exit', (c) => {
      code = c;
      grace = setTimeout(finish, HELPERS_GRACE_MS);
    });
    child.once('close', finish);
    child.once('error', finish);
  });
  return {
    process: child,
    exited,
    stderrTail: () => tail.trim().split('\n').slice(-6).join('\n'),
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

/** How long after a browser exits its profile waits for helper processes still holding its stderr. */
const HELPERS_GRACE_MS = 3000;

/**
 * Removes a browser's temporary profile. Its helper processes may still be writing there for a moment after the
 * browser itself exits (ENOTEMPTY while removing): retried, and what is left then is left, never thrown.
 */
function removeProfile(dir: string): void {
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
  } catch {
    // a temporary directory: the system's cleaning takes what is left
  }
}

export interface HeadlessPage {
  // playwright-core types, kept loose here so app/ does not depend on them at type level
  page: import('playwright-core').Page;
  browser: import('playwright-core').Browser;
  close(): Promise<void>;
}

/** Opens `url` in headless Chromium through playwright-core. */
export async function openHeadless(url: string, opts: { width?: number; height?: number; tunnelSpki?: string; alsoOrigins?: readonly string[] } = {}): Promise<HeadlessPage> {
  if (!chromiumAvailable()) throw new HostError('HOST_ERR_NO_CHROMIUM', `Chromium not found at ${CHROMIUM_PATH} (apt-get install chromium, or set CHROME_PATH)`);
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: [...chromiumFlags(), ...onlyToFlags([new URL(url).origin, ...(opts.alsoOrigins ?? [])]), ...tunnelFlags(opts.tunnelSpki)] });
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
