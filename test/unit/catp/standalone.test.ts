/**
 * Index frames that stand alone (issue 16): every index frame, whatever order it arrives in and whatever is lost,
 * makes its piece of the page displayable the moment it arrives. Checked after EVERY frame against a model of
 * what must be on screen, built from the encoder's numbered nodes:
 *  - every node of every piece that arrived is in the tree, in its place (pre-order, right parent), with its
 *    attributes and inline text; slot text as far as its data has come;
 *  - the ancestors of a piece whose own frame is not here stand in provisionally: right tag, no attributes;
 *  - a `<catp-missing data-catp-kind="index">` stands before the first node of every piece whose preceding
 *    piece is missing, and goes when that piece arrives; a `kind="slot"` one before each visible text still
 *    waiting for data;
 *  - nothing else is in the tree.
 * At the end the tree is exactly parse5's, without placeholders. Lost index frames are repaired through the
 * real report / resend path (index frames are resent before anything else).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as parse5 from 'parse5';
import {
  CatpAssembler,
  CatpEvent,
  CatpTreeBuilder,
  encodePage,
  EncodedPage,
  FIRST_FLIGHT,
  FRAME_KIND,
  HEADER_BYTES,
  IndexAttr,
  IndexNode,
  IndexPiece,
  PAGE_DIGEST_BYTES,
  parse5TreeBuilder,
  Parse5TreeBuilder,
  RepairSender,
  STREAM,
  SlotRef,
} from '../../../protocol/catp';
import { DomOpRecorder } from '../../../app/browser/dom-recorder';
import { PageNames } from '../../../app/browser/page-names';
import { toHtml5libTree } from '../../helpers/html5lib';
import { realPages } from '../../helpers/catp-real-pages';
import { codec, newAssembler, placeholders, rng, seqOf, sha256, shuffle } from '../../helpers/catp-util';
import { seededRng } from '../../../protocol/random';
import { testIf } from '../../helpers/requires';

type P5Node = parse5.DefaultTreeAdapterMap['node'];
type P5Element = parse5.DefaultTreeAdapterMap['element'];
type Doc = parse5.DefaultTreeAdapterMap['document'];

const ID = new Uint8Array([0x80, 0x16, 0x16, 0x16, 0x16, 0x16, 0x16, 0x16]);

/** A generated article with many index frames: varied markup, attributes, lists, a table, a template. */
/** The first element named `tag` in document order. */
function findElement(n: P5Node, tag: string): P5Element | null {
  if ('tagName' in n && n.tagName === tag) return n;
  for (const c of ('childNodes' in n ? n.childNodes : []) as P5Node[]) {
    const hit = findElement(c, tag);
    if (hit) return hit;
  }
  return null;
}

