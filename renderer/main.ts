// The browser's page: address bar, navigation buttons, the page frame, the HUD and the timeline. The page
// is shown in <iframe sandbox="allow-same-origin"> (no allow-scripts) whose document the host serves with
// `Content-Security-Policy: script-src 'none'`: nothing in a page ever runs. CATP pages are built from the
// skeleton the moment it arrives and filled block by block; in-order pages go through the frame's own parser
// (document.open / write). Every visible update is stamped when painted (meter.ts).
import type { BrowserEvent, LoadRecord, LoadSavings, Transport, WireFrame } from '../protocol/browser/api';
import { connectApi } from './api-client';
import { DomOpApplier } from './dom-ops';
import { dumpDocument } from './dump';
import { buildRecord, epochNow, longestGap, networkFloor, PaintClock, round } from './meter';
import { drawTimeline } from './timeline';
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
  clock: PaintClock;
  arrivals: WireFrame[];
  /** CATP: applies the host's DOM operations to the page frame, in slices. */
  applier: DomOpApplier | null;
  /** Blocks painted (in order), and the page's block count once the host knows it (else 0). */
  filledBlocks: number[];
  blockCount: number;
  /** When each dom event's content was painted (epoch ms), in event order. */
  domPainted: number[];
  /** The same events: sent by the host, received here, applied (epoch ms). */
  domSent: number[];
  domReceived: number[];
  domApplied: number[];
  frameReady: boolean;
  queue: BrowserEvent[];
  written: boolean;
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

const { api, kind } = connectApi();
let shell: string = kind;
let cur: LoadState | null = null;
let lastRecord: LoadRecord | null = null;

function frameDoc(): Document | null {
  try {
    return ui.frame.contentDocument;
  } catch {
    return null;
  }
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
  if (abs.origin === location.origin) {
    const m = /^\/view\/([^/]+)(\/.*)?$/.exec(abs.pathname);
    if (m) return decodeURIComponent(m[1]!) + (m[2] ?? '/') + abs.search + abs.hash;
    const origin = cur ? originOf(cur.url) : null;
    return origin ? origin + abs.pathname + abs.search + abs.hash : null;
  }
  return abs.href;
}

