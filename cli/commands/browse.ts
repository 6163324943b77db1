// `catp browse`: the browser. A window (Electron when its binary is present, else a Chromium `--app` window),
// or headless (`--headless`: Chromium without a window, driven through playwright-core only for what needs DevTools:
// --frames, --page-area) that exits when the page completes. Without a URL it serves the bundled demo site with the
// embedded reference server behind an in-process lossy relay.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

import {
  BrowserUnavailableError,
  chromiumAvailable,
  CHROMIUM_PATH,
  hasDisplay,
  NoDisplayError,
  openAppWindow,
  openHeadless,
  type AppWindow,
  serializeDump,
  startBrowserSession,
  startLossyRelay,
  type LossyRelay,
  type Transport,
} from '../../app/browser';
import { fitPageArea, startPageFrames, type PageFrameCapture } from '../../lab/silent-time/page-frames';
import { CAPTURE_MODES, DEFAULT_CAPTURE, isCaptureMode, type CaptureMode } from '../../lab/silent-time/updates';
import { defaultStoreDir } from '../../app/payload-store';
import { FIRST_CONTACT } from '../../app';
import { labSupport } from '../../lab/link';
import { packageRoot } from '../../native';
import { hostLiteral, parseTarget } from '../../protocol/dhttp';
import { startServer, type DhttpServer } from '../../server';
import { intOption, parse, UsageError, type Io } from '../args';
import { LabError } from '../../lab/errors';
import { HostError } from '../../app/errors';

const HELP = `usage: catp browse [URL] [options]

Opens the browser on URL (dhttp://, dhttpt:// or http://). Without URL: the bundled demo site, served by the
embedded reference server behind an in-process UDP relay that loses datagrams, so out-of-order painting shows.

options:
      --headless          load URL in the same renderer without a window; exit when the page completes
      --dump-dom FILE     (headless) write parse5's serialization of the rendered page's tree
      --record FILE       (headless) write the load record (visible updates, arrivals, silent time, floor)
      --frames FILE       (headless) capture compositor frames (screencast PNGs) and write, as JSON,
                          their times (epoch ms) and which changed pixels inside the page area (not the HUD)
      --frames-capture M  damage (default: only frames that change something) | vsync (a frame every vsync, the
                          heartbeat: costs the browser measured; see catp silent-time --capture)
      --page-area WxH     (headless) size the window so the page area (without toolbar and HUD) is WxH
      --transport T       catp (default) | inorder | tcp   (tcp: http:// to the same host and port)
      --loss P            datagram loss each way through the relay, 0..0.9 (demo default 0.1)
      --rate B/S          ask the server to send frames at most B bytes/s (Catp-Rate; demo default 40000)
      --shell S           auto (default: Electron if its binary is present, else Chromium) | electron | chromium
                          Chromium: CHROME_PATH if set, else chromium, chromium-browser, google-chrome on PATH
      --timeout MS        headless: give up after MS (default 60000)
      --store DIR         payload store (DTD and CATP block reuse: blocks and payloads already held for the
                          site are not transferred again; the HUD shows what that saved). Default for a window:
                          ${defaultStoreDir().replace(/^.*\/\.cache\//, '~/.cache/')}; --headless runs without one unless
                          given (a headless load is a measurement: it starts cold)
      --no-store          no payload store
  -h, --help              show this help

A window needs a display (DISPLAY or WAYLAND_DISPLAY); without one, use --headless, or run it on a virtual
display: xvfb-run -a npm start.
`;

const options = {
  headless: { type: 'boolean' },
  'dump-dom': { type: 'string' },
  record: { type: 'string' },
  frames: { type: 'string' },
  'frames-capture': { type: 'string' },
  'page-area': { type: 'string' },
  transport: { type: 'string' },
  loss: { type: 'string' },
  rate: { type: 'string' },
  shell: { type: 'string' },
  timeout: { type: 'string' },
  seed: { type: 'string' },
  store: { type: 'string' },
  'no-store': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The Electron binary's path when it is installed (require('electron') gives it), else null. */
export function electronBinary(): string | null {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const p = require('electron') as unknown;
    return typeof p === 'string' && existsSync(p) ? p : null;
  } catch {
    return null;
  }
}

