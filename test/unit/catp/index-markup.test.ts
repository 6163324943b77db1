/**
 * The index's node markup (protocol/catp/index-markup.ts): random pieces with names, values and texts full of the
 * characters the markup uses (`< > & " = / ! $ % # ^ ' :`, controls, space, astral), empty and side-by-side texts,
 * namespaces, prefixes, slots, template contents, decode to exactly the nodes encoded; mutated markup is refused
 * by a named reason (Reject), never anything else.
 */
import fc from 'fast-check';
import { ChainEntry, decodeIndexPiece, DEFAULT_INDEX_LIMITS, encodePieceBody, IndexAttr, IndexNode, IndexPiece, NS_HTML, NS_MATHML, NS_SVG, NS_XLINK, NS_XML, NS_XMLNS, SlotRef, Stream } from '../../../protocol/catp';
import { REJECT, Reject } from '../../../protocol/catp/errors';
import { nodeSectionMarkup } from '../../../protocol/catp/index-markup';
import { rng } from '../../helpers/catp-util';

const ODD = ['', 'a', 'div', '<', '>', '&', '&amp;', '"', '=', ' ', '\u0000', '\u001f', '\t', '/', '!', '$', '%', '#', '^', "'", ':', 'é', '😀', '</>', '<$11>', 'x y', '&#36;', ';', '\n'];
const ELEMENT_NS = [NS_HTML, NS_HTML, NS_HTML, NS_SVG, NS_MATHML, 'urn:x-other^ns:'];
const ATTR_NS: Array<string | undefined> = [undefined, undefined, undefined, NS_XLINK, NS_XML, NS_XMLNS, 'urn:other'];

function randomPiece(seed: number): IndexPiece {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
  const str = (max = 4): string => Array.from({ length: Math.floor(r() * max) }, () => pick(ODD)).join('');
  const name = (): string => (r() < 0.5 ? pick(['p', 'div', 'template', 'svg', 'a', 'li']) : str(3));
  // the chain: a few ancestors, maybe ending in a template's content
  const chain: ChainEntry[] = [];
  let n = 0;
  for (let i = Math.floor(r() * 4); i > 0; i--) {
    n += 1 + Math.floor(r() * 3);
    const last = chain[chain.length - 1];
    if (last && !last.content && last.tagName === 'template' && last.namespace === NS_HTML && r() < 0.5) chain.push({ n, content: true, tagName: '', namespace: '' });
    else chain.push({ n, content: false, tagName: r() < 0.3 ? 'template' : name(), namespace: pick(ELEMENT_NS) });
  }
  const firstNode = n + 1;
  const open: Array<{ n: number; template: boolean; hasContent: boolean }> = [{ n: 0, template: false, hasContent: false }];
  for (const c of chain) {
    const top = open[open.length - 1];
    if (c.content) top.hasContent = true;
    open.push({ n: c.n, template: !c.content && c.tagName === 'template' && c.namespace === NS_HTML, hasContent: false });
  }
  const nodes: IndexNode[] = [];
  let slot = 0;
  const pieceAt = [0, 0, 0];
  const slotRef = (): SlotRef => {
    const stream = Math.floor(r() * 3) as Stream;
    const parts = 1 + Math.floor(r() * 12);
    const ref = { slot: slot++, stream, parts, firstPiece: pieceAt[stream] };
    pieceAt[stream] += parts;
    return ref;
  };
  const count = 1 + Math.floor(r() * 30);
  for (let k = 0; k < count; k++) {
    // closes: never before the first node (it is a child of the chain's last entry)
    while (k > 0 && open.length > 1 && r() < 0.25) open.pop();
    const top = open[open.length - 1];
    const at = firstNode + k;
    const parent = top.n;
    const kind = r();
    if (top.template && !top.hasContent && r() < 0.3) {
      top.hasContent = true;
      nodes.push({ kind: 'content', n: at, parent });
      open.push({ n: at, template: false, hasContent: false });
    } else if (kind < 0.35) {
      const attrs: IndexAttr[] = Array.from({ length: Math.floor(r() * 4) }, () => {
        const a: IndexAttr = { name: r() < 0.5 ? pick(['class', 'href', 'id', 'x']) : str(3), value: r() < 0.8 ? str(5) : '' };
        const ns = pick(ATTR_NS);
        if (ns !== undefined) a.namespace = ns;
        if (r() < 0.2) a.prefix = str(2);
        if (r() < 0.2) {
          a.slot = slotRef();
          a.value = '';
        }
        return a;
      });
      const tagName = r() < 0.2 ? 'template' : name();
      const namespace = pick(ELEMENT_NS);
      nodes.push({ kind: 'element', n: at, parent, tagName, namespace, attrs });
      open.push({ n: at, template: tagName === 'template' && namespace === NS_HTML, hasContent: false });
    } else if (kind < 0.6) nodes.push({ kind: 'text', n: at, parent, value: str(6) });
    else if (kind < 0.7) nodes.push({ kind: 'comment', n: at, parent, data: str(5) });
    else if (kind < 0.8) nodes.push({ kind: 'text-slot', n: at, parent, ref: slotRef() });
    else if (kind < 0.9) nodes.push({ kind: 'comment-slot', n: at, parent, ref: slotRef() });
    else if (parent === 0) nodes.push({ kind: 'doctype', n: at, parent, name: str(2), publicId: str(3), systemId: str(3) });
    else nodes.push({ kind: 'text', n: at, parent, value: '' });
  }
  return {
    ordinal: 1,
    fragment: false,
    mode: 'no-quirks',
    firstNode,
    nodeCount: nodes.length,
    firstSlot: 0,
    slotCount: slot,
    firstPieces: [0, 0, 0],
    chain,
    nodes,
    firstBlock: 0,
    blocks: [],
    pageDigest: null,
  };
}

