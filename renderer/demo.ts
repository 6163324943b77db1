// The demo page (`catp demo`): the controls, three panes — each the browser's own renderer (app.html in pane
// mode) talking to its own host behind its own copy of the emulated link — and, after a load, the three silent
// times side by side and a filmstrip per pane, cut from a screencast of this window (lab/demo/window.ts).
import type { DEFAULT_SETTINGS as DefaultSettings, DemoCommand, DemoEvent, DemoRun, DemoSettings, DemoTransport, PageChoice, PaneResult } from '../protocol/demo/api';
import { RendererError } from './errors';

// The renderer imports protocol/ as types only: the defaults are repeated here, and the type says they match.
const DEFAULT_SETTINGS: typeof DefaultSettings = { page: '', loss: 0.15, delayMs: 40, rate: 50_000, burst: 1 };

const $ = <T extends Element>(sel: string): T => {
  const e = document.querySelector<T>(sel);
  if (!e) throw new RendererError('RENDERER_ERR_MISSING_ELEMENT', `missing ${sel}`);
  return e;
};

const ui = {
  form: $<HTMLFormElement>('#settings'),
  page: $<HTMLInputElement>('#page'),
  pages: $<HTMLDataListElement>('#pages'),
  loss: $<HTMLInputElement>('#loss'),
  lossOut: $<HTMLOutputElement>('#loss-out'),
  delay: $<HTMLInputElement>('#delay'),
  rate: $<HTMLSelectElement>('#rate'),
  burst: $<HTMLInputElement>('#burst'),
  seed: $<HTMLInputElement>('#seed'),
  load: $<HTMLButtonElement>('#load'),
  replay: $<HTMLButtonElement>('#replay'),
  newSeed: $<HTMLButtonElement>('#new-seed'),
  status: $<HTMLElement>('#status'),
  panes: $<HTMLElement>('#panes'),
  results: $<HTMLElement>('#results'),
  bars: $<HTMLElement>('#bars'),
  strips: $<HTMLElement>('#strips'),
  stripNote: $<HTMLElement>('#strip-note'),
};

const TITLES: Record<DemoTransport, [string, string]> = {
  catp: ['CATP', 'out of order: each frame paints the part of the page it carries'],
  inorder: ['in-order UDP', 'the same datagrams, shown in order: a loss holds back what follows'],
  tcp: ['TCP', 'HTTP/1.1 over kernel TCP: a loss stalls the stream until it is resent'],
};

interface Pane {
  transport: DemoTransport;
  box: HTMLElement;
  frame: HTMLIFrameElement;
  badge: HTMLElement;
  /** the pane's page area inside its frame (CSS px), as the pane's renderer reported it */
  area: { x: number; y: number; width: number; height: number } | null;
  /** the page area in this window when the load started */
  clip: { x: number; y: number; width: number; height: number } | null;
}

const panes = new Map<DemoTransport, Pane>();
let lastRun: DemoRun | null = null;
let busy = false;

// ---- the connection ------------------------------------------------------------------------------------

const params = new URLSearchParams(location.hash.slice(1));
const secret = params.get('secret') ?? sessionStorage.getItem('catp-demo-secret') ?? '';
sessionStorage.setItem('catp-demo-secret', secret);
history.replaceState(null, '', location.pathname);
const ws = new WebSocket(`ws://${location.host}/__demo/ws`, ['catp-demo.v1', `catp-secret.${secret}`]);
ws.onmessage = (m) => {
  let ev: DemoEvent;
  try {
    ev = JSON.parse(String(m.data)) as DemoEvent;
  } catch {
    return;
  }
  on(ev);
};
ws.onclose = () => status('the demo stopped (its process exited): close this window', true);

function send(c: DemoCommand): void {
  if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(c));
}

function status(text: string, error = false): void {
  ui.status.textContent = text;
  ui.status.classList.toggle('error', error);
}

function setBusy(b: boolean): void {
  busy = b;
  for (const el of [ui.load, ui.replay, ui.newSeed]) el.disabled = b;
  ui.replay.disabled = b || lastRun === null;
}

// ---- controls ------------------------------------------------------------------------------------------

function fill(s: DemoSettings): void {
  ui.page.value = s.page;
  ui.loss.value = String(Math.round(s.loss * 100));
  ui.lossOut.textContent = `${ui.loss.value}%`;
  ui.delay.value = String(s.delayMs);
  if (![...ui.rate.options].some((o) => o.value === String(s.rate))) ui.rate.add(new Option(`${s.rate.toLocaleString('en-US')} B/s`, String(s.rate)));
  ui.rate.value = String(s.rate);
  ui.burst.value = String(s.burst);
  ui.seed.value = String(s.seed);
}

