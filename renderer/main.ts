// The browser's page: address bar, navigation buttons, the page frame, the HUD and the timeline. The page is shown
// on the frame origin — another origin than this page's, so a page never reaches this page, its secret or its API:
// in the agent frame (frame-agent.ts, our one script there) sits the page frame, sandboxed without scripts, whose
// document the host serves with `script-src 'none'`. The agent builds what this page hands it over a MessagePort —
// CATP's DOM operations the moment they arrive, in-order markup through the page frame's own parser — and stamps
// every visible update when the frame has painted it (meter.ts).
import type { BrowserEvent, DumpNode, LoadRecord, LoadSavings, Transport, VisibleUpdate, WireFrame } from '../protocol/browser/api';
import { connectApi } from './api-client';
import type { DocumentMode } from '../protocol/catp/index-piece';
import { PORT_MESSAGE, type FrameStats, type FromFrame, type ToFrame } from './frame-protocol';
import { buildRecord, epochNow, longestGap, networkFloor, PaintClock, round } from './meter';
import { drawTimeline, watchTimeline } from './timeline';
import { RendererError } from './errors';

const $ = <T extends Element>(sel: string): T => {
  const e = document.querySelector<T>(sel);
  if (!e) throw new RendererError('RENDERER_ERR_MISSING_ELEMENT', `missing ${sel}`);
  return e;
};

const ui = {
  back: $<HTMLButtonElement>('#back'),
  forward: $<HTMLButtonElement>('#forward'),
  reload: $<HTMLButtonElement>('#reload'),
  stop: $<HTMLButtonElement>('#stop'),
  form: $<HTMLFormElement>('#nav'),
  url: $<HTMLInputElement>('#url'),
  transport: $<HTMLSelectElement>('#transport'),
  save: $<HTMLButtonElement>('#save'),
  compare: $<HTMLButtonElement>('#compare'),
  frame: $<HTMLIFrameElement>('#page'),
  errorBox: $<HTMLElement>('#error'),
  errorTitle: $<HTMLElement>('#error-title'),
  errorText: $<HTMLElement>('#error-text'),
  timeline: $<SVGSVGElement>('#timeline'),
  status: $<HTMLElement>('#status'),
  hud: {
    transport: $<HTMLElement>('#hud-transport'),
    frames: $<HTMLElement>('#hud-frames'),
    missing: $<HTMLElement>('#hud-missing'),
    repaired: $<HTMLElement>('#hud-repaired'),
    elapsed: $<HTMLElement>('#hud-elapsed'),
    gap: $<HTMLElement>('#hud-gap'),
    silent: $<HTMLElement>('#hud-silent'),
    floor: $<HTMLElement>('#hud-floor'),
    reuse: $<HTMLElement>('#hud-reuse'),
    saved: $<HTMLElement>('#hud-saved'),
    state: $<HTMLElement>('#hud-state'),
  },
};

interface LoadState {
  loadId: number;
  url: string;
  transport: Transport;
  requestAtEpochMs: number;
  viewUrl: string;
  /** Visible updates: the frame's (stamped by its agent) and this page's own (an error page), in time order. */
  updates: VisibleUpdate[];
  /** Stamps this page's own visible updates (the error page). */
  clock: PaintClock;
  arrivals: WireFrame[];
  /** CATP: the blocks each dom event filled (shown once the agent has applied it). */
  domFilled: number[][];
  /** Blocks painted (in order), and the page's block count once the host knows it (else 0). */
  filledBlocks: number[];
  blockCount: number;
  /** When each dom event's content was painted (epoch ms), in event order. */
  domPainted: number[];
  /** The same events: sent by the host, received here, applied (epoch ms). */
  domSent: number[];
  domReceived: number[];
  domApplied: number[];
  /** The frame's agent has applied and painted everything of this load (after 'finish'). */
  frameSettled: (() => void) | null;
  finished: boolean;
  hostCompleteAtEpochMs: number | null;
  record: LoadRecord | null;
  /** What the host's payload store saved (CATP blocks reused, DTD hits); null: nothing reported. */
  savings: LoadSavings | null;
}

