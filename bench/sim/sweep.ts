// bench:sim's pure half: one CATP load through the simulated link (lab/sim-link.ts), and the figures a sweep keeps
// and compares. No files, no clock: run.ts reads the pages and prints.
import { type CatpEvent, type FrameCodec, type RawAssemblerEvent, CatpAssembler, RepairSender, STREAM } from '../../protocol/catp';
import { FIRST_CONTACT, runBottleneck } from '../../lab/sim-link';
import { sha256 } from '../../platform/sha256';
import { longestGap } from '../../protocol/silent-time';
import { BenchError } from '../errors';

/**
 * One load's figures: ms after the request reached the server (lab/sim-link.ts starts there); `gap` the longest wait
 * for a useful frame, the first included.
 */
export interface Load { page: string; rate: number; delayMs: number; loss: number; hint: boolean; seed: number; complete: number | null; first: number | null; gap: number | null; sendsPerFrame: number; queueDrops: number }

/** Per point (link, loss, hint): means over the loads that completed. */
export interface Point { rate: number; delayMs: number; loss: number; hint: boolean; loads: number; failed: number; completeMs: number; gapMs: number; firstMs: number; sendsPerFrame: number; loadsWithQueueDrops: number }

const ID = new Uint8Array([0x80, 1, 2, 3, 4, 5, 6, 7]);

/**
 * One CATP load of `frames` through the simulated link (`rate` B/s, `delayMs` one way, random `loss` both ways, the
 * first contact at 1×); `hint`: the server read the uplink's rate (0.97 × the link's) from the first two datagrams.
 */
export function simulateLoad(frames: Uint8Array[], indexFrames: number, link: { rate: number; delayMs: number }, loss: number, hint: boolean, seed: number, codec: FrameCodec) {
  const sender = new RepairSender(frames, indexFrames, { requestId: ID });
  const perMs = link.rate / 1000;
  if (hint) sender.onPathRateHint(0, perMs * 0.97);
  const client = new CatpAssembler({ sha256, codec, requestId: ID, otherPort: 40000 });
  const res = runBottleneck(sender, client, { rate: perMs, delayMs: link.delayMs, loss, upLoss: loss, seed, firstFlight: FIRST_CONTACT, timerLateMs: 1, maxMs: 300_000, useful: canShow(client) });
  // the clock starts at 0 (the request at the server), so the first gap is the wait for the first useful frame
  const gap = longestGap(0, res.usefulAt)?.ms ?? null;
  return { complete: res.completeAt, first: res.usefulAt[0] ?? null, gap, sendsPerFrame: res.sent / frames.length, queueDrops: res.queueDrops };
}

/**
 * Which of a CATP client's events can change what a browser shows (the lab counts only changed pixels): an index
 * piece that adds nodes under `<body>`; a block whose fills are visible text; a block of context (styles) once some
 * of the body is there for it to restyle. Not: the head's pieces, context before any body, deferred text (scripts,
 * metadata), `index-complete`. It knows no viewport, so it still counts what a browser would show below the fold.
 */
export function canShow(client: CatpAssembler): (e: CatpEvent | RawAssemblerEvent) => boolean {
  const inBody = new Set<number>();
  let bodyShown = false;
  return (e) => {
    if (e.type === 'index-piece') {
      // the body and everything under it (the chain runs top down: what follows the body in it is under it)
      let under = false;
      for (const c of e.piece.chain) {
        if (under || (!c.content && c.tagName === 'body')) under = true;
        if (under) inBody.add(c.n);
      }
      let added = false;
      for (const nd of e.piece.nodes) {
        if (inBody.has(nd.parent)) {
          added = true;
          inBody.add(nd.n);
        } else if (nd.kind === 'element' && nd.tagName === 'body') inBody.add(nd.n);
      }
      if (added) bodyShown = true;
      return added;
    }
    if (e.type !== 'block-filled' || e.fills.length === 0) return false;
    const stream = client.blockInfo(e.block)?.stream;
    return stream === STREAM.VISIBLE || (stream === STREAM.CONTEXT && bodyShown);
  };
}