function read(): DemoSettings {
  const n = (el: HTMLInputElement | HTMLSelectElement, d: number) => (el.value.trim() === '' || !Number.isFinite(Number(el.value)) ? d : Number(el.value));
  return {
    page: ui.page.value.trim(),
    loss: n(ui.loss, DEFAULT_SETTINGS.loss * 100) / 100,
    delayMs: n(ui.delay, DEFAULT_SETTINGS.delayMs),
    rate: Math.round(n(ui.rate, DEFAULT_SETTINGS.rate)),
    burst: n(ui.burst, DEFAULT_SETTINGS.burst),
    seed: Math.round(n(ui.seed, 1)),
  };
}

function start(s: DemoSettings): void {
  if (busy) return;
  setBusy(true);
  status('starting…');
  send({ type: 'run', settings: s });
}

ui.loss.addEventListener('input', () => (ui.lossOut.textContent = `${ui.loss.value}%`));
ui.form.addEventListener('submit', (e) => {
  e.preventDefault();
  start(read());
});
ui.replay.addEventListener('click', () => {
  if (!lastRun) return;
  fill(lastRun.settings);
  start(lastRun.settings);
});
ui.newSeed.addEventListener('click', () => {
  ui.seed.value = String(Math.floor(Math.random() * 2 ** 31));
  start(read());
});

function fillPages(pages: PageChoice[]): void {
  ui.pages.replaceChildren(...pages.map((p) => {
    const o = document.createElement('option');
    o.value = p.value;
    o.label = `${p.group}: ${p.label} (${(p.bytes / 1000).toFixed(1)} kB)`;
    return o;
  }));
}

// ---- panes ---------------------------------------------------------------------------------------------

function pane(t: DemoTransport): Pane {
  let p = panes.get(t);
  if (p) return p;
  const box = document.createElement('section');
  box.className = `pane pane-${t}`;
  box.dataset.transport = t;
  const head = document.createElement('header');
  const h = document.createElement('h2');
  h.textContent = TITLES[t][0];
  const sub = document.createElement('span');
  sub.className = 'sub';
  sub.textContent = TITLES[t][1];
  const badge = document.createElement('output');
  badge.className = 'badge';
  head.append(h, sub, badge);
  const frame = document.createElement('iframe');
  frame.title = `${TITLES[t][0]} pane`;
  box.append(head, frame);
  ui.panes.append(box);
  p = { transport: t, box, frame, badge, area: null, clip: null };
  panes.set(t, p);
  return p;
}

// Each pane's renderer says where its page area is (renderer/main.ts, pane mode): the filmstrip shows that part.
window.addEventListener('message', (e) => {
  const d = e.data as { type?: unknown; rect?: { x: number; y: number; width: number; height: number } };
  if (d?.type !== 'catp-pane-area' || !d.rect) return;
  for (const p of panes.values()) if (p.frame.contentWindow === e.source) p.area = d.rect;
});

function clipOf(p: Pane): Pane['clip'] {
  const r = p.frame.getBoundingClientRect();
  const a = p.area ?? { x: 0, y: 0, width: r.width, height: r.height };
  return { x: r.left + a.x, y: r.top + a.y, width: Math.min(a.width, r.width), height: Math.min(a.height, r.height - a.y) };
}

const sec = (ms: number | null) => (ms === null ? '–' : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`);

function describe(r: PaneResult): string {
  if (r.outcome !== 'complete') return `${r.outcome}${r.error ? `: ${r.error}` : ''}`;
  return `silent ${sec(r.silentTimeMs)} · first paint ${sec(r.firstPaintMs)} · complete ${sec(r.completeMs)}`;
}

// ---- results -------------------------------------------------------------------------------------------

function showRun(r: DemoRun): void {
  lastRun = r;
  ui.results.hidden = false;
  const max = Math.max(1, ...r.panes.map((p) => p.silentTimeMs ?? 0));
  const best = Math.min(...r.panes.map((p) => p.silentTimeMs ?? Infinity));
  const catp = r.panes.find((p) => p.transport === 'catp')?.silentTimeMs ?? null;
  ui.bars.replaceChildren(...r.panes.map((p) => {
    const row = document.createElement('div');
    row.className = `bar-row pane-${p.transport}`;
    row.dataset.transport = p.transport;
    row.dataset.silentMs = String(p.silentTimeMs ?? '');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = TITLES[p.transport][0];
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${(((p.silentTimeMs ?? 0) / max) * 100).toFixed(1)}%`;
    if (p.silentTimeMs === best) bar.classList.add('best');
    const v = document.createElement('span');
    v.className = 'value';
    const ratio = catp && p.transport !== 'catp' && p.silentTimeMs ? ` (${(p.silentTimeMs / catp).toFixed(1)}× CATP's)` : '';
    v.textContent = p.outcome === 'complete' ? `${sec(p.silentTimeMs)}${ratio}` : p.outcome;
    const lost = document.createElement('span');
    lost.className = 'lost';
    lost.textContent = `lost on the link: ${p.lost.s2c.length} of ${p.packets.s2c} packets to the browser, ${p.lost.c2s.length} of ${p.packets.c2s} to the server`;
    lost.title = `packet indices lost to the browser: ${p.lost.s2c.join(', ') || 'none'}\nto the server: ${p.lost.c2s.join(', ') || 'none'}`;
    row.append(name, bar, v, lost);
    return row;
  }));
  const s = r.settings;
  status(`done: ${r.page.name} (${(r.page.bytes / 1000).toFixed(1)} kB), ${(s.loss * 100).toFixed(0)}% loss${s.burst > 1 ? ` in bursts of ${s.burst}` : ''}, ` +
    `${s.delayMs} ms each way, ${s.rate.toLocaleString('en-US')} B/s, seed ${s.seed}${r.rootless ? ' (rootless)' : ''}. Replay repeats the same losses.`);
  document.body.dataset.run = String(r.runId);
}

