// The silent-time arithmetic (renderer/meter.ts) and the skeleton wire form round trip through the DOM dump.
import { parse, serialize } from 'parse5';

import { toWireSkeleton, serializeDump } from '../../../app/browser/wire';
import { encodePage, CatpAssembler, type Skeleton } from '../../../protocol/catp';
import { sha256 } from '../../../app/stream-session';
import { buildRecord, longestGap, networkFloor, silentTime } from '../../../renderer/silent-time';
import type { DumpNode, WireFrame, WireNode } from '../../../protocol/browser/api';

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

/** Builds a DumpNode the way the renderer's DOM would look once every slot is filled (pure, no DOM). */
function fill(sk: Skeleton, texts: string[]): DumpNode {
  const wire = toWireSkeleton(sk);
  const conv = (list: WireNode[]): DumpNode[] => list.map((n): DumpNode => {
    switch (n.k) {
      case 'e': return { t: 'el', tag: n.tag, ns: n.ns, attrs: n.attrs, children: conv(n.children), ...(n.content ? { content: conv(n.content) } : {}) };
      case 't': return { t: 'text', v: n.v };
      case 's': return { t: 'text', v: texts[n.slot] ?? '' };
      case 'c': return { t: 'comment', v: n.v };
      case 'd': return { t: 'doctype', name: n.name, publicId: n.publicId, systemId: n.systemId };
    }
  });
  return { t: 'doc', mode: wire.mode, children: conv(wire.children) };
}

test('wire skeleton + fills, dumped and serialized by parse5, equal parse5 of the source', () => {
  const html = '<!DOCTYPE html><title>t</title><p class=a>Hello <b>wörld</b></p><template><i>x</i></template><svg viewBox="0 0 1 1"><a xlink:href="#q">s</a></svg><!-- c -->';
  const page = encodePage(html, { sha256 });
  const asm = new CatpAssembler({ sha256 });
  asm.start(0);
  for (const f of page.frames) asm.receive(f, 0);
  let sk: Skeleton | null = null;
  const texts: string[][] = [];
  for (let ev = asm.nextEvent(); ev; ev = asm.nextEvent()) {
    if (ev.type === 'skeleton-ready') sk = ev.skeleton;
    if (ev.type === 'block-filled') for (const f of ev.fills) (texts[f.slot] ??= [])[f.part] = f.text;
  }
  expect(sk).not.toBeNull();
  const wire = toWireSkeleton(sk!);
  expect(JSON.parse(JSON.stringify(wire))).toEqual(wire);
  expect(serializeDump(fill(sk!, texts.map((t) => t.join(''))))).toBe(serialize(parse(html)));
});
