/**
 * Applying assembler events to a tree, through a small adapter interface (parse5's tree-adapter idea).
 *
 * `CatpTreeBuilder` turns `skeleton-ready` into nodes (a placeholder text node per slot) and
 * `block-filled` into text updates. The same builder drives a real DOM in the renderer (a DOM sink) and
 * a parse5 default-tree-adapter document in tests ({@link parse5Sink}), so a test can compare
 * `parse5.serialize(builder.root)` with `parse5.serialize(parse5.parse(original))`.
 */
import { defaultTreeAdapter } from 'parse5';
import type { DefaultTreeAdapterMap } from 'parse5';
import type { CatpAttr, DocumentMode, Skeleton, SkeletonNode } from './skeleton';
import type { CatpEvent } from './assembler';

/** What a tree needs to offer. `P` is a node that can hold children, `T` a text node. */
export interface CatpTreeSink<P, T> {
  createRoot(fragment: boolean, mode: DocumentMode): P;
  /** Create an element, append it to `parent`, return it. */
  appendElement(parent: P, tagName: string, namespace: string, attrs: CatpAttr[]): P;
  /** The content fragment of a template element just created (create it if the tree needs that). */
  templateContent(template: P): P;
  appendText(parent: P, value: string): T;
  setText(node: T, value: string): void;
  appendComment(parent: P, data: string): void;
  appendDoctype(parent: P, name: string, publicId: string, systemId: string): void;
}

export class CatpTreeBuilder<P, T> {
  root: P | null = null;
  private slotNodes: T[] = [];
  private slotParts: string[][] = [];

  constructor(private readonly sink: CatpTreeSink<P, T>) {}

  /** Apply one event; returns true when the tree changed. Unknown / irrelevant events are ignored. */
  apply(ev: CatpEvent): boolean {
    if (ev.type === 'skeleton-ready') {
      this.build(ev.skeleton);
      return true;
    }
    if (ev.type === 'block-filled') {
      if (this.root === null) return false;
      for (const f of ev.fills) {
        const parts = this.slotParts[f.slot];
        if (parts === undefined) continue;
        parts[f.part] = f.text;
        this.sink.setText(this.slotNodes[f.slot], parts.join(''));
      }
      return ev.fills.length > 0;
    }
    return false;
  }

  private build(sk: Skeleton): void {
    const sink = this.sink;
    this.root = sink.createRoot(sk.fragment, sk.mode);
    this.slotNodes = new Array(sk.slotCount);
    this.slotParts = new Array(sk.slotCount);
    // Explicit stack: depth is bounded by the decoder, but no recursion anyway.
    const stack: Array<{ parent: P; list: SkeletonNode[]; i: number }> = [{ parent: this.root, list: sk.children, i: 0 }];
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      if (top.i >= top.list.length) {
        stack.pop();
        continue;
      }
      const n = top.list[top.i++];
      switch (n.kind) {
        case 'element': {
          const el = sink.appendElement(top.parent, n.tagName, n.namespace, n.attrs);
          if (n.content) stack.push({ parent: sink.templateContent(el), list: n.content, i: 0 });
          stack.push({ parent: el, list: n.children, i: 0 });
          break;
        }
        case 'text':
          sink.appendText(top.parent, n.value);
          break;
        case 'slot':
          this.slotNodes[n.slot] = sink.appendText(top.parent, '');
          this.slotParts[n.slot] = new Array<string>(n.parts).fill('');
          break;
        case 'comment':
          sink.appendComment(top.parent, n.data);
          break;
        case 'doctype':
          sink.appendDoctype(top.parent, n.name, n.publicId, n.systemId);
          break;
      }
    }
  }
}

type P5Parent = DefaultTreeAdapterMap['parentNode'];
type P5Text = DefaultTreeAdapterMap['textNode'];

/** A sink that builds a parse5 default-tree-adapter document (or fragment). */
export const parse5Sink: CatpTreeSink<P5Parent, P5Text> = {
  createRoot(fragment, mode) {
    if (fragment) return defaultTreeAdapter.createDocumentFragment();
    const d = defaultTreeAdapter.createDocument();
    defaultTreeAdapter.setDocumentMode(d, mode as DefaultTreeAdapterMap['document']['mode']);
    return d;
  },
  appendElement(parent, tagName, namespace, attrs) {
    const el = defaultTreeAdapter.createElement(
      tagName,
      namespace as DefaultTreeAdapterMap['element']['namespaceURI'],
      attrs.map((a) => ({ ...a })),
    );
    defaultTreeAdapter.appendChild(parent, el);
    return el;
  },
  templateContent(template) {
    const content = defaultTreeAdapter.createDocumentFragment();
    defaultTreeAdapter.setTemplateContent(template as DefaultTreeAdapterMap['template'], content);
    return content;
  },
  appendText(parent, value) {
    const t = defaultTreeAdapter.createTextNode(value);
    defaultTreeAdapter.appendChild(parent, t);
    return t;
  },
  setText(node, value) {
    node.value = value;
  },
  appendComment(parent, data) {
    defaultTreeAdapter.appendChild(parent, defaultTreeAdapter.createCommentNode(data));
  },
  appendDoctype(parent, name, publicId, systemId) {
    const d: DefaultTreeAdapterMap['documentType'] = { nodeName: '#documentType', name, publicId, systemId, parentNode: null };
    defaultTreeAdapter.appendChild(parent, d);
  },
};

/** Convenience: a builder over a fresh parse5 tree. */
export function parse5TreeBuilder(): CatpTreeBuilder<P5Parent, P5Text> {
  return new CatpTreeBuilder(parse5Sink);
}
