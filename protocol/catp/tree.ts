/**
 * Applying assembler events to a tree, through a small adapter interface (parse5's tree-adapter idea).
 *
 * `CatpTreeBuilder` turns each `index-piece` into nodes the moment it arrives — under provisional ancestors when
 * the frame with its real ancestors is not here yet (their attributes follow when it is) — and `block-filled`
 * into slot content. Every node is numbered (pre-order), so wherever and whenever a node arrives it is inserted
 * before its next present sibling: the finished tree is exactly parse5's, whatever the arrival order.
 * Placeholders mark what is still missing: a `<catp-missing>` element before a visible text slot still waiting
 * for data, and one where an index frame that should precede an arrived one has not come yet.
 *
 * The same builder drives the browser (the host records the sink's calls as DOM operations for the renderer,
 * app/browser/dom-recorder.ts) and a parse5 default-tree-adapter document in tests ({@link parse5Sink}), so a
 * test compares `parse5.serialize(builder.root)` with `parse5.serialize(parse5.parse(original))`.
 */
import { defaultTreeAdapter } from 'parse5';
import type { DefaultTreeAdapterMap } from 'parse5';
import type { CatpEvent, SlotFill } from './assembler';
import { DEFAULT_INDEX_LIMITS, NS_HTML, STREAM, type CatpAttr, type DocumentMode, type IndexAttr, type IndexPiece, type SlotRef } from './index-piece';
import { OrderedList } from './ordered-list';

/** What a tree needs to offer. `H` is a handle to any node. */
export interface CatpTreeSink<H> {
  /** A new, empty document (or fragment); returns its handle. */
  reset(fragment: boolean, mode: DocumentMode): H;
  /** A detached element. */
  element(tagName: string, namespace: string, attrs: CatpAttr[]): H;
  /** Set these attributes on an element (one it has keeps its place; a new one is appended). */
  setAttrs(element: H, attrs: CatpAttr[]): void;
  text(value: string): H;
  comment(data: string): H;
  doctype(name: string, publicId: string, systemId: string): H;
  /** The content fragment of a template element (created on first call). */
  templateContent(template: H): H;
  /**
   * A detached placeholder element (`<catp-missing>`): kind 'slot' (text to come: the slot's number) or 'index' (a
   * piece to come: its index frame's ordinal). Its title says which (placeholderTitle).
   */
  placeholder(kind: 'slot' | 'index', ordinal: number): H;
  /** Insert `node` into `parent` before `before` (null: at the end). */
  insertBefore(parent: H, node: H, before: H | null): void;
  remove(node: H): void;
  /** New data of a text or comment node. */
  setText(node: H, value: string): void;
  /**
   * Insert `text` into a text or comment node's data at `offset` (UTF-16 code units, as the DOM's insertData): a
   * part of a slot whose data comes in several, or consecutive parts that came together. `around` is the inserted
   * text with the parts already on each side of it, and the node's whole data when this completes it: what a sink
   * that reads the data (for URLs in CSS) has to look at to see every token the insertion may have joined.
   */
  insertText(node: H, offset: number, text: string, around: string): void;
}

interface NodeState<H> {
  h: H;
  /** Placeholders standing right before this node (the first is where a sibling inserted after goes). */
  fronts: H[];
  /** Numbers of the children present, ascending (for parents only). */
  children: OrderedList<number> | null;
  provisional: boolean;
}

interface SlotState<H> {
  ref: SlotRef;
  target: 'text' | 'comment' | 'attr';
  node: number;
  h: H;
  attr: IndexAttr | null;
  /** For a slot in several parts, the parts that have come; null for one part (most): its fill is the value. */
  parts: SlotParts | null;
  left: number;
  placeholder: H | null;
}

/**
 * The parts of a slot in several parts that have come, and the offset (UTF-16) each goes in at. Sized by what came,
 * never by the count the index declares: a hostile index frame may declare millions of parts a slot, and an array of
 * that many per slot, made as its piece came, ran a host out of memory from one 137-byte datagram. A part's offset is
 * the length of the runs of consecutive parts before it, and the next part of a run (a block's parts of a slot come in
 * a row) goes right after the last one: a walk over every part below each part made a hostile page of 1,428 parts a
 * block in one slot cost more per frame as the slot filled (over 1 s a frame from its 75th data frame of 49 bytes).
 */