function parseLoss(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 0.9) throw new UsageError(`--loss must be a number from 0 to 0.9, got '${v}'`);
  return n;
}

function parsePageArea(v: string | undefined): { width: number; height: number } | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d+)x(\d+)$/.exec(v);
  if (!m || Number(m[1]) < 100 || Number(m[2]) < 100 || Number(m[1]) > 4000 || Number(m[2]) > 4000) throw new UsageError(`--page-area takes WxH (100 to 4000), got '${v}'`);
  return { width: Number(m[1]), height: Number(m[2]) };
}

export async function browse(argv: string[], io: Io, signal?: AbortSignal): Promise<number> {
  const { values, positionals } = parse(argv, options);
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError('expected at most one URL');
  const transportArg = values.transport ?? 'catp';
  if (!['catp', 'inorder', 'tcp'].includes(transportArg)) throw new UsageError(`--transport must be catp, inorder or tcp, got '${transportArg}'`);
  const shellArg = values.shell ?? 'auto';
  if (!['auto', 'electron', 'chromium'].includes(shellArg)) throw new UsageError(`--shell must be auto, electron or chromium`);
  if (!values.headless && (values['dump-dom'] || values.record || values.frames)) throw new UsageError('--dump-dom, --record and --frames need --headless');
  const capture = values['frames-capture'] ?? DEFAULT_CAPTURE;
  if (!isCaptureMode(capture)) throw new UsageError(`--frames-capture must be ${CAPTURE_MODES.join(' or ')}, got '${capture}'`);
  if (values['frames-capture'] !== undefined && !values.frames) throw new UsageError('--frames-capture needs --frames');
  const rate = intOption(values.rate, 'rate', 1000, 1_000_000_000);
  const timeoutMs = intOption(values.timeout, 'timeout', 100, 3_600_000) ?? 60_000;
  const seed = intOption(values.seed, 'seed', 0, 2 ** 31) ?? (Date.now() & 0x7fffffff);
  if (values.store !== undefined && values['no-store']) throw new UsageError('--store and --no-store exclude each other');
  // A window browses with the per-user store; a headless load is a measurement (silent time, dumps) and must
  // not depend on what earlier runs left behind, so it gets a store only when asked for one.
  const storeDir: string | null = values['no-store'] ? null : values.store ?? (values.headless ? null : defaultStoreDir());
  let loss = parseLoss(values.loss);
  // Before anything starts: a browser to drive, and for a window a display to put it on.
  const electron = values.headless || shellArg === 'chromium' ? null : electronBinary();
  if (shellArg === 'electron' && !electron) throw new HostError('HOST_ERR_NO_ELECTRON', "Electron's binary is not installed (node node_modules/electron/install.js fetches it; needs internet)");
  if (!electron && !chromiumAvailable()) throw new BrowserUnavailableError(Boolean(values.headless));
  if (!values.headless && !hasDisplay()) throw new NoDisplayError();

  // ---- what to load: a URL, or the demo site --------------------------------------------------------
  let server: DhttpServer | null = null;
  let relay: LossyRelay | null = null;
  let url: string;
  let effectiveRate = rate;
  const cleanup: (() => Promise<void>)[] = [];
  if (positionals.length === 0) {
    loss ??= 0.1;
    effectiveRate ??= 40_000;
    const root = join(packageRoot(), 'demo', 'site');
    server = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: effectiveRate } });
    const s = server;
    cleanup.push(() => s.close());
    url = `dhttp://127.0.0.1:${server.port}/index.html`;
  } else {
    url = positionals[0]!;
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) url = `dhttp://${url}`;
  }
  if (transportArg === 'tcp') url = url.replace(/^dhttpt?:\/\//i, 'http://');
  const target = parseTarget(url);
  if (loss !== undefined && loss > 0 && target.scheme === 'dhttp') {
    const host = hostLiteral(target.host);
    // the demo also gets 40 ms each way, so frames after a lost one arrive before its repair (visible out of order)
    relay = await startLossyRelay(target.port, { loss, seed, host: host === 'localhost' ? '127.0.0.1' : host, delayMs: server ? 40 : 0 });
    const r = relay;
    cleanup.unshift(() => r.close());
    url = url.replace(`${target.host}:${target.port}`, `${target.host}:${relay.port}`);
  }
  const link = relay ? `relay :${relay.port} losing ${(loss! * 100).toFixed(0)}% each way${server ? ', +40 ms each way' : ''}` : 'no added loss';
  const pace = effectiveRate ? `paced at ${effectiveRate} B/s` : 'server pace';
  const transport: Transport = transportArg === 'tcp' ? 'tcp' : (transportArg as Transport);
  const serviceOptions = {
    defaultTransport: (transportArg === 'inorder' ? 'inorder' : 'catp') as 'catp' | 'inorder',
    ...(effectiveRate !== undefined ? { rateBytesPerSec: effectiveRate } : {}),
    loadTimeoutMs: timeoutMs,
    // under the relay's added loss several tries in a row can be lost: wait longer before falling back to HTTP
    hostOptions: { client: relay ? { ...FIRST_CONTACT, fallbackAfterResends: 8, maxResends: 8 } : FIRST_CONTACT },
    storeDir,
  };
  const done = async () => {
    for (const c of cleanup) await c().catch(() => undefined);
  };

  try {
    if (values.headless) {
      return await headless(url, transport, serviceOptions, { dumpDom: values['dump-dom'], recordFile: values.record, framesFile: values.frames, capture, pageAreaSize: parsePageArea(values['page-area']) }, timeoutMs, io);
    }
    io.stdout.write(`catp browse: ${url} (${transport}, ${link}, ${pace}, ${storeDir === null ? 'no payload store' : `payload store ${storeDir}`})\n`);
    if (electron) {
      io.stdout.write(`catp browse: shell = Electron (${electron})\n`);
      const child = spawn(electron, [join(packageRoot(), 'dist', 'electron', 'main.js'), url], {
        stdio: 'inherit',
        env: {
          ...process.env, CATP_TRANSPORT: transport, ...(effectiveRate ? { CATP_RATE: String(effectiveRate) } : {}),
          ...(storeDir === null ? { CATP_NO_STORE: '1' } : { CATP_STORE_DIR: storeDir }),
        },
      });
      const code = await new Promise<number>((ok) => {
        child.once('exit', (c) => ok(c ?? 0));
        signal?.addEventListener('abort', () => child.kill(), { once: true });
      });
      return code;
    }
    io.stdout.write(`catp browse: shell = Chromium window (${CHROMIUM_PATH}; Electron's binary is not present); close the window or press Ctrl-C to quit\n`);
    const compare = compareLauncher(io);
    cleanup.push(async () => compare.close());
    const session = await startBrowserSession({ ...serviceOptions, shell: 'chromium-window', openCompare: compare.open });
    const win = openAppWindow(session.shell.appUrl, { tunnelSpki: session.shell.tunnelCert.spki, alsoOrigins: [session.shell.frameOrigin] });
    let ready = false;
    session.service.whenReady(30_000).then(
      () => {
        ready = true;
        session.service.navigate(url, transport);
      },
      (err: Error) => io.stderr.write(`catp browse: ${err.message}\n`),
    );
    const code = await new Promise<number | null>((ok) => {
      const stop = () => ok(0);
      void win.exited.then((c) => ok(ready ? 0 : c ?? 1));
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      signal?.addEventListener('abort', stop, { once: true });
    });
    await win.close();
    await session.close();
    if (!ready && code !== 0) {
      // The browser exited before the window showed anything: say why, in its own words.
      io.stderr.write(`catp browse: Chromium (${CHROMIUM_PATH}) exited with code ${code} before showing the window:\n${win.stderrTail() || '(no message)'}\n`);
      return 1;
    }
    return 0;
  } finally {
    await done();
  }
}

