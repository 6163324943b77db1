// Applies the host's DOM operations (protocol/browser/api.ts DomOps) to the page frame's document. The host's tree
// builder decided where every node goes; this only executes, in order, in slices that leave the main thread free:
// a large piece of a page is built a few milliseconds at a time, and the paint between slices shows what is done.
// The operations come over IPC: anything malformed is counted and skipped, never thrown.
import type { DOM_OP as DomOpCodes, DomOps } from '../protocol/browser/api';
import type { CatpAttr, DocumentMode } from '../protocol/catp/index-piece';

// The renderer imports protocol/ as types only: the op codes are repeated here, and the type says they match.
const DOM_OP: typeof DomOpCodes = { RESET: 0, ELEMENT: 1, TEXT: 2, COMMENT: 3, DOCTYPE: 4, CONTENT: 5, PLACEHOLDER: 6, INSERT: 7, REMOVE: 8, SET_TEXT: 9, SET_ATTRS: 10, INSERT_TEXT: 11, APPEND_NEW: 12 };

export const HTML_NS = 'http://www.w3.org/1999/xhtml';
const PLACEHOLDER_TAG_NAME = 'catp-missing';
export const PLACEHOLDER_TAG = PLACEHOLDER_TAG_NAME;
const MATHML_NS = 'http://www.w3.org/1998/Math/MathML';
const NS = [HTML_NS, 'http://www.w3.org/2000/svg', MATHML_NS];
/** How many array entries each operation of a fixed layout takes (api.ts, DomOps). */
const OP_WIDTH: Record<number, number> = {
  [DOM_OP.RESET]: 3, [DOM_OP.TEXT]: 2, [DOM_OP.COMMENT]: 2, [DOM_OP.DOCTYPE]: 4, [DOM_OP.CONTENT]: 2, [DOM_OP.PLACEHOLDER]: 3,
  [DOM_OP.INSERT]: 4, [DOM_OP.REMOVE]: 2, [DOM_OP.SET_TEXT]: 3, [DOM_OP.INSERT_TEXT]: 4, [DOM_OP.APPEND_NEW]: 2,
};
const MODES: DocumentMode[] = ['no-quirks', 'quirks', 'limited-quirks'];
// Flat colours: a gradient would be re-rasterized and show up as a visible change that is not one. One stylesheet
// adopted by the page's document (not a node of its tree) styles every placeholder: a style attribute on each was
// a CSS parse per placeholder, the largest single cost of building a page (a 1 MB page has 12,000 of them).
// !important: the page's own rules must not restyle our placeholders.
const PLACEHOLDER_CSS = `${PLACEHOLDER_TAG_NAME}[data-catp-kind=slot]{display:inline-block!important;min-width:3em!important;height:.85em!important;margin:0 .1em!important;padding:0!important;border:0!important;vertical-align:baseline!important;border-radius:2px!important;background:#f6cccc!important}
${PLACEHOLDER_TAG_NAME}[data-catp-kind=index]{display:block!important;height:1.2em!important;margin:.2em 0!important;padding:0!important;border:0!important;border-radius:2px!important;background:#e8e2f4!important}`;

/**
 * How long one slice may run before yielding (ms): at least SLICE_MS, and as long as the browser itself took since
 * the last slice (style, layout, paint, IPC), up to MAX_SLICE_MS. A fixed 4 ms slice starves on a large page:
 * every frame between slices relayouts the whole growing document (100 ms and more on a 1 MB page), so the
 * operations got 4 ms in every 100. Matching the browser's own time gives them about half the main thread while
 * a frame never waits more than MAX_SLICE_MS for input or a paint.
 */
export const SLICE_MS = 4;
export const MAX_SLICE_MS = 50;
/**
 * Elements that open a nested browsing context when they enter the document, and at most how many of them one
 * slice creates. Chromium makes a frame and an about:blank document for each, synchronously, inside the insert
 * that connects it (~10–20 ms apiece here): a piece of gmw held 15 `<iframe>`s, and the slice that attached them
 * ran 478 ms with nothing painted. Each element's cost only comes when the slice's held inserts go in, after the
 * slice's clock has stopped counting, so it is counted here instead.
 */