class SlotParts {
  private readonly texts = new Map<number, string>();
  /** Runs of consecutive parts here, in part order: first part, end (exclusive), UTF-16 length. */
  private readonly runs: Array<{ first: number; end: number; length: number }> = [];
  /** The offset of part `next`, right after the last one added (valid until the next add). */
  private next = -1;
  private nextOffset = 0;

  has(part: number): boolean {
    return this.texts.has(part);
  }

  get(part: number): string | undefined {
    return this.texts.get(part);
  }

  /** Adds a part not here yet; returns its offset (the length of the parts here before it). */
  add(part: number, text: string): number {
    const runs = this.runs;
    let at = 0; // the first run after the part
    let hi = runs.length;
    while (at < hi) {
      const mid = (at + hi) >> 1;
      if (runs[mid].first < part) at = mid + 1;
      else hi = mid;
    }
    let offset = 0;
    if (part === this.next) offset = this.nextOffset;
    else for (let k = 0; k < at; k++) offset += runs[k].length;
    const before = at > 0 && runs[at - 1].end === part ? runs[at - 1] : null;
    const after = at < runs.length && runs[at].first === part + 1 ? runs[at] : null;
    if (before !== null && after !== null) {
      before.end = after.end;
      before.length += text.length + after.length;
      runs.splice(at, 1);
    } else if (before !== null) {
      before.end++;
      before.length += text.length;
    } else if (after !== null) {
      after.first = part;
      after.length += text.length;
    } else runs.splice(at, 0, { first: part, end: part + 1, length: text.length });
    this.texts.set(part, text);
    this.next = part + 1;
    this.nextOffset = offset + text.length;
    return offset;
  }

  /** The whole text, once every part has come (parts 0 .. n - 1). */
  join(): string {
    let out = '';
    for (let i = 0; i < this.texts.size; i++) out += this.texts.get(i) as string;
    return out;
  }
}

/** No placeholder before a node (most nodes): shared, never written (a node that gets one gets a new array). */
const NO_FRONTS: never[] = Object.freeze([]) as never[];

/** Slots numbered below this are kept in an array (8 bytes a number up to the highest): the default node limit. */
const SLOT_ARRAY_LIMIT = DEFAULT_INDEX_LIMITS.maxNodes;

/** `a[i] = v`, first growing `a` with `undefined` up to `i` (so that it stays a packed array). */
function setAt<T>(a: Array<T | undefined>, i: number, v: T): void {
  while (a.length < i) a.push(undefined);
  a[i] = v;
}

const byNumber = (n: number): number => n;

/** A parent's list of present children. */
function childList(): OrderedList<number> {
  return new OrderedList(byNumber);
}

export class CatpTreeBuilder<H> {
  root: H | null = null;
  // Node numbers are dense (pre-order, from 0) and bounded (the assembler refuses a piece past its node limit), so
  // a plain array indexed by them: a Map's get and set were most of a large page's tree building (wikipedia-2).
  // Grown with `undefined` up to a number before it is set, so that it stays packed (a write far past the end would
  // make V8 turn an array into a dictionary). Slot numbers are dense too, but only the wire bounds them (2^32): an
  // array up to SLOT_ARRAY_LIMIT, a Map past it (where only a hostile index numbers its slots).
  private readonly nodes: Array<NodeState<H> | undefined> = [];
  private readonly slots: Array<SlotState<H> | undefined> = [];
  private readonly farSlots = new Map<number, SlotState<H>>();
  /** Index frame ordinal -> the placeholder standing for the frame before it, and the node it stands before. */
  private readonly gaps = new Map<number, { ph: H; node: number }>();
  private readonly pieces = new Map<number, IndexPiece>();
  /** Text slots still waiting for data, and placeholders shown. */
  missingSlots = 0;
  /** Consecutive parts of one text slot that came in the event being applied, not yet handed to the sink. */
  private run: { slot: SlotState<H>; offset: number; texts: string[]; first: number; last: number } | null = null;

  constructor(private readonly sink: CatpTreeSink<H>) {}

  /** Apply one event; returns true when the tree changed. Unknown / irrelevant events are ignored. */
  apply(ev: CatpEvent): boolean {
    if (ev.type === 'index-piece') {
      this.addPiece(ev.piece);
      this.fillAll(ev.fills);
      return true;
    }
    if (ev.type === 'block-filled') return this.fillAll(ev.fills);
    return false;
  }