function drawStrips(ev: Extract<DemoEvent, { type: 'filmstrip' }>): void {
  const r = lastRun;
  if (!r || r.runId !== ev.runId) return;
  ui.stripNote.textContent = `a thumbnail every ${ev.intervalMs} ms from the request; outlined: something changed; red underline: the pane's longest silent gap`;
  const images = ev.frames.map((f) => {
    const img = new Image();
    img.src = f.dataUrl;
    return img;
  });
  const loaded = Promise.all(images.map((img) => img.decode().catch(() => undefined)));
  void loaded.then(() => {
    const rows: HTMLElement[] = [];
    for (const res of r.panes) {
      const p = panes.get(res.transport);
      if (!p?.clip) continue;
      const clip = p.clip;
      const row = document.createElement('div');
      row.className = `strip pane-${res.transport}`;
      row.dataset.transport = res.transport;
      const name = document.createElement('span');
      name.className = 'name';
      name.textContent = TITLES[res.transport][0];
      row.append(name);
      const cells = document.createElement('div');
      cells.className = 'cells';
      let prev: Uint8ClampedArray | null = null;
      const gap = res.silentGap;
      ev.ticks.forEach((fi, k) => {
        const t = k * ev.intervalMs;
        const cell = document.createElement('figure');
        const canvas = document.createElement('canvas');
        const w = 120;
        const h = Math.max(1, Math.round((clip.height / Math.max(1, clip.width)) * w));
        canvas.width = w;
        canvas.height = h;
        const g = canvas.getContext('2d', { willReadFrequently: true });
        if (g && fi >= 0) {
          const f = ev.frames[fi]!;
          const img = images[fi]!;
          const scale = img.naturalWidth / f.width;
          g.drawImage(img, clip.x * scale, clip.y * scale, clip.width * scale, clip.height * scale, 0, 0, w, h);
          const px = g.getImageData(0, 0, w, h).data;
          if (prev !== null && !same(prev, px)) cell.classList.add('changed');
          prev = px;
        } else if (g) {
          g.fillStyle = '#fff';
          g.fillRect(0, 0, w, h);
        }
        const at = r.startedAtEpochMs + t;
        if (gap && at >= gap.from && at <= gap.to) cell.classList.add('silent');
        const cap = document.createElement('figcaption');
        cap.textContent = `${(t / 1000).toFixed(1)} s`;
        cell.append(canvas, cap);
        cells.append(cell);
      });
      row.append(cells);
      rows.push(row);
    }
    ui.strips.replaceChildren(...rows);
    document.body.dataset.filmstrip = String(ev.runId);
  });
}

function same(a: Uint8ClampedArray, b: Uint8ClampedArray): boolean {
  if (a.length !== b.length) return false;
  // JPEG noise: a pixel counts as changed when a channel moved by more than a few levels
  for (let i = 0; i < a.length; i++) if (Math.abs(a[i]! - b[i]!) > 24) return false;
  return true;
}

// ---- events --------------------------------------------------------------------------------------------

function on(ev: DemoEvent): void {
  switch (ev.type) {
    case 'init':
      fill(ev.settings);
      fillPages(ev.pages);
      for (const t of ev.transports) pane(t);
      status('ready');
      return;
    case 'progress':
      setBusy(true);
      status(`run ${ev.runId}: ${ev.message}…`);
      return;
    case 'panes':
      for (const v of ev.panes) {
        const p = pane(v.transport);
        p.area = null;
        p.badge.textContent = 'connecting…';
        p.frame.src = v.appUrl;
      }
      return;
    case 'started':
      for (const p of panes.values()) {
        p.clip = clipOf(p);
        p.badge.textContent = 'loading…';
      }
      return;
    case 'pane-done': {
      const p = panes.get(ev.pane.transport);
      if (p) {
        p.badge.textContent = describe(ev.pane);
        p.box.dataset.silentMs = String(ev.pane.silentTimeMs ?? '');
      }
      return;
    }
    case 'run':
      showRun(ev.run);
      setBusy(false); // after showRun: Replay needs the run it repeats
      return;
    case 'filmstrip':
      drawStrips(ev);
      return;
    case 'error':
      setBusy(false);
      status(`${ev.message} [${ev.code}]`, true);
      return;
    default:
      return;
  }
}
