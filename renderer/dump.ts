// Walks the page frame's document back into the JSON tree the host serializes with parse5 (--dump-dom).
import type { DumpNode } from '../protocol/browser/api';
import type { CatpAttr, DocumentMode } from '../protocol/catp/index-piece';

const HTML_NS = 'http://www.w3.org/1999/xhtml';

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
