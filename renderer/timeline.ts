// The timeline panel: each frame's arrival against time since the request (SVG), the visible updates under
// it, and the load's longest silent gap marked.
import type { VisibleUpdate, WireFrame } from '../protocol/browser/api';
import type { Gap } from './silent-time';

const SVG = 'http://www.w3.org/2000/svg';

function el(doc: Document, name: string, attrs: Record<string, string | number>): SVGElement {
  const e = doc.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

export interface TimelineData {
  requestAtEpochMs: number;
  nowEpochMs: number;
  arrivals: readonly WireFrame[];
  updates: readonly VisibleUpdate[];
  silent: Gap;
  floor: Gap;
}

/**
 * The timeline's box, as a ResizeObserver last reported it. Reading `clientWidth` while drawing forced a synchronous
 * layout of the app page (its HUD text had just changed) every time the HUD redrew during a load, every 150 ms, on
 * the renderer's main thread, which the page frame shares; the layout now waits for the next frame like any other.
 */
const boxes = new WeakMap<SVGSVGElement, { width: number; height: number }>();

/** Keeps the timeline's box size for drawTimeline; `onResize` runs after each change (and once, at the start). */
export function watchTimeline(svg: SVGSVGElement, onResize: () => void): void {
  if (typeof ResizeObserver !== 'function') return;
  new ResizeObserver((entries) => {
    for (const e of entries) boxes.set(svg, { width: e.contentRect.width, height: e.contentRect.height });
    onResize();
  }).observe(svg);
}

/** Redraws the timeline into `svg` (width × height from its box, as watchTimeline last saw it; never read here). */
export function drawTimeline(svg: SVGSVGElement, d: TimelineData): void {
  const doc = svg.ownerDocument;
  const box = boxes.get(svg);
  const width = Math.max(200, box?.width || 600);
  const height = Math.max(80, box?.height || 120);
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const left = 60;
  const right = width - 10;
  const span = Math.max(50, d.nowEpochMs - d.requestAtEpochMs);
  const x = (t: number) => left + ((t - d.requestAtEpochMs) / span) * (right - left);
  const rowFrames = 14;
  const rowUseless = 34;
  const rowUpdates = 58;
  const axis = height - 16;
  // the longest silent gap
  if (d.silent.ms > 0) {
    svg.appendChild(el(doc, 'rect', { x: x(d.silent.from), y: 4, width: Math.max(1, x(d.silent.to) - x(d.silent.from)), height: axis - 4, class: 'tl-silent' }));
    const label = el(doc, 'text', { x: Math.min(right - 120, x(d.silent.from) + 3), y: axis - 4, class: 'tl-label tl-silent-label' });
    label.textContent = `silent ${d.silent.ms.toFixed(0)} ms`;
    svg.appendChild(label);
  }
  if (d.floor.ms > 0) {
    svg.appendChild(el(doc, 'line', { x1: x(d.floor.from), x2: x(d.floor.to), y1: rowFrames + 10, y2: rowFrames + 10, class: 'tl-floor' }));
  }
  const names: [number, string][] = [[rowFrames, 'useful'], [rowUseless, 'other'], [rowUpdates, 'painted']];
  for (const [y, name] of names) {
    const t = el(doc, 'text', { x: 4, y: y + 4, class: 'tl-label' });
    t.textContent = name;
    svg.appendChild(t);
  }
  // one path per row keeps the SVG small for thousands of frames
  let useful = '';
  let repaired = '';
  let other = '';
  let prevRepaired = 0;
  for (const f of d.arrivals) {
    const fx = x(f.atEpochMs).toFixed(1);
    const isRepair = f.repaired > prevRepaired;
    prevRepaired = f.repaired;
    if (f.useful && isRepair) repaired += `M${fx} ${rowFrames - 6}v12`;
    else if (f.useful) useful += `M${fx} ${rowFrames - 6}v12`;
    else other += `M${fx} ${rowUseless - 6}v12`;
  }
  let painted = '';
  for (const u of d.updates) painted += `M${x(u.atEpochMs).toFixed(1)} ${rowUpdates - 6}v12`;
  if (useful) svg.appendChild(el(doc, 'path', { d: useful, class: 'tl-useful' }));
  if (repaired) svg.appendChild(el(doc, 'path', { d: repaired, class: 'tl-repaired' }));
  if (other) svg.appendChild(el(doc, 'path', { d: other, class: 'tl-other' }));
  if (painted) svg.appendChild(el(doc, 'path', { d: painted, class: 'tl-painted' }));
  svg.appendChild(el(doc, 'line', { x1: left, x2: right, y1: axis, y2: axis, class: 'tl-axis' }));
  const step = niceStep(span);
  for (let t = 0; t <= span; t += step) {
    const tx = left + (t / span) * (right - left);
    svg.appendChild(el(doc, 'line', { x1: tx, x2: tx, y1: axis, y2: axis + 4, class: 'tl-axis' }));
    const label = el(doc, 'text', { x: tx - 8, y: axis + 14, class: 'tl-label' });
    label.textContent = t >= 1000 ? `${(t / 1000).toFixed(t % 1000 ? 1 : 0)}s` : `${t}ms`;
    svg.appendChild(label);
  }
}

function niceStep(span: number): number {
  const raw = span / 6;
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return m * pow;
  return 10 * pow;
}
