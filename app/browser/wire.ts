// Conversions between the protocol's values and the browser API's JSON-able forms, and --dump-dom's
// DumpNode → parse5 tree → parse5.serialize.
import { defaultTreeAdapter, serialize, type DefaultTreeAdapterMap } from 'parse5';

import type { Skeleton, SkeletonNode } from '../../protocol/catp';
import type { DumpNode, WireNode, WireSkeleton } from '../../protocol/browser/api';

/** The assembler's Skeleton as JSON: each slot also names the blocks that carry its pieces. */
export function toWireSkeleton(sk: Skeleton): WireSkeleton {
  const pieceBlock = new Uint32Array(sk.pieceCount);
  sk.blocks.forEach((b, i) => pieceBlock.fill(i, b.firstPiece, b.firstPiece + b.pieces));
  const convert = (list: SkeletonNode[]): WireNode[] => {
    const out: WireNode[] = [];
    for (const n of list) {
      switch (n.kind) {
        case 'element': {
          const e: WireNode = { k: 'e', tag: n.tagName, ns: n.namespace, attrs: n.attrs.map((a) => ({ ...a })), children: convert(n.children) };
          if (n.content) e.content = convert(n.content);
          out.push(e);
          break;
        }
        case 'text':
          out.push({ k: 't', v: n.value });
          break;
        case 'slot': {
          const blocks: number[] = [];
          for (let p = n.firstPiece; p < n.firstPiece + n.parts; p++) {
            const b = pieceBlock[p]!;
            if (blocks[blocks.length - 1] !== b) blocks.push(b);
          }
          out.push({ k: 's', slot: n.slot, parts: n.parts, blocks });
          break;
        }
        case 'comment':
          out.push({ k: 'c', v: n.data });
          break;
        case 'doctype':
          out.push({ k: 'd', name: n.name, publicId: n.publicId, systemId: n.systemId });
          break;
      }
    }
    return out;
  };
  // Depth is bounded by the index decoder's limit (2048), well inside the stack for this recursion.
  return { fragment: sk.fragment, mode: sk.mode, children: convert(sk.children), slotCount: sk.slotCount, blockCount: sk.blocks.length };
}

type P5Parent = DefaultTreeAdapterMap['parentNode'];
const MAX_DUMP_NODES = 1 << 21;

/** Builds a parse5 document from the renderer's DOM dump (untrusted shape: checked as it goes). */
export function dumpToParse5(root: DumpNode): DefaultTreeAdapterMap['document'] {
  if (root.t !== 'doc') throw new Error('a dump must start with a document');
  const doc = defaultTreeAdapter.createDocument();
  defaultTreeAdapter.setDocumentMode(doc, root.mode as DefaultTreeAdapterMap['document']['mode']);
  let count = 0;
  const stack: { parent: P5Parent; list: DumpNode[] }[] = [{ parent: doc, list: root.children }];
  while (stack.length > 0) {
    const { parent, list } = stack.pop()!;
    if (!Array.isArray(list)) throw new Error('bad dump: children');
    for (const n of list) {
      if (++count > MAX_DUMP_NODES) throw new Error('bad dump: too many nodes');
      switch (n.t) {
        case 'el': {
          const el = defaultTreeAdapter.createElement(String(n.tag), String(n.ns) as DefaultTreeAdapterMap['element']['namespaceURI'],
            (n.attrs ?? []).map((a) => ({ ...a })));
          defaultTreeAdapter.appendChild(parent, el);
          stack.push({ parent: el, list: n.children });
          if (n.content) {
            const content = defaultTreeAdapter.createDocumentFragment();
            defaultTreeAdapter.setTemplateContent(el as DefaultTreeAdapterMap['template'], content);
            stack.push({ parent: content, list: n.content });
          }
          break;
        }
        case 'text':
          defaultTreeAdapter.insertText(parent, String(n.v));
          break;
        case 'comment':
          defaultTreeAdapter.appendChild(parent, defaultTreeAdapter.createCommentNode(String(n.v)));
          break;
        case 'doctype': {
          const d: DefaultTreeAdapterMap['documentType'] = { nodeName: '#documentType', name: n.name, publicId: n.publicId, systemId: n.systemId, parentNode: null };
          defaultTreeAdapter.appendChild(parent, d);
          break;
        }
        default:
          throw new Error('bad dump: node type');
      }
    }
  }
  return doc;
}

/** parse5's serialization of a dumped DOM. */
export function serializeDump(root: DumpNode): string {
  return serialize(dumpToParse5(root));
}
