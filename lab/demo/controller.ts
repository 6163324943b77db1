// `catp demo`'s runs: the same page loaded at the same moment by three browser hosts (CATP, in-order UDP, TCP),
// each through its own copy of the same emulated link (lab/link.ts: real kernel packets, so TCP meets real
// loss too; the same seed, so packet k of each direction has the same fate on all three links). Per pane:
//
//   link i:   client netns ──[linkemu: loss → queue+rate → delay]── server netns
//             pane host (lab/demo/pane-host.ts)                     `catp serve` (the reference server)
//
// The panes' renderers run in the demo window, outside the namespaces: each pane host's shell server listens
// on a Unix socket (filesystems are shared across network namespaces) and a proxy here forwards a loopback port
// to it. A run builds everything fresh, so the links' packet counters start at zero: *replay* (same settings,
// same seed) drops the same packet indices, and the emulators' logs say which.
import { type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import * as readline from 'node:readline';

import type { LoadRecord } from '../../app/browser';
import { checkSettings, DEMO_TRANSPORTS, type DemoRun, type DemoSettings, type DemoTransport, type PaneResult, type PaneView } from '../../protocol/demo/api';
import { startLink, type Dir, type Link } from '../link';
import { catpCommand, startOrigin, warmOrigin, type Origin } from '../silent-time/origin';
import type { PageSpec } from '../silent-time/pages';
import { linkOptionsFor } from '../silent-time/run';
import { resolvePage } from './pages';
import type { PaneMessage } from './pane-host';
import { LabError } from '../errors';

export { checkSettings, DEFAULT_SETTINGS, DEMO_TRANSPORTS, DemoSettingsError } from '../../protocol/demo/api';
export type { DemoRun, DemoSettings, DemoTransport, PaneResult, PaneView } from '../../protocol/demo/api';

/** What the controller needs from the window it runs in. */
export interface DemoView {
  progress(runId: number, message: string): void;
  /** open the panes' renderers; the controller then waits for each to connect to its host */
  showPanes(runId: number, panes: PaneView[]): void;
  /** the three panes are about to be told to load: start recording the window */
  loadStarting(runId: number, atEpochMs: number): Promise<void>;
  paneDone(runId: number, pane: PaneResult): void;
}

/** Forwards a loopback port to whatever Unix socket the pane's current host listens on. */
class PaneProxy {
  target: string | null = null;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  /** `host`: a loopback address of the pane's own, so each pane is a site of its own (a renderer process each) */
  constructor(readonly host: string) {
    this.server = net.createServer((c) => {
      this.sockets.add(c);
      c.once('close', () => this.sockets.delete(c));
      if (this.target === null) {
        c.destroy();
        return;
      }
      const u = net.connect(this.target);
      this.sockets.add(u);
      u.once('close', () => this.sockets.delete(u));
      c.pipe(u).pipe(c);
      const end = () => {
        c.destroy();
        u.destroy();
      };
      c.once('error', end);
      u.once('error', end);
      c.once('close', end);
      u.once('close', end);
    });
  }

  async listen(): Promise<void> {
    await new Promise<void>((ok) => this.server.listen(0, this.host, ok));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Points the port at a new host; connections to the old one are cut. */
  retarget(target: string | null): void {
    this.target = target;
    for (const s of this.sockets) s.destroy();
  }

  async close(): Promise<void> {
    this.retarget(null);
    await new Promise<void>((ok) => this.server.close(() => ok()));
  }
}

interface LivePane {
  transport: DemoTransport;
  link: Link;
  origin: Origin | null;
  host: ChildProcess | null;
  messages: PaneMessage[];
  waiters: (() => void)[];
}

function nextMessage<T extends PaneMessage['type']>(pane: LivePane, types: readonly T[], timeoutMs: number, what: string): Promise<Extract<PaneMessage, { type: T }>> {
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new LabError('LAB_ERR_DEMO_TIMEOUT', `${pane.transport} pane: ${what} did not happen within ${timeoutMs} ms`)), timeoutMs);
    const look = (): boolean => {
      const i = pane.messages.findIndex((m) => (types as readonly string[]).includes(m.type) || m.type === 'error');
      if (i < 0) return false;
      const [m] = pane.messages.splice(i, 1);
      clearTimeout(timer);
      if (m!.type === 'error' && !(types as readonly string[]).includes('error')) fail(new LabError('LAB_ERR_DEMO_PANE', `${pane.transport} pane: ${m!.message}`));
      else ok(m as Extract<PaneMessage, { type: T }>);
      return true;
    };
    if (look()) return;
    const w = () => {
      if (!look()) pane.waiters.push(w);
    };
    pane.waiters.push(w);
  });
}

