// The page frame's agent: the one script that runs in the page frame (its CSP admits this script by a nonce made for
// each frame document; the page's own scripts, handlers and javascript: URLs stay blocked). The frame is sandboxed
// without allow-same-origin, so it has an opaque origin of its own, apart from the app page and its secret. The
// agent builds the page the app hands it over a MessagePort — CATP's DOM operations in slices, in-order markup
// through the document's own parser, a whole answer — and stamps each visible update after the frame that painted
// it, in the frame's own renderer (which may be a process of its own).
import type { DumpNode } from '../protocol/browser/api';
import { DomOpApplier } from './dom-ops';
import { dumpDocument } from './dump';
import { PORT_MESSAGE, type FromFrame, type ToFrame } from './frame-protocol';
import { epochNow, PaintClock } from './meter';

document.currentScript?.remove();

let port: MessagePort | null = null;
let loadId = -1;
let viewUrl = location.href;
let applier: DomOpApplier | null = null;
let written = false;
let clock = new PaintClock();

const post = (m: FromFrame) => port?.postMessage(m);

function stats(): void {
  post({
    t: 'stats',
    loadId,
    stats: {
      placeholders: applier?.placeholders ?? 0,
      fallbacks: applier?.fallbacks ?? 0,
      bad: applier?.bad ?? 0,
      longestSliceMs: applier?.longestSliceMs ?? 0,
      height: document.documentElement?.scrollHeight ?? 0,
    },
  });
}

/** Links navigate through the app (as a user's click would); a form submits nowhere. */
function interceptLinks(): void {
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
      abs = new URL(href, document.baseURI);
    } catch {
      return;
    }
    if (abs.protocol === 'javascript:') return;
    post({ t: 'click', href: abs.href });
  };
  document.addEventListener('click', onClick, true);
  document.addEventListener('auxclick', onClick, true);
  document.addEventListener('submit', (e) => e.preventDefault(), true);
}

/** document.open() empties the document and forgets its listeners (and the window's): the page's URL goes back. */
function reopen(): void {
  document.open();
  try {
    history.replaceState(null, '', viewUrl);
  } catch {
    // refused: relative sub-resources resolve against the previous view URL
  }
  interceptLinks();
  listenForPort();
}

function handle(m: ToFrame): void {
  if ('loadId' in m && m.t !== 'reset' && m.loadId !== loadId) return;
  switch (m.t) {
    case 'reset': {
      loadId = m.loadId;
      viewUrl = m.viewUrl;
      applier = null;
      written = false;
      const id = m.loadId;
      clock = new PaintClock((u) => post({ t: 'update', loadId: id, update: u }));
      reopen();
      document.close();
      return;
    }
    case 'ops': {
      const a = (applier ??= new DomOpApplier(document));
      const { k, what, count } = m;
      const id = loadId;
      a.push(m.ops, () => {
        if (id !== loadId) return;
        post({ t: 'dom-applied', loadId: id, k, atEpochMs: epochNow() });
        if (count > 0) clock.dirty(what, count); // (a batch with no piece and no block shows nothing new)
        void clock.settled().then(() => post({ t: 'dom-painted', loadId: id, k, atEpochMs: clock.updates.at(-1)?.atEpochMs ?? epochNow() }));
        stats();
      });
      return;
    }
    case 'text':
      if (!written) {
        written = true;
        reopen();
      }
      if (m.text.length > 0) {
        document.write(m.text);
        clock.dirty('bytes', m.text.length);
      }
      return;
    case 'whole':
      showWhole(m);
      return;
    case 'finish': {
      if (m.complete && written) document.close();
      if (m.complete && applier && !applier.idle) applier.flush();
      const id = loadId;
      void clock.settled().then(() => {
        stats();
        post({ t: 'settled', loadId: id });
      });
      return;
    }
    case 'dump': {
      let tree: DumpNode | null = null;
      try {
        tree = dumpDocument(document, m.mode ?? applier?.mode);
      } catch {
        tree = null;
      }
      post({ t: 'dump', id: m.id, tree });
      return;
    }
    case 'scroll-to':
      document.getElementById(m.id)?.scrollIntoView();
      return;
    default:
      return;
  }
}

function showWhole(m: Extract<ToFrame, { t: 'whole' }>): void {
  if (m.html) {
    if (!written) {
      written = true;
      reopen();
    }
    document.write(m.text);
    document.close();
  } else {
    const body = document.body ?? document.documentElement.appendChild(document.createElement('body'));
    while (body.firstChild) body.removeChild(body.firstChild);
    if (/^image\//i.test(m.contentType)) {
      const img = document.createElement('img');
      img.src = new URL(viewUrl).pathname + new URL(viewUrl).search;
      body.appendChild(img);
    } else if (m.text !== '' || /^text\//i.test(m.contentType)) {
      const pre = document.createElement('pre');
      pre.textContent = m.text;
      body.appendChild(pre);
    } else {
      const p = document.createElement('p');
      p.textContent = `${m.contentType} (not shown)`;
      body.appendChild(p);
    }
  }
  clock.dirty('whole');
}

/** The app hands its port over once, in answer to our hello; only our parent may. */
function listenForPort(): void {
  window.addEventListener('message', (e: MessageEvent) => {
    const data = e.data as { type?: unknown } | null;
    if (port !== null || e.source !== window.parent || data?.type !== PORT_MESSAGE || e.ports.length !== 1) return;
    port = e.ports[0]!;
    port.onmessage = (msg: MessageEvent) => handle(msg.data as ToFrame);
    post({ t: 'hello' });
  });
}

listenForPort();
interceptLinks();
window.parent.postMessage({ type: PORT_MESSAGE }, '*');