const FRAME_TAGS = new Set(['iframe', 'frame', 'object', 'embed']);
export const FRAMES_PER_SLICE = 2;

interface Batch {
  ops: DomOps;
  at: number;
  done: () => void;
}

/** Gives `doc` the placeholders' stylesheet (once; a document keeps it across loads). */
function adoptPlaceholderStyle(doc: Document): void {
  const view = doc.defaultView as (Window & typeof globalThis) | null;
  if (view === null || typeof view.CSSStyleSheet !== 'function' || !('adoptedStyleSheets' in doc)) return;
  const mark = '__catpPlaceholderSheet';
  const holder = doc as Document & { [mark]?: CSSStyleSheet };
  if (holder[mark] && doc.adoptedStyleSheets.includes(holder[mark])) return;
  const sheet = new view.CSSStyleSheet();
  sheet.replaceSync(PLACEHOLDER_CSS);
  holder[mark] = sheet;
  doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
}

export class DomOpApplier {
  private readonly nodes = new Map<number, Node>();
  /** The handle the next created node takes, and the node this batch created last (api.ts, DomOps). */
  private nextHandle = 1;
  private last = 0;
  private readonly queue: Batch[] = [];
  /** Handles that queued batches remove (noteRemovals), and slot placeholders never built, each with its node. */
  private readonly removals = new Set<number>();
  private readonly unbuilt = new Map<number, number>();
  /**
   * Inserts into the live document, held until the end of the slice (or until an operation needs them done), in
   * order. A piece's nodes come parent first: inserted at once, each new child went into the live document on its
   * own, with its share of the document's bookkeeping. Held, a piece's top nodes wait while their descendants go into
   * them detached, and each goes in once, whole. The first index frame of four real pages, in Chromium (20 fresh
   * pages each): 7–35% less time (a table page most); built wholly detached it would take about half.
   */
  private readonly attach: Array<{ parent: Node; node: Node; before: Node | null }> = [];
  private running = false;
  private inert: Document | null = null;
  mode: DocumentMode = 'no-quirks';
  /** Operations refused (bad handle, bad type), and names the DOM refused but an inert parse made. */
  bad = 0;
  fallbacks = 0;
  /** Placeholders in the document now. */
  placeholders = 0;
  /** Slot placeholders never built: their text was queued behind them (noteRemovals). */
  skipped = 0;
  /** Longest slice so far (ms), and slices run. */
  longestSliceMs = 0;
  slices = 0;
  /** FRAME_TAGS elements made in the current slice. */
  private framesInSlice = 0;
  /**
   * `<math>` elements in the document whose MathML children changed in this slice: Chromium keeps the layout a
   * token element (`<mi>`, `<mn>`, …) got from the children it had then (a placeholder element beside its text made
   * an `<mi>` 20 px tall instead of 9 after the placeholder went), so the page laid out differently from one load to
   * the next. Each is put back where it is at the end of the slice, which lays it out anew from what it holds.
   */
  private readonly mathChanged = new Set<Element>();
  private idleWaiters: Array<() => void> = [];

  /**
   * `onReset`: told each new page's mode before the document is emptied for it. Only a parser sets a document's mode
   * (from the doctype it reads), so the owner of the document re-parses it with a doctype that gives that mode.
   */
  constructor(
    private readonly doc: Document,
    private readonly onReset: ((mode: DocumentMode) => void) | null = null,
    /** The longest a slice may run (ms); a page's builds use MAX_SLICE_MS, a warm-up that must give way at once less. */
    private readonly maxSliceMs = MAX_SLICE_MS,
  ) {
    this.nodes.set(0, doc);
    adoptPlaceholderStyle(doc);
  }