/** A page's own drop patterns (the same in every run and build, different from other pages'): FNV-1a of its name. */
export function nameSeed(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

const mean = (xs: number[]) => (xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
const key = (p: { rate: number; delayMs: number; loss: number; hint: boolean }) => `${p.rate}|${p.delayMs}|${p.loss}|${p.hint}`;

/** Per link, loss and hint of `o`: means over the loads that completed. */
export function summarize(loads: Load[], o: { links: Array<{ rate: number; delayMs: number }>; losses: number[]; hints: boolean[] }): Point[] {
  const out: Point[] = [];
  for (const link of o.links) {
    for (const loss of o.losses) {
      for (const hint of o.hints) {
        const ls = loads.filter((l) => l.rate === link.rate && l.delayMs === link.delayMs && l.loss === loss && l.hint === hint);
        const ok = ls.filter((l) => l.complete !== null);
        out.push({
          ...link, loss, hint, loads: ls.length, failed: ls.length - ok.length,
          completeMs: mean(ok.map((l) => l.complete as number)), gapMs: mean(ok.map((l) => l.gap as number)), firstMs: mean(ok.map((l) => l.first as number)),
          sendsPerFrame: mean(ls.map((l) => l.sendsPerFrame)), loadsWithQueueDrops: ls.filter((l) => l.queueDrops > 0).length,
        });
      }
    }
  }
  return out;
}

/** One page's means at one point (what the JSON keeps, and what --compare reads). */
export interface PagePoint {
  page: string; rate: number; delayMs: number; loss: number; hint: boolean; loads: number; failed: number; completeMs: number; gapMs: number;
  /** the wait for the first useful frame (absent from runs before 2026-11-29) */
  firstMs?: number;
  sendsPerFrame: number;
}

/** Each page's means at each point. */
export function perPage(loads: Load[]): PagePoint[] {
  const m = new Map<string, Load[]>();
  for (const l of loads) {
    const k = `${key(l)}|${l.page}`;
    const e = m.get(k);
    if (e === undefined) m.set(k, [l]);
    else e.push(l);
  }
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return [...m.values()].map((ls) => {
    const ok = ls.filter((l) => l.complete !== null);
    return {
      page: ls[0].page, rate: ls[0].rate, delayMs: ls[0].delayMs, loss: ls[0].loss, hint: ls[0].hint, loads: ls.length, failed: ls.length - ok.length,
      completeMs: r1(mean(ok.map((l) => l.complete as number))), gapMs: r1(mean(ok.map((l) => l.gap as number))), firstMs: r1(mean(ok.map((l) => l.first as number))), sendsPerFrame: Math.round(mean(ls.map((l) => l.sendsPerFrame)) * 1000) / 1000,
    };
  });
}

/** One point of a comparison: geometric means of the pages' new/old ratios, pages beyond 2% either way, worst gaps. */
export interface CompareRow {
  rate: number; delayMs: number; loss: number; hint: boolean; pages: number; completion: number; completionBetter: number; completionWorse: number; gap: number; gapBetter: number; gapWorse: number;
  /** the wait for the first useful frame, new / old (null when the old run did not keep it) */
  first: number | null;
  worstGaps: Array<[string, number]>;
}

/** new / old per point, over the pages both runs have (throws BENCH_ERR_COMPARE when they share none). */
export function compare(now: PagePoint[], old: PagePoint[]): CompareRow[] {
  const before = new Map(old.map((p) => [`${key(p)}|${p.page}`, p]));
  const points = new Map<string, { p: PagePoint; c: number[]; g: number[]; f: number[]; worst: Array<[string, number]> }>();
  for (const p of now) {
    const w = before.get(`${key(p)}|${p.page}`);
    if (w === undefined || !(w.completeMs > 0) || !(w.gapMs > 0)) continue;
    const e = points.get(key(p)) ?? { p, c: [], g: [], f: [], worst: [] };
    e.c.push(p.completeMs / w.completeMs);
    e.g.push(p.gapMs / w.gapMs);
    if ((w.firstMs ?? 0) > 0 && (p.firstMs ?? 0) > 0) e.f.push((p.firstMs as number) / (w.firstMs as number));
    e.worst.push([p.page, p.gapMs / w.gapMs]);
    points.set(key(p), e);
  }
  if (points.size === 0) throw new BenchError('BENCH_ERR_COMPARE', 'the compared run has no page and point in common with this one');
  const gm = (xs: number[]) => Math.exp(mean(xs.map(Math.log)));
  return [...points.values()].map(({ p, c, g, f, worst }) => ({
    rate: p.rate, delayMs: p.delayMs, loss: p.loss, hint: p.hint, pages: c.length,
    completion: gm(c), completionBetter: c.filter((x) => x < 0.98).length, completionWorse: c.filter((x) => x > 1.02).length,
    gap: gm(g), gapBetter: g.filter((x) => x < 0.98).length, gapWorse: g.filter((x) => x > 1.02).length,
    first: f.length === c.length ? gm(f) : null,
    worstGaps: worst.sort((x, y) => y[1] - x[1]).slice(0, 3),
  }));
}