async function headless(
  url: string,
  transport: Transport,
  serviceOptions: Parameters<typeof startBrowserSession>[0],
  files: { dumpDom?: string; recordFile?: string; framesFile?: string; capture: CaptureMode; pageAreaSize?: { width: number; height: number } },
  timeoutMs: number,
  io: Io,
): Promise<number> {
  const { dumpDom, recordFile, framesFile, capture, pageAreaSize } = files;
  const session = await startBrowserSession({ ...serviceOptions, shell: 'headless' });
  let page: Awaited<ReturnType<typeof openHeadless>> | null = null;
  let plain: AppWindow | null = null;
  let frames: PageFrameCapture | null = null;
  try {
    const where = { tunnelSpki: session.shell.tunnelCert.spki, alsoOrigins: [session.shell.frameOrigin] };
    // Compositor frames, the page area's size and a performance trace need a DevTools client (playwright-core);
    // a load that needs only the host's record and dump runs as a window would, with none attached (openAppWindow).
    if (framesFile || pageAreaSize || process.env.CATP_TRACE) page = await openHeadless(session.shell.appUrl, where);
    else plain = openAppWindow(session.shell.appUrl, { ...where, headless: true });
    const orExit = <T>(p: Promise<T>): Promise<T> => (plain ? Promise.race([p, browserExit(plain)]) : p);
    await orExit(session.service.whenReady(30_000));
    // compositor frames of the page area (lab/silent-time/page-frames.ts), from before the navigation
    if (page && pageAreaSize) await fitPageArea(page.page, pageAreaSize);
    if (page && framesFile) frames = await startPageFrames(page.page, 'main', undefined, capture);
    const loadId = session.service.navigate(url, transport);
    const record = await orExit(session.service.recordOf(loadId, timeoutMs + 5000));
    if (frames) {
      // late paints: the last marker's frame reaches the screencast a few vsyncs later
      await new Promise((r) => setTimeout(r, FRAMES_SETTLE_MS));
      const f = await frames.stop();
      frames = null;
      writeFileSync(resolve(framesFile!), JSON.stringify(f));
    }
    if (dumpDom) {
      const tree = await session.service.requestDump();
      if (tree) writeFileSync(resolve(dumpDom), serializeDump(tree));
    }
    if (recordFile) writeFileSync(resolve(recordFile), JSON.stringify(record, null, 1));
    const sv = record.savings;
    io.stdout.write(
      `catp browse: ${record.outcome} ${url} (${record.transport}): silent time ${record.silentTimeMs.toFixed(1)} ms, ` +
        `network floor ${record.networkFloorMs.toFixed(1)} ms, first paint ${record.firstPaintMs?.toFixed(1) ?? '-'} ms, ` +
        `complete ${record.completeMs?.toFixed(1) ?? '-'} ms, ${record.arrivals.length} frames, ${record.updates.length} visible updates` +
        (sv ? `; from the store: ${sv.blocksReused}/${sv.blocks} blocks, ${sv.dtdHits} DTD hits, ${sv.bytesSaved} bytes (~${sv.savedMs.toFixed(1)} ms) saved` : '') +
        '\n',
    );
    if (record.outcome !== 'complete') io.stderr.write(`catp browse: ${record.error ?? record.outcome}\n`);
    return record.outcome === 'complete' ? 0 : 1;
  } finally {
    await frames?.stop().catch(() => undefined);
    await page?.close();
    await plain?.close();
    await session.close();
  }
}