  /**
   * An event's fills. Consecutive parts of one slot (a block's parts of a slot come in a row) go to the sink as one
   * insert: one per part cost the renderer the text's length per part (the DOM's insertData copies the data), so a
   * hostile page of 1,428 one-character parts a block into one <pre> took the renderer's applier in Chromium 0.86 s
   * for 100 blocks and 6.9 s for 300.
   */
  private fillAll(fills: readonly SlotFill[]): boolean {
    let changed = false;
    for (const f of fills) changed = this.fill(f) || changed;
    this.flushRun();
    return changed;
  }

  /** Hands the sink the run of parts not yet inserted (see fillAll). */
  private flushRun(): void {
    const r = this.run;
    if (r === null) return;
    this.run = null;
    const s = r.slot;
    const text = r.texts.length === 1 ? r.texts[0] : r.texts.join('');
    const parts = s.parts as SlotParts;
    const around = s.left === 0 ? parts.join() : (parts.get(r.first - 1) ?? '') + text + (parts.get(r.last + 1) ?? '');
    this.sink.insertText(s.h, r.offset, text, around);
  }

  private ensureRoot(p: IndexPiece): NodeState<H> {
    let r = this.nodeAt(0);
    if (r === undefined) {
      this.root = this.sink.reset(p.fragment, p.mode);
      r = { h: this.root, fronts: NO_FRONTS, children: childList(), provisional: false };
      setAt(this.nodes, 0, r);
    }
    return r;
  }

  private nodeAt(n: number): NodeState<H> | undefined {
    return n < this.nodes.length ? this.nodes[n] : undefined;
  }

  private slotAt(n: number): SlotState<H> | undefined {
    return n < this.slots.length ? this.slots[n] : this.farSlots.get(n);
  }

  private lead(n: number): H {
    const s = this.nodeAt(n) as NodeState<H>;
    return s.fronts.length > 0 ? s.fronts[0] : s.h;
  }

  /** Puts node n (handle h) under `parent` before its next present sibling. */
  private place(parent: number, n: number, h: H, fronts: H[] = NO_FRONTS): NodeState<H> {
    const p = this.nodeAt(parent) as NodeState<H>;
    const kids = p.children as OrderedList<number>;
    const next = kids.higher(n);
    const before = next === undefined ? null : this.lead(next);
    // In document order a node comes after its present siblings (an append); one whose piece came before pieces
    // after it goes in among them, which in a list of chunks moves at most a chunk (a page's index frames in
    // reverse moved every later sibling, with a splice each and then a merge a piece: quadratic in the page).
    kids.insert(n);
    this.sink.insertBefore(p.h, h, before);
    for (const f of fronts) this.sink.insertBefore(p.h, f, h);
    const st: NodeState<H> = { h, fronts, children: null, provisional: false };
    setAt(this.nodes, n, st);
    return st;
  }

  private addPiece(p: IndexPiece): void {
    this.ensureRoot(p);
    this.pieces.set(p.ordinal, p);
    // Ancestors not here yet stand in provisionally (right tag, no attributes until their own piece comes).
    let parent = 0;
    for (const c of p.chain) {
      if (this.nodeAt(c.n) === undefined) {
        if (c.content) {
          const h = this.sink.templateContent((this.nodeAt(parent) as NodeState<H>).h);
          setAt(this.nodes, c.n, { h, fronts: NO_FRONTS, children: childList(), provisional: true });
        } else {
          const st = this.place(parent, c.n, this.sink.element(c.tagName, c.namespace, []));
          st.children = childList();
          st.provisional = true;
        }
      }
      parent = c.n;
    }
    for (const nd of p.nodes) {
      const known = this.nodeAt(nd.n);
      switch (nd.kind) {
        case 'element': {
          // an IndexAttr is a CatpAttr (its slot aside): sinks read attributes, and copy what they keep
          const attrs: CatpAttr[] = nd.attrs;
          if (known !== undefined) {
            // a provisional ancestor: its attributes now
            if (attrs.length > 0) this.sink.setAttrs(known.h, attrs);
            known.provisional = false;
          } else {
            const st = this.place(nd.parent, nd.n, this.sink.element(nd.tagName, nd.namespace, attrs));
            st.children = childList();
          }
          for (const a of nd.attrs) if (a.slot) this.addSlot(a.slot, 'attr', nd.n, (this.nodeAt(nd.n) as NodeState<H>).h, a);
          break;
        }
        case 'content': {
          if (known !== undefined) known.provisional = false;
          else setAt(this.nodes, nd.n, { h: this.sink.templateContent((this.nodeAt(nd.parent) as NodeState<H>).h), fronts: NO_FRONTS, children: childList(), provisional: false });
          break;
        }
        case 'text':
          this.place(nd.parent, nd.n, this.sink.text(nd.value));
          break;
        case 'comment':
          this.place(nd.parent, nd.n, this.sink.comment(nd.data));
          break;
        case 'doctype':
          this.place(nd.parent, nd.n, this.sink.doctype(nd.name, nd.publicId, nd.systemId));
          break;
        case 'text-slot': {
          const h = this.sink.text('');
          const ph = nd.ref.stream === STREAM.VISIBLE ? this.sink.placeholder('slot', nd.ref.slot) : null;
          this.place(nd.parent, nd.n, h, ph === null ? NO_FRONTS : [ph]);
          this.addSlot(nd.ref, 'text', nd.n, h, null, ph);
          break;
        }
        case 'comment-slot': {
          const h = this.sink.comment('');
          this.place(nd.parent, nd.n, h);
          this.addSlot(nd.ref, 'comment', nd.n, h, null);
          break;
        }
      }
    }
    // This piece fills the gap before the next one; a gap before it is marked until the previous one comes.
    const next = this.gaps.get(p.ordinal + 1);
    if (next !== undefined) this.removeFront(next.node, next.ph, p.ordinal + 1);
    if (p.ordinal > 0 && p.nodes.length > 0 && !this.pieces.has(p.ordinal - 1)) {
      const first = this.nodeAt(p.firstNode) as NodeState<H>;
      const parentState = this.nodeAt(p.nodes[0].parent) as NodeState<H>;
      const ph = this.sink.placeholder('index', p.ordinal - 1);
      this.sink.insertBefore(parentState.h, ph, this.lead(p.firstNode));
      first.fronts = [ph, ...first.fronts];
      this.gaps.set(p.ordinal, { ph, node: p.firstNode });
    }
  }