const decode = (body: Uint8Array): IndexPiece => decodeIndexPiece(body, DEFAULT_INDEX_LIMITS, 8, 8);

describe('the index as markup', () => {
  test('random pieces full of markup characters decode to exactly the nodes encoded', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), (seed) => {
        const p = randomPiece(seed);
        expect(decode(encodePieceBody(p))).toEqual(p);
      }),
      { numRuns: 2000 },
    );
  });

  test('what the markup looks like: names and values spelled out, closes, slots, a text after a text written apart', () => {
    const chain: ChainEntry[] = [{ n: 1, content: false, tagName: 'body', namespace: NS_HTML }];
    const ref = (slot: number): SlotRef => ({ slot, stream: 1, parts: 2, firstPiece: 2 * slot });
    const nodes: IndexNode[] = [
      { kind: 'element', n: 2, parent: 1, tagName: 'p', namespace: NS_HTML, attrs: [{ name: 'class', value: 'a "b" & c' }, { name: 'hidden', value: '' }] },
      { kind: 'text', n: 3, parent: 2, value: 'x < y' },
      { kind: 'text', n: 4, parent: 2, value: 'z' },
      { kind: 'element', n: 5, parent: 1, tagName: 'svg', namespace: NS_SVG, attrs: [{ name: 'href', value: '#i', namespace: NS_XLINK, prefix: 'xlink' }] },
      { kind: 'element', n: 6, parent: 5, tagName: 'path', namespace: NS_SVG, attrs: [{ name: 'd', value: '', slot: ref(0) }] },
      { kind: 'text-slot', n: 7, parent: 1, ref: ref(1) },
    ];
    expect(nodeSectionMarkup(nodes, chain)).toBe('<p class="a &quot;b&quot; &amp; c" hidden>x &lt; y<\'z></><^1svg ^6xlink:href="#i"><path d=$12></></><$12>');
  });

  test("a slot's digits: stream 0-2, then its parts from 1 with no leading zero; anything else refused", () => {
    const one: IndexPiece = { ...randomPiece(1), chain: [], firstNode: 1, nodeCount: 1, slotCount: 1, firstPieces: [0, 0, 0], nodes: [{ kind: 'text-slot', n: 1, parent: 0, ref: { slot: 0, stream: 0, parts: 1, firstPiece: 0 } }] };
    const read = (markup: string): string => {
      try {
        const node = decode(encodePieceBody(one, markup)).nodes[0];
        return node.kind === 'text-slot' || node.kind === 'comment-slot' ? `${node.kind} ${node.ref.stream}:${node.ref.parts}` : node.kind;
      } catch (e) {
        if (!(e instanceof Reject)) throw e;
        return e.code;
      }
    };
    expect(read('<$01>')).toBe('text-slot 0:1');
    expect(read('<$2907>')).toBe('text-slot 2:907');
    expect(read('<!$1123>')).toBe('comment-slot 1:123');
    // a stream past 2, parts 0 or with a leading zero, no parts, a sign, a space, a letter; ten digits of parts (more
    // than the piece's bytes could carry) and eleven (not a slot at all)
    for (const bad of ['<$31>', '<$0>', '<$00>', '<$002>', '<$1>', '<$>', '<$-1>', '<$+1>', '<$1 1>', '<$x1>', '<$1x>', '<$11234567890>', '<$112345678901>']) {
      expect([bad, read(bad)]).toEqual([bad, REJECT.BAD_INDEX]);
    }
  });

  test('mutated markup: decoded or refused by a named reason, never anything else', () => {
    let refused = 0;
    let decoded = 0;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), fc.array(fc.tuple(fc.nat(), fc.constantFrom(...ODD, '<', '</>', '<!', '<$', '<#>', '<%', '<^3', '^9', '"', '=$', '=$0', '&#55296;', '&#1114112;')), { minLength: 1, maxLength: 4 }), (seed, edits) => {
        const p = randomPiece(seed);
        let m = nodeSectionMarkup(p.nodes, p.chain);
        for (const [at, s] of edits) {
          const i = at % (m.length + 1);
          m = at % 2 === 0 ? m.slice(0, i) + s + m.slice(i) : m.slice(0, i) + m.slice(i + 1);
        }
        try {
          decode(encodePieceBody(p, m));
          decoded++;
        } catch (e) {
          if (!(e instanceof Reject)) throw e;
          refused++;
        }
      }),
      { numRuns: 3000 },
    );
    expect(refused).toBeGreaterThan(1000);
    expect(decoded).toBeGreaterThan(0);
  });
});