function originOf(url: string): string | null {
  const m = /^([a-z][a-z0-9+.-]*:\/\/[^/?#]*)/i.exec(url);
  return m ? m[1]! : null;
}

function interceptLinks(doc: Document): void {
  const onClick = (e: Event) => {
    const target = e.target as Element | null;
    const a = target && typeof target.closest === 'function' ? target.closest('a[href], area[href]') : null;
    if (!a) return;
    e.preventDefault();
    e.stopPropagation();
    if ((e as MouseEvent).button > 0 && e.type === 'click') return;
    const to = pageUrlOf(a.getAttribute('href') ?? '', doc.baseURI);
    if (to === null) return;
    const here = cur?.url.replace(/#.*$/, '');
    const hash = /#(.*)$/.exec(to);
    if (hash && to.replace(/#.*$/, '') === here) {
      doc.getElementById(decodeURIComponent(hash[1]!))?.scrollIntoView();
      return;
    }
    api.send({ type: 'navigate', url: to.replace(/#.*$/, ''), transport: ui.transport.value as Transport });
  };
  doc.addEventListener('click', onClick, true);
  doc.addEventListener('auxclick', onClick, true);
  doc.addEventListener('submit', (e) => e.preventDefault(), true);
}

// ---- loads ---------------------------------------------------------------------------------------------

ui.frame.addEventListener('load', () => {
  const load = cur;
  if (!load || load.frameReady) return;
  const doc = frameDoc();
  if (!doc || !doc.location.pathname.startsWith('/view/')) return;
  load.frameReady = true;
  interceptLinks(doc);
  for (const ev of load.queue.splice(0)) apply(load, ev);
});

function startLoad(ev: Extract<BrowserEvent, { type: 'load-started' }>): void {
  if (cur && !cur.finished) finish(cur, 'stopped');
  const load: LoadState = {
    loadId: ev.loadId,
    url: ev.url,
    transport: ev.transport,
    requestAtEpochMs: ev.requestAtEpochMs,
    viewUrl: ev.viewUrl,
    clock: new PaintClock(),
    arrivals: [],
    applier: null,
    filledBlocks: [],
    blockCount: 0,
    domPainted: [],
    domSent: [],
    domReceived: [],
    domApplied: [],
    frameReady: false,
    queue: [],
    written: false,
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
  const win = ui.frame.contentWindow;
  const doc = frameDoc();
  if (win && doc && doc.location.pathname.startsWith('/view/') && doc.readyState === 'complete') {
    // The frame already holds a view document (same origin, the view's CSP, no scripts): empty it and give it
    // the page's URL instead of navigating. A navigation costs a fresh document — about 250 ms in a cold
    // headless Chromium — during which nothing the load brings can be painted.
    doc.open();
    doc.close();
    try {
      win.history.replaceState(null, '', ev.viewUrl);
    } catch {
      // refused: relative sub-resources resolve against the previous view URL's origin path
    }
    load.frameReady = true;
    interceptLinks(doc);
  } else if (win) win.location.replace(ev.viewUrl);
  else ui.frame.src = ev.viewUrl;
  render();
}

function openForWriting(load: LoadState): Document | null {
  const doc = frameDoc();
  if (!doc) return null;
  if (!load.written) {
    load.written = true;
    doc.open();
    // document.open() gives the document the URL of the app page; put the /view/ URL back so the page's
    // relative URLs still resolve through the host.
    try {
      ui.frame.contentWindow?.history.replaceState(null, '', load.viewUrl);
    } catch {
      // the frame refused: relative sub-resources resolve against the app page
    }
    interceptLinks(doc);
  }
  return doc;
}

function apply(load: LoadState, ev: BrowserEvent): void {
  if (load.finished && ev.type !== 'complete') return;
  if (!load.frameReady && (ev.type === 'dom' || ev.type === 'text' || ev.type === 'whole')) {
    load.queue.push(ev);
    return;
  }
  switch (ev.type) {
    case 'dom': {
      const doc = frameDoc();
      if (!doc) return;
      load.applier ??= new DomOpApplier(doc);
      if (ev.blockCount >= 0) load.blockCount = ev.blockCount;
      const { pieces, blocks, filled } = ev;
      const k = load.domPainted.length;
      load.domPainted.push(NaN);
      load.domSent.push(typeof ev.atEpochMs === 'number' ? ev.atEpochMs : NaN);
      load.domReceived.push(epochNow());
      load.domApplied.push(NaN);
      // the visible update is stamped by the paint after the slice that finished these operations
      load.applier.push(ev.ops, () => {
        if (load.finished && load.record !== null) return;
        load.domApplied[k] = epochNow();
        load.filledBlocks.push(...filled);
        if (blocks > 0) load.clock.dirty('blocks', blocks);
        else if (pieces > 0) load.clock.dirty('index', pieces);
        void load.clock.settled().then(() => {
          load.domPainted[k] = load.clock.updates.at(-1)?.atEpochMs ?? epochNow();
        });
      });
      return;
    }
    case 'text': {
      const doc = openForWriting(load);
      if (doc && ev.text.length > 0) {
        doc.write(ev.text);
        load.clock.dirty('bytes', ev.text.length);
      }
      return;
    }
    case 'whole': {
      showWhole(load, ev);
      return;
    }
    default:
      return;
  }
}

function showWhole(load: LoadState, ev: Extract<BrowserEvent, { type: 'whole' }>): void {
  if (ev.html) {
    const doc = openForWriting(load);
    if (!doc) return;
    doc.write(ev.text);
    doc.close();
  } else {
    const doc = frameDoc();
    if (!doc) return;
    const body = doc.body ?? doc.documentElement.appendChild(doc.createElement('body'));
    while (body.firstChild) body.removeChild(body.firstChild);
    if (/^image\//i.test(ev.contentType)) {
      const img = doc.createElement('img');
      img.src = load.viewUrl.replace(/^.*\/view\//, '/view/');
      body.appendChild(img);
    } else if (ev.text !== '' || /^text\//i.test(ev.contentType)) {
      const pre = doc.createElement('pre');
      pre.textContent = ev.text;
      body.appendChild(pre);
    } else {
      const p = doc.createElement('p');
      p.textContent = `${ev.contentType} (not shown)`;
      body.appendChild(p);
    }
  }
  load.clock.dirty('whole');
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
  if (outcome === 'complete' && load.written) frameDoc()?.close();
  // what is still queued goes in now: the load is over
  if (outcome === 'complete' && load.applier && !load.applier.idle) load.applier.flush();
  if (outcome !== 'stopped') await load.clock.settled();
  const record = buildRecord({
    version: 1,
    url: load.url,
    transport: load.transport,
    loadId: load.loadId,
    requestAtEpochMs: load.requestAtEpochMs,
    updates: load.clock.updates.slice(),
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
    case 'load-started':
      startLoad(ev);
      return;
    case 'dump-request': {
      const doc = frameDoc();
      const tree = doc && cur ? dumpDocument(doc, cur.applier?.mode) : null;
      api.send({ type: 'dump-tree', requestId: ev.requestId, tree });
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
      load.hostCompleteAtEpochMs = ev.atEpochMs;
      if (!load.frameReady) {
        // whatever is queued is applied when the frame is ready; finish after that
        const wait = setInterval(() => {
          if (load.frameReady || cur !== load) {
            clearInterval(wait);
            void finish(load, 'complete');
          }
        }, 10);
        return;
      }
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
  const updates = load.clock.updates;
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
  for (const u of load.clock.updates) if (u.atEpochMs > t) t = u.atEpochMs;
  return t;
}

setInterval(() => {
  if (cur && !cur.finished) render();
}, 150);

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

// What tests and tools read (the app page's own window; the page frame cannot reach it: no scripts run there).
const probe = {
  state() {
    const load = cur;
    return load
      ? {
          loadId: load.loadId,
          url: load.url,
          transport: load.transport,
          finished: load.record !== null,
          frameReady: load.frameReady,
          filledBlocks: load.filledBlocks.slice(),
          blockCount: load.blockCount,
          missingSlots: load.applier?.placeholders ?? 0,
          fallbacks: load.applier?.fallbacks ?? 0,
          badOps: load.applier?.bad ?? 0,
          longestSliceMs: load.applier?.longestSliceMs ?? 0,
          arrivals: load.arrivals.length,
          updates: load.clock.updates.length,
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

// Ready once the page frame holds its (empty) view document, so that the first load paints into it at once; a
// frame that never loads does not hold the window back for more than two seconds.
{
  let sent = false;
  const ready = () => {
    if (sent) return;
    sent = true;
    api.send({ type: 'ready' });
  };
  const doc = frameDoc();
  if (doc && doc.location.pathname.startsWith('/view/') && doc.readyState === 'complete') ready();
  else {
    ui.frame.addEventListener('load', ready, { once: true });
    setTimeout(ready, 2000);
  }
}
