// The silent-time arithmetic (renderer/meter.ts), and the host's DOM operations round trip through the DOM dump.
import { parse, serialize } from 'parse5';

import { serializeDump } from '../../../app/browser/wire';
import { DomOpRecorder } from '../../../app/browser/dom-recorder';
import { encodePage, CatpAssembler, CatpTreeBuilder, type CatpAttr } from '../../../protocol/catp';
import { sha256 } from '../../../platform/sha256';
import { buildRecord, longestGap, networkFloor, silentTime } from '../../../renderer/silent-time';
import { DOM_OP, type DomOps, type DumpNode, type WireFrame } from '../../../protocol/browser/api';

const frame = (atEpochMs: number, useful: boolean): WireFrame => ({
  atEpochMs, seq: 0, kind: 'data', bytes: 100, accepted: true, useful, missing: 0, repaired: 0, received: 1,
});

test('longest gap starts at the request and ignores out-of-order stamps', () => {
  expect(longestGap(100, [])).toEqual({ ms: 0, from: 100, to: 100 });
  expect(longestGap(100, [150, 160, 400, 410])).toEqual({ ms: 240, from: 160, to: 400 });
  expect(longestGap(100, [300, 310])).toEqual({ ms: 200, from: 100, to: 300 });
});

test('silent time uses visible updates; the floor uses useful arrivals only', () => {
  const updates = [{ atEpochMs: 120, what: 'skeleton', count: 1 }, { atEpochMs: 500, what: 'blocks', count: 1 }];
  expect(silentTime(100, updates).ms).toBe(380);
  const arrivals = [frame(110, true), frame(300, false), frame(480, true)];
  expect(networkFloor(100, arrivals).ms).toBe(370);
  const r = buildRecord({ version: 1, url: 'dhttp://x/', transport: 'catp', loadId: 1, requestAtEpochMs: 100, updates, arrivals, hostCompleteMs: 381, outcome: 'complete' });
  expect(r).toMatchObject({ silentTimeMs: 380, networkFloorMs: 370, firstPaintMs: 20, completeMs: 400, silentGap: { from: 120, to: 500 } });
});

/**
 * Applies the host's DOM operation batches to a DumpNode tree (pure, no DOM): the renderer's DomOpApplier semantics
 * (renderer/dom-ops.ts) in miniature, so the op stream the host records can be checked against parse5 here.
 */