  /** Queue a batch; `done` runs once all of it is in the document. */
  push(ops: DomOps, done: () => void = () => {}): void {
    if (!Array.isArray(ops)) {
      this.bad++;
      done();
      return;
    }
    this.queue.push({ ops, at: 0, done });
    this.noteRemovals(ops);
    this.schedule();
  }

  /**
   * The handles a queued batch removes. A slot's placeholder whose removal is already queued when it is made is
   * never built: its text has come (a backlog: the page arrives faster than it is built), and building it, putting
   * it in the document and taking it out again would only cost the main thread and show nothing new.
   */
  private noteRemovals(ops: DomOps): void {
    for (let at = 1; at < ops.length; ) {
      const op = ops[at];
      if (op === DOM_OP.REMOVE) {
        const h = ops[at + 1];
        if (typeof h === 'number') this.removals.add(h);
        at += 2;
        continue;
      }
      const fixed = OP_WIDTH[op as number];
      if (fixed !== undefined) {
        at += fixed;
        continue;
      }
      // ELEMENT and SET_ATTRS: their attributes' count says how far they reach
      const countAt = op === DOM_OP.ELEMENT ? at + 3 : op === DOM_OP.SET_ATTRS ? at + 2 : -1;
      const n = countAt < 0 ? NaN : ops[countAt];
      if (typeof n !== 'number' || !Number.isInteger(n)) return; // unreadable: step() will say so
      at = countAt + 1 + Math.abs(n) * (n < 0 ? 4 : 2);
    }
  }

  /** Applies everything queued now, without slicing (tests; a load that ends lets its backlog go on in slices). */
  flush(): void {
    while (this.queue.length > 0) this.slice(Infinity);
    this.releaseIdle();
  }

  get idle(): boolean {
    return this.queue.length === 0;
  }

  /** Drops what is queued (another load took the document): nothing more is applied, waiters are let go. */
  stop(): void {
    this.queue.length = 0;
    this.attach.length = 0;
    this.releaseIdle();
  }