  private removeFront(n: number, ph: H, gap: number): void {
    const st = this.nodeAt(n);
    if (st !== undefined) {
      const i = st.fronts.indexOf(ph);
      if (i >= 0) st.fronts.splice(i, 1);
    }
    this.sink.remove(ph);
    this.gaps.delete(gap);
  }

  private addSlot(ref: SlotRef, target: SlotState<H>['target'], node: number, h: H, attr: IndexAttr | null, placeholder: H | null = null): void {
    const st: SlotState<H> = {
      ref,
      target,
      node,
      h,
      attr,
      // (two arrays for every slot took a fifth of a large page's tree building: wikipedia-2 warm 48 → 37 ms)
      parts: ref.parts > 1 ? new SlotParts() : null,
      left: ref.parts,
      placeholder,
    };
    if (ref.slot < SLOT_ARRAY_LIMIT) setAt(this.slots, ref.slot, st);
    else this.farSlots.set(ref.slot, st);
    if (placeholder !== null) this.missingSlots++;
  }

  private fill(f: SlotFill): boolean {
    const s = this.slotAt(f.slot);
    if (s === undefined || f.part < 0 || f.part >= s.ref.parts) return false;
    if (s.parts === null) {
      // one part: the whole value
      if (s.left === 0) return false;
      s.left = 0;
      if (s.target !== 'attr') this.sink.setText(s.h, f.text);
      else if (s.attr !== null) this.sink.setAttrs(s.h, [{ ...plainAttr(s.attr), value: f.text }]);
    } else {
      if (s.parts.has(f.part)) return false;
      const r = this.run;
      // the next part of the run being gathered: it goes in with it (fillAll)
      const joins = r !== null && r.slot === s && f.part === r.last + 1;
      if (!joins) this.flushRun();
      s.left--;
      const offset = s.parts.add(f.part, f.text);
      if (s.target === 'attr') {
        // an attribute is set once whole: half a URL or path is worse than none
        if (s.left === 0 && s.attr !== null) this.sink.setAttrs(s.h, [{ ...plainAttr(s.attr), value: s.parts.join() }]);
      } else if (joins) {
        r.texts.push(f.text);
        r.last = f.part;
      } else {
        // Only the new parts go in: setting the whole data again per part made a slot of n parts cost n^2 (a 635 KB
        // inline script in ~200 parts was 49 MB of DOM operations for the renderer to take).
        this.run = { slot: s, offset, texts: [f.text], first: f.part, last: f.part };
      }
    }
    if (s.left === 0 && s.placeholder !== null) {
      this.flushRun(); // the text in before its placeholder goes, as a part by itself would be
      const st = this.nodeAt(s.node);
      if (st !== undefined) {
        const i = st.fronts.indexOf(s.placeholder);
        if (i >= 0) st.fronts.splice(i, 1);
      }
      this.sink.remove(s.placeholder);
      s.placeholder = null;
      this.missingSlots--;
    }
    return true;
  }
}