// Pane mode (`catp demo`, #pane=<transport> beside the secret): one of three panes in the demo window. No
// toolbar (the demo's controls drive every pane) and no store figures (a demo load runs without a store); the
// page area's box goes to the demo page, which cuts the filmstrip's thumbnails from it.
const paneMode = new URLSearchParams(location.hash.slice(1)).get('pane') ?? sessionStorage.getItem('catp-pane');
if (paneMode !== null) {
  sessionStorage.setItem('catp-pane', paneMode);
  document.body.classList.add('pane');
  const reportArea = () => {
    const r = document.querySelector('main')?.getBoundingClientRect();
    if (r && window.parent !== window) window.parent.postMessage({ type: 'catp-pane-area', rect: { x: r.left, y: r.top, width: r.width, height: r.height } }, '*');
  };
  window.addEventListener('resize', reportArea);
  requestAnimationFrame(reportArea);
}

// The frame origin (the shell's second port, in the fragment beside the secret; the same origin behind a Unix socket).
const framePortParam = new URLSearchParams(location.hash.slice(1)).get('frame') ?? sessionStorage.getItem('catp-frame');
if (framePortParam !== null) sessionStorage.setItem('catp-frame', framePortParam);
const frameOrigin = framePortParam !== null && /^\d{1,5}$/.test(framePortParam) ? `${location.protocol}//${location.hostname}:${framePortParam}` : location.origin;
ui.frame.src = `${frameOrigin}/__catp/agent.html`;

const { api, kind } = connectApi();
let shell: string = kind;
let cur: LoadState | null = null;
let lastRecord: LoadRecord | null = null;

// ---- the page frame's agent --------------------------------------------------------------------------

let framePort: MessagePort | null = null;
let frameStats: FrameStats | null = null;
/** Batches the agent's warm-up built before it ended (null: it has not ended, or there was none). */
let warmedUp: number | null = null;
const outbox: ToFrame[] = [];
let dumpId = 0;
const dumpWaiters = new Map<number, (tree: DumpNode | null) => void>();

function toFrame(m: ToFrame): void {
  if (framePort) framePort.postMessage(m);
  else outbox.push(m);
}

// The agent says hello when its document starts; it gets a port of its own (a new document: a new agent).
window.addEventListener('message', (e: MessageEvent) => {
  const data = e.data as { type?: unknown } | null;
  if (e.source === null || e.source !== ui.frame.contentWindow || e.origin !== frameOrigin || data?.type !== PORT_MESSAGE) return;
  const ch = new MessageChannel();
  const port = ch.port1;
  port.onmessage = (m: MessageEvent) => fromFrame(port, m.data as FromFrame);
  (e.source as Window).postMessage({ type: PORT_MESSAGE }, frameOrigin, [ch.port2]);
});

/** What the frame says. Untrusted: a page that ran a script there could say anything on this port. */
function fromFrame(port: MessagePort, m: FromFrame): void {
  if (typeof m !== 'object' || m === null) return;
  if (m.t === 'hello') {
    framePort?.close();
    framePort = port;
    for (const q of outbox.splice(0)) port.postMessage(q);
    frameReadyNow();
    return;
  }
  if (port !== framePort) return;
  if (m.t === 'click') {
    if (typeof m.href === 'string') followLink(m.href);
    return;
  }
  if (m.t === 'warmed-up') {
    if (Number.isSafeInteger(m.batches)) warmedUp = m.batches;
    return;
  }
  if (m.t === 'dump') {
    dumpWaiters.get(m.id)?.(m.tree ?? null);
    dumpWaiters.delete(m.id);
    return;
  }
  const load = cur;
  if (!load || m.loadId !== load.loadId || typeof m.loadId !== 'number') return;
  switch (m.t) {
    case 'update':
      if (load.record === null && Number.isFinite(m.update?.atEpochMs)) {
        load.updates.push({ atEpochMs: m.update.atEpochMs, what: String(m.update.what).slice(0, 40), count: Number(m.update.count) || 0 });
      }
      return;
    case 'dom-applied':
      if (m.k >= 0 && m.k < load.domApplied.length && Number.isNaN(load.domApplied[m.k])) {
        load.domApplied[m.k] = m.atEpochMs;
        load.filledBlocks.push(...(load.domFilled[m.k] ?? []));
      }
      return;
    case 'dom-painted':
      if (m.k >= 0 && m.k < load.domPainted.length) load.domPainted[m.k] = m.atEpochMs;
      return;
    case 'stats':
      frameStats = m.stats;
      return;
    case 'settled':
      load.frameSettled?.();
      return;
    default:
      return;
  }
}