  private releaseIdle(): void {
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const ok of w) ok();
  }

  /** Resolves once everything queued so far is in the document (at once when idle). */
  whenIdle(): Promise<void> {
    if (this.idle) return Promise.resolve();
    return new Promise((ok) => this.idleWaiters.push(ok));
  }

  private schedule(): void {
    if (this.running) return;
    this.running = true;
    // A MessageChannel task runs before the next frame when there is time, and never waits for one (a
    // requestAnimationFrame loop would cost a frame per slice even on an idle page).
    const ch = new MessageChannel();
    let lastEnd = -1;
    ch.port1.onmessage = () => {
      const now = performance.now();
      const budget = lastEnd < 0 ? SLICE_MS : Math.min(this.maxSliceMs, Math.max(SLICE_MS, now - lastEnd));
      this.slice(budget);
      lastEnd = performance.now();
      if (this.queue.length > 0) ch.port2.postMessage(0);
      else {
        this.running = false;
        ch.port1.close();
        this.releaseIdle();
      }
    };
    ch.port2.postMessage(0);
  }

  private slice(budgetMs: number): void {
    const t0 = performance.now();
    let n = 0;
    this.framesInSlice = 0;
    const full = () => this.framesInSlice >= FRAMES_PER_SLICE || performance.now() - t0 >= budgetMs;
    while (this.queue.length > 0) {
      const b = this.queue[0]!;
      if (b.at === 0) b.at = this.begin(b.ops);
      while (b.at < b.ops.length) {
        b.at = this.step(b.ops, b.at);
        if (this.framesInSlice >= FRAMES_PER_SLICE || ((++n & 63) === 0 && full())) break;
      }
      if (b.at >= b.ops.length) {
        this.queue.shift();
        this.attachHeld();
        b.done();
      }
      if (full()) break;
    }
    this.attachHeld();
    this.relayoutMath();
    const took = performance.now() - t0;
    this.slices++;
    if (took > this.longestSliceMs && budgetMs !== Infinity) this.longestSliceMs = took;
  }

  /** A change to `parent`'s children: when it is MathML in the document, its `<math>` is laid out anew at the slice's end. */
  private noteMath(parent: Node): void {
    if (parent.nodeType !== 1 || (parent as Element).namespaceURI !== MATHML_NS || !parent.isConnected) return;
    const math = (parent as Element).closest('math');
    if (math !== null) this.mathChanged.add(math);
  }

  /** Puts each changed `<math>` back where it is (see mathChanged). */
  private relayoutMath(): void {
    for (const math of this.mathChanged) {
      const parent = math.parentNode;
      if (parent !== null && math.isConnected) parent.insertBefore(math, math.nextSibling);
    }
    this.mathChanged.clear();
  }

  /** Does the held inserts into the live document, in the order they came. */
  private attachHeld(): void {
    for (const { parent, node, before } of this.attach) this.insert(parent, node, before);
    this.attach.length = 0;
  }

  /** An insert: held until the slice ends when it goes into the live document, done at once into a detached subtree. */
  private place(parent: Node, node: Node, before: Node | null): void {
    if (parent.isConnected) this.attach.push({ parent, node, before });
    else this.insert(parent, node, before);
  }

  private insert(parent: Node, node: Node, before: Node | null): void {
    this.noteMath(parent);
    try {
      parent.insertBefore(node, before !== null && before.parentNode === parent ? before : null);
      if ((node as Element).localName === PLACEHOLDER_TAG) this.placeholders++;
    } catch {
      this.bad++;
    }
  }

  private node(h: unknown): Node | null {
    return typeof h === 'number' ? (this.nodes.get(h) ?? null) : null;
  }

  private str(v: unknown): string | null {
    return typeof v === 'string' ? v : null;
  }

  /**
   * Reads the attributes at `at` (a count n, then n name-value pairs, or −n × name, value, namespace, prefix);
   * returns them and the position after, or null when malformed.
   */
  private attrs(ops: DomOps, at: number): [CatpAttr[], number] | null {
    const n = ops[at];
    if (typeof n !== 'number' || !Number.isInteger(n)) return null;
    const width = n < 0 ? 4 : 2;
    const count = Math.abs(n);
    if (at + 1 + count * width > ops.length) return null;
    const out: CatpAttr[] = [];
    let i = at + 1;
    for (let k = 0; k < count; k++, i += width) {
      const name = ops[i];
      const value = ops[i + 1];
      if (typeof name !== 'string' || typeof value !== 'string') return null;
      const a: CatpAttr = { name, value };
      if (width === 4) {
        const ns = ops[i + 2];
        const prefix = ops[i + 3];
        if (typeof ns !== 'string' || typeof prefix !== 'string') return null;
        if (ns !== '') a.namespace = ns;
        if (prefix !== '') a.prefix = prefix;
      }
      out.push(a);
    }
    return [out, i];
  }

  /** A batch starts: its first created node's handle (api.ts, DomOps); returns where its operations start. */
  private begin(ops: DomOps): number {
    this.last = 0;
    if (ops.length === 0) return 0;
    const first = ops[0];
    if (typeof first !== 'number' || !Number.isSafeInteger(first) || first < 1) {
      this.bad++;
      return ops.length;
    }
    this.nextHandle = first;
    return 1;
  }

  /** A created node takes the next handle (null: one the DOM refused; its handle is taken all the same). */
  private created(node: Node | null): void {
    this.last = this.nextHandle++;
    if (node !== null) this.nodes.set(this.last, node);
  }

  /** Applies the operation at `at`; returns where the next one starts (the end, when the rest is unreadable). */
  private step(ops: DomOps, at: number): number {
    const op = ops[at];
    const fail = (): number => {
      this.bad++;
      return ops.length; // an op we cannot read: we cannot find where the next one starts either
    };
    const doc = this.doc;
    switch (op) {
      case DOM_OP.RESET: {
        const mode = ops[at + 1];
        this.attach.length = 0;
        this.mode = typeof mode === 'number' && MODES[mode] ? MODES[mode]! : 'no-quirks';
        if (this.onReset !== null) {
          this.onReset(this.mode);
          adoptPlaceholderStyle(doc);
        }
        while (doc.firstChild) doc.removeChild(doc.firstChild);
        this.nodes.clear();
        this.nodes.set(0, doc);
        this.placeholders = 0;
        return at + 3;
      }
      case DOM_OP.ELEMENT: {
        const tag = this.str(ops[at + 1]);
        const nsv = ops[at + 2];
        const ns = typeof nsv === 'number' ? NS[nsv] : this.str(nsv);
        const a = this.attrs(ops, at + 3);
        if (tag === null || !ns || a === null) return fail();
        this.created(this.element(tag, ns, a[0]));
        return a[1];
      }
      case DOM_OP.TEXT:
      case DOM_OP.COMMENT: {
        const v = this.str(ops[at + 1]);
        if (v === null) return fail();
        this.created(op === DOM_OP.TEXT ? doc.createTextNode(v) : doc.createComment(v));
        return at + 2;
      }
      case DOM_OP.DOCTYPE: {
        const [name, pub, sys] = [this.str(ops[at + 1]), this.str(ops[at + 2]), this.str(ops[at + 3])];
        if (name === null || pub === null || sys === null) return fail();
        let node: Node | null = null;
        try {
          node = doc.implementation.createDocumentType(name, pub, sys);
        } catch {
          this.fallbacks++; // a doctype the DOM refuses: left out (it changes nothing on screen), its handle taken
        }
        this.created(node);
        return at + 4;
      }
      case DOM_OP.CONTENT: {
        const t = this.node(ops[at + 1]);
        if (t === null) return fail();
        const content = 'content' in t ? (t as HTMLTemplateElement).content : null;
        this.created(content ?? doc.createDocumentFragment());
        return at + 2;
      }
      case DOM_OP.PLACEHOLDER: {
        const kind = ops[at + 1];
        const ordinal = ops[at + 2];
        if ((kind !== 0 && kind !== 1) || typeof ordinal !== 'number') return fail();
        if (kind === 0 && this.removals.has(this.nextHandle)) {
          this.unbuilt.set(this.nextHandle, 0);
          this.created(null);
          this.skipped++;
          return at + 3;
        }
        const ph = doc.createElement(PLACEHOLDER_TAG);
        ph.setAttribute('data-catp-kind', kind === 1 ? 'index' : 'slot');
        // the same title as protocol/catp/tree.ts placeholderTitle (the renderer takes only types from protocol/)
        ph.title = kind === 1 ? `waiting for index frame ${ordinal}` : `waiting for slot ${ordinal}`;
        this.created(ph);
        return at + 3;
      }
      case DOM_OP.APPEND_NEW: {
        if (this.unbuilt.has(this.last)) return at + 2; // (the recorder appends no slot placeholder this way)
        const parent = this.node(ops[at + 1]);
        const node = this.last === 0 ? null : this.node(this.last);
        if (parent === null || node === null) {
          this.bad++;
          return at + 2;
        }
        this.place(parent, node, null);
        return at + 2;
      }
      case DOM_OP.INSERT: {
        const nodeH = ops[at + 2];
        let beforeH = ops[at + 3];
        if (typeof nodeH === 'number' && this.unbuilt.has(nodeH)) {
          // a slot's placeholder goes right before its text node (tree.ts place): what goes before it goes there
          if (this.unbuilt.get(nodeH) === 0 && typeof beforeH === 'number') this.unbuilt.set(nodeH, beforeH);
          return at + 4;
        }
        if (typeof beforeH === 'number' && this.unbuilt.has(beforeH)) beforeH = this.unbuilt.get(beforeH)!;
        const parent = this.node(ops[at + 1]);
        const node = this.node(nodeH);
        const before = beforeH === 0 ? null : this.node(beforeH);
        if (parent === null || node === null || (before === null && beforeH !== 0)) {
          this.bad++;
          return at + 4;
        }
        this.place(parent, node, before);
        return at + 4;
      }
      case DOM_OP.REMOVE: {
        const h = ops[at + 1];
        if (typeof h === 'number') {
          this.removals.delete(h);
          if (this.unbuilt.delete(h)) return at + 2;
        }
        this.attachHeld(); // the node, or the one a held insert goes before, may be among them
        const node = this.node(h);
        if (node === null) {
          this.bad++;
          return at + 2;
        }
        if (node.parentNode) {
          if ((node as Element).localName === PLACEHOLDER_TAG) this.placeholders--;
          this.noteMath(node.parentNode);
          node.parentNode.removeChild(node);
        }
        this.nodes.delete(h as number);
        return at + 2;
      }
      case DOM_OP.SET_TEXT: {
        const node = this.node(ops[at + 1]);
        const v = this.str(ops[at + 2]);
        if (node === null || v === null || !('data' in node)) {
          this.bad++;
          return at + 3;
        }
        (node as CharacterData).data = v;
        return at + 3;
      }
      case DOM_OP.INSERT_TEXT: {
        const node = this.node(ops[at + 1]);
        const offset = ops[at + 2];
        const v = this.str(ops[at + 3]);
        if (node === null || v === null || !('data' in node) || typeof offset !== 'number' || !Number.isInteger(offset) || offset < 0 || offset > (node as CharacterData).length) {
          this.bad++;
          return at + 4;
        }
        (node as CharacterData).insertData(offset, v);
        return at + 4;
      }
      case DOM_OP.SET_ATTRS: {
        const node = this.node(ops[at + 1]);
        const a = this.attrs(ops, at + 2);
        if (a === null) return fail();
        if (node === null || node.nodeType !== 1) this.bad++;
        else for (const attr of a[0]) this.setAttr(node as Element, attr);
        return a[1];
      }
      default:
        return fail();
    }
  }

  private element(tag: string, ns: string, attrs: CatpAttr[]): Element {
    if (ns === HTML_NS && FRAME_TAGS.has(tag)) this.framesInSlice++;
    let el: Element;
    try {
      el = ns === HTML_NS ? this.doc.createElement(tag) : this.doc.createElementNS(ns, tag);
    } catch {
      el = this.inertElement(tag, ns);
    }
    for (const a of attrs) this.setAttr(el, a);
    return el;
  }

  private setAttr(el: Element, a: CatpAttr): void {
    try {
      if (a.namespace) el.setAttributeNS(a.namespace, a.prefix ? `${a.prefix}:${a.name}` : a.name, a.value);
      else el.setAttribute(a.name, a.value);
    } catch {
      this.inertAttribute(el, a);
    }
  }

  /** A name the DOM API refuses but the HTML parser accepts: let a parser make it, in an inert document. */
  private inertDoc(): Document {
    this.inert ??= this.doc.implementation.createHTMLDocument('');
    return this.inert;
  }

  private inertElement(tag: string, ns: string): Element {
    this.fallbacks++;
    const box = this.inertDoc().createElement('div');
    box.innerHTML = ns === HTML_NS ? `<${tag}>` : ns.endsWith('svg') ? `<svg><${tag}></svg>` : `<math><${tag}></math>`;
    const made = ns === HTML_NS ? box.firstElementChild : box.firstElementChild?.firstElementChild;
    if (made && made.localName === tag && made.namespaceURI === ns) {
      made.remove();
      return this.doc.adoptNode(made);
    }
    return this.doc.createElement('catp-unnamed');
  }

  private inertAttribute(el: Element, a: CatpAttr): void {
    const existing = a.namespace ? null : el.getAttributeNode(a.name);
    if (existing) {
      existing.value = a.value;
      return;
    }
    this.fallbacks++;
    const box = this.inertDoc().createElement('div');
    box.innerHTML = `<span ${a.name}="">`;
    const attr = box.firstElementChild?.attributes[0];
    if (!attr || attr.localName !== a.name) return;
    box.firstElementChild!.removeAttributeNode(attr);
    attr.value = a.value;
    el.setAttributeNode(this.doc.adoptNode(attr));
  }
}
