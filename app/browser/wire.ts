// --dump-dom: the renderer's DumpNode → parse5 tree → parse5.serialize.
import { defaultTreeAdapter, serialize, type DefaultTreeAdapterMap } from 'parse5';

import type { DumpNode } from '../../protocol/browser/api';
import { HostError } from '../errors';

type P5Parent = DefaultTreeAdapterMap['parentNode'];
const MAX_DUMP_NODES = 1 << 21;

/** Builds a parse5 document from the renderer's DOM dump (untrusted shape: checked as it goes). */
export function dumpToParse5(root: DumpNode): DefaultTreeAdapterMap['document'] {
  if (root.t !== 'doc') throw new HostError('HOST_ERR_BAD_DUMP', 'a dump must start with a document');
  const doc = defaultTreeAdapter.createDocument();
  defaultTreeAdapter.setDocumentMode(doc, root.mode as DefaultTreeAdapterMap['document']['mode']);
  let count = 0;
  const stack: { parent: P5Parent; list: DumpNode[] }[] = [{ parent: doc, list: root.children }];
  while (stack.length > 0) {
    const { parent, list } = stack.pop()!;
    if (!Array.isArray(list)) throw new HostError('HOST_ERR_BAD_DUMP', 'bad dump: children');
    for (const n of list) {
      if (++count > MAX_DUMP_NODES) throw new HostError('HOST_ERR_BAD_DUMP', 'bad dump: too many nodes');
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
          throw new HostError('HOST_ERR_BAD_DUMP', 'bad dump: node type');
      }
    }
  }
  return doc;
}

/** parse5's serialization of a dumped DOM. */
export function serializeDump(root: DumpNode): string {
  return serialize(dumpToParse5(root));
}
