// `catp demo`: the out-of-order demo. One window, three panes (CATP, in-order UDP, TCP) loading the same page at
// the same moment, each through its own copy of the same emulated link (lab/demo/). `__demo-pane` is the
// per-pane host the demo starts inside each link's client namespace (not for users).
import { writeFileSync, appendFileSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';

import { BrowserUnavailableError, chromiumAvailable, defaultRendererDir, hasDisplay, NoDisplayError, type Transport } from '../../app/browser';
import { labSupport } from '../../lab/link';
import { checkSettings, DEFAULT_SETTINGS, type DemoRun, type DemoSettings } from '../../lab/demo/controller';
import { DEFAULT_PAGE, demoTempRoot } from '../../lab/demo/pages';
import { runPaneHost } from '../../lab/demo/pane-host';
import { openDemoWindow } from '../../lab/demo/window';
import { intOption, parse, UsageError, type Io } from '../args';
import { LabError } from '../../lab/errors';

const HELP = `usage: catp demo [PAGE|URL] [options]

Opens one window with three panes, CATP (out of order), in-order UDP and TCP, that load the same page at the
same moment, each through its own copy of the same emulated link: real kernel packets (so TCP meets the same
loss), and the same seed, so the k-th packet each way has the same fate on all three. Each pane shows its
live HUD (frames, missing, repaired, current gap, silent time) and timeline; after the load, a filmstrip per
pane (a thumbnail every 100 ms) and the three silent times side by side. Change the link in the window, then
Load; Replay runs again with the same seed (the same packets are lost); New seed draws another pattern.

PAGE: a page of demo/site (default ${DEFAULT_PAGE}), corpus:NAME (a page of the real-pages corpus), any HTML
file, or an http(s):// URL (fetched once, then served from the lab's server).

options:
      --loss P        random loss each way, 0 to 0.3 (default ${DEFAULT_SETTINGS.loss})
      --delay MS      one-way delay (default ${DEFAULT_SETTINGS.delayMs})
      --rate B/S      bottleneck rate in IP bytes/s (default ${DEFAULT_SETTINGS.rate}); the senders are not told it
      --burst LEN     mean loss-burst length in packets (default 1: independent losses)
      --seed N        the drop pattern (default: a new one)
      --headless      no window: one run in headless Chromium, print the three silent times, exit
      --screenshot F  (headless) a PNG of the window after the run
      --log FILE      append every run (settings, per pane: silent time, first paint, completion, the packets
                      the emulator dropped) to FILE, one JSON object per line
      --timeout S     a pane's load gives up after S seconds (default 60)
  -h, --help          show this help

Needs Chromium (apt-get install chromium), root or unprivileged user namespaces for the emulated links, and
for the window a display (DISPLAY or WAYLAND_DISPLAY; else --headless, or xvfb-run -a npx catp demo).
`;

const options = {
  loss: { type: 'string' },
  delay: { type: 'string' },
  rate: { type: 'string' },
  burst: { type: 'string' },
  seed: { type: 'string' },
  headless: { type: 'boolean' },
  screenshot: { type: 'string' },
  log: { type: 'string' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function numberOption(v: string | undefined, name: string, lo: number, hi: number, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < lo || n > hi) throw new UsageError(`--${name} must be a number from ${lo} to ${hi}, got '${v}'`);
  return n;
}

/** One line per pane: what a reader compares. */
export function formatRun(r: DemoRun): string {
  const ms = (v: number | null) => (v === null ? '-' : `${Math.round(v)} ms`);
  const s = r.settings;
  const lines = [
    `run ${r.runId}: ${r.page.name} (${r.page.bytes.toLocaleString('en-US')} B), ${(s.loss * 100).toFixed(0)}% loss${s.burst > 1 ? ` in bursts of ${s.burst}` : ''}, ` +
      `${s.delayMs} ms, ${s.rate.toLocaleString('en-US')} B/s, seed ${s.seed}`,
    `  pane      silent time  first paint  complete   lost packets (to server / to client)`,
  ];
  for (const p of r.panes) {
    lines.push(`  ${p.transport.padEnd(8)}  ${ms(p.silentTimeMs).padStart(11)}  ${ms(p.firstPaintMs).padStart(11)}  ${ms(p.completeMs).padStart(8)}   ` +
      `${p.lost.c2s.length}/${p.packets.c2s} · ${p.lost.s2c.length}/${p.packets.s2c}${p.outcome !== 'complete' ? `   ${p.outcome}${p.error ? `: ${p.error}` : ''}` : ''}`);
  }
  return `${lines.join('\n')}\n`;
}

export async function demo(argv: string[], io: Io, signal?: AbortSignal): Promise<number> {
  const { values, positionals } = parse(argv, options);
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError('expected at most one page');
  if (values.screenshot && !values.headless) throw new UsageError('--screenshot needs --headless (the window has its own)');
  let settings: DemoSettings;
  try {
    settings = checkSettings({
      page: positionals[0] ?? DEFAULT_PAGE,
      loss: numberOption(values.loss, 'loss', 0, 0.3, DEFAULT_SETTINGS.loss),
      delayMs: numberOption(values.delay, 'delay', 0, 1000, DEFAULT_SETTINGS.delayMs),
      rate: intOption(values.rate, 'rate', 1000, 100_000_000) ?? DEFAULT_SETTINGS.rate,
      burst: numberOption(values.burst, 'burst', 1, 50, DEFAULT_SETTINGS.burst),
      seed: intOption(values.seed, 'seed', 0, 2 ** 31 - 1) ?? Math.floor(Math.random() * 2 ** 31),
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const timeoutMs = (intOption(values.timeout, 'timeout', 1, 3600) ?? 60) * 1000;
  if (!chromiumAvailable()) throw new BrowserUnavailableError(true);
  if (!values.headless && !hasDisplay()) throw new NoDisplayError();
  const support = labSupport();
  if (!support.ok) {
    throw new LabError('DEMO_ERR_LAB', `the demo's emulated links cannot run here: ${support.reason}. Run it as root, or enable unprivileged user namespaces ` +
      '(Debian: sysctl kernel.unprivileged_userns_clone=1) and make /dev/net/tun readable and writable (chmod 0666 /dev/net/tun).');
  }
  const tmpRoot = demoTempRoot();
  const logFile = values.log ? resolve(values.log) : null;
  const win = await openDemoWindow({
    rendererDir: defaultRendererDir(),
    tmpRoot,
    settings,
    headless: Boolean(values.headless),
    timeoutMs,
    onRun: (r) => {
      if (logFile) appendFileSync(logFile, `${JSON.stringify(r)}\n`);
      io.stdout.write(formatRun(r));
    },
    onProgress: (m) => io.stderr.write(`catp demo: ${m}\n`),
  }).catch((err: unknown) => {
    rmSync(tmpRoot, { recursive: true, force: true });
    throw err;
  });
  try {
    if (values.headless) {
      const r = await win.run(settings);
      await win.drawn(r.runId, 10_000);
      if (values.screenshot) writeFileSync(resolve(values.screenshot), await win.page.screenshot({ fullPage: true }));
      return r.panes.every((p) => p.outcome === 'complete') ? 0 : 1;
    }
    io.stdout.write(`catp demo: window open (${support.mode === 'userns' ? 'rootless' : 'as root'}); close it or press Ctrl-C to quit\n`);
    win.run(settings).catch((err: Error) => io.stderr.write(`catp demo: ${err.message}\n`));
    await new Promise<void>((ok) => {
      void win.closed.then(ok);
      process.once('SIGINT', ok);
      process.once('SIGTERM', ok);
      signal?.addEventListener('abort', () => ok(), { once: true });
    });
    return 0;
  } finally {
    await win.close();
    rmSync(tmpRoot, { recursive: true, force: true });
  }
}

const paneOptions = {
  socket: { type: 'string' },
  'public-host': { type: 'string' },
  'public-port': { type: 'string' },
  'public-frame-port': { type: 'string' },
  transport: { type: 'string' },
  timeout: { type: 'string' },
} as const;

/** `catp __demo-pane`: one pane's host, started by the demo inside a link's client namespace. */
export async function demoPane(argv: string[]): Promise<number> {
  const { values } = parse(argv, paneOptions);
  const transport = values.transport as Transport | undefined;
  if (!values.socket || !transport || !['catp', 'inorder', 'tcp'].includes(transport)) throw new UsageError('--socket PATH --public-port N --transport T are required');
  return runPaneHost({
    socketPath: values.socket,
    publicHost: /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(values['public-host'] ?? '') ? values['public-host']! : '127.0.0.1',
    publicPort: intOption(values['public-port'], 'public-port', 1, 65535) ?? 0,
    ...(values['public-frame-port'] ? { publicFramePort: intOption(values['public-frame-port'], 'public-frame-port', 1, 65535) ?? 0 } : {}),
    transport,
    timeoutMs: intOption(values.timeout, 'timeout', 1000, 3_600_000) ?? 60_000,
  });
}