function generated(): string {
  const r = seededRng(16);
  const words = ['river', 'stone', 'ünïcode', 'graph', '日本語', 'window', 'packet', 'loss', '😀', 'frame', 'index', 'piece'];
  const phrase = (n: number) => Array.from({ length: n }, () => words[Math.floor(r() * words.length)]).join(' ');
  const sections = Array.from({ length: 150 }, (_, i) =>
    `<section id="s${i}" class="sec sec-${i % 4}" data-n="${i}"><h2>Section ${i}: ${phrase(3)}</h2>` +
    `<p class="lead">${phrase(40)} <a href="/s/${i}?q=${phrase(1)}" title="${phrase(2)}">${phrase(2)}</a> ${phrase(25)}</p>` +
    `<ul class="l${i}">${Array.from({ length: 4 }, (_, j) => `<li id="i${i}-${j}"><em>${phrase(2)}</em> ${phrase(4)}</li>`).join('')}</ul>` +
    (i % 7 === 3 ? `<table><tr><th>a</th><th>b</th></tr><tr><td>${phrase(3)}</td><td>${phrase(3)}</td></tr></table>` : '') +
    (i % 9 === 5 ? `<template><p>${phrase(5)}</p></template><!-- ${phrase(8)} -->` : '') +
    `</section>`).join('\n');
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Generated</title><style>body{font:16px serif} .sec{margin:1em}</style></head>` +
    `<body><header id="top"><h1>Top heading of the page</h1><p id="first">First paragraph, at the top.</p></header><main>${sections}</main>` +
    `<footer><p id="last">Last paragraph, at the bottom.</p></footer><script>var late = 1;</script></body></html>`;
}

/** What must be on screen, from the encoder's numbered nodes and the events seen so far. */
class Model {
  readonly nodes: IndexNode[];
  private readonly depth: number[];
  private readonly refs = new Map<number, SlotRef>();
  private readonly arrived = new Map<number, IndexPiece>();
  private readonly real = new Set<number>();
  private readonly firstOf = new Map<number, number>();
  private readonly parts = new Map<number, string[]>();

  constructor(readonly page: EncodedPage) {
    this.nodes = page.pieces.flatMap((p) => p.nodes);
    this.depth = [0];
    for (const nd of this.nodes) {
      this.depth[nd.n] = this.depth[nd.parent] + 1;
      if (nd.kind === 'element') for (const a of nd.attrs) if (a.slot) this.refs.set(a.slot.slot, a.slot);
      if (nd.kind === 'text-slot' || nd.kind === 'comment-slot') this.refs.set(nd.ref.slot, nd.ref);
    }
  }

  apply(e: CatpEvent): void {
    if (e.type === 'index-piece') {
      this.arrived.set(e.piece.ordinal, e.piece);
      for (const nd of e.piece.nodes) this.real.add(nd.n);
      if (e.piece.nodeCount > 0) this.firstOf.set(e.piece.firstNode, e.piece.ordinal);
    }
    if (e.type === 'index-piece' || e.type === 'block-filled') {
      for (const f of e.fills) {
        let p = this.parts.get(f.slot);
        if (p === undefined) this.parts.set(f.slot, (p = new Array<string>(f.parts).fill('')));
        p[f.part] = f.text;
      }
    }
  }

  has(ordinal: number): boolean {
    return this.arrived.has(ordinal);
  }

  private text(ref: SlotRef): string {
    return (this.parts.get(ref.slot) ?? []).join('');
  }

  private complete(ref: SlotRef): boolean {
    return this.filledCount(ref) === ref.parts;
  }

  private readonly filled = new Map<number, Set<number>>();
  /** Parts of a slot filled so far (a part may be filled with ''). */
  private filledCount(ref: SlotRef): number {
    return this.filled.get(ref.slot)?.size ?? 0;
  }

  noteFills(e: CatpEvent): void {
    if (e.type !== 'index-piece' && e.type !== 'block-filled') return;
    for (const f of e.fills) {
      let s = this.filled.get(f.slot);
      if (s === undefined) this.filled.set(f.slot, (s = new Set()));
      s.add(f.part);
    }
  }

  /** Expected tree entries (depth, description) in document order, and the node number of each (-1: placeholder). */
  expected(): { entries: string[]; ns: number[]; indexPlaceholders: number; provisional: number } {
    const prov = new Set<number>();
    for (const p of this.arrived.values()) for (const c of p.chain) if (!this.real.has(c.n)) prov.add(c.n);
    const entries: string[] = [];
    const ns: number[] = [];
    let indexPlaceholders = 0;
    for (const nd of this.nodes) {
      const n = nd.n;
      const isReal = this.real.has(n);
      if (!isReal && !prov.has(n)) continue;
      const d = this.depth[n];
      const k = this.firstOf.get(n);
      if (isReal && k !== undefined && k > 0 && !this.arrived.has(k - 1)) {
        entries.push(`${d} ph:index`);
        ns.push(-1);
        indexPlaceholders++;
      }
      if (nd.kind === 'text-slot' && nd.ref.stream === STREAM.VISIBLE && !this.complete(nd.ref)) {
        entries.push(`${d} ph:slot`);
        ns.push(-1);
      }
      let desc: string;
      switch (nd.kind) {
        case 'element': {
          const attrs = isReal ? nd.attrs.map((a) => attrDesc(a, a.slot ? (this.complete(a.slot) ? this.text(a.slot) : '') : a.value)).join('') : '';
          desc = `<${nd.namespace}|${nd.tagName}${attrs}>`;
          break;
        }
        case 'content':
          desc = '#content';
          break;
        case 'text':
          desc = `#text ${JSON.stringify(nd.value)}`;
          break;
        case 'text-slot':
          desc = `#text ${JSON.stringify(this.text(nd.ref))}`;
          break;
        case 'comment':
          desc = `#comment ${JSON.stringify(nd.data)}`;
          break;
        case 'comment-slot':
          desc = `#comment ${JSON.stringify(this.text(nd.ref))}`;
          break;
        case 'doctype':
          desc = `#doctype ${nd.name}|${nd.publicId}|${nd.systemId}`;
          break;
      }
      entries.push(`${d} ${desc}`);
      ns.push(n);
    }
    return { entries, ns, indexPlaceholders, provisional: prov.size };
  }
}

function attrDesc(a: { name: string; value: string; namespace?: string; prefix?: string }, value: string): string {
  return ` ${a.namespace ? `{${a.namespace}}` : ''}${a.prefix ? `${a.prefix}:` : ''}${a.name}=${JSON.stringify(value)}`;
}

/** The builder's tree as entries (depth, description) in document order, with the node of each. */
function actual(root: P5Node): { entries: string[]; nodes: P5Node[] } {
  const entries: string[] = [];
  const nodes: P5Node[] = [];
  const stack: Array<[P5Node, number]> = [];
  const push = (kids: P5Node[], d: number): void => {
    for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], d]);
  };
  push(('childNodes' in root ? root.childNodes : []) as P5Node[], 1);
  while (stack.length > 0) {
    const [n, d] = stack.pop() as [P5Node, number];
    nodes.push(n);
    switch (n.nodeName) {
      case '#text':
        entries.push(`${d} #text ${JSON.stringify((n as parse5.DefaultTreeAdapterMap['textNode']).value)}`);
        continue;
      case '#comment':
        entries.push(`${d} #comment ${JSON.stringify((n as parse5.DefaultTreeAdapterMap['commentNode']).data)}`);
        continue;
      case '#documentType': {
        const t = n as parse5.DefaultTreeAdapterMap['documentType'];
        entries.push(`${d} #doctype ${t.name}|${t.publicId}|${t.systemId}`);
        continue;
      }
      case '#document-fragment':
        entries.push(`${d} #content`);
        push((n as parse5.DefaultTreeAdapterMap['documentFragment']).childNodes as P5Node[], d + 1);
        continue;
    }
    const e = n as P5Element;
    if (e.tagName === 'catp-missing') {
      entries.push(`${d} ph:${e.attrs.find((a) => a.name === 'data-catp-kind')?.value}`);
      expect(e.childNodes).toHaveLength(0);
      continue;
    }
    entries.push(`${d} <${e.namespaceURI}|${e.tagName}${e.attrs.map((a) => attrDesc(a, a.value)).join('')}>`);
    const content = (e as parse5.DefaultTreeAdapterMap['template']).content;
    // a template's own children come before its content (the encoder's pre-order)
    if (content) stack.push([content, d + 1]);
    push(e.childNodes as P5Node[], d + 1);
  }
  return { entries, nodes };
}

/** Feeds frames one at a time; after each, the tree must be exactly what the model says. */
class Watcher {
  readonly builder: Parse5TreeBuilder = parse5TreeBuilder();
  readonly model: Model;
  readonly types: string[] = [];
  checks = 0;
  maxIndexPlaceholders = 0;
  maxProvisional = 0;

