// Blink's own cost of a rendering update on the bench's page, beside CATP's receive-to-paint figures: the finished page
// in stock Chromium (served whole over HTTP/1.1, other requests refused), one text node changed per animation frame at
// places spread over the document, traced; the mean and p90 of the rendering updates (style, layout, pre-paint, paint
// on the main thread) that carried a change. While a page streams in, updates run back to back, and a frame that
// arrives as one starts waits for it and then for its own: about twice this before it can show, for any renderer that
// builds the page in the page's own document on this machine. The receive-to-paint target (p95 ≤ 50 ms) is
// read against it.
import { CHROMIUM_PATH, chromiumFlags } from '../../app/browser/chromium';

/** The fields of a Chrome trace event this reads (the JSON trace format). */
export interface TraceEvent {
  name: string;
  ph: string;
  pid: number;
  tid: number;
  ts: number;
  dur?: number;
  args?: { name?: string };
}

/** The event Blink records around one rendering update of a frame's widget (style, layout, pre-paint, paint). */
export const UPDATE_EVENT = 'WebFrameWidgetImpl::UpdateLifecycle';
/** Updates shorter than this did no work for a change (an animation frame with nothing dirty): not counted. */
const MIN_UPDATE_US = 1000;

/**
 * The rendering updates of a trace that did work, in ms, sorted: `UPDATE_EVENT` complete events of at least
 * MIN_UPDATE_US on the renderer main thread (`CrRendererMain`) that has the most of them (the page's, when one page is
 * traced).
 */
export function renderingUpdatesMs(events: readonly TraceEvent[]): number[] {
  const mainThreads = new Set<string>();
  for (const e of events) if (e.ph === 'M' && e.name === 'thread_name' && e.args?.name === 'CrRendererMain') mainThreads.add(`${e.pid}:${e.tid}`);
  const byThread = new Map<string, number[]>();
  for (const e of events) {
    if (e.ph !== 'X' || e.name !== UPDATE_EVENT || e.dur === undefined || e.dur < MIN_UPDATE_US) continue;
    const k = `${e.pid}:${e.tid}`;
    if (!mainThreads.has(k)) continue;
    let list = byThread.get(k);
    if (list === undefined) byThread.set(k, (list = []));
    list.push(e.dur / 1000);
  }
  let best: number[] = [];
  for (const list of byThread.values()) if (list.length > best.length) best = list;
  return best.sort((a, b) => a - b);
}

export interface BlinkFloor {
  /** Rendering updates that carried a change, and their mean and p90 (ms). */
  updates: number;
  meanMs: number;
  p90Ms: number;
}

/** Traces `changes` one-text-node changes, one an animation frame, on the finished page at `url` in stock Chromium. */
export async function blinkUpdateFloor(url: string, changes = 60): Promise<BlinkFloor> {
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: chromiumFlags() });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.route((u) => u.href !== url, (route) => route.abort());
    await page.goto(url, { waitUntil: 'load' });
    await page.evaluate('new Promise((ok) => setTimeout(ok, 500))'); // the load's own updates settle
    await browser.startTracing(page, { categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'blink'] });
    // (a string: this file is compiled without the DOM library)
    await page.evaluate(`(async () => {
      const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, { acceptNode: (n) => (n.data.trim().length > 20 ? 1 : 3) });
      const texts = [];
      for (let n = walk.nextNode(); n; n = walk.nextNode()) texts.push(n);
      for (let i = 0; i < ${changes} && texts.length > 0; i++) {
        const t = texts[Math.floor(((i + 0.5) * texts.length) / ${changes})];
        await new Promise((ok) => requestAnimationFrame(ok));
        t.data = t.data + ' x';
        await new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 30)));
      }
    })()`);
    const trace = await browser.stopTracing();
    const parsed = JSON.parse(trace.toString('utf8')) as { traceEvents?: TraceEvent[] } | TraceEvent[];
    const d = renderingUpdatesMs(Array.isArray(parsed) ? parsed : parsed.traceEvents ?? []);
    const at = (p: number) => d[Math.min(d.length - 1, Math.floor(p * d.length))] ?? NaN;
    return { updates: d.length, meanMs: d.length > 0 ? d.reduce((s, x) => s + x, 0) / d.length : NaN, p90Ms: at(0.9) };
  } finally {
    await browser.close();
  }
}
