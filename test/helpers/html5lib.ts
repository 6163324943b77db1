/**
 * html5lib tree-construction test support: a `.dat` parser and a serializer of parse5 trees into the
 * `#document` format (see the corpus README).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { DefaultTreeAdapterMap } from 'parse5';

export interface TreeCase {
  file: string;
  /** 0-based index of the case in its file. */
  index: number;
  data: string;
  errors: number;
  /** Context element of a fragment case: `{ namespace, localName }`; undefined for a document case. */
  fragment?: { namespace: string; localName: string };
  /** true: `#script-on`, false: `#script-off`, undefined: run in both modes. */
  scripting?: boolean;
  /** The `#document` dump, lines joined with '\n'. */
  document: string;
}

const NS = {
  html: 'http://www.w3.org/1999/xhtml',
  svg: 'http://www.w3.org/2000/svg',
  math: 'http://www.w3.org/1998/Math/MathML',
  xlink: 'http://www.w3.org/1999/xlink',
  xml: 'http://www.w3.org/XML/1998/namespace',
  xmlns: 'http://www.w3.org/2000/xmlns/',
};

/** Parse one `.dat` file's text. */
export function parseDat(text: string, file = ''): TreeCase[] {
  const lines = text.split('\n');
  const cases: TreeCase[] = [];
  let i = 0;
  while (i < lines.length) {
    if (lines[i] !== '#data') {
      i++;
      continue;
    }
    i++;
    const data: string[] = [];
    while (i < lines.length && lines[i] !== '#errors') data.push(lines[i++]);
    i++; // #errors
    let errors = 0;
    let fragment: TreeCase['fragment'];
    let scripting: boolean | undefined;
    const doc: string[] = [];
    while (i < lines.length) {
      const l = lines[i];
      if (l === '#new-errors' || l === '#errors') {
        i++;
        continue;
      }
      if (l === '#document-fragment') {
        const ctx = lines[i + 1];
        i += 2;
        if (ctx.startsWith('svg ')) fragment = { namespace: NS.svg, localName: ctx.slice(4) };
        else if (ctx.startsWith('math ')) fragment = { namespace: NS.math, localName: ctx.slice(5) };
        else fragment = { namespace: NS.html, localName: ctx };
        continue;
      }
      if (l === '#script-off' || l === '#script-on') {
        scripting = l === '#script-on';
        i++;
        continue;
      }
      if (l === '#document') {
        i++;
        // Until a blank line followed by '#data', or the end of the file.
        while (i < lines.length) {
          if (lines[i] === '' && (i + 1 >= lines.length || lines[i + 1] === '#data')) break;
          doc.push(lines[i++]);
        }
        break;
      }
      errors++;
      i++;
    }
    cases.push({ file, index: cases.length, data: data.join('\n'), errors, fragment, scripting, document: doc.join('\n') });
  }
  return cases;
}

export function loadDatDir(dir: string): TreeCase[] {
  const out: TreeCase[] = [];
  for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.dat')).sort()) {
    out.push(...parseDat(fs.readFileSync(path.join(dir, f), 'utf8'), f));
  }
  return out;
}

type Node = DefaultTreeAdapterMap['node'];
type Parent = DefaultTreeAdapterMap['parentNode'];

function elName(ns: string, name: string): string {
  if (ns === NS.svg) return `svg ${name}`;
  if (ns === NS.math) return `math ${name}`;
  return name;
}

function attrName(a: { name: string; namespace?: string }): string {
  switch (a.namespace) {
    case NS.xlink:
      return `xlink ${a.name}`;
    case NS.xml:
      return `xml ${a.name}`;
    case NS.xmlns:
      return `xmlns ${a.name}`;
    default:
      return a.name;
  }
}

/** Serialize a parse5 document / fragment into html5lib's `#document` format. */
export function toHtml5libTree(root: Parent): string {
  const out: string[] = [];
  const walk = (parent: Parent, depth: number): void => {
    const pad = '| ' + '  '.repeat(depth);
    for (const n of parent.childNodes as Node[]) {
      switch (n.nodeName) {
        case '#text':
          out.push(`${pad}"${(n as DefaultTreeAdapterMap['textNode']).value}"`);
          break;
        case '#comment':
          out.push(`${pad}<!-- ${(n as DefaultTreeAdapterMap['commentNode']).data} -->`);
          break;
        case '#documentType': {
          const d = n as DefaultTreeAdapterMap['documentType'];
          const ids = d.publicId || d.systemId ? ` "${d.publicId ?? ''}" "${d.systemId ?? ''}"` : '';
          out.push(`${pad}<!DOCTYPE ${d.name ?? ''}${ids}>`);
          break;
        }
        default: {
          const e = n as DefaultTreeAdapterMap['element'];
          out.push(`${pad}<${elName(e.namespaceURI, e.tagName)}>`);
          const attrs = e.attrs.map((a) => [attrName(a), a.value] as const);
          attrs.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
          for (const [k, v] of attrs) out.push(`${pad}  ${k}="${v}"`);
          if (e.namespaceURI === NS.html && e.tagName === 'template' && 'content' in e) {
            out.push(`${pad}  content`);
            walk((e as DefaultTreeAdapterMap['template']).content, depth + 2);
          }
          walk(e, depth + 1);
        }
      }
    }
  };
  walk(root, 0);
  return out.join('\n');
}

/** Where the shared corpus is: env CATP_CORPUS, else ../shared/corpus from the project root; null if absent. */
export function corpusDir(): string | null {
  const candidates = [process.env.CATP_CORPUS, path.resolve(__dirname, '../../../shared/corpus')];
  for (const c of candidates) if (c && fs.existsSync(c)) return c;
  return null;
}