  constructor(
    readonly page: EncodedPage,
    readonly asm: CatpAssembler,
  ) {
    this.model = new Model(page);
  }

  deliver(f: Uint8Array, now = 0): void {
    const isIndex = f[10] === FRAME_KIND.INDEX;
    const r = this.asm.receive(f, now);
    const ordinals: number[] = [];
    for (let e = this.asm.nextEvent(); e; e = this.asm.nextEvent()) {
      this.types.push(e.type);
      expect(e.type === 'page-corrupt' || e.type === 'error').toBe(false);
      this.model.noteFills(e);
      this.model.apply(e);
      this.builder.apply(e);
      if (e.type === 'index-piece') ordinals.push(e.piece.ordinal);
    }
    // an index frame taken is shown at once: its own index-piece event, from this very frame
    if (isIndex && r.accepted) expect(ordinals).toHaveLength(1);
    if (!isIndex) expect(ordinals).toHaveLength(0);
    this.check(isIndex && r.accepted ? ordinals[0] : null);
  }

  check(justArrived: number | null): void {
    this.checks++;
    const want = this.model.expected();
    if (this.builder.root === null) {
      expect(want.entries).toEqual([]);
      return;
    }
    const got = actual(this.builder.root);
    expect(got.entries).toEqual(want.entries);
    const ph = placeholders(this.builder.root);
    expect(ph.index).toBe(want.indexPlaceholders);
    this.maxIndexPlaceholders = Math.max(this.maxIndexPlaceholders, ph.index);
    this.maxProvisional = Math.max(this.maxProvisional, want.provisional);
    if (justArrived === null) return;
    // the piece that just arrived: each of its nodes is in the tree, and its first node sits under its chain
    const p = this.page.pieces[justArrived];
    const at = new Map<number, P5Node>();
    want.ns.forEach((n, i) => {
      if (n >= 0) at.set(n, got.nodes[i]);
    });
    for (const nd of p.nodes) expect(at.has(nd.n)).toBe(true);
    if (p.nodeCount === 0) return;
    const tags: string[] = [];
    const first = at.get(p.firstNode);
    // a piece may start at a <template>'s content, which parse5 keeps on its template without a parentNode
    const host = first?.nodeName === '#document-fragment' ? (got.nodes.find((n) => 'content' in n && (n as parse5.DefaultTreeAdapterMap['template']).content === first) as P5Element | undefined) : undefined;
    for (let u = host ?? (first as P5Element | undefined)?.parentNode; u && 'tagName' in u; u = u.parentNode) tags.unshift(u.tagName);
    const lastContent = p.chain.map((c) => c.content).lastIndexOf(true);
    expect(tags).toEqual(p.chain.slice(lastContent + 1).map((c) => c.tagName));
  }

  finish(html: string): void {
    expect(this.types).toContain('page-complete');
    const root = this.builder.root as Doc;
    const want = parse5.parse(html, { scriptingEnabled: false });
    expect(parse5.serialize(root)).toBe(parse5.serialize(want));
    expect(toHtml5libTree(root)).toBe(toHtml5libTree(want));
    expect(placeholders(root)).toEqual({ slot: 0, index: 0 });
    expect(this.builder.missingSlots).toBe(0);
  }
}

/**
 * The issue's scenario: index frames in reverse order with a third of them lost, then every data frame; then the
 * receiver's report, the sender's resends (the lost index frames first), delivered. Checked after every frame.
 */
function reverseLossRepair(html: string): { watcher: Watcher; page: EncodedPage; lost: number } {
  const page = encodePage(html, { sha256, codec });
  const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID, pacing: 'fixed', rateFramesPerSec: 1e12, initialRttMs: 1 });
  const w = new Watcher(page, newAssembler({ requestId: ID }));
  w.asm.start(0);
  const first: Uint8Array[] = [];
  for (let d = sender.nextDatagram(0); d; d = sender.nextDatagram(0)) first.push(d);
  expect(first).toHaveLength(page.frames.length);
  const index = first.filter((f) => f[10] === FRAME_KIND.INDEX);
  const data = first.filter((f) => f[10] !== FRAME_KIND.INDEX);
  expect(index).toHaveLength(page.indexFrames);
  // a third of the index frames lost (ordinals 1, 4, 7, ...: each leaves a gap before the next piece)
  const lostSeqs = new Set(index.filter((_, k) => k % 3 === 1).map(seqOf));
  for (const f of [...index].reverse()) if (!lostSeqs.has(seqOf(f))) w.deliver(f, 1);
  // a placeholder stands before each piece whose predecessor is lost
  const gaps = page.pieces.filter((p) => p.ordinal % 3 === 2 && p.nodeCount > 0).length;
  expect(w.maxIndexPlaceholders).toBe(gaps);
  for (const f of data) w.deliver(f, 2);
  // repair: the receiver reports, the sender resends the lost index frames before anything else
  let now = 2;
  for (let round = 0; round < 5 && !w.types.includes('page-complete'); round++) {
    now += 500;
    for (let rep = w.asm.nextReport(now); rep; rep = w.asm.nextReport(now)) sender.receiveReport(rep, now);
    const resent: Uint8Array[] = [];
    for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) resent.push(d);
    // (each resend here is in the tail, so a copy follows it one send later: RepairSender `repeatTailRepairs`)
    const firstData = resent.findIndex((f) => f[10] !== FRAME_KIND.INDEX);
    if (round === 0) expect(new Set((firstData < 0 ? resent : resent.slice(0, firstData)).map(seqOf))).toEqual(lostSeqs);
    for (const f of resent) w.deliver(f, now);
  }
  w.finish(html);
  return { watcher: w, page, lost: lostSeqs.size };
}

const corpus = realPages();
const REAL = 'wikipedia-4.html';
const realHtml = corpus && corpus.files.includes(REAL) ? fs.readFileSync(path.join(corpus.dir, REAL), 'utf8') : null;