export interface DemoControllerOptions {
  /** a pane's load gives up after this long (default 60 s) */
  timeoutMs?: number;
  /** where runs keep their sockets and fetched pages; removed by close() */
  tmpRoot: string;
}

export class DemoController {
  private readonly proxies = new Map<DemoTransport, PaneProxy>();
  /** Each pane's frame origin: a second port on the pane's address, forwarded to the same host. */
  private readonly frameProxies = new Map<DemoTransport, PaneProxy>();
  private live: LivePane[] = [];
  private runs = 0;
  private pageCache: { spec: string; page: PageSpec } | null = null;
  private closed = false;

  constructor(private readonly options: DemoControllerOptions) {}

  async start(): Promise<void> {
    for (const [i, t] of DEMO_TRANSPORTS.entries()) {
      // 127.0.0.2, .3, .4: the demo page is 127.0.0.1; every 127/8 address is this machine's loopback
      const p = new PaneProxy(`127.0.0.${2 + i}`);
      await p.listen();
      this.proxies.set(t, p);
      const f = new PaneProxy(`127.0.0.${2 + i}`);
      await f.listen();
      this.frameProxies.set(t, f);
    }
  }

  /** The loopback address and port a pane's frame opens (the same for every run). */
  paneOrigin(t: DemoTransport): string {
    const p = this.proxies.get(t);
    return p ? `http://${p.host}:${p.port}` : '';
  }

  /** The origin a pane's page frame is on (another port of the pane's address: another origin, the same site). */
  paneFrameOrigin(t: DemoTransport): string {
    const p = this.frameProxies.get(t);
    return p ? `http://${p.host}:${p.port}` : '';
  }

