// The host side of the renderer's DOM: a CatpTreeSink (protocol/catp/tree.ts) that records the builder's calls
// as DomOps (protocol/browser/api.ts), a flat array the renderer applies in order. The builder decides where
// every node goes; the renderer only executes. Handles are numbers, given out in creation order (a batch says
// where its count starts, so they need not be carried); 0 is the page's document.
import { DOM_OP, type DomOps } from '../../protocol/browser/api';
import { NS_HTML, NS_MATHML, NS_SVG, type CatpAttr, type CatpTreeSink, type DocumentMode } from '../../protocol/catp';
import { tagMatters, type PageNames } from './page-names';

const NS_CODE: Record<string, number> = { [NS_HTML]: 0, [NS_SVG]: 1, [NS_MATHML]: 2 };
const MODE_CODE: Record<DocumentMode, number> = { 'no-quirks': 0, quirks: 1, 'limited-quirks': 2 };

export class DomOpRecorder implements CatpTreeSink<number> {
  private next = 1;
  /** This batch: the handle its first created node gets, then the operations. */
  private ops: DomOps = [this.next];
  /** The node this batch created last (APPEND_NEW appends it), 0 for none yet. */
  private last = 0;
  /** Template element handle -> its content's handle. */
  private readonly contents = new Map<number, number>();
  /**
   * The tag name of each element whose tag decides what a URL attribute loads (page-names.ts tagMatters), and a
   * link's rel: a slot may fill an attribute later (a <base>'s href, a link's href). Other elements read untagged.
   */
  private readonly tags = new Map<number, string>();
  private readonly rels = new Map<number, string>();

  /** `names`: told every URL the tree names, as the operations holding it are recorded (before they are sent). */
  constructor(private readonly names: PageNames | null = null) {}

  /** The operations recorded since the last call, as one batch (the caller sends it as one `dom` event); [] for none. */
  take(): DomOps {
    if (this.ops.length === 1) return [];
    const out = this.ops;
    this.ops = [this.next];
    this.last = 0;
    return out;
  }

  /** Operations recorded since the last take. */
  get pending(): number {
    return this.ops.length - 1;
  }

  private created(): number {
    this.last = this.next++;
    return this.last;
  }

  /** Attributes as name-value pairs; all four fields each (count negative) when one has a namespace or a prefix. */
  private attrs(attrs: CatpAttr[]): void {
    if (attrs.every((a) => !a.namespace && !a.prefix)) {
      this.ops.push(attrs.length);
      for (const a of attrs) this.ops.push(a.name, a.value);
      return;
    }
    this.ops.push(-attrs.length);
    for (const a of attrs) this.ops.push(a.name, a.value, a.namespace ?? '', a.prefix ?? '');
  }

  reset(fragment: boolean, mode: DocumentMode): number {
    this.ops.push(DOM_OP.RESET, MODE_CODE[mode], fragment ? 1 : 0);
    this.contents.clear();
    this.tags.clear();
    this.rels.clear();
    return 0;
  }

  element(tagName: string, namespace: string, attrs: CatpAttr[]): number {
    const h = this.created();
    this.ops.push(DOM_OP.ELEMENT, tagName, NS_CODE[namespace] ?? namespace);
    this.attrs(attrs);
    if (this.names !== null && tagMatters(tagName)) {
      this.tags.set(h, tagName);
      const rel = tagName === 'link' ? attrs.find((a) => a.name === 'rel') : undefined;
      if (rel !== undefined) this.rels.set(h, rel.value);
    }
    this.names?.element(tagName, attrs);
    return h;
  }

  setAttrs(element: number, attrs: CatpAttr[]): void {
    this.ops.push(DOM_OP.SET_ATTRS, element);
    this.attrs(attrs);
    if (this.names === null) return;
    const rel = this.rels.get(element);
    this.names.element(this.tags.get(element) ?? '', rel === undefined ? attrs : [...attrs, { name: 'rel', value: rel }]);
  }

  text(value: string): number {
    const h = this.created();
    this.ops.push(DOM_OP.TEXT, value);
    this.names?.css(value); // a <style>'s text (any text is read: naming too much only allows what the page wrote)
    return h;
  }

  comment(data: string): number {
    const h = this.created();
    this.ops.push(DOM_OP.COMMENT, data);
    return h;
  }

  doctype(name: string, publicId: string, systemId: string): number {
    const h = this.created();
    this.ops.push(DOM_OP.DOCTYPE, name, publicId, systemId);
    return h;
  }

  templateContent(template: number): number {
    const known = this.contents.get(template);
    if (known !== undefined) return known;
    const h = this.created();
    this.ops.push(DOM_OP.CONTENT, template);
    this.contents.set(template, h);
    return h;
  }

  placeholder(kind: 'slot' | 'index', ordinal: number): number {
    const h = this.created();
    this.ops.push(DOM_OP.PLACEHOLDER, kind === 'slot' ? 0 : 1, ordinal);
    return h;
  }

  insertBefore(parent: number, node: number, before: number | null): void {
    if (node === this.last && before === null) this.ops.push(DOM_OP.APPEND_NEW, parent);
    else this.ops.push(DOM_OP.INSERT, parent, node, before ?? 0);
  }

  remove(node: number): void {
    this.ops.push(DOM_OP.REMOVE, node);
  }

  setText(node: number, value: string): void {
    this.ops.push(DOM_OP.SET_TEXT, node, value);
    this.names?.css(value);
  }

  insertText(node: number, offset: number, text: string, around: string): void {
    this.ops.push(DOM_OP.INSERT_TEXT, node, offset, text);
    this.names?.css(around);
  }
}
