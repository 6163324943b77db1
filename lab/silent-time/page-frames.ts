// Compositor frames of the page area of our own browser (`catp browse --headless --frames FILE`), taken the
// same way as stock Chromium's in updates.ts: CDP screencast PNGs with the heartbeat forcing a frame per
// vsync, consecutive frames compared pixel by pixel (frames.ts). The app page around the page frame (toolbar,
// HUD, timeline, status line) changes all the time, so only the pixels inside the page area count: the
// bounding box of the app's <main> (which the page <iframe> fills), read once the app is laid out (its
// layout does not move). The capture only keeps the PNGs while the load runs; they are decoded and compared
// after it (stop()), so the comparison does not compete with the load for this process's event loop.
//
// The file (PageFramesFile) has the frame stamps in epoch ms (CLOCK_REALTIME, like the load record), which
// frames changed pixels inside the area, and the sampling interval; lab/silent-time/transports.ts maps it
// onto CLOCK_MONOTONIC and analyzes it with summarizeUpdates, exactly as the chromium transport's frames.
import type { CDPSession, Page } from 'playwright-core';

import { clampRect, frameChanges, type Rect } from './frames';
import { framesBeforeLoad, HEARTBEAT_MASK, HEARTBEAT_SCRIPT, localRealtimeMinusMonotonicNs, monotoneFrames, ScreencastRecorder, type CaptureMode } from './updates';
import { LabError } from '../errors';

export interface PageFrame {
  /** the compositor frame's reference time, epoch ms (CLOCK_REALTIME), as stamped (not yet made monotone) */
  tEpochMs: number;
  /** when `catp browse` received the frame, epoch ms */
  recvEpochMs: number;
  /** pixels inside the page area that differ from the previous frame (0 for the first frame) */
  changed: number;
  box?: Rect;
}

export interface PageFramesFile {
  version: 1;
  method: 'compositor-screencast';
  /** the page area compared: the app page's <main> at the start ∩ at the end, in CSS pixels (= screencast pixels, device scale factor 1) */
  clip: Rect;
  /** the page area read when the capture started */
  clipAtStart: Rect;
  /** the page area read again when the capture stopped: the check that the app's layout did not move */
  clipAtEnd: Rect | null;
  /** the screencast frame size */
  frameSize: { width: number; height: number } | null;
  /** the heartbeat ran (capture 'vsync'); without it ('damage') a frame comes only when something changed */
  heartbeat: boolean;
  frames: PageFrame[];
  /** gaps between consecutive captured frames over the whole capture (after making stamps monotone), ms */
  sampling: { maxMs: number; medianMs: number } | null;
  /** how long decoding and comparing took, ms */
  analysisMs: number;
  /** the loaded page's document height in CSS px at the end (content below the page area is not on screen) */
  contentHeight?: number | null;
}

export interface PageFrameCapture {
  readonly clip: Rect;
  /** stops the screencast, compares the frames and returns the file's content */
  stop(): Promise<PageFramesFile>;
}

/** The bounding box of the page area in the app page (the <main> the page <iframe> fills). */
export async function pageArea(page: Page, selector = 'main'): Promise<Rect> {
  // (a string: this file is compiled without the DOM library)
  const r = (await page.evaluate(`(() => {
    const el = document.querySelector(${JSON.stringify(selector)});
    if (!el) return null;
    const b = el.getBoundingClientRect();
    return { x: b.x, y: b.y, width: b.width, height: b.height };
  })()`)) as Rect | null;
  if (!r || r.width <= 0 || r.height <= 0) throw new LabError('LAB_ERR_PAGE_AREA', `the app page has no visible ${selector} (the page area)`);
  return r;
}

function intersect(a: Rect, b: Rect): Rect {
  const x = Math.max(a.x, b.x);
  const y = Math.max(a.y, b.y);
  return { x, y, width: Math.max(0, Math.min(a.x + a.width, b.x + b.width) - x), height: Math.max(0, Math.min(a.y + a.height, b.y + b.height) - y) };
}

/**
 * Resizes the app page's viewport so that its page area (`selector`) is exactly `size`: the toolbar above
 * and the HUD below keep their heights, so the viewport grows by the difference. silent-time gives our
 * browser's page area the size of stock Chromium's viewport, so both show the same part of a page.
 */
