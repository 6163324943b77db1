// Visible updates taken from the compositor. Chromium (playwright-core, fresh profile) runs inside the
// client network namespace of the link: playwright launches a small wrapper script as the "browser
// executable" which execs `nsenter --net=... -- /usr/bin/chromium "$@"`. nsenter keeps the file descriptors,
// so playwright's default --remote-debugging-pipe (fds 3 and 4) crosses the namespace boundary and no
// debugging port is needed on either side.
//
// Frame capture: CDP Page.startScreencast (format png, everyNthFrame 1). Chosen over trace screenshots
// (disabled-by-default-devtools.screenshot) because the trace's screenshots are JPEG (lossy: a pixel
// comparison would see encoder noise or need a threshold) and downscaled, and have a count limit per
// trace; screencast frames are lossless PNG at full viewport resolution with no count limit. The
// screencast sends frames only when the compositor produces one and drops frames while two are
// unacknowledged, so on its own the gap before a captured change could be a quiet screen or a dropped
// frame. To make every captured frame a *sample*, an init script adds a heartbeat: a 1×1 px element at the
// top-left corner whose opacity runs a compositor animation between 0.001 and 0.002. That never changes a
// pixel value (both round to the background) but damages the frame, so the compositor produces a frame
// every vsync (16.7 ms) for the whole load and the screencast captures as many as it can. The change seen
// in frame k happened in (t[k-1], t[k]]: the interval between consecutive captured frames is the sampling
// interval, and its maximum over the load is the error bound of every time we report. (The heartbeat's
// pixel is masked out of the comparison anyway.)
//
// That is the capture 'vsync' (--capture vsync), the method of every table before session 43. It is not free: a
// screencast frame per vsync is a full redraw, a readback and a PNG in Chromium's GPU and browser processes, on the
// two cores the page, the link and the server share. With it off (the renderer's own paint stamps, recorded either
// way), our browser's first paint came 40–100 ms sooner on four real pages at the issue's link
// (docs/results-real-pages.md, session 42). 'damage' (--capture damage) leaves the heartbeat out: the compositor
// makes a frame, and the screencast captures it, only when something on screen changed; it is the default since
// session 43. What it reports means the same: a change seen in frame k happened in (t[k-1], t[k]] (the frame before
// did not show it), so the gaps between captured frames are still the error bound; they are as long as the screen
// was still (for stock Chromium, the whole wait before its first paint), so the bound says less, while the capture
// no longer takes the cores the measured browser needs: on twelve real pages our browser's silent times came out
// 13–33% lower with it, stock Chromium's the same (session 42).
//
// Clock: each frame's metadata.timestamp is the compositor frame's reference time (vsync-aligned) in
// seconds since the epoch (CLOCK_REALTIME); it maps onto CLOCK_MONOTONIC — the emulator's clock — with the
// link's realtimeMinusMonotonicNs. Stamps are made non-decreasing in capture order (monotoneFrames). The
// receipt time (process.hrtime.bigint()) of each frame is kept as a check: a frame is never received more
// than a vsync before its stamp.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { Browser, BrowserContext, CDPSession, Page } from 'playwright-core';
import { PNG } from 'pngjs';

import { CHROMIUM_PATH, chromiumFlags } from '../../app/browser/chromium';
import { type Link } from '../link';
import { frameChanges, type CapturedFrame, type FrameChange, type Rect } from './frames';
import { longestGap } from './stats';
import { LabError } from '../errors';

export const CHROMIUM = CHROMIUM_PATH;

/** app/browser's launch flags, with the ACCEPT_CH frame feature off as well for the measured browser. */
export function chromiumArgs(): string[] {
  return chromiumFlags(['AcceptCHFrame']);
}

/** The heartbeat (see above): never changes a pixel, keeps the compositor producing frames. */
export const HEARTBEAT_SCRIPT = `(() => {
  const start = () => {
    const root = document.documentElement;
    if (!root) return false;
    const d = document.createElement('catp-heartbeat');
    d.setAttribute('aria-hidden', 'true');
    d.setAttribute('style', 'all:initial;position:fixed;left:0;top:0;width:1px;height:1px;background:#000;opacity:0.001;z-index:2147483647;pointer-events:none;display:block;will-change:opacity');
    root.appendChild(d);
    d.animate([{ opacity: 0.001 }, { opacity: 0.002 }], { duration: 250, iterations: Infinity, direction: 'alternate' });
    return true;
  };
  if (!start()) new MutationObserver((_, mo) => { if (start()) mo.disconnect(); }).observe(document, { childList: true });
})();`;

/** The heartbeat's pixel, left out of every comparison. */
export const HEARTBEAT_MASK: Rect = { x: 0, y: 0, width: 1, height: 1 };

/** How compositor frames are captured (see the top of this file): a frame every vsync, or only frames that show a change. */
export type CaptureMode = 'vsync' | 'damage';
export const CAPTURE_MODES: readonly CaptureMode[] = ['vsync', 'damage'];
/** 'damage': the vsync capture takes the cores of the browser it measures (see the top of this file). */
export const DEFAULT_CAPTURE: CaptureMode = 'damage';
/** What a load log written before `capture` was recorded in its settings (up to session 42) was captured with. */
export const UNRECORDED_CAPTURE: CaptureMode = 'vsync';