/** The frame's tree, from its agent (null when it does not answer within 10 s). */
function dumpFrame(mode: DocumentMode | null): Promise<DumpNode | null> {
  const id = ++dumpId;
  return new Promise((ok) => {
    const t = setTimeout(() => {
      dumpWaiters.delete(id);
      ok(null);
    }, 10_000);
    dumpWaiters.set(id, (tree) => {
      clearTimeout(t);
      ok(tree);
    });
    toFrame({ t: 'dump', id, mode });
  });
}

// ---- links inside the page navigate through the host ---------------------------------------------------

/** The page URL a link in the frame points to (the frame's URLs are /view/<origin>/<path> on the host). */
function pageUrlOf(href: string, base: string): string | null {
  if (/^\s*javascript:/i.test(href)) return null;
  let abs: URL;
  try {
    abs = new URL(href, base);
  } catch {
    return null;
  }
  if (abs.protocol === 'javascript:') return null;
  if (abs.origin === frameOrigin) {
    const m = /^\/view\/([^/]+)(\/.*)?$/.exec(abs.pathname);
    if (m) return decodeURIComponent(m[1]!) + (m[2] ?? '/') + abs.search + abs.hash;
    const origin = cur ? originOf(cur.url) : null;
    return origin ? origin + abs.pathname + abs.search + abs.hash : null;
  }
  return abs.href;
}