export async function fitPageArea(page: Page, size: { width: number; height: number }, selector = 'main'): Promise<Rect> {
  const vp = page.viewportSize() ?? { width: 1280, height: 900 };
  let area = await pageArea(page, selector);
  for (let i = 0; i < 3 && (Math.round(area.width) !== size.width || Math.round(area.height) !== size.height); i++) {
    await page.setViewportSize({ width: Math.round(vp.width + size.width - area.width), height: Math.round(vp.height + size.height - area.height) });
    Object.assign(vp, page.viewportSize());
    area = await pageArea(page, selector);
  }
  if (Math.round(area.width) !== size.width || Math.round(area.height) !== size.height) {
    throw new LabError('LAB_ERR_PAGE_AREA', `could not size the page area to ${size.width}x${size.height} (it is ${area.width}x${area.height})`);
  }
  return area;
}

/**
 * The document height of the page shown in the page area's iframe, or null (no page, or not readable). The frame is
 * another origin than the app page: its agent reports its height to the app (the probe's frameHeight).
 */
async function contentHeight(page: Page, selector: string): Promise<number | null> {
  const h = (await page.evaluate(`(() => {
    const f = document.querySelector(${JSON.stringify(selector)} + ' iframe');
    const s = f && window.__catp && window.__catp.state();
    return s ? s.frameHeight : null;
  })()`)) as number | null;
  return typeof h === 'number' && Number.isFinite(h) ? h : null;
}

/**
 * Starts the screencast on the (laid out) app page, with the heartbeat for `capture` 'vsync' (updates.ts); resolves
 * once frames are coming. With `areaSize`, the viewport is first resized so that the page area has exactly that size.
 */
export async function startPageFrames(page: Page, selector: string, areaSize: { width: number; height: number } | undefined, capture: CaptureMode): Promise<PageFrameCapture> {
  if (areaSize) await fitPageArea(page, areaSize, selector);
  if (capture === 'vsync') await page.evaluate(HEARTBEAT_SCRIPT);
  const area = await pageArea(page, selector);
  const cdp: CDPSession = await page.context().newCDPSession(page);
  const offset = localRealtimeMinusMonotonicNs();
  const recorder = new ScreencastRecorder(cdp, offset);
  await recorder.start();
  await recorder.waitFrames(framesBeforeLoad(capture), 3000);
  return {
    clip: area,
    async stop() {
      await recorder.stop();
      await cdp.detach().catch(() => undefined);
      const clipAtEnd = await pageArea(page, selector).catch(() => null);
      const height = await contentHeight(page, selector).catch(() => null);
      const t0 = Date.now();
      const frames = recorder.frames;
      const first = frames[0]?.png;
      const frameSize = first ? { width: first.readUInt32BE(16), height: first.readUInt32BE(20) } : null;
      // Only what was page area both at the start and at the end counts (the app's layout should not move;
      // transports.ts warns when it did).
      const both = clipAtEnd ? intersect(area, clipAtEnd) : area;
      const clip = frameSize ? clampRect(both, frameSize.width, frameSize.height) : both;
      const changes = new Map(frameChanges(frames, [HEARTBEAT_MASK], 0, clip).map((c) => [c.index, c]));
      const mono = monotoneFrames(frames);
      const gaps: number[] = [];
      for (let i = 1; i < mono.length; i++) gaps.push(Number(mono[i]!.tNs - mono[i - 1]!.tNs) / 1e6);
      gaps.sort((a, b) => a - b);
      const epochMs = (ns: bigint) => Number(ns + offset) / 1e6;
      return {
        version: 1,
        method: 'compositor-screencast',
        clip,
        clipAtStart: area,
        clipAtEnd,
        frameSize,
        heartbeat: capture === 'vsync',
        frames: frames.map((f, i) => {
          const c = changes.get(i);
          const pf: PageFrame = { tEpochMs: epochMs(f.tNs), recvEpochMs: epochMs(f.recvNs), changed: c?.changed ?? 0 };
          if (c?.box) pf.box = c.box;
          return pf;
        }),
        sampling: gaps.length ? { maxMs: gaps[gaps.length - 1]!, medianMs: gaps[gaps.length >> 1]! } : null,
        analysisMs: Date.now() - t0,
        contentHeight: height,
      };
    },
  };
}