/** Rejects when a headless browser without a DevTools client exits (or crashes) before the load is over. */
function browserExit(win: AppWindow): Promise<never> {
  return win.exited.then((code) => {
    throw new HostError('HOST_ERR_BROWSER_EXITED', `Chromium (${CHROMIUM_PATH}) exited with code ${code} during the load:\n${win.stderrTail() || '(no message)'}`);
  });
}

/**
 * The browser's Compare button: `catp demo URL` in a window of its own (one at a time), stopped with the browser.
 * The lab's links need root or user namespaces: where they cannot run, the button says why instead.
 */
function compareLauncher(io: Io): { open: (url: string) => Promise<string>; close: () => void } {
  let child: ChildProcess | null = null;
  return {
    open: async (url) => {
      const support = labSupport();
      if (!support.ok) throw new LabError('LAB_ERR_UNSUPPORTED', `the demo's emulated links cannot run here: ${support.reason}`);
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      io.stdout.write(`catp browse: opening the side-by-side demo on ${url}\n`);
      const c = spawn(process.execPath, [join(packageRoot(), 'bin', 'catp.js'), 'demo', url], { stdio: ['ignore', 'inherit', 'inherit'] });
      child = c;
      await new Promise<void>((ok, fail) => {
        c.once('spawn', () => ok());
        c.once('error', fail);
      });
      return `the side-by-side demo opens in its own window (catp demo ${url})`;
    },
    close: () => {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    },
  };
}

/** How long the frame capture runs past the end of the load. */
const FRAMES_SETTLE_MS = 500;