function applyOps(batches: DomOps[]): { root: DumpNode & { t: 'doc' }; placeholders: number } {
  const root: DumpNode & { t: 'doc' } = { t: 'doc', mode: 'no-quirks', children: [] };
  type Box = { node: DumpNode; parent: DumpNode[] | null };
  const nodes = new Map<number, Box>([[0, { node: root, parent: null }]]);
  const contentOf = new Map<number, DumpNode[]>();
  const kids = (h: number): DumpNode[] => {
    const c = contentOf.get(h);
    if (c) return c;
    const n = nodes.get(h)!.node;
    return (n as { children: DumpNode[] }).children;
  };
  const NS = ['http://www.w3.org/1999/xhtml', 'http://www.w3.org/2000/svg', 'http://www.w3.org/1998/Math/MathML'];
  let placeholders = 0;
  for (const ops of batches) {
    if (ops.length === 0) continue;
    let next = ops[0] as number;
    let last = 0;
    const created = (node: DumpNode) => {
      last = next++;
      nodes.set(last, { node, parent: null });
    };
    const attrs = (at: number): [CatpAttr[], number] => {
      const n = ops[at] as number;
      const width = n < 0 ? 4 : 2;
      const out: CatpAttr[] = [];
      for (let k = 0, i = at + 1; k < Math.abs(n); k++, i += width) {
        const a: CatpAttr = { name: ops[i] as string, value: ops[i + 1] as string };
        if (width === 4 && ops[i + 2] !== '') {
          a.namespace = ops[i + 2] as string;
          a.prefix = ops[i + 3] as string;
        }
        out.push(a);
      }
      return [out, at + 1 + Math.abs(n) * width];
    };
    const insert = (parent: number, h: number, before: number) => {
      const list = kids(parent);
      const box = nodes.get(h)!;
      const i = before === 0 ? list.length : list.indexOf(nodes.get(before)!.node);
      list.splice(i < 0 ? list.length : i, 0, box.node);
      box.parent = list;
      if (box.node.t === 'el' && box.node.tag === 'catp-missing') placeholders++;
    };
    for (let at = 1; at < ops.length; ) {
      const op = ops[at];
      const h = ops[at + 1] as number;
      switch (op) {
        case DOM_OP.RESET:
          root.mode = (['no-quirks', 'quirks', 'limited-quirks'] as const)[ops[at + 1] as number]!;
          at += 3;
          break;
        case DOM_OP.ELEMENT: {
          const ns = typeof ops[at + 2] === 'number' ? NS[ops[at + 2] as number]! : (ops[at + 2] as string);
          const [a, after] = attrs(at + 3);
          created({ t: 'el', tag: ops[at + 1] as string, ns, attrs: a, children: [] });
          at = after;
          break;
        }
        case DOM_OP.TEXT:
          created({ t: 'text', v: ops[at + 1] as string });
          at += 2;
          break;
        case DOM_OP.COMMENT:
          created({ t: 'comment', v: ops[at + 1] as string });
          at += 2;
          break;
        case DOM_OP.DOCTYPE:
          created({ t: 'doctype', name: ops[at + 1] as string, publicId: ops[at + 2] as string, systemId: ops[at + 3] as string });
          at += 4;
          break;
        case DOM_OP.CONTENT: {
          const t = nodes.get(ops[at + 1] as number)!.node as DumpNode & { t: 'el' };
          t.content ??= [];
          created({ t: 'doc', mode: 'no-quirks', children: [] });
          contentOf.set(last, t.content);
          at += 2;
          break;
        }
        case DOM_OP.PLACEHOLDER:
          created({ t: 'el', tag: 'catp-missing', ns: NS[0]!, attrs: [], children: [] });
          at += 3;
          break;
        case DOM_OP.INSERT:
          insert(h, ops[at + 2] as number, ops[at + 3] as number);
          at += 4;
          break;
        case DOM_OP.APPEND_NEW:
          insert(h, last, 0);
          at += 2;
          break;
        case DOM_OP.REMOVE: {
          const box = nodes.get(h)!;
          if (box.parent) box.parent.splice(box.parent.indexOf(box.node), 1);
          if (box.node.t === 'el' && box.node.tag === 'catp-missing') placeholders--;
          nodes.delete(h);
          at += 2;
          break;
        }
        case DOM_OP.SET_TEXT:
          (nodes.get(h)!.node as { v: string }).v = ops[at + 2] as string;
          at += 3;
          break;
        case DOM_OP.INSERT_TEXT: {
          const n = nodes.get(h)!.node as { v: string };
          const off = ops[at + 2] as number;
          n.v = n.v.slice(0, off) + (ops[at + 3] as string) + n.v.slice(off);
          at += 4;
          break;
        }
        case DOM_OP.SET_ATTRS: {
          const el = nodes.get(h)!.node as DumpNode & { t: 'el' };
          const [a, after] = attrs(at + 2);
          for (const x of a) {
            const have = el.attrs.find((y) => y.name === x.name && y.namespace === x.namespace);
            if (have) have.value = x.value;
            else el.attrs.push(x);
          }
          at = after;
          break;
        }
        default:
          throw new Error(`op ${String(op)} at ${at}`);
      }
    }
  }
  return { root, placeholders };
}

test("the host's DOM operations, applied in any frame order and dumped, serialize to parse5 of the source", () => {
  const html = '<!DOCTYPE html><title>t</title><p class=a>Hello <b>wörld</b></p><template><i>x</i></template><svg viewBox="0 0 1 1"><a xlink:href="#q">s</a></svg><!-- c -->' +
    '<div>' + 'lorem ipsum dolor '.repeat(400) + '</div><p>' + 'x'.repeat(400) + '</p>';
  const page = encodePage(html, { sha256, maxPayload: 200 });
  expect(page.indexFrames).toBeGreaterThan(2);
  for (const order of [page.frames, [...page.frames].reverse()]) {
    const asm = new CatpAssembler({ sha256 });
    asm.start(0);
    const recorder = new DomOpRecorder();
    const tree = new CatpTreeBuilder(recorder);
    const batches: DomOps[] = [];
    for (const f of order) {
      asm.receive(f, 0);
      for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) tree.apply(ev);
      // what crosses the IPC is JSON
      batches.push(JSON.parse(JSON.stringify(recorder.take())) as DomOps);
    }
    const { root, placeholders } = applyOps(batches);
    expect(placeholders).toBe(0);
    expect(serializeDump(root)).toBe(serialize(parse(html)));
  }
});
