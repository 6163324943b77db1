// Transports under test. Each loads one page through the link and returns its visible updates on
// CLOCK_MONOTONIC; the runner adds the request time and the network floor from the emulator's log, the
// same way for every transport.
//
//  chromium          stock Chromium (HTTP/1.1 over kernel TCP, --disable-quic), frames from its compositor
//                    (updates.ts), no network throttling of its own: the emulator impairs.
//  h3                the same stock Chromium over HTTP/3 (QUIC) to Caddy (lab/caddy.ts) on the same port over
//                    https, QUIC forced to that origin, its certificate trusted by SPKI hash for this launch only;
//                    the load says which protocol Chromium used (nextHopProtocol), and one that fell back to
//                    TCP is an error, not an h3 load.
//  catp, inorder,    our browser, `catp browse --headless --record FILE --frames FRAMES --transport X URL`,
//  tcp               run in the client namespace. FRAMES (page-frames.ts) has the compositor frames of the
//                    page area only, captured and compared with the same code as chromium's: they are the
//                    visible updates (method 'compositor'). FILE is its load record (JSON, app/browser's
//                    LoadRecord); its updates are the renderer's own paint markers, kept as a cross-check.
//                    Times in both are epoch ms, mapped onto CLOCK_MONOTONIC with the link's realtime −
//                    monotonic offset. Until `catp browse` exists they report "not available yet".
import { type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { CADDY_HINT, findCaddy } from '../caddy';
import { type Link } from '../link';
import { catpCommand, repoRoot, type ServerKind } from './origin';
import { type FrameChange } from './frames';
import { type PageFramesFile } from './page-frames';
import { analyzeUpdates, CHROMIUM, framesBeforeLoad, launchChromium, monotoneFrames, openRecordedPage, summarizeUpdates, type CaptureMode, type UpdatesResult } from './updates';
import { LabError } from '../errors';

export interface LoadContext {
  link: Link;
  /** host:port of the server as seen from the client */
  host: string;
  port: number;
  urlPath: string;
  viewport: { width: number; height: number };
  /** give up on a load after this long */
  timeoutMs: number;
  /** keep capturing this long after the load event (late paints) */
  settleMs: number;
  /** how compositor frames are captured (updates.ts): every vsync (the heartbeat) or only frames that change */
  capture: CaptureMode;
  /**
   * The link's rate in bytes/s handed to our UDP senders (the oracle-rate ablation: they are asked to pace just
   * under it); 0 (the default): they are told nothing and find the rate themselves, as TCP does.
   */
  rate: number;
  /** an https origin's certificate (its SPKI hash): the h3 transport trusts it and nothing else */
  spki?: string;
}

export interface TransportLoad {
  /** when the navigation was issued (CLOCK_MONOTONIC ns); the request itself is found in the link log */
  navStartNs: bigint;
  /** the transport's own idea of the request time, if it has one (used when the log shows none) */
  requestHintNs?: bigint;
  /** visible update times (CLOCK_MONOTONIC ns), sorted */
  updateNs: bigint[];
  /** sampling intervals between consecutive observations, in the order observed (for the error bound) */
  frameNs: bigint[];
  loadEventNs: bigint | null;
  /** where the updates come from */
  method: 'compositor-screencast' | 'compositor' | 'renderer-markers';
  /** the renderer's own paint markers (CLOCK_MONOTONIC ns, sorted), a cross-check of the compositor's updates */
  markerNs?: bigint[];
  /** the page's layout height, to warn when it is taller than the viewport (updates below it are unseen) */
  pageHeight?: number;
  /** notes of the transport, copied into the load's warnings */
  warnings?: string[];
  /** the protocol the page came over (the navigation's nextHopProtocol: http/1.1, h2, h3), when known */
  protocol?: string;
  /** analysis the transport already did (chromium) — recomputed by the runner against the request time */
  reanalyze?: (requestNs: bigint) => UpdatesResult;
  /** our browser's own account (frames as the host received them, `dom` events host → renderer → paint), for --trace */
  timeline?: BrowserTimeline;
}

/** Our browser's record of a load, CLOCK_MONOTONIC ns: when each frame reached the host's socket, and each `dom`
 * event's stages (host sent it, renderer received it, its operations applied, the paint that showed it). */
export interface BrowserTimeline {
  arrivals: Array<{ atNs: bigint; seq: number | null; kind: string | null; bytes: number; useful: boolean }>;
  domSentNs: bigint[];
  domReceivedNs: bigint[];
  domAppliedNs: bigint[];
  domPaintedNs: bigint[];
}

export interface Transport {
  readonly name: string;
  /** the origin it needs, when not the run's own server (h3: caddy) */
  readonly origin?: ServerKind;
  /** the protocol a load must have used to count (h3: 'h3'); another one is an error */
  readonly protocol?: string;
  /** null when usable, else why not */
  unavailable(): Promise<string | null>;
  load(ctx: LoadContext): Promise<TransportLoad>;
}

const now = () => process.hrtime.bigint();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Stock Chromium loading the page itself: over http:// (chromium), or over https:// with QUIC forced (h3). */
function stockChromium(name: 'chromium' | 'h3'): Transport {
  const h3 = name === 'h3';
  return {
    name,
    ...(h3 ? { origin: 'caddy' as const, protocol: 'h3' } : {}),
    async unavailable() {
      if (!fs.existsSync(CHROMIUM)) return `Chromium not found at ${CHROMIUM}`;
      return h3 && findCaddy(repoRoot()) === null ? CADDY_HINT : null;
    },
    async load(ctx) {
      const authority = `${ctx.host}:${ctx.port}`;
      if (h3 && !ctx.spki) throw new LabError('LAB_ERR_NOT_HTTPS', 'h3: the origin has no certificate to trust (not an https origin)');
      const b = await launchChromium(ctx.link, h3
        ? { drop: ['--disable-quic'], add: ['--enable-quic', `--origin-to-force-quic-on=${authority}`, `--ignore-certificate-errors-spki-list=${ctx.spki!}`] }
        : undefined);
      try {
        const s = await openRecordedPage(b.browser, ctx.viewport, ctx.link.realtimeMinusMonotonicNs, ctx.capture);
        // What is on screen before the load: wait for the first frames of about:blank.
        await s.recorder.waitFrames(framesBeforeLoad(ctx.capture), 3000);
        await sleep(100);
        const navStartNs = now();
        const url = `${h3 ? 'https' : 'http'}://${authority}${ctx.urlPath}`;
        await s.page.goto(url, { waitUntil: 'load', timeout: ctx.timeoutMs });
        await sleep(ctx.settleMs);
        await s.recorder.stop();
        // (a string: this file is compiled without the DOM library)
        const info = (await s.page.evaluate(`(() => {
          const nav = performance.getEntriesByType('navigation')[0];
          const el = document.scrollingElement || document.documentElement;
          return { timeOrigin: performance.timeOrigin, loadEventEnd: nav ? nav.loadEventEnd : 0, height: el ? el.scrollHeight : 0, protocol: nav ? nav.nextHopProtocol : '' };
        })()`)) as { timeOrigin: number; loadEventEnd: number; height: number; protocol: string };
        const loadEventNs = info.loadEventEnd > 0
          ? BigInt(Math.round((info.timeOrigin + info.loadEventEnd) * 1e6)) - ctx.link.realtimeMinusMonotonicNs
          : null;
        const frames = s.recorder.frames;
        return {
          navStartNs,
          updateNs: [],
          frameNs: frames.map((f) => f.tNs),
          loadEventNs,
          method: 'compositor-screencast',
          pageHeight: info.height,
          ...(info.protocol ? { protocol: info.protocol } : {}),
          reanalyze: (requestNs) => analyzeUpdates(frames, requestNs),
        };
      } finally {
        await b.close();
      }
    },
  };
}

export const chromiumTransport = stockChromium('chromium');
export const h3Transport = stockChromium('h3');

/** The fields of app/browser's LoadRecord this tool reads (epoch ms). */
interface BrowseRecord {
  requestAtEpochMs: number;
  updates: Array<{ atEpochMs: number }>;
  outcome?: string;
  error?: string;
  arrivals?: Array<{ atEpochMs: number; seq: number | null; kind: string | null; bytes: number; useful: boolean }>;
  domSentAtEpochMs?: number[];
  domReceivedAtEpochMs?: number[];
  domAppliedAtEpochMs?: number[];
  domPaintedAtEpochMs?: number[];
}

/** The browser's own account of a load (its record's arrivals and `dom` event stages), on the link's clock. */
function browserTimeline(rec: BrowseRecord, toNs: (epochMs: number) => bigint): BrowserTimeline {
  const list = (xs: unknown): bigint[] => (Array.isArray(xs) ? xs.filter((x): x is number => typeof x === 'number').map(toNs) : []);
  const arrivals = Array.isArray(rec.arrivals) ? rec.arrivals.filter((a) => typeof a?.atEpochMs === 'number') : [];
  return {
    arrivals: arrivals.map((a) => ({ atNs: toNs(a.atEpochMs), seq: a.seq ?? null, kind: a.kind ?? null, bytes: a.bytes, useful: a.useful === true })),
    domSentNs: list(rec.domSentAtEpochMs),
    domReceivedNs: list(rec.domReceivedAtEpochMs),
    domAppliedNs: list(rec.domAppliedAtEpochMs),
    domPaintedNs: list(rec.domPaintedAtEpochMs),
  };
}

function readFrames(file: string): PageFramesFile {
  if (!fs.existsSync(file)) throw new LabError('LAB_ERR_BAD_FRAMES', 'catp browse wrote no frames file (--frames)');
  const f = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<PageFramesFile>;
  if (f.version !== 1 || !Array.isArray(f.frames)) throw new LabError('LAB_ERR_BAD_FRAMES', `${file} is not a frames file (version 1, frames[])`);
  if (f.frames.length < 2) throw new LabError('LAB_ERR_BAD_FRAMES', `catp browse captured ${f.frames.length} compositor frames`);
  return f as PageFramesFile;
}

/**
 * The page-area frames of `catp browse --frames` on CLOCK_MONOTONIC, stamps made non-decreasing, and their
 * changes, analysed against the request exactly as chromium's frames are (summarizeUpdates).
 */
export function framesAnalysis(f: PageFramesFile, realtimeMinusMonotonicNs: bigint): { frameNs: bigint[]; reanalyze: (requestNs: bigint) => UpdatesResult } {
  const toNs = (ms: number) => BigInt(Math.round(ms * 1e6)) - realtimeMinusMonotonicNs;
  const frames = monotoneFrames(f.frames.map((x) => ({ tNs: toNs(x.tEpochMs), recvNs: toNs(x.recvEpochMs) })));
  const changes: FrameChange[] = [];
  f.frames.forEach((x, i) => {
    if (i > 0 && x.changed > 0) changes.push({ index: i, tNs: frames[i]!.tNs, prevNs: frames[i - 1]!.tNs, changed: x.changed, box: x.box ?? null });
  });
  return { frameNs: frames.map((x) => x.tNs), reanalyze: (requestNs) => summarizeUpdates(frames, changes, requestNs) };
}

function readRecord(file: string): BrowseRecord {
  const r = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<BrowseRecord>;
  if (typeof r.requestAtEpochMs !== 'number' || !Array.isArray(r.updates)) throw new LabError('LAB_ERR_BAD_RECORD', `${file} is not a load record (requestAtEpochMs, updates[])`);
  for (const u of r.updates) if (typeof u?.atEpochMs !== 'number') throw new LabError('LAB_ERR_BAD_RECORD', `${file}: an update without atEpochMs`);
  return r as BrowseRecord;
}

let browseCheck: Promise<string | null> | undefined;

/** Whether `catp browse` is registered in the built command line; the reason if not. */
export function browseUnavailable(): Promise<string | null> {
  browseCheck ??= (async () => {
    let cmd: { cmd: string; args: string[] };
    try {
      cmd = catpCommand();
    } catch (err) {
      return `not available yet: ${(err as Error).message}`;
    }
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync(cmd.cmd, [...cmd.args, 'browse', '--help'], { encoding: 'utf8', timeout: 30_000 });
    if (r.status === 0) return null;
    if (/unknown command/.test(r.stderr ?? '')) return 'not available yet: catp browse is missing';
    return `not available yet: catp browse --help failed (${r.status}): ${(r.stderr ?? '').trim().slice(0, 200)}`;
  })();
  return browseCheck;
}

function collect(child: ChildProcess, timeoutMs: number): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      if (stderr.length < 8192) stderr += d;
    });
    child.stdout?.resume();
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    child.once('close', (code) => {
      clearTimeout(t);
      resolve({ code, stderr });
    });
  });
}

