// Pixel-by-pixel comparison of captured frames. A frame is a visible update when at least one pixel
// outside the masked rectangles differs from the previous frame in R, G or B. This is deliberately not a
// colour histogram (Speed Index's "visual progress"): a histogram is blind to content that moves or changes
// without changing the colour mix, e.g. one line of text replaced by another of the same length.
import { PNG } from 'pngjs';

export interface RawImage {
  width: number;
  height: number;
  /** RGBA, 4 bytes a pixel, row by row */
  data: Uint8Array;
}

export interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
}

export function decodePng(png: Buffer): RawImage {
  const img = PNG.sync.read(png);
  return { width: img.width, height: img.height, data: img.data };
}

export interface PixelDiff {
  /** pixels (outside the masks) whose R, G or B differ */
  changed: number;
  /** bounding box of the changed pixels; null when none changed */
  box: Rect | null;
  /** the two frames differ in size (every pixel counts as changed) */
  resized: boolean;
}

function masked(masks: readonly Rect[], x: number, y: number): boolean {
  for (const m of masks) if (x >= m.x && x < m.x + m.width && y >= m.y && y < m.y + m.height) return true;
  return false;
}

/**
 * Compares two frames pixel by pixel (alpha ignored: the screencast is opaque). With `clip`, only the
 * pixels inside that rectangle count (e.g. the page area of our browser's app page, whose HUD changes
 * all the time); it is clamped to the image.
 */
export function diffPixels(a: RawImage, b: RawImage, masks: readonly Rect[] = [], clip?: Rect): PixelDiff {
  if (a.width !== b.width || a.height !== b.height) {
    const r = clip ? clampRect(clip, b.width, b.height) : { x: 0, y: 0, width: b.width, height: b.height };
    return { changed: r.width * r.height, box: r, resized: true };
  }
  const { width, height } = a;
  const da = a.data;
  const db = b.data;
  const c = clip ? clampRect(clip, width, height) : { x: 0, y: 0, width, height };
  let changed = 0;
  let x0 = width;
  let y0 = height;
  let x1 = -1;
  let y1 = -1;
  const useMasks = masks.length > 0;
  for (let y = c.y; y < c.y + c.height; y++) {
    let i = (y * width + c.x) * 4;
    for (let x = c.x; x < c.x + c.width; x++, i += 4) {
      if (da[i] === db[i] && da[i + 1] === db[i + 1] && da[i + 2] === db[i + 2]) continue;
      if (useMasks && masked(masks, x, y)) continue;
      changed++;
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (y < y0) y0 = y;
      if (y > y1) y1 = y;
    }
  }
  return { changed, box: changed ? { x: x0, y: y0, width: x1 - x0 + 1, height: y1 - y0 + 1 } : null, resized: false };
}

/** `r` with whole-pixel edges, inside a width × height image. */
export function clampRect(r: Rect, width: number, height: number): Rect {
  const x = Math.max(0, Math.min(width, Math.floor(r.x)));
  const y = Math.max(0, Math.min(height, Math.floor(r.y)));
  const x1 = Math.max(x, Math.min(width, Math.ceil(r.x + r.width)));
  const y1 = Math.max(y, Math.min(height, Math.ceil(r.y + r.height)));
  return { x, y, width: x1 - x, height: y1 - y };
}

/** A captured frame: when the compositor produced it (CLOCK_MONOTONIC ns) and its PNG bytes. */
export interface CapturedFrame {
  tNs: bigint;
  png: Buffer;
}

export interface FrameChange {
  /** index of the frame in the capture */
  index: number;
  tNs: bigint;
  /** time of the previous captured frame: the change happened in (prevNs, tNs] */
  prevNs: bigint;
  changed: number;
  box: Rect | null;
}

/**
 * The frames that differ from their predecessor. Identical PNG bytes mean identical pixels (the encoder is
 * deterministic), so only frames whose bytes differ are decoded and compared; the previous decoded image is
 * kept. `from` is the index of the reference frame (what was on screen before the load). With `clip`, only
 * pixels inside it are compared (see diffPixels).
 */
export function frameChanges(frames: readonly CapturedFrame[], masks: readonly Rect[] = [], from = 0, clip?: Rect): FrameChange[] {
  const out: FrameChange[] = [];
  if (frames.length <= from) return out;
  let prevPng = frames[from]!.png;
  let prevImg: RawImage | null = null;
  for (let i = from + 1; i < frames.length; i++) {
    const f = frames[i]!;
    if (f.png.equals(prevPng)) continue;
    prevImg ??= decodePng(prevPng);
    const img = decodePng(f.png);
    const d = diffPixels(prevImg, img, masks, clip);
    if (d.changed > 0) out.push({ index: i, tNs: f.tNs, prevNs: frames[i - 1]!.tNs, changed: d.changed, box: d.box });
    prevPng = f.png;
    prevImg = img;
  }
  return out;
}