/** An attribute's own fields (an IndexAttr's slot left behind). */
function plainAttr(a: CatpAttr): CatpAttr {
  const c: CatpAttr = { name: a.name, value: a.value };
  if (a.namespace !== undefined) c.namespace = a.namespace;
  if (a.prefix !== undefined) c.prefix = a.prefix;
  return c;
}

type P5Node = DefaultTreeAdapterMap['node'];
type P5Parent = DefaultTreeAdapterMap['parentNode'];

/** A placeholder's title (the renderer's DomOpApplier writes the same). */
export function placeholderTitle(kind: 'slot' | 'index', ordinal: number): string {
  return kind === 'slot' ? `waiting for slot ${ordinal}` : `waiting for index frame ${ordinal}`;
}

/** A sink that builds a parse5 default-tree-adapter document (or fragment). */
export const parse5Sink: CatpTreeSink<P5Node> = {
  reset(fragment, mode) {
    if (fragment) return defaultTreeAdapter.createDocumentFragment();
    const d = defaultTreeAdapter.createDocument();
    defaultTreeAdapter.setDocumentMode(d, mode as DefaultTreeAdapterMap['document']['mode']);
    return d;
  },
  element(tagName, namespace, attrs) {
    return defaultTreeAdapter.createElement(tagName, namespace as DefaultTreeAdapterMap['element']['namespaceURI'], attrs.map(plainAttr));
  },
  setAttrs(element, attrs) {
    const el = element as DefaultTreeAdapterMap['element'];
    for (const a of attrs) {
      const have = el.attrs.find((x) => x.name === a.name && x.namespace === a.namespace);
      if (have) have.value = a.value;
      else el.attrs.push(plainAttr(a));
    }
  },
  text(value) {
    return defaultTreeAdapter.createTextNode(value);
  },
  comment(data) {
    return defaultTreeAdapter.createCommentNode(data);
  },
  doctype(name, publicId, systemId) {
    return { nodeName: '#documentType', name, publicId, systemId, parentNode: null } as DefaultTreeAdapterMap['documentType'];
  },
  templateContent(template) {
    const t = template as DefaultTreeAdapterMap['template'];
    if (t.content) return t.content;
    const content = defaultTreeAdapter.createDocumentFragment();
    defaultTreeAdapter.setTemplateContent(t, content);
    return content;
  },
  placeholder(kind, ordinal) {
    return defaultTreeAdapter.createElement('catp-missing', NS_HTML as DefaultTreeAdapterMap['element']['namespaceURI'], [
      { name: 'data-catp-kind', value: kind },
      { name: 'title', value: placeholderTitle(kind, ordinal) },
    ]);
  },
  insertBefore(parent, node, before) {
    if (before === null) defaultTreeAdapter.appendChild(parent as P5Parent, node as DefaultTreeAdapterMap['childNode']);
    else defaultTreeAdapter.insertBefore(parent as P5Parent, node as DefaultTreeAdapterMap['childNode'], before as DefaultTreeAdapterMap['childNode']);
  },
  remove(node) {
    defaultTreeAdapter.detachNode(node as DefaultTreeAdapterMap['childNode']);
  },
  setText(node, value) {
    if (node.nodeName === '#comment') (node as DefaultTreeAdapterMap['commentNode']).data = value;
    else (node as DefaultTreeAdapterMap['textNode']).value = value;
  },
  insertText(node, offset, text) {
    if (node.nodeName === '#comment') {
      const c = node as DefaultTreeAdapterMap['commentNode'];
      c.data = c.data.slice(0, offset) + text + c.data.slice(offset);
    } else {
      const t = node as DefaultTreeAdapterMap['textNode'];
      t.value = t.value.slice(0, offset) + text + t.value.slice(offset);
    }
  },
};

/** A builder over a parse5 tree; its root is the parse5 document (or fragment) `parse5.serialize` takes. */
export class Parse5TreeBuilder extends CatpTreeBuilder<P5Node> {
  declare root: P5Parent | null;
}

/** Convenience: a builder over a fresh parse5 tree. */
export function parse5TreeBuilder(): Parse5TreeBuilder {
  return new Parse5TreeBuilder(parse5Sink);
}