/** A transport of our own browser: `catp browse --headless --record FILE --transport X URL` in the client namespace. */
export function browseTransport(name: 'catp' | 'inorder' | 'tcp'): Transport {
  return {
    name,
    unavailable: browseUnavailable,
    async load(ctx) {
      const why = await browseUnavailable();
      if (why) throw new LabError('LAB_ERR_UNAVAILABLE', why);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-record-'));
      const file = path.join(dir, 'record.json');
      const framesFile = path.join(dir, 'frames.json');
      try {
        const { cmd, args } = catpCommand();
        const scheme = name === 'tcp' ? 'http' : 'dhttp';
        const url = `${scheme}://${ctx.host}:${ctx.port}${ctx.urlPath}`;
        const navStartNs = now();
        // Oracle-rate ablation only: our server paces CATP and in-order frames at the rate asked for, just under the
        // link's rate (which counts IP and UDP headers too). By default nothing is asked: the senders find it.
        const rate = name !== 'tcp' && ctx.rate > 0 ? ['--rate', String(Math.max(1000, Math.floor(ctx.rate * 0.95)))] : [];
        // The page area gets the size of chromium's viewport, so every transport shows the same part of the page.
        const child = ctx.link.spawnIn('client', cmd, [...args, 'browse', '--headless', '--record', file, '--frames', framesFile, '--frames-capture', ctx.capture, '--page-area', `${ctx.viewport.width}x${ctx.viewport.height}`, '--transport', name, ...rate, url], { stdio: ['ignore', 'pipe', 'pipe'] });
        const { code, stderr } = await collect(child, ctx.timeoutMs + 30_000);
        if (code !== 0) throw new LabError('LAB_ERR_BROWSE_FAILED', `catp browse exited with ${code}: ${stderr.trim().slice(0, 300)}`);
        const rec = readRecord(file);
        if (rec.outcome && rec.outcome !== 'complete') throw new LabError('LAB_ERR_LOAD_FAILED', `catp browse: load ${rec.outcome}${rec.error ? `: ${rec.error}` : ''}`);
        const toNs = (ms: number) => BigInt(Math.round(ms * 1e6)) - ctx.link.realtimeMinusMonotonicNs;
        const updateNs = rec.updates.map((u) => toNs(u.atEpochMs)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
        const frames = readFrames(framesFile);
        const fa = framesAnalysis(frames, ctx.link.realtimeMinusMonotonicNs);
        const warnings: string[] = [];
        if (frames.clipAtEnd && JSON.stringify(frames.clipAtEnd) !== JSON.stringify(frames.clipAtStart)) {
          warnings.push(`the page area moved during the load (${JSON.stringify(frames.clipAtStart)} → ${JSON.stringify(frames.clipAtEnd)}); compared: ${JSON.stringify(frames.clip)}`);
        }
        return {
          warnings, pageHeight: frames.contentHeight ?? undefined,
          navStartNs, requestHintNs: toNs(rec.requestAtEpochMs), updateNs: [], frameNs: fa.frameNs, loadEventNs: null,
          method: 'compositor', markerNs: updateNs, reanalyze: fa.reanalyze, timeline: browserTimeline(rec, toNs),
        };
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

export const TRANSPORTS = ['chromium', 'h3', 'catp', 'inorder', 'tcp'] as const;
export type TransportName = (typeof TRANSPORTS)[number];

export function transportByName(name: string): Transport {
  switch (name) {
    case 'chromium':
      return chromiumTransport;
    case 'h3':
      return h3Transport;
    case 'catp':
      return browseTransport('catp');
    case 'inorder':
    case 'udp-inorder':
      return browseTransport('inorder');
    case 'tcp':
      return browseTransport('tcp');
    default:
      throw new RangeError(`unknown transport '${name}' (one of ${TRANSPORTS.join(', ')})`);
  }
}