export function isCaptureMode(v: string): v is CaptureMode {
  return (CAPTURE_MODES as readonly string[]).includes(v);
}

/** Frames to wait for before a load: with the heartbeat two come at once; without it a still page makes one. */
export function framesBeforeLoad(capture: CaptureMode): number {
  return capture === 'vsync' ? 2 : 1;
}

export interface LaunchedBrowser {
  browser: Browser;
  close(): Promise<void>;
}

/** Launches headless Chromium with a fresh profile, inside the link's client namespace when a link is given. */
/** `flags`: flags to leave out of chromiumArgs() and to add (the h3 transport lets QUIC through). */
export async function launchChromium(link?: Link, flags?: { drop: string[]; add: string[] }): Promise<LaunchedBrowser> {
  if (!fs.existsSync(CHROMIUM)) throw new LabError('LAB_ERR_NO_CHROMIUM', `Chromium not found at ${CHROMIUM} (apt-get install chromium, or set CATP_CHROMIUM)`);
  const { chromium } = await import('playwright-core');
  let dir: string | undefined;
  let executablePath = CHROMIUM;
  if (link) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-chromium-'));
    executablePath = path.join(dir, 'chromium-in-netns');
    const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    fs.writeFileSync(executablePath, `#!/bin/sh\nexec nsenter ${link.nsenterArgs('client').map(q).join(' ')} -- ${q(CHROMIUM)} "$@"\n`, { mode: 0o755 });
  }
  try {
    const args = [...chromiumArgs().filter((a) => !flags?.drop.includes(a)), ...(flags?.add ?? [])];
    const browser = await chromium.launch({ executablePath, headless: true, args, timeout: 60_000 });
    return {
      browser,
      async close() {
        await browser.close().catch(() => undefined);
        if (dir) fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/** CLOCK_REALTIME − CLOCK_MONOTONIC in ns, measured here (ms precision; the link's own figure is exact). */
export function localRealtimeMinusMonotonicNs(): bigint {
  const a = process.hrtime.bigint();
  const wall = BigInt(Date.now()) * 1_000_000n;
  const b = process.hrtime.bigint();
  return wall - (a + b) / 2n;
}

export interface RecordedFrame extends CapturedFrame {
  /** when this process received it (CLOCK_MONOTONIC ns) */
  recvNs: bigint;
}

/** Screencast frames of one page, each stamped on CLOCK_MONOTONIC. */
export class ScreencastRecorder {
  readonly frames: RecordedFrame[] = [];
  private waiters: Array<() => void> = [];
  private running = false;

  constructor(
    private readonly cdp: CDPSession,
    private readonly realtimeMinusMonotonicNs: bigint,
  ) {
    cdp.on('Page.screencastFrame', (f) => {
      const recvNs = process.hrtime.bigint();
      const ts = f.metadata.timestamp;
      const tNs = ts !== undefined ? BigInt(Math.round(ts * 1e9)) - this.realtimeMinusMonotonicNs : recvNs;
      this.frames.push({ tNs, recvNs, png: Buffer.from(f.data, 'base64') });
      for (const w of this.waiters.splice(0)) w();
      cdp.send('Page.screencastFrameAck', { sessionId: f.sessionId }).catch(() => undefined);
    });
  }

  async start(): Promise<void> {
    this.running = true;
    await this.cdp.send('Page.startScreencast', { format: 'png', everyNthFrame: 1 });
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    await this.cdp.send('Page.stopScreencast').catch(() => undefined);
  }

  /** Resolves when at least n frames are in, or after timeoutMs. */
  async waitFrames(n: number, timeoutMs: number): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (this.frames.length < n) {
      const left = until - Date.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return true;
  }
}

export interface UpdatesResult {
  /** visible updates after the request, CLOCK_MONOTONIC ns */
  updates: FrameChange[];
  /** frames captured from the request to the end of the capture */
  frames: number;
  /** longest gap between visible updates, the first from the request (ms); null without updates */
  silentMs: number | null;
  silentGap: { fromMs: number; toMs: number } | null;
  firstPaintMs: number | null;
  /** last visible update, ms after the request */
  lastUpdateMs: number | null;
  /** sampling interval (gap between consecutive captured frames) from the request to the last update, ms */
  sampling: { maxMs: number; medianMs: number } | null;
  /** frames whose compositor time lies after their receipt (clock misalignment if more than a few) */
  clockViolations: number;
  /** median receipt − frame time (ms): how long a frame took to reach us */
  captureLatencyMs: number | null;
}

/**
 * Visible updates of a load from its frames: frames are compared with the last frame at or before the
 * request (what was on screen before the load); a frame that differs in any pixel is a visible update.
 */
export function analyzeUpdates(frames0: readonly RecordedFrame[], requestNs: bigint, masks: readonly Rect[] = [HEARTBEAT_MASK]): UpdatesResult {
  const frames = monotoneFrames(frames0);
  let ref = -1;
  for (let i = 0; i < frames.length; i++) if (frames[i]!.tNs <= requestNs) ref = i;
  // Without a frame before the request, an all-white frame of the first frame's size stands in for it.
  let list: CapturedFrame[] = [...frames];
  let from = ref;
  if (ref < 0 && frames.length > 0) {
    list = [{ tNs: requestNs, png: whitePng(frames[0]!.png) }, ...frames];
    from = 0;
  }
  const updates = frameChanges(list, masks, Math.max(0, from)).filter((u) => u.tNs > requestNs);
  return summarizeUpdates(frames, updates, requestNs);
}

/** A captured frame's times only (CLOCK_MONOTONIC ns): its compositor stamp and its receipt. */
export interface FrameTimes {
  tNs: bigint;
  recvNs: bigint;
}

/**
 * The figures of a load from its frames (stamps already non-decreasing: monotoneFrames) and the frames
 * among them that changed pixels (any order of computing them: analyzeUpdates here, or the page-area
 * capture of `catp browse --frames`). Changes at or before the request are ignored.
 */
export function summarizeUpdates(frames: readonly FrameTimes[], changes: readonly FrameChange[], requestNs: bigint): UpdatesResult {
  const ms = (ns: bigint) => Number(ns - requestNs) / 1e6;
  const updates = changes.filter((u) => u.tNs > requestNs);
  const times = updates.map((u) => ms(u.tNs));
  const g = longestGap(0, times);
  const after = frames.filter((f) => f.tNs > requestNs);
  const lastNs = updates.length ? updates[updates.length - 1]!.tNs : null;
  // Sampling interval of frame i: from the previous captured frame (or the request, if later) to it.
  const intervals: number[] = [];
  for (let i = 0; i < frames.length; i++) {
    const t = frames[i]!.tNs;
    if (t <= requestNs) continue;
    const prev = i > 0 && frames[i - 1]!.tNs > requestNs ? frames[i - 1]!.tNs : requestNs;
    intervals.push(Number(t - prev) / 1e6);
    if (lastNs !== null && t >= lastNs) break;
  }
  const sorted = [...intervals].sort((a, b) => a - b);
  const lat = frames.map((f) => Number(f.recvNs - f.tNs) / 1e6).sort((a, b) => a - b);
  return {
    updates,
    frames: after.length,
    silentMs: g ? g.ms : null,
    silentGap: g ? { fromMs: g.from, toMs: g.to } : null,
    firstPaintMs: times.length ? times[0]! : null,
    lastUpdateMs: times.length ? times[times.length - 1]! : null,
    sampling: sorted.length ? { maxMs: sorted[sorted.length - 1]!, medianMs: sorted[sorted.length >> 1]! } : null,
    clockViolations: frames.filter((f) => f.tNs > f.recvNs + CLOCK_SLACK_NS).length,
    captureLatencyMs: lat.length ? lat[lat.length >> 1]! : null,
  };
}

/** A stamp may lie up to one vsync after the receipt (the compositor's expected display time); more is a clock problem. */
const CLOCK_SLACK_NS = 20_000_000n;

/**
 * Frames in the order they were captured (= received: the screencast delivers in capture order), with
 * their stamps made non-decreasing. The compositor's reference times are vsync-aligned and occasionally
 * one or two vsyncs out of order (an expected display time next to a refresh frame's "now"); a frame
 * captured before another cannot show content made after it, so each stamp becomes the minimum of its
 * own and every later frame's stamp.
 */
export function monotoneFrames<F extends FrameTimes>(frames: readonly F[]): F[] {
  const out = frames.map((f) => ({ ...f }));
  for (let i = out.length - 2; i >= 0; i--) if (out[i]!.tNs > out[i + 1]!.tNs) out[i]!.tNs = out[i + 1]!.tNs;
  return out;
}

function whitePng(like: Buffer): Buffer {
  // Reads only the size from the IHDR chunk and encodes a white image of that size.
  const width = like.readUInt32BE(16);
  const height = like.readUInt32BE(20);
  const img = new PNG({ width, height });
  img.data.fill(255);
  return PNG.sync.write(img);
}

export interface PageSession {
  context: BrowserContext;
  page: Page;
  cdp: CDPSession;
  recorder: ScreencastRecorder;
}

/** A fresh context (no cache, no cookies), with the heartbeat for 'vsync', on about:blank, screencast running. */
export async function openRecordedPage(browser: Browser, viewport: { width: number; height: number }, realtimeMinusMonotonicNs: bigint, capture: CaptureMode): Promise<PageSession> {
  const context = await browser.newContext({ viewport, deviceScaleFactor: 1, serviceWorkers: 'block' });
  if (capture === 'vsync') await context.addInitScript(HEARTBEAT_SCRIPT);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  await page.goto('about:blank');
  const recorder = new ScreencastRecorder(cdp, realtimeMinusMonotonicNs);
  await recorder.start();
  return { context, page, cdp, recorder };
}
