// Builds the page's tree in the frame's document from the skeleton (the DOM mirror of protocol/catp/tree.ts's
// CatpTreeBuilder, written against the DOM directly because the renderer may import protocol's types only),
// then fills slots block by block. A slot still waiting for data is marked by a <catp-missing> placeholder
// element just before its (empty) text node; the placeholder goes when the slot's last part arrives, so the
// finished tree is exactly the parsed page. Also walks a DOM back into the JSON form --dump-dom uses.
import type { DumpNode, WireFill, WireNode, WireSkeleton } from '../protocol/browser/api';
import type { CatpAttr, DocumentMode } from '../protocol/catp/skeleton';

export const HTML_NS = 'http://www.w3.org/1999/xhtml';
export const PLACEHOLDER_TAG = 'catp-missing';
const PLACEHOLDER_STYLE =
  'display:inline-block;min-width:3em;height:.85em;margin:0 .1em;vertical-align:baseline;border-radius:2px;' +
  'background:repeating-linear-gradient(45deg,#f3b7b7 0 4px,#fde4e4 4px 8px);outline:1px dashed #d77';

interface SlotState {
  text: Text;
  parts: string[];
  done: boolean[];
  left: number;
  placeholder: Element | null;
}

export class DomPageBuilder {
  private slots: SlotState[] = [];
  readonly filledBlocks: number[] = [];
  blockCount = 0;
  mode: DocumentMode = 'no-quirks';
  /** Elements or attributes the DOM refused to create directly (rebuilt through an inert parse). */
  fallbacks = 0;
  private inert: Document | null = null;

  constructor(private readonly doc: Document) {}

  /** Replaces the document's tree with the skeleton's (slots empty, placeholders shown). */
  build(sk: WireSkeleton): void {
    const doc = this.doc;
    this.mode = sk.mode;
    this.blockCount = sk.blockCount;
    this.slots = new Array(sk.slotCount);
    while (doc.firstChild) doc.removeChild(doc.firstChild);
    // Each root child is built detached, then appended: one layout instead of thousands.
    for (const n of sk.children) {
      const node = this.node(n);
      if (node) doc.appendChild(node);
    }
  }

  private node(n: WireNode): Node | null {
    const doc = this.doc;
    switch (n.k) {
      case 'd':
        try {
          return doc.implementation.createDocumentType(n.name, n.publicId, n.systemId);
        } catch {
          this.fallbacks++;
          return null;
        }
      case 'c':
        return doc.createComment(n.v);
      case 't':
        return doc.createTextNode(n.v);
      case 's':
        return this.slot(n);
      case 'e': {
        const el = this.element(n.tag, n.ns, n.attrs);
        this.children(el, n.children);
        if (n.content && 'content' in el && n.ns === HTML_NS && n.tag === 'template') {
          this.children((el as HTMLTemplateElement).content, n.content);
        }
        return el;
      }
    }
  }

  private children(parent: Node, list: WireNode[]): void {
    for (const c of list) {
      const node = this.node(c);
      if (node === null) continue;
      parent.appendChild(node);
    }
  }

  private slot(n: Extract<WireNode, { k: 's' }>): Node {
    const doc = this.doc;
    const text = doc.createTextNode('');
    const frag = doc.createDocumentFragment();
    const ph = doc.createElement(PLACEHOLDER_TAG);
    ph.setAttribute('data-catp-slot', String(n.slot));
    ph.setAttribute('data-catp-blocks', n.blocks.join(' '));
    ph.setAttribute('style', PLACEHOLDER_STYLE);
    ph.setAttribute('title', `waiting for block ${n.blocks.join(', ')}`);
    frag.appendChild(ph);
    frag.appendChild(text);
    this.slots[n.slot] = { text, parts: new Array<string>(n.parts).fill(''), done: new Array<boolean>(n.parts).fill(false), left: n.parts, placeholder: ph };
    return frag;
  }

