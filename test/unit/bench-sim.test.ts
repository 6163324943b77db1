// bench:sim's pure half (bench/sim/sweep.ts): a CATP load through the simulated link, and the figures a sweep keeps
// and compares.
import * as fs from 'node:fs';
import * as path from 'node:path';

import { canShow, compare, type Load, nameSeed, perPage, simulateLoad, summarize } from '../../bench/sim/sweep';
import { CatpAssembler, encodePage } from '../../protocol/catp';
import { generatePage } from '../../lab/silent-time/pages';
import { codec, sha256 } from '../helpers/catp-util';
import { realPages } from '../helpers/catp-real-pages';

const page = encodePage(generatePage(20_000), { sha256, codec });
const LINK = { rate: 50_000, delayMs: 40 };

describe('bench/sim', () => {
  test('a load through the simulated link completes; its longest wait covers the first useful frame; the same seed gives the same load', () => {
    const a = simulateLoad(page.frames, page.indexFrames, LINK, 0.1, true, 7, codec);
    expect(a.complete).not.toBeNull();
    // the clock starts with the request at the server: the way down, and the token answer and the first index frame
    // ahead of any useful frame (72 ms here; 86 before the first block of text went in small frames)
    expect(a.first).toBeGreaterThan(LINK.delayMs + ((151 + page.frames[0].length) / LINK.rate) * 1000);
    expect(a.gap).toBeGreaterThanOrEqual(a.first!);
    expect(a.complete!).toBeGreaterThanOrEqual(a.first!);
    expect(a.sendsPerFrame).toBeGreaterThanOrEqual(1);
    expect(simulateLoad(page.frames, page.indexFrames, LINK, 0.1, true, 7, codec)).toEqual(a);
    // no loss: every frame once, the page at about the link's rate plus the first contact's round trips
    const clean = simulateLoad(page.frames, page.indexFrames, LINK, 0, false, 7, codec);
    expect(clean.sendsPerFrame).toBe(1);
    const bytes = page.frames.reduce((n, f) => n + f.length + 28, 0);
    expect(clean.complete!).toBeLessThan((bytes / LINK.rate) * 1000 + 400);
  });

  test('per-page means, per-point summaries, and a comparison that finds a change and only that', () => {
    const loads: Load[] = [];
    for (const name of ['a', 'b']) {
      for (const seed of [1, 2, 3]) {
        const r = simulateLoad(page.frames, page.indexFrames, LINK, 0.1, false, nameSeed(name) + seed, codec);
        loads.push({ page: name, ...LINK, loss: 0.1, hint: false, seed, ...r });
      }
    }
    const pages = perPage(loads);
    expect(pages.map((p) => [p.page, p.loads, p.failed])).toEqual([['a', 3, 0], ['b', 3, 0]]);
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    expect(pages[0].completeMs).toBeCloseTo(mean(loads.slice(0, 3).map((l) => l.complete!)), 0);
    const [point] = summarize(loads, { links: [LINK], losses: [0.1], hints: [false] });
    expect(point.loads).toBe(6);
    expect(point.gapMs).toBeCloseTo(mean(loads.map((l) => l.gap!)), 6);
    // the same run: every ratio 1; page b 10% slower in a second run: only b counted worse
    const same = compare(pages, pages);
    expect(same).toHaveLength(1);
    expect(same[0]).toMatchObject({ pages: 2, completion: 1, gap: 1, first: 1, completionBetter: 0, completionWorse: 0 });
    const slower = pages.map((p) => (p.page === 'b' ? { ...p, completeMs: p.completeMs * 1.1, gapMs: p.gapMs * 1.1, firstMs: p.firstMs! * 1.21 } : p));
    const c = compare(slower, pages)[0];
    expect(c.completion).toBeCloseTo(Math.sqrt(1.1), 6);
    expect(c.first).toBeCloseTo(1.1, 6);
    // a run from before the first wait was kept: no ratio for it, the others as before
    expect(compare(slower, pages.map(({ firstMs: _, ...p }) => p))[0]).toMatchObject({ first: null, completion: c.completion });
    expect([c.completionWorse, c.gapWorse, c.gapBetter]).toEqual([1, 1, 0]);
    expect(c.worstGaps[0][0]).toBe('b');
    // nothing in common: a clear error, not a table of nothing
    expect(() => compare(pages, pages.map((p) => ({ ...p, rate: 1 })))).toThrow(expect.objectContaining({ code: 'BENCH_ERR_COMPARE' }));
  });

  test('the first flight in small frames: on real pages whose head fills frames, the first useful frame comes sooner on both links (no loss)', () => {
    const found = realPages();
    expect(found).not.toBeNull(); // ../shared/corpus beside the project, as for every corpus test
    for (const name of ['heise', 'lemonde-1', 'ehow-1']) {
      const bytes = new Uint8Array(fs.readFileSync(path.join(found!.dir, `${name}.html`)));
      const now = encodePage(bytes, { sha256, codec });
      const before = encodePage(bytes, { sha256, codec, firstFlight: false });
      for (const link of [{ rate: 10_000, delayMs: 10 }, LINK]) {
        const a = simulateLoad(now.frames, now.indexFrames, link, 0, true, 1, codec);
        const b = simulateLoad(before.frames, before.indexFrames, link, 0, true, 1, codec);
        // by a quarter datagram's time on the link at least (365 bytes and the headers: 39 ms at 10,000 B/s)
        expect([name, link.rate, a.first! + (393 / link.rate) * 1000 <= b.first!]).toEqual([name, link.rate, true]);
      }
    }
  });

  test('what can change the screen: body pieces, visible text, styles once there is a body; not the head, scripts or styles before it', () => {
    // head (its long style: a context block), body text (visible blocks), a long script (deferred); small frames so
    // the head's index piece holds no body
    const css = Array.from({ length: 120 }, (_, i) => `.k${i}{margin:${i}px}`).join('');
    const noise = (i: number) => Array.from({ length: 40 }, (_, k) => String.fromCharCode(97 + (((i * 40 + k) * 2654435761) >>> 13) % 26)).join('');
    const metas = Array.from({ length: 40 }, (_, i) => `<link rel=stylesheet href="/${noise(i)}.css">`).join('');
    const html = `<!DOCTYPE html><html><head><style>${css}</style>${metas}</head><body>` +
      Array.from({ length: 8 }, (_, i) => `<p>para ${i} ${'word '.repeat(80)}</p>`).join('') + `<style>${css.replace(/k/g, 'q')}</style>` +
      `<script>${'var a = 1;'.repeat(300)}</script></body></html>`;
    // (one frame a block: the two styles' text apart; no first flight, whose pieces go before the blocks they introduce)
    const p = encodePage(html, { sha256, codec, maxPayload: 300, spanning: [], firstFlight: false });
    const blocks = new Map(p.pieces.flatMap((pc) => pc.blocks).map((b) => [b.block, b.stream]));
    const client = new CatpAssembler({ sha256, codec });
    const shows = canShow(client);
    const seen: Array<[string, boolean]> = [];
    for (const f of p.frames) {
      client.receive(f, 0);
      for (let e = client.nextEvent(); e; e = client.nextEvent()) {
        const kind = e.type === 'block-filled' ? ['context', 'visible', 'deferred'][blocks.get(e.block)!] : e.type === 'index-piece' ? (e.piece.nodes.some((n) => n.kind === 'element' && n.tagName === 'p') ? 'body piece' : e.piece.nodes.length > 0 ? 'head piece' : 'blocks-only piece') : e.type;
        seen.push([kind, shows(e)]);
      }
    }
    const says = (kind: string) => [...new Set(seen.filter(([k]) => k === kind).map(([, v]) => v))];
    expect(says('head piece')).toEqual([false]);
    expect(says('body piece')).toEqual([true]);
    expect(says('visible')).toEqual([true]);
    expect(says('deferred')).toEqual([false]);
    expect(says('page-complete')).toEqual([false]);
    // the head's style comes right after the head's piece, before any body: nothing to restyle yet; the body's
    // style comes after body pieces, which it restyles
    const styles = seen.flatMap(([k, v], i) => (k === 'context' ? [[i, v] as const] : []));
    expect(styles.length).toBeGreaterThanOrEqual(2);
    expect(styles[0][0]).toBeLessThan(seen.findIndex(([k]) => k === 'body piece'));
    expect(styles[0][1]).toBe(false);
    expect(styles[styles.length - 1][1]).toBe(true);
  });

  test("each page's drop patterns are its own and the same in every run", () => {
    expect(nameSeed('lemonde-1')).toBe(nameSeed('lemonde-1'));
    expect(nameSeed('lemonde-1')).not.toBe(nameSeed('lemonde-2'));
  });
});