/** A link the user followed in the page (the agent's absolute URL of it). */
function followLink(href: string): void {
  const to = pageUrlOf(href, location.href);
  if (to === null) return;
  const here = cur?.url.replace(/#.*$/, '');
  const hash = /#(.*)$/.exec(to);
  if (hash && to.replace(/#.*$/, '') === here) {
    toFrame({ t: 'scroll-to', id: decodeURIComponent(hash[1]!) });
    return;
  }
  api.send({ type: 'navigate', url: to.replace(/#.*$/, ''), transport: ui.transport.value as Transport });
}

function originOf(url: string): string | null {
  const m = /^([a-z][a-z0-9+.-]*:\/\/[^/?#]*)/i.exec(url);
  return m ? m[1]! : null;
}

// ---- loads ---------------------------------------------------------------------------------------------

function startLoad(ev: Extract<BrowserEvent, { type: 'load-started' }>): void {
  if (cur && !cur.finished) finish(cur, 'stopped');
  const load: LoadState = {
    loadId: ev.loadId,
    url: ev.url,
    transport: ev.transport,
    requestAtEpochMs: ev.requestAtEpochMs,
    viewUrl: ev.viewUrl,
    updates: [],
    clock: new PaintClock((u) => load.updates.push(u)),
    arrivals: [],
    domFilled: [],
    filledBlocks: [],
    blockCount: 0,
    domPainted: [],
    domSent: [],
    domReceived: [],
    domApplied: [],
    frameSettled: null,
    finished: false,
    hostCompleteAtEpochMs: null,
    record: null,
    savings: null,
  };
  cur = load;
  ui.url.value = ev.url;
  if (ev.transport === 'catp' || ev.transport === 'inorder') ui.transport.value = ev.transport;
  ui.back.disabled = !ev.history.canBack;
  ui.forward.disabled = !ev.history.canForward;
  ui.stop.disabled = false;
  ui.errorBox.hidden = true;
  ui.frame.hidden = false;
  ui.status.textContent = `loading ${ev.url}`;
  document.title = `${ev.url} — catp-browser`;
  frameStats = null;
  // the frame keeps its view document: the agent empties it and gives it the page's URL (no navigation)
  toFrame({ t: 'reset', loadId: ev.loadId, viewUrl: ev.viewUrl });
  render();
}

function apply(load: LoadState, ev: BrowserEvent): void {
  if (load.finished) return;
  switch (ev.type) {
    case 'dom': {
      if (ev.blockCount >= 0) load.blockCount = ev.blockCount;
      const { pieces, blocks, filled } = ev;
      const k = load.domPainted.length;
      load.domPainted.push(NaN);
      load.domSent.push(typeof ev.atEpochMs === 'number' ? ev.atEpochMs : NaN);
      load.domReceived.push(epochNow());
      load.domApplied.push(NaN);
      load.domFilled.push(filled);
      // the visible update is stamped by the frame's paint after the slice that finished these operations
      toFrame({ t: 'ops', loadId: load.loadId, k, ops: ev.ops, what: blocks > 0 ? 'blocks' : 'index', count: blocks > 0 ? blocks : pieces });
      return;
    }
    case 'text':
      toFrame({ t: 'text', loadId: load.loadId, text: ev.text });
      return;
    case 'whole':
      toFrame({ t: 'whole', loadId: load.loadId, html: ev.html, text: ev.text, contentType: ev.contentType });
      return;
    default:
      return;
  }
}

/** Resolves when the frame's agent has applied and painted all of the load (or after `ms`: a frame that died). */
function frameSettled(load: LoadState, complete: boolean, ms: number): Promise<void> {
  return new Promise((ok) => {
    const t = setTimeout(() => {
      load.frameSettled = null;
      ok();
    }, ms);
    load.frameSettled = () => {
      clearTimeout(t);
      load.frameSettled = null;
      ok();
    };
    toFrame({ t: 'finish', loadId: load.loadId, complete });
  });
}

function showError(load: LoadState, code: string, message: string, url: string): void {
  ui.frame.hidden = true;
  ui.errorBox.hidden = false;
  ui.errorTitle.textContent = 'This page could not be loaded';
  ui.errorText.textContent = `${url || load.url}\n${message.replace(`${code}: `, '')}\n[${code}]`;
  load.clock.dirty('error');
}

async function finish(load: LoadState, outcome: LoadRecord['outcome'], error?: string): Promise<void> {
  if (load.finished) return;
  load.finished = true;
  // what is still queued goes in now: the load is over
  const settled = frameSettled(load, outcome === 'complete', 10_000);
  if (outcome !== 'stopped') await Promise.all([settled, load.clock.settled()]);
  load.updates.sort((a, b) => a.atEpochMs - b.atEpochMs);
  const record = buildRecord({
    version: 1,
    url: load.url,
    transport: load.transport,
    loadId: load.loadId,
    requestAtEpochMs: load.requestAtEpochMs,
    updates: load.updates.slice(),
    arrivals: load.arrivals.slice(),
    hostCompleteMs: load.hostCompleteAtEpochMs === null ? null : round(load.hostCompleteAtEpochMs - load.requestAtEpochMs),
    outcome,
    ...(error !== undefined ? { error } : {}),
    ...(load.savings ? { savings: { ...load.savings } } : {}),
    ...(load.domPainted.length > 0
      ? {
          domPaintedAtEpochMs: load.domPainted.map((t) => round(t)),
          domSentAtEpochMs: load.domSent.map((t) => round(t)),
          domReceivedAtEpochMs: load.domReceived.map((t) => round(t)),
          domAppliedAtEpochMs: load.domApplied.map((t) => round(t)),
        }
      : {}),
  });
  load.record = record;
  lastRecord = record;
  if (cur === load) {
    ui.stop.disabled = true;
    ui.status.textContent = outcome === 'complete'
      ? `done: silent time ${record.silentTimeMs.toFixed(1)} ms, network floor ${record.networkFloorMs.toFixed(1)} ms`
      : outcome === 'error' ? `failed: ${error ?? ''}` : 'stopped';
  }
  api.send({ type: 'load-record', record });
  render();
}

api.onEvent((ev) => {
  switch (ev.type) {
    case 'hello':
      shell = ev.shell;
      ui.transport.value = ev.defaultTransport;
      ui.compare.hidden = ev.canCompare !== true;
      return;
    case 'compare-opened':
      ui.status.textContent = ev.message;
      return;
    case 'warm-up':
      if (cur === null) toFrame({ t: 'warm-up', batches: ev.batches });
      return;
    case 'load-started':
      startLoad(ev);
      return;
    case 'dump-request': {
      if (!cur) {
        api.send({ type: 'dump-tree', requestId: ev.requestId, tree: null });
        return;
      }
      const requestId = ev.requestId;
      void dumpFrame(null).then((tree) => api.send({ type: 'dump-tree', requestId, tree }));
      return;
    }
    case 'record-saved':
      ui.status.textContent = `record saved: ${ev.path}`;
      return;
    default:
      break;
  }
  if (ev.type === 'error' && ev.loadId === -1) {
    ui.status.textContent = ev.message;
    return;
  }
  const load = cur;
  if (!load || !('loadId' in ev) || ev.loadId !== load.loadId) return;
  switch (ev.type) {
    case 'frame':
      load.arrivals.push(ev.frame);
      return;
    case 'savings':
      load.savings = ev.savings;
      if (load.record) load.record.savings = { ...ev.savings };
      render();
      return;
    case 'complete':
      // (what the frame has not taken yet waits in the outbox, in order, ahead of the 'finish')
      load.hostCompleteAtEpochMs = ev.atEpochMs;
      void finish(load, 'complete');
      return;
    case 'error':
      showError(load, ev.code, ev.message, ev.url);
      void finish(load, 'error', ev.message.includes(ev.code) ? ev.message : `${ev.code}: ${ev.message}`);
      return;
    case 'stopped':
      void finish(load, 'stopped');
      return;
    default:
      apply(load, ev);
  }
});

// ---- HUD and timeline ----------------------------------------------------------------------------------

function render(): void {
  const load = cur;
  const h = ui.hud;
  if (!load) return;
  const now = load.finished ? lastTime(load) : epochNow();
  const last = load.arrivals[load.arrivals.length - 1];
  h.transport.textContent = `${load.transport} (${shell})`;
  h.frames.textContent = String(load.arrivals.length);
  h.missing.textContent = String(last?.missing ?? 0);
  h.repaired.textContent = String(last?.repaired ?? 0);
  h.elapsed.textContent = `${(now - load.requestAtEpochMs).toFixed(0)} ms`;
  const updates = load.updates;
  const lastUpdate = updates.length ? updates[updates.length - 1]!.atEpochMs : load.requestAtEpochMs;
  let silent;
  if (load.record) {
    silent = { ms: load.record.silentTimeMs, from: load.record.silentGap.from, to: load.record.silentGap.to };
    h.gap.textContent = '—';
    h.silent.textContent = `${load.record.silentTimeMs.toFixed(1)} ms`;
    h.floor.textContent = `${load.record.networkFloorMs.toFixed(1)} ms`;
    h.state.textContent = load.record.outcome;
  } else {
    const sofar = longestGap(load.requestAtEpochMs, updates.map((u) => u.atEpochMs));
    const gapNow = now - lastUpdate;
    silent = gapNow > sofar.ms ? { ms: gapNow, from: lastUpdate, to: now } : sofar;
    h.gap.textContent = `${gapNow.toFixed(0)} ms`;
    h.silent.textContent = `≥ ${silent.ms.toFixed(0)} ms`;
    h.floor.textContent = `${networkFloor(load.requestAtEpochMs, load.arrivals).ms.toFixed(0)} ms`;
    h.state.textContent = 'loading';
  }
  renderSavings(load);
  drawTimeline(ui.timeline, {
    requestAtEpochMs: load.requestAtEpochMs,
    nowEpochMs: Math.max(now, lastTime(load)),
    arrivals: load.arrivals,
    updates,
    silent,
    floor: networkFloor(load.requestAtEpochMs, load.arrivals),
  });
}

/** The HUD's store figures: blocks filled from the store (of the page's), DTD hits, bytes and time saved. */
function renderSavings(load: LoadState): void {
  const s = load.savings;
  const h = ui.hud;
  if (!s) {
    h.reuse.textContent = '—';
    h.saved.textContent = '—';
    h.saved.title = 'no payload store';
    return;
  }
  const blocks = s.blocks || load.blockCount;
  h.reuse.textContent = `${s.blocksReused}/${blocks} blocks${s.dtdHits > 0 ? ` · ${s.dtdHits} DTD hit${s.dtdHits === 1 ? '' : 's'}` : ''}`;
  h.saved.textContent = s.bytesSaved > 0 ? `${formatBytes(s.bytesSaved)} ≈ ${s.savedMs.toFixed(1)} ms` : '0 B';
  h.saved.title = `estimate: ${s.estimate}`;
}

function formatBytes(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} kB` : `${n} B`;
}

function lastTime(load: LoadState): number {
  let t = load.requestAtEpochMs;
  for (const f of load.arrivals) if (f.atEpochMs > t) t = f.atEpochMs;
  for (const u of load.updates) if (u.atEpochMs > t) t = u.atEpochMs;
  return t;
}

setInterval(() => {
  if (cur && !cur.finished) render();
}, 150);
watchTimeline(ui.timeline, render);

// ---- controls ------------------------------------------------------------------------------------------

ui.form.addEventListener('submit', (e) => {
  e.preventDefault();
  const url = ui.url.value.trim();
  if (url) api.send({ type: 'navigate', url, transport: ui.transport.value as Transport });
});
ui.back.addEventListener('click', () => api.send({ type: 'back' }));
ui.forward.addEventListener('click', () => api.send({ type: 'forward' }));
ui.reload.addEventListener('click', () => api.send({ type: 'reload' }));
ui.stop.addEventListener('click', () => api.send({ type: 'stop' }));
ui.compare.addEventListener('click', () => {
  if (!cur) return;
  ui.status.textContent = `opening ${cur.url} in the side-by-side demo…`;
  api.send({ type: 'compare' });
});

ui.save.addEventListener('click', () => {
  const record = cur?.record ?? lastRecord;
  if (record) api.send({ type: 'save-record', record });
  else ui.status.textContent = 'no finished load to save yet';
});

// What tests and tools read (the app page's own window; the page frame, another origin, cannot reach it).
const probe = {
  warmedUp() {
    return warmedUp;
  },
  state() {
    const load = cur;
    return load
      ? {
          loadId: load.loadId,
          url: load.url,
          transport: load.transport,
          finished: load.record !== null,
          frameReady: framePort !== null,
          filledBlocks: load.filledBlocks.slice(),
          blockCount: load.blockCount,
          missingSlots: frameStats?.placeholders ?? 0,
          fallbacks: frameStats?.fallbacks ?? 0,
          badOps: frameStats?.bad ?? 0,
          longestSliceMs: frameStats?.longestSliceMs ?? 0,
          frameHeight: frameStats?.height ?? null,
          arrivals: load.arrivals.length,
          updates: load.updates.length,
          record: load.record,
          hudSilent: ui.hud.silent.textContent,
          hudReuse: ui.hud.reuse.textContent,
          hudSaved: ui.hud.saved.textContent,
          savings: load.savings,
        }
      : null;
  },
};
(window as unknown as { __catp: typeof probe }).__catp = probe;

// Ready once the page frame's agent has said hello, so that the first load paints into it at once; a frame that
// never answers does not hold the window back for more than two seconds.
let readySent = false;
function frameReadyNow(): void {
  if (readySent) return;
  readySent = true;
  api.send({ type: 'ready' });
}
setTimeout(frameReadyNow, 2000);