  private element(tag: string, ns: string, attrs: CatpAttr[]): Element {
    const doc = this.doc;
    let el: Element;
    try {
      el = ns === HTML_NS ? doc.createElement(tag) : doc.createElementNS(ns, tag);
    } catch {
      el = this.inertElement(tag, ns);
    }
    for (const a of attrs) {
      try {
        if (a.namespace) el.setAttributeNS(a.namespace, a.prefix ? `${a.prefix}:${a.name}` : a.name, a.value);
        else el.setAttribute(a.name, a.value);
      } catch {
        this.inertAttribute(el, a);
      }
    }
    return el;
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
    this.fallbacks++;
    const box = this.inertDoc().createElement('div');
    box.innerHTML = `<span ${a.name}="">`;
    const attr = box.firstElementChild?.attributes[0];
    if (!attr || attr.localName !== a.name) return;
    box.firstElementChild!.removeAttributeNode(attr);
    attr.value = a.value;
    el.setAttributeNode(this.doc.adoptNode(attr));
  }

  /** Applies one block's fills; returns how many slots changed. */
  fill(block: number, fills: WireFill[]): number {
    let changed = 0;
    for (const f of fills) {
      const s = this.slots[f.slot];
      if (!s || f.part < 0 || f.part >= s.parts.length) continue;
      if (!s.done[f.part]) {
        s.done[f.part] = true;
        s.left--;
      }
      s.parts[f.part] = f.text;
      s.text.data = s.parts.length === 1 ? f.text : s.parts.join('');
      if (s.left <= 0 && s.placeholder) {
        s.placeholder.remove();
        s.placeholder = null;
      }
      changed++;
    }
    this.filledBlocks.push(block);
    return changed;
  }

  /** Placeholders still in the tree. */
  missingSlots(): number {
    let n = 0;
    for (const s of this.slots) if (s?.placeholder) n++;
    return n;
  }
}

/** Walks a document into the JSON tree the host serializes with parse5 (--dump-dom). */
export function dumpDocument(doc: Document, mode?: DocumentMode): DumpNode {
  const docMode: DocumentMode = mode ?? (doc.compatMode === 'BackCompat' ? 'quirks' : 'no-quirks');
  const root: DumpNode = { t: 'doc', mode: docMode, children: [] };
  const stack: { from: Node; into: DumpNode[] }[] = [{ from: doc, into: root.children }];
  while (stack.length > 0) {
    const { from, into } = stack.pop()!;
    for (let c = from.firstChild; c !== null; c = c.nextSibling) {
      switch (c.nodeType) {
        case Node.ELEMENT_NODE: {
          const el = c as Element;
          const attrs: CatpAttr[] = [];
          for (const a of Array.from(el.attributes)) {
            const attr: CatpAttr = { name: a.localName, value: a.value };
            if (a.namespaceURI) {
              attr.namespace = a.namespaceURI;
              attr.prefix = a.prefix ?? '';
            }
            attrs.push(attr);
          }
          const node: DumpNode = { t: 'el', tag: el.localName, ns: el.namespaceURI ?? HTML_NS, attrs, children: [] };
          into.push(node);
          stack.push({ from: el, into: node.children });
          if (el.namespaceURI === HTML_NS && el.localName === 'template') {
            node.content = [];
            stack.push({ from: (el as HTMLTemplateElement).content, into: node.content });
          }
          break;
        }
        case Node.TEXT_NODE:
          into.push({ t: 'text', v: (c as Text).data });
          break;
        case Node.COMMENT_NODE:
          into.push({ t: 'comment', v: (c as Comment).data });
          break;
        case Node.DOCUMENT_TYPE_NODE: {
          const d = c as DocumentType;
          into.push({ t: 'doctype', name: d.name, publicId: d.publicId, systemId: d.systemId });
          break;
        }
        default:
          break;
      }
    }
  }
  return root;
}
