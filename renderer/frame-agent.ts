// The agent frame's script: the one script that runs on the frame origin (its CSP admits it by a nonce made for
// each agent document). The frame origin is another origin than the app page's, so neither the agent nor the page
// reaches the app page, its secret or its API. The page itself is shown in the page frame inside this one:
// sandboxed without scripts (the page's <script>s are inert to its parser, as in parse5's scripting-disabled
// trees) and with allow-same-origin, so that the agent — same origin — builds it: CATP's DOM operations in slices,
// in-order markup through the page frame's own parser (document.open / write), a whole answer. The agent takes
// what to show from the app over a MessagePort and stamps each visible update after the frame that painted it.
import type { DomOps, DumpNode } from '../protocol/browser/api';
import type { DocumentMode } from '../protocol/catp/index-piece';
import { DomOpApplier, SLICE_MS } from './dom-ops';
import { dumpDocument } from './dump';
import { PORT_MESSAGE, type FromFrame, type ToFrame } from './frame-protocol';
import { epochNow, PaintClock } from './meter';

const frame = document.getElementById('page') as HTMLIFrameElement;
let port: MessagePort | null = null;
let loadId = -1;
let viewUrl = '';
let applier: DomOpApplier | null = null;
/** The warm-up's applier, building the host's warm-up page in a document never shown, until a page needs the agent. */
let warm: DomOpApplier | null = null;
let warmUpBatches = 0;
let written = false;
let clock = new PaintClock();
/**
 * The page frame document's mode, when we set it (null: its parser read a page's own markup). Emptied by
 * document.open() and close() with nothing written, a document is in quirks mode (HTML's "initial" insertion mode
 * at the end of input): CATP pages, built by DOM operations into it, were all laid out in quirks mode.
 */
let docMode: DocumentMode | null = null;
/** A doctype that puts a document in each mode when its parser reads it (HTML § 13.2.6.4.1). */
const DOCTYPE_FOR: Record<DocumentMode, string> = {
  'no-quirks': '<!DOCTYPE html>',
  'limited-quirks': '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">',
  quirks: '',
};

const post = (m: FromFrame) => port?.postMessage(m);
/** Times the warm-up page is built (warmUp). */
const WARM_UP_ROUNDS = 3;

/** The page frame's document (null while it navigates). */
function pageDoc(): Document | null {
  try {
    return frame.contentDocument;
  } catch {
    return null;
  }
}

function stats(): void {
  const doc = pageDoc();
  post({
    t: 'stats',
    loadId,
    stats: {
      placeholders: applier?.placeholders ?? 0,
      fallbacks: applier?.fallbacks ?? 0,
      bad: applier?.bad ?? 0,
      longestSliceMs: applier?.longestSliceMs ?? 0,
      height: doc?.documentElement?.scrollHeight ?? 0,
    },
  });
}

/** Links navigate through the app (as a user's click would); a form submits nowhere. */
function interceptLinks(doc: Document): void {
  const onClick = (e: Event) => {
    const target = e.target as Element | null;
    const a = target && typeof target.closest === 'function' ? target.closest('a[href], area[href]') : null;
    if (!a) return;
    e.preventDefault();
    e.stopPropagation();
    if ((e as MouseEvent).button > 0 && e.type === 'click') return;
    const href = a.getAttribute('href') ?? '';
    if (/^\s*javascript:/i.test(href)) return;
    let abs: URL;
    try {
      abs = new URL(href, doc.baseURI);
    } catch {
      return;
    }
    if (abs.protocol === 'javascript:') return;
    post({ t: 'click', href: abs.href });
  };
  doc.addEventListener('click', onClick, true);
  doc.addEventListener('auxclick', onClick, true);
  doc.addEventListener('submit', (e) => e.preventDefault(), true);
}

/**
 * document.open() empties the page frame's document, forgets its listeners and gives it this document's URL: the
 * page's /view/ URL goes back, so that its relative URLs resolve through the host.
 */
function reopen(doc: Document): void {
  doc.open();
  try {
    frame.contentWindow?.history.replaceState(null, '', viewUrl);
  } catch {
    // refused: relative sub-resources resolve against the previous view URL
  }
  interceptLinks(doc);
}

/**
 * Builds the warm-up page (the host's, as DOM operations) WARM_UP_ROUNDS times in a document of the page frame's that
 * is never shown, in the applier's slices: V8 compiles a function on its first call and optimizes it once it has run
 * long enough, so a fresh renderer's first page otherwise meets the applier cold, on its first frames: heise's first
 * index frame (210 bytes) took 5–7 ms to apply in a fresh browser, 1–3 after this. It goes on through a load's first
 * round trip and stops when that load's first content comes. Slices of SLICE_MS: a page's operations that come in
 * the meantime wait for one at most.
 */
function warmUp(doc: Document, batches: unknown): void {
  if (!Array.isArray(batches) || warm !== null || applier !== null) return;
  let inert: Document;
  try {
    inert = doc.implementation.createHTMLDocument('');
  } catch {
    return;
  }
  const a = new DomOpApplier(inert, null, SLICE_MS);
  warm = a;
  for (let r = 0; r < WARM_UP_ROUNDS; r++) for (const ops of batches) a.push(ops as DomOps, () => warmUpBatches++);
  void a.whenIdle().then(() => {
    if (warm === a) warm = null;
    post({ t: 'warmed-up', batches: warmUpBatches });
  });
}