  /** Loads the page in the three panes at once through three copies of the link; resolves with what happened. */
  async run(settingsIn: DemoSettings, view: DemoView): Promise<DemoRun> {
    if (this.closed) throw new LabError('LAB_ERR_DEMO_CLOSED', 'the demo is closed');
    const settings = checkSettings(settingsIn);
    const runId = ++this.runs;
    const timeoutMs = this.options.timeoutMs ?? 60_000;
    await this.teardown();
    view.progress(runId, 'preparing the page');
    const page = await this.page(settings.page);
    view.progress(runId, `starting three links (${(settings.loss * 100).toFixed(0)}% loss, ${settings.delayMs} ms, ${settings.rate.toLocaleString('en-US')} B/s, seed ${settings.seed}) and their servers`);
    const linkOptions = linkOptionsFor({ delayMs: settings.delayMs, rate: settings.rate, burst: settings.burst > 1 ? settings.burst : undefined, queueBytes: undefined }, settings.loss, settings.seed);
    const { cmd, args } = catpCommand();
    const started = await Promise.allSettled(DEMO_TRANSPORTS.map(async (transport): Promise<LivePane> => {
      const link = await startLink(linkOptions);
      const pane: LivePane = { transport, link, origin: null, host: null, messages: [], waiters: [] };
      this.live.push(pane);
      pane.origin = await startOrigin(link, 'catp', page.root);
      // the server encodes (CATP) or compresses (HTTP) a page once per version: done before the clock starts
      await warmOrigin(link, pane.origin, page.urlPath, transport);
      const socketPath = path.join(this.options.tmpRoot, `pane-${transport}-${runId}.sock`);
      const host = link.spawnIn('client', cmd, [...args, '__demo-pane', '--socket', socketPath, '--public-host', this.proxies.get(transport)!.host, '--public-port', String(this.proxies.get(transport)!.port),
        '--public-frame-port', String(this.frameProxies.get(transport)!.port),
        '--transport', transport, '--timeout', String(timeoutMs)], { stdio: ['pipe', 'pipe', 'pipe'] });
      pane.host = host;
      let stderr = '';
      host.stderr!.setEncoding('utf8').on('data', (d: string) => {
        if (stderr.length < 4096) stderr += d;
      });
      readline.createInterface({ input: host.stdout! }).on('line', (line) => {
        try {
          pane.messages.push(JSON.parse(line) as PaneMessage);
        } catch {
          return;
        }
        for (const w of pane.waiters.splice(0)) w();
      });
      host.once('exit', (code) => {
        pane.messages.push({ type: 'error', message: `its host exited (${code})${stderr.trim() ? `: ${stderr.trim().slice(-300)}` : ''}` });
        for (const w of pane.waiters.splice(0)) w();
      });
      const listening = await nextMessage(pane, ['listening'], 20_000, 'the host starting');
      this.proxies.get(transport)!.retarget(socketPath);
      this.frameProxies.get(transport)!.retarget(socketPath);
      // a query of its own per run: the frames hold the previous run's app at the same address, and a new URL
      // that differed only in its fragment would not reload them
      return Object.assign(pane, { appUrl: listening.appUrl.replace('/__catp/app.html#', `/__catp/app.html?run=${runId}#`) });
    }));
    const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      await this.teardown();
      throw failed.reason instanceof Error ? failed.reason : new LabError('LAB_ERR_DEMO_PANE', String(failed.reason));
    }
    const panes = started.map((r) => (r as PromiseFulfilledResult<LivePane & { appUrl: string }>).value);
    view.progress(runId, 'opening the panes');
    view.showPanes(runId, panes.map((p) => ({ transport: p.transport, appUrl: p.appUrl })));
    await Promise.all(panes.map((p) => nextMessage(p, ['ready'], 30_000, "the pane's renderer connecting")));
    const urlFor = (t: DemoTransport, link: Link) => `${t === 'tcp' ? 'http' : 'dhttp'}://${link.serverAddress}:8080${page.urlPath}`;
    await view.loadStarting(runId, Date.now());
    view.progress(runId, 'loading');
    // the same moment: three writes in one turn of the event loop (the filmstrip's time 0)
    const startedAtEpochMs = Date.now();
    for (const p of panes) p.host!.stdin!.write(`${JSON.stringify({ type: 'go', url: urlFor(p.transport, p.link) })}\n`);
    const results = await Promise.all(panes.map(async (p): Promise<PaneResult> => {
      let result: PaneResult;
      try {
        const m = await nextMessage(p, ['record'], timeoutMs + 15_000, 'the load ending');
        result = await this.paneResult(p, m.record, null);
      } catch (err) {
        result = await this.paneResult(p, null, (err as Error).message);
      }
      view.paneDone(runId, result);
      return result;
    }));
    return { runId, settings, page: { name: page.name, bytes: page.bytes }, startedAtEpochMs, panes: results, rootless: panes[0]!.link.rootless };
  }

  private async paneResult(p: LivePane, record: LoadRecord | null, error: string | null): Promise<PaneResult> {
    const log = await p.link.log().catch(() => null);
    const lost: Record<Dir, number[]> = { c2s: [], s2c: [] };
    const packets: Record<Dir, number> = { c2s: 0, s2c: 0 };
    for (const e of log?.events ?? []) {
      if (e.ev === 'arrive' && e.idx >= 0) packets[e.dir] = Math.max(packets[e.dir], e.idx + 1);
      if (e.ev === 'drop' && e.reason === 'loss') lost[e.dir].push(e.idx);
    }
    const last = record?.arrivals.at(-1);
    return {
      transport: p.transport,
      outcome: record?.outcome ?? 'failed',
      ...(error !== null ? { error } : record?.error ? { error: record.error } : {}),
      silentTimeMs: record ? record.silentTimeMs : null,
      silentGap: record ? record.silentGap : null,
      firstPaintMs: record?.firstPaintMs ?? null,
      completeMs: record?.completeMs ?? null,
      networkFloorMs: record ? record.networkFloorMs : null,
      frames: record?.arrivals.length ?? 0,
      missing: last?.missing ?? 0,
      repaired: last?.repaired ?? 0,
      visibleUpdates: record?.updates.length ?? 0,
      lost,
      packets,
    };
  }

  private async page(spec: string): Promise<PageSpec> {
    if (this.pageCache?.spec === spec && fs.existsSync(this.pageCache.page.root)) return this.pageCache.page;
    const page = await resolvePage(spec, this.options.tmpRoot);
    this.pageCache = { spec, page };
    return page;
  }

  /** Stops the current run's hosts, servers and links. */
  private async teardown(): Promise<void> {
    const live = this.live.splice(0);
    for (const p of [...this.proxies.values(), ...this.frameProxies.values()]) p.retarget(null);
    await Promise.all(live.map(async (p) => {
      p.host?.stdin?.end();
      await p.origin?.close().catch(() => undefined);
      await p.link.close().catch(() => undefined);
    }));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.teardown();
    for (const p of [...this.proxies.values(), ...this.frameProxies.values()]) await p.close();
  }
}