describe('index frames that stand alone', () => {
  test('a generated page: index frames in reverse order, a third lost and repaired, data after; checked after every frame', () => {
    const { watcher, page, lost } = reverseLossRepair(generated());
    expect(page.indexFrames).toBeGreaterThanOrEqual(5);
    expect(lost).toBeGreaterThanOrEqual(2);
    expect(watcher.maxProvisional).toBeGreaterThan(0);
    expect(watcher.checks).toBeGreaterThanOrEqual(page.frames.length);
  });

  testIf(realHtml !== null, 'the real-pages corpus (../shared/corpus/real-pages)')(`a real page (${REAL}): the same, checked after every frame`, () => {
    const { watcher, page, lost } = reverseLossRepair(realHtml as string);
    expect(page.indexFrames).toBeGreaterThanOrEqual(10);
    expect(lost).toBeGreaterThanOrEqual(4);
    expect(watcher.maxProvisional).toBeGreaterThan(0);
    console.log(`${REAL}: ${page.indexFrames} index frames (${lost} lost and repaired), ${page.frames.length} frames, ${watcher.checks} checks`);
  }, 60_000);

  test('any order with a third of the index frames lost (seeded), checked after every frame', () => {
    const html = generated();
    const page = encodePage(html, { sha256, codec });
    for (let seed = 1; seed <= 3; seed++) {
      const r = rng(seed);
      const w = new Watcher(page, newAssembler());
      const frames = shuffle([...page.frames], r);
      const late = frames.filter((f) => f[10] === FRAME_KIND.INDEX && r() < 1 / 3);
      for (const f of frames) if (!late.includes(f)) w.deliver(f);
      for (const f of late) w.deliver(f);
      w.finish(html);
    }
  });
});

describe('a parent of very many children, its index frames in reverse', () => {
  const commentsPage = (n: number): string => `<!DOCTYPE html><html><head><title>t</title></head><body>${'<!--x-->'.repeat(n)}</body></html>`;

  test('each piece\'s children come before the siblings already there: the tree is parse5\'s', () => {
    const html = commentsPage(40_000);
    const page = encodePage(html, { sha256, codec });
    expect(page.indexFrames).toBeGreaterThan(2);
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    for (const f of [...page.frames].reverse()) {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
    }
    expect(asm.finished).toBe(true);
    expect(parse5.serialize(b.root as parse5.DefaultTreeAdapterMap['document'])).toBe(html);
  });

  test('a piece\'s children go in among their siblings without moving every later sibling each', () => {
    // 16,000 children a piece put before up to a million siblings by a splice each: an honest page of a million
    // comments, its 63 index frames reversed, took 51 s in the browser's tree builder (1.6 s a frame); then a merge a
    // piece, now an ordered list of chunks (ordered-list.ts)
    const page = encodePage(commentsPage(400_000), { sha256, codec });
    expect(page.indexFrames).toBeGreaterThan(20);
    const asm = newAssembler();
    const recorder = new DomOpRecorder(new PageNames('http://example.test/'));
    const tree = new CatpTreeBuilder(recorder);
    const started = performance.now();
    for (const f of [...page.frames].reverse()) {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) tree.apply(e);
      recorder.take();
    }
    expect(asm.finished).toBe(true);
    expect(performance.now() - started).toBeLessThan(3000); // (0.3 s; a splice each: 8 s)
  });

  test('thousands of small index frames in reverse and shuffled: the tree is parse5\'s', () => {
    // 3,547 index frames of 128 bytes (what a sender may send): each piece goes in before everything already here
    // (reversed) or among it (shuffled). The lists that hold the present children, the slots' and blocks' spans and
    // the pieces here move at most a chunk an insert (ordered-list.test.ts); as plain arrays this page took 1.5 s
    // reversed against 0.5 s in order, and a page of twice as many index frames 7.1 s (docs/fuzzing.md).
    const html = `<!DOCTYPE html><html><head><title>t</title></head><body>${Array.from({ length: 20_000 }, (_, i) => `<p>t${i}</p>`).join('')}</body></html>`;
    const page = encodePage(html, { sha256, maxPayload: 128 });
    expect(page.indexFrames).toBeGreaterThan(3000);
    const r = rng(61);
    for (const frames of [[...page.frames].reverse(), shuffle([...page.frames], r)]) {
      const asm = newAssembler();
      const b = parse5TreeBuilder();
      for (const f of frames) {
        asm.receive(f, 0);
        for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
      }
      expect(asm.finished).toBe(true);
      expect(parse5.serialize(b.root as parse5.DefaultTreeAdapterMap['document'])).toBe(html);
    }
  });
});