/** The warm-up gives way: a page needs the main thread. */
function endWarmUp(): void {
  warm?.stop();
  warm = null;
}

function handle(m: ToFrame): void {
  if ('loadId' in m && m.t !== 'reset' && m.loadId !== loadId) return;
  const doc = pageDoc();
  if (doc === null) return;
  if (m.t === 'ops' || m.t === 'text' || m.t === 'whole') endWarmUp();
  switch (m.t) {
    case 'warm-up':
      warmUp(doc, m.batches);
      return;
    case 'reset': {
      loadId = m.loadId;
      viewUrl = m.viewUrl;
      applier?.stop(); // its queued operations were the last load's
      applier = null;
      written = false;
      const id = m.loadId;
      clock = new PaintClock((u) => post({ t: 'update', loadId: id, update: u }));
      // Emptied in the mode most pages have (no-quirks), so that a CATP page in it need not be emptied again, on its
      // first paint's path, to be given its mode (setMode: 4–7 ms); a page in another mode is, as before.
      docMode = null;
      setMode(doc, 'no-quirks');
      return;
    }
    case 'ops': {
      const a = (applier ??= new DomOpApplier(doc, (mode) => setMode(doc, mode)));
      const { k, what, count } = m;
      const id = loadId;
      a.push(m.ops, () => {
        if (id !== loadId) return;
        post({ t: 'dom-applied', loadId: id, k, atEpochMs: epochNow() });
        if (count > 0) clock.dirty(what, count); // (a batch with no piece and no block shows nothing new)
        // no stats here: they read the page's height, which forces a layout of the whole page (16 ms on a 64 KB
        // page) whenever operations came since the last frame; tools read it once the load has settled
        void clock.settled().then(() => post({ t: 'dom-painted', loadId: id, k, atEpochMs: clock.updates.at(-1)?.atEpochMs ?? epochNow() }));
      });
      return;
    }
    case 'text':
      if (!written) {
        written = true;
        reopen(doc);
        docMode = null;
      }
      if (m.text.length > 0) {
        doc.write(m.text);
        clock.dirty('bytes', m.text.length);
      }
      return;
    case 'whole':
      showWhole(doc, m);
      return;
    case 'finish': {
      if (m.complete && written) doc.close();
      const id = loadId;
      // What is still queued goes on in slices, as it came: applied all at once, a backlog held the main thread for
      // as long as it took (478 ms on gmw) with nothing painted, and the last visible update waited for all of it.
      const queued = m.complete && applier ? applier.whenIdle() : Promise.resolve();
      void queued.then(() => clock.settled()).then(() => {
        if (id !== loadId) return;
        stats();
        post({ t: 'settled', loadId: id });
      });
      return;
    }
    case 'dump': {
      let tree: DumpNode | null = null;
      try {
        tree = dumpDocument(doc, m.mode ?? applier?.mode);
      } catch {
        tree = null;
      }
      post({ t: 'dump', id: m.id, tree });
      return;
    }
    case 'scroll-to':
      doc.getElementById(m.id)?.scrollIntoView();
      return;
    default:
      return;
  }
}

/** Gives the (empty) page document `mode` for a page built by DOM operations: parsed again from a doctype. */
function setMode(doc: Document, mode: DocumentMode): void {
  if (docMode === mode) return;
  reopen(doc);
  doc.write(DOCTYPE_FOR[mode]);
  doc.close();
  docMode = mode;
}

function showWhole(doc: Document, m: Extract<ToFrame, { t: 'whole' }>): void {
  if (m.html) {
    if (!written) {
      written = true;
      reopen(doc);
      docMode = null;
    }
    doc.write(m.text);
    doc.close();
  } else {
    const body = doc.body ?? doc.documentElement.appendChild(doc.createElement('body'));
    while (body.firstChild) body.removeChild(body.firstChild);
    if (/^image\//i.test(m.contentType)) {
      const img = doc.createElement('img');
      const u = new URL(viewUrl);
      img.src = u.pathname + u.search;
      body.appendChild(img);
    } else if (m.text !== '' || /^text\//i.test(m.contentType)) {
      const pre = doc.createElement('pre');
      pre.textContent = m.text;
      body.appendChild(pre);
    } else {
      const p = doc.createElement('p');
      p.textContent = `${m.contentType} (not shown)`;
      body.appendChild(p);
    }
  }
  clock.dirty('whole');
}

// The app hands its port over once, in answer to our hello; only our parent may.
window.addEventListener('message', (e: MessageEvent) => {
  const data = e.data as { type?: unknown } | null;
  if (port !== null || e.source !== window.parent || data?.type !== PORT_MESSAGE || e.ports.length !== 1) return;
  port = e.ports[0]!;
  port.onmessage = (msg: MessageEvent) => handle(msg.data as ToFrame);
  post({ t: 'hello' });
});

// Hello once the page frame holds its (empty) view document, so that the first load is written into it.
function helloWhenReady(): void {
  const doc = pageDoc();
  if (doc && doc.location.pathname.startsWith('/view/') && doc.readyState === 'complete') {
    window.parent.postMessage({ type: PORT_MESSAGE }, '*');
    return;
  }
  frame.addEventListener('load', helloWhenReady, { once: true });
}
helloWhenReady();