describe('send order: the top of the page first', () => {
  /** Delivers frames in send order until index frame `k` (default the second); returns the tree's text so far. */
  function textBeforeSecondIndexFrame(page: EncodedPage, k = 2): { text: string; frames: number; bytes: number } {
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    let indexSeen = 0;
    let frames = 0;
    let bytes = 0;
    for (const f of page.frames) {
      if (f[10] === FRAME_KIND.INDEX && ++indexSeen === k) break;
      frames++;
      bytes += f.length;
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
    }
    const texts: string[] = [];
    const walk = (n: P5Node): void => {
      if (n.nodeName === '#text') texts.push((n as parse5.DefaultTreeAdapterMap['textNode']).value);
      for (const c of ('childNodes' in n ? n.childNodes : []) as P5Node[]) walk(c);
    };
    if (b.root) walk(b.root);
    return { text: texts.join(' '), frames, bytes };
  }

  test('generated page: the first index frame ends at the first text (the heading) and its block follows; the second brings the first paragraph; nothing from the bottom', () => {
    const page = encodePage(generated(), { sha256, codec });
    expect(page.indexFrames).toBeGreaterThan(2);
    const first = textBeforeSecondIndexFrame(page);
    expect(first.text).toContain('Top heading of the page');
    expect(first.text).not.toContain('First paragraph, at the top.');
    expect(first.frames).toBe(2); // the short index frame, the block with the heading's text
    const last = page.pieces[0].nodes[page.pieces[0].nodes.length - 1];
    const lastParent = page.pieces[0].nodes.find((n) => n.n === last.parent);
    expect([last.kind === 'text' || last.kind === 'text-slot', lastParent?.kind === 'element' ? lastParent.tagName : null]).toEqual([true, 'h1']);
    const second = textBeforeSecondIndexFrame(page, 3);
    expect(second.text).toContain('First paragraph, at the top.');
    expect(second.text).not.toContain('Last paragraph, at the bottom.');
    expect(second.frames).toBeLessThan(page.frames.length / 2);
  });

  /** The tree the assembler builds from `frames`, in their order, serialized. */
  function assembledHtml(frames: readonly Uint8Array[]): string {
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    for (const f of frames) {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
    }
    return parse5.serialize(b.root as Doc);
  }

  /** A head of `links` stylesheet links (150: ~3 KB of index after brotli), then a heading and a long paragraph. */
  function longHead(style = '', links = 150): string {
    const r = seededRng(7);
    const word = () => Array.from({ length: 24 }, () => 'abcdefghijklmnopqrstuvwxyz0123456789'[Math.floor(r() * 36)]).join('');
    // stylesheet links stay in the index (metadata such as <meta content> would go to deferred slots): ~6 KB brotli cannot shrink far
    const head = Array.from({ length: links }, (_, i) => `<link rel="stylesheet" href="/${i}/${word()}.css">`).join('');
    return `<!DOCTYPE html><html><head><title>t</title>${style}${head}</head><body><h1>Heading</h1><p>${'Text. '.repeat(400)}</p></body></html>`;
  }

  test('a page whose first text lies past one frame of index: the first piece fills its frame as every other does, the second ends at that text with its block behind it', () => {
    const html = longHead();
    const page = encodePage(html, { sha256, codec, firstFlight: false }); // full frames from the first (the first flight: below)
    expect(page.pieces[0].nodes.some((n) => n.kind === 'element' && n.tagName === 'body')).toBe(false);
    expect(page.frames[0].length).toBeGreaterThan(1200); // a full frame, not cut short
    // As on heise, lemonde-1, ehow-1 and 32 of the 87 corpus pages, the head fills whole index frames (two here). The
    // piece that opens the body ends at the heading, so the heading paints from it and the block behind it, not
    // after a whole frame more of index.
    const at = page.pieces.findIndex((p) => p.nodes.some((n) => n.kind === 'element' && n.tagName === 'body'));
    expect(at).toBeGreaterThan(0);
    const piece = page.pieces[at].nodes;
    const last = piece[piece.length - 1];
    expect([last.kind, piece.find((n) => n.n === last.parent)]).toEqual(['text-slot', expect.objectContaining({ tagName: 'h1' })]);
    const top = textBeforeSecondIndexFrame(page, at + 2);
    expect(top.text).toContain('Heading');
    expect(top.frames).toBe(at + 2); // the head's index frames, the one to the heading, the heading's block
  });

  test('the first flight: index frames of at most 500 bytes of payload for about 4,400 bytes of index on the wire, together before their blocks; then full frames; the same tree', () => {
    // the head's index (~6 KB) is longer than the flight: the flight is all head, the style it introduces right behind it
    const html = longHead(`<style>${Array.from({ length: 400 }, (_, i) => `.c${i}{margin:${i}px}`).join('')}</style>`, 300);
    const page = encodePage(html, { sha256, codec });
    const isIndex = (f: Uint8Array) => f[10] === FRAME_KIND.INDEX;
    const run = page.frames.findIndex((f) => !isIndex(f));
    const flight = page.frames.slice(0, run);
    // (frame 0 carries the page digest too, which the search counts as zeros: 32 bytes brotli cannot shrink)
    flight.forEach((f, i) => expect(f.length - HEADER_BYTES).toBeLessThanOrEqual(FIRST_FLIGHT.framePayload + (i === 0 ? PAGE_DIGEST_BYTES : 0)));
    const wire = flight.reduce((n, f) => n + f.length + 28, 0);
    expect(wire).toBeGreaterThan(FIRST_FLIGHT.indexBytes - 600); // (the flight is counted with the search's compression, the frames are the final one's)
    expect(wire).toBeLessThan(FIRST_FLIGHT.indexBytes + 600);
    expect(flight.length).toBeGreaterThanOrEqual(8);
    const style = page.pieces.slice(0, run).flatMap((p) => p.blocks).find((b) => b.stream === STREAM.CONTEXT);
    expect(style?.seq).toBe(run);
    // index frames after the flight are full again, each with its blocks behind it
    const later = page.frames.slice(run).filter(isIndex);
    expect(later.length).toBeGreaterThan(0);
    expect(Math.max(...later.map((f) => f.length))).toBeGreaterThan(1200);
    // the heading paints from the index to it and the blocks behind, in send order; the tree is parse5's in any order
    const at = page.pieces.findIndex((p) => p.nodes.some((n) => n.kind === 'element' && n.tagName === 'h1'));
    expect(textBeforeSecondIndexFrame(page, at + 2).text).toContain('Heading');
    expect(assembledHtml(shuffle([...page.frames], rng(3)))).toBe(parse5.serialize(parse5.parse(html, { scriptingEnabled: false })));
    // without it (firstFlight: false), the first frame is a full one
    expect(encodePage(html, { sha256, codec, firstFlight: false }).frames[0].length).toBeGreaterThan(1200);
  });

  test('the first flight ends its togetherness at the first text: that piece\'s blocks follow it at once', () => {
    // the generated page's heading comes after a short head: the first small piece ends at it, its block right behind
    const page = encodePage(generated(), { sha256, codec });
    expect(page.frames[0].length - HEADER_BYTES).toBeLessThanOrEqual(FIRST_FLIGHT.framePayload + PAGE_DIGEST_BYTES);
    expect([page.frames[0][10], page.frames[1][10], page.frames[2][10]]).toEqual([FRAME_KIND.INDEX, FRAME_KIND.DATA, FRAME_KIND.INDEX]);
    expect(page.frames[2].length - HEADER_BYTES).toBeLessThanOrEqual(FIRST_FLIGHT.framePayload); // still the flight
  });

  test("the first block of visible text goes in frames of the flight's size, each behind the piece it starts in, so the pieces its text fills come between them", () => {
    // As on 001 and v8-blog: a short heading, then paragraphs in many elements; the first block of text (~8 KB before
    // compression) holds the text of the pieces after the one that introduces it. Words that brotli cannot shrink far.
    const r = seededRng(5);
    const word = () => Array.from({ length: 3 + Math.floor(r() * 7) }, () => 'abcdefghijklmnopqrstuvwxyz'[Math.floor(r() * 26)]).join('');
    const para = (i: number) => `<div class="c${i}"><p id="p${i}"><a href="/a/${i}">${word()}</a> ${Array.from({ length: 14 }, word).join(' ')}</p></div>\n`;
    const html = `<!DOCTYPE html><html><head><title>t</title></head><body><h1>Heading</h1>${Array.from({ length: 120 }, (_, i) => para(i)).join('')}</body></html>`;
    const page = encodePage(html, { sha256, codec });
    const whole = encodePage(html, { sha256, codec, firstFlight: false });
    const visible = (p: EncodedPage) => p.pieces.flatMap((pc) => pc.blocks).filter((b) => b.stream === STREAM.VISIBLE).sort((a, b) => a.seq - b.seq);
    // without the flight the first visible block is one large frame
    expect(whole.frames[visible(whole)[0].seq].length - HEADER_BYTES).toBeGreaterThan(FIRST_FLIGHT.framePayload + 300);
    const first = visible(page).filter((b) => b.firstPiece < visible(whole)[1].firstPiece); // the same text as whole's first block
    expect(first.length).toBeGreaterThanOrEqual(3);
    for (const b of first) expect(page.frames[b.seq].length - HEADER_BYTES).toBeLessThanOrEqual(FIRST_FLIGHT.framePayload);
    // index frames come between them: each block goes behind the piece that introduces it
    const order = sendOrder(page);
    const between = order.slice(first[0].seq, first[first.length - 1].seq).filter((o) => 'index' in o);
    expect(between.length).toBeGreaterThanOrEqual(1);
    // delivered in send order up to the second of those blocks, more of the page's text shows than with the whole block
    const textUpTo = (p: EncodedPage, seq: number): number => assembledHtml(p.frames.slice(0, seq + 1)).replace(/<[^>]*>/g, '').trim().length;
    const bytesTo = (p: EncodedPage, seq: number) => p.frames.slice(0, seq + 1).reduce((n, f) => n + f.length, 0);
    const seqSplit = first[1].seq;
    // the same bytes or fewer of the whole encoding (its frames up to the same count of bytes) show less text
    let seqWhole = 0;
    while (seqWhole + 1 < whole.frames.length && bytesTo(whole, seqWhole + 1) <= bytesTo(page, seqSplit)) seqWhole++;
    expect(textUpTo(page, seqSplit)).toBeGreaterThan(textUpTo(whole, seqWhole));
    // a size that is no size is refused by name
    for (const bad of [-1, NaN]) {
      expect(() => encodePage(html, { sha256, codec, firstFlight: { ...FIRST_FLIGHT, firstBlockPayload: bad } })).toThrow(expect.objectContaining({ code: 'CATP_ERR_BAD_OPTIONS' }));
    }
    // the same tree, frames in any order
    expect(assembledHtml(shuffle([...page.frames], rng(4)))).toBe(parse5.serialize(parse5.parse(html, { scriptingEnabled: false })));
  });

  /** Each frame in send order: an index frame's piece (ordinal), or a data frame's block stream. */
  function sendOrder(page: EncodedPage): Array<{ index: number } | { stream: number }> {
    const streamOf = new Map(page.pieces.flatMap((p) => p.blocks).flatMap((b) => Array.from({ length: b.frames ?? 1 }, (_, i) => [b.seq + i, b.stream] as const)));
    const asm = newAssembler();
    return page.frames.map((f) => {
      if (f[10] !== FRAME_KIND.INDEX) return { stream: streamOf.get(seqOf(f)) as number };
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) if (e.type === 'index-piece') return { index: e.piece.ordinal };
      throw new Error('an index frame without its piece');
    });
  }

  test("the head's unpainted markup (meta, scripts, icons) goes after the rest of the index: the first flight holds the title, the stylesheets and the top of the body", () => {
    const r = seededRng(11);
    const word = () => Array.from({ length: 16 }, () => 'abcdefghijklmnopqrstuvwxyz0123456789'[Math.floor(r() * 36)]).join('');
    const unpainted = (n: number) =>
      Array.from({ length: n }, (_, i) => `<meta name="m${i}" content="${word()}">\n<script src="/js/${word()}.js"></script><link rel="icon" href="/${word()}.png">\n`).join('');
    const html =
      `<!DOCTYPE html><html><head><meta charset="utf-8"><title>The title</title>\n${unpainted(30)}<link rel="stylesheet" href="/site.css">${unpainted(30)}` +
      `<style>h1 { color: red }</style><script>var analytics = ${JSON.stringify(word().repeat(20))};</script>${unpainted(20)}</head>` +
      `<body><h1>Heading</h1><p>${'Text. '.repeat(400)}</p></body></html>`;
    const page = encodePage(html, { sha256, codec });
    const inOrder = encodePage(html, { sha256, codec, firstFlight: { ...FIRST_FLIGHT, unpaintedHead: 0 } });
    const tags = (p: IndexPiece) => p.nodes.flatMap((n) => (n.kind === 'element' ? [n.tagName] : []));
    const isUnpainted = (p: IndexPiece) => tags(p).length > 0 && tags(p).every((t) => t === 'meta' || t === 'script' || t === 'link') && !p.nodes.some((n) => n.kind === 'element' && n.attrs.some((a) => a.value === 'stylesheet'));
    const later = page.pieces.filter(isUnpainted).map((p) => p.ordinal);
    expect(later.length).toBeGreaterThanOrEqual(3); // the runs of 30, 30 and 20
    const ordinals = (p: EncodedPage) => sendOrder(p).flatMap((o) => ('index' in o ? [o.index] : []));
    expect(ordinals(inOrder)).toEqual(inOrder.pieces.map((p) => p.ordinal)); // without it: the index in document order

    // In send order: the title, the stylesheet, the style and the body's top, the heading's block; every other index
    // frame; the visible blocks; then the unpainted pieces, before the deferred blocks (the script's text, the metas' values).
    const order = sendOrder(page);
    const heading = order.findIndex((o) => 'stream' in o && o.stream === STREAM.VISIBLE);
    const before = order.slice(0, heading).flatMap((o) => ('index' in o ? [o.index] : []));
    expect(before.some((k) => later.includes(k))).toBe(false);
    expect(before.flatMap((k) => tags(page.pieces[k]))).toEqual(expect.arrayContaining(['title', 'link', 'style', 'body', 'h1']));
    const at = (k: number) => order.findIndex((o) => 'index' in o && o.index === k);
    const lastOther = Math.max(...page.pieces.filter((p) => !later.includes(p.ordinal)).map((p) => at(p.ordinal)));
    const lastVisible = order.map((o) => 'stream' in o && o.stream === STREAM.VISIBLE).lastIndexOf(true);
    const firstDeferred = order.findIndex((o) => 'stream' in o && o.stream === STREAM.DEFERRED);
    for (const k of later) expect([at(k) > lastOther, at(k) > lastVisible, at(k) < firstDeferred]).toEqual([true, true, true]);

    // The heading is on screen after less than half the bytes it took in document order.
    const bytesTo = (p: EncodedPage) => {
      const o = sendOrder(p);
      return p.frames.slice(0, o.findIndex((x) => 'stream' in x && x.stream === STREAM.VISIBLE) + 1).reduce((n, f) => n + f.length, 0);
    };
    expect(bytesTo(page)).toBeLessThan(bytesTo(inOrder) / 2);
    // Until the unpainted pieces come, the placeholders for them stand in the head (a placeholder outside it is a
    // block on screen, and the page would move when it went).
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    const headOf = (): P5Node => findElement(b.root as Doc, 'head') as P5Node;
    const firstLater = Math.min(...later.map(at));
    page.frames.slice(0, firstLater).forEach((f, i) => {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
      if (i >= heading) expect([i, placeholders(b.root as Doc).index]).toEqual([i, placeholders(headOf()).index]);
    });
    expect(placeholders(headOf()).index).toBeGreaterThan(0);
    const h1 = findElement(b.root as Doc, 'h1');
    expect(h1 && parse5.serialize(h1)).toBe('Heading');
    expect(findElement(b.root as Doc, 'style')).not.toBeNull();

    // the tree is parse5's in send order, reverse order and shuffled
    const want = parse5.serialize(parse5.parse(html, { scriptingEnabled: false }));
    for (const frames of [page.frames, [...page.frames].reverse(), shuffle([...page.frames], rng(5))]) {
      const a2 = newAssembler();
      const b2 = parse5TreeBuilder();
      for (const f of frames) {
        a2.receive(f, 0);
        for (let e = a2.nextEvent(); e; e = a2.nextEvent()) b2.apply(e);
      }
      expect(parse5.serialize(b2.root as Doc)).toBe(want);
    }
  });

  test('text the markup hides (hidden, display: none, visibility: hidden) does not end the first piece; the first text that shows does', () => {
    const hidden = '<div style="height:0; DISPLAY: none !important">Cookie banner</div><p hidden>Skip</p><span style="visibility:hidden">x</span>';
    const page = encodePage(generated().replace('<header id="top">', `${hidden}<header id="top">`), { sha256, codec });
    const nodes = page.pieces[0].nodes;
    const last = nodes[nodes.length - 1];
    expect(nodes.find((n) => n.n === last.parent)).toEqual(expect.objectContaining({ tagName: 'h1' }));
    expect(textBeforeSecondIndexFrame(page).text).toContain('Top heading of the page');
  });

  test('<noscript> at the top is markup sent with the top of the page (the sandbox shows it), not raw text sent last', () => {
    // archive-of-our-own: a "please turn on JavaScript" paragraph in <noscript> above the heading. Parsed with
    // scripting on, it was one raw text node, deferred to the end, then painted as literal tags.
    const warning = 'While we have done our best, turn JavaScript on.';
    const html = generated().replace('<header id="top">', `<noscript><p id="js-warning">${warning.repeat(3)}</p></noscript><header id="top">`);
    const page = encodePage(html, { sha256, codec });
    const { text } = textBeforeSecondIndexFrame(page);
    expect(text).toContain(warning);
    expect(text).not.toContain('<p');
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    for (const f of page.frames) {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
    }
    const noscript = findElement(b.root as Doc, 'noscript');
    expect(noscript?.childNodes.map((c) => c.nodeName)).toEqual(['p']);
    expect(parse5.serialize(b.root as Doc)).toBe(parse5.serialize(parse5.parse(html, { scriptingEnabled: false })));

    // The scripting-on encoding (a client that runs scripts and hides <noscript>) still defers its raw text.
    const scripted = encodePage(html, { sha256, codec, scriptingEnabled: true });
    expect(textBeforeSecondIndexFrame(scripted).text).not.toContain(warning);
    const slots = scripted.pieces.flatMap((p) => p.nodes).filter((n): n is Extract<IndexNode, { kind: 'text-slot' }> => n.kind === 'text-slot');
    const under = slots.filter((n) => n.parent === scripted.pieces.flatMap((p) => p.nodes).find((e) => e.kind === 'element' && e.tagName === 'noscript')?.n);
    expect(under.map((n) => n.ref.stream)).toEqual([STREAM.DEFERRED]);
  });

  test('metadata (Open Graph, Twitter cards, icons, tooltips, inline handlers) rides in deferred blocks; what can change the paint stays in the first piece', () => {
    const og = (p: string, v: string): string => `<meta property="og:${p}" content="${v}">`;
    const head = [
      '<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
      '<meta http-equiv="Content-Security-Policy" content="default-src \'self\'; img-src https:">',
      og('title', 'A title for crawlers that nobody sees on the page itself'),
      og('description', 'A description for link previews, as long as real pages make them, and then some more.'),
      og('image', 'https://images.example.com/2026/11/a-rather-long-path/to-an-image-1200x630.jpg'),
      '<meta name="twitter:card" content="summary_large_image"><meta name="theme-color" content="#112233">',
      '<link rel="icon" href="https://static.example.com/favicons/favicon-32x32-v2.png">',
      '<link rel="stylesheet" title="The default style sheet set" href="https://static.example.com/css/site-main-v2.css">',
      '<style>h1 { color: #333 }</style>',
    ].join('');
    // a broken image without alt shows its title (Chromium): painted; with alt, or on another input, a tooltip
    const images = [
      '<img src="https://images.example.com/avatars/64/courtney.jpeg" title="Courtney Kirchoff, the author">',
      '<input type="IMAGE" src="https://images.example.com/buttons/send.png" title="Send this to a friend, now">',
      '<img src="https://images.example.com/avatars/64/someone.jpeg" alt="" title="Someone else, with an alt">',
      '<input type="text" name="q" title="Search the whole site for it">',
    ].join('');
    const html = `<!DOCTYPE html><html><head><title>t</title>${head}</head><body><h1 title="A tooltip that shows on hover, never before">Heading</h1><button onclick="openTheMenu(event, 'main')">Menu</button><p>${'Text. '.repeat(40)}</p>${images}</body></html>`;
    const page = encodePage(html, { sha256, codec });
    const attrsOf = (name: string): IndexAttr[] =>
      page.pieces.flatMap((p) => p.nodes).filter((n) => n.kind === 'element' && n.tagName === name).flatMap((n) => (n.kind === 'element' ? n.attrs : []));
    const value = (attrs: IndexAttr[], name: string, match: string): IndexAttr | undefined => attrs.filter((a) => a.name === name).find((a) => a.slot !== undefined || a.value.includes(match));
    const metas = attrsOf('meta');
    // painted or enforced: inline in the index, as before
    expect(value(metas, 'content', 'width=device-width')?.value).toContain('width=device-width');
    expect(value(metas, 'content', 'default-src')?.value).toContain('default-src');
    expect(metas.filter((a) => a.name === 'content' && a.value === '#112233')).toHaveLength(1);
    expect(attrsOf('link').find((a) => a.name === 'href' && a.value.endsWith('site-main-v2.css'))).toBeDefined();
    expect(attrsOf('link').find((a) => a.name === 'title')?.value).toBe('The default style sheet set'); // names a style sheet set
    // nothing paints these: deferred, the attribute present (empty) until its block comes
    for (const [tag, name] of [['h1', 'title'], ['button', 'onclick']]) {
      const a = attrsOf(tag).find((x) => x.name === name);
      expect([a?.value, a?.slot?.stream]).toEqual(['', STREAM.DEFERRED]);
    }
    const titles = (tag: string) => attrsOf(tag).filter((x) => x.name === 'title').map((a) => a.slot?.stream ?? 'inline');
    // (painted: inline in the element's index piece, as any short value; only the other two wait for the deferred blocks)
    expect(titles('img')).toEqual(['inline', STREAM.DEFERRED]);
    expect(titles('input')).toEqual(['inline', STREAM.DEFERRED]);
    // for crawlers, previews and the tab (og:title, og:description, og:image, twitter:card, the icon): deferred slots,
    // empty in the index
    const deferred = [...metas, ...attrsOf('link')].filter((a) => a.slot !== undefined);
    expect(deferred.map((a) => a.slot?.stream)).toEqual([STREAM.DEFERRED, STREAM.DEFERRED, STREAM.DEFERRED, STREAM.DEFERRED, STREAM.DEFERRED]);
    expect(deferred.every((a) => a.value === '')).toBe(true);
    const { text } = textBeforeSecondIndexFrame(page);
    expect(text).toContain('Heading');
    // the finished tree is parse5's, values and all
    const asm = newAssembler();
    const b = parse5TreeBuilder();
    for (const f of [...page.frames].reverse()) {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) b.apply(e);
    }
    expect(parse5.serialize(b.root as Doc)).toBe(parse5.serialize(parse5.parse(html, { scriptingEnabled: false })));
  });

  testIf(realHtml !== null, 'the real-pages corpus (../shared/corpus/real-pages)')(`${REAL}: the first body text is on screen before the second index frame`, () => {
    const page = encodePage(realHtml as string, { sha256, codec });
    const { text, frames, bytes } = textBeforeSecondIndexFrame(page);
    expect(text).toMatch(/Jump to\s+content/);
    expect(frames).toBeLessThanOrEqual(3);
    expect(bytes).toBeLessThan(4500);
  });
});
