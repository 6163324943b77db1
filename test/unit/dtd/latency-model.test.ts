// The DTD paper's section 7: Table 3 reproduced from its own inputs (equation 1 and the warm-start
// hit ratios of Tables 1 and 2), and the client's mode choice following it.
import { breakEvenBytes, chooseMode, dtdPaysOff, expectedConvMs, expectedDtdMs, DtdPolicy } from '../../../protocol/dtd';

// Warm-start transfer counts (Tables 1 and 2): property (iv) rows are conventional hits, rows with (iv)=0 and
// any of (i)-(iii) are DTD-only hits, the (0,0,0,0) row is new payloads.
const WEBTV = {
  total: 140_060_678,
  conv: 52_607_080 + 64_263_811 + 168_472 + 4_916_756,
  dtd: 2_332_816 + 43_313 + 908_075 + 465_865 + 62_776 + 67_477 + 309_030,
  fresh: 13_915_207,
};
const COMPAQ = {
  total: 28_913_350,
  conv: 7_230_114 + 7_587_555 + 65_695 + 1_046_725,
  dtd: 1_291_369 + 49_339 + 229_799 + 612_795 + 48_965 + 62_984 + 112_359,
  fresh: 10_575_651,
};
const hr = (t: typeof WEBTV) => ({ conv: t.conv / t.total, dtdOnly: t.dtd / t.total });

// Table 3: scenario, RTT, bandwidth (Kb/s = 1000 bit/s), break-even bytes for WebTV and Compaq.
const TABLE3 = [
  ['cellphone', 100, 10, 415, 549],
  ['modem', 100, 56, 2325, 3075],
  ['DSL', 30, 384, 4783, 6325],
  ['WAN', 42, 6000, 104629, 138367],
] as const;

test('the trace counts add up (the categories partition the warm-start transfers)', () => {
  for (const t of [WEBTV, COMPAQ]) expect(t.conv + t.dtd + t.fresh).toBe(t.total);
});

test.each(TABLE3)('Table 3, %s: break-even sizes reproduced within rounding', (_name, rttMs, kbps, webtv, compaq) => {
  const link = { rttMs, bytesPerSec: (kbps * 1000) / 8 };
  expect(Math.abs(breakEvenBytes(link, hr(WEBTV)) - webtv)).toBeLessThanOrEqual(1);
  expect(Math.abs(breakEvenBytes(link, hr(COMPAQ)) - compaq)).toBeLessThanOrEqual(1);
});

test('equation 1 agrees with the expected latencies it was derived from', () => {
  const link = { rttMs: 100, bytesPerSec: 7000 };
  const ratios = hr(WEBTV);
  for (const L of [100, 1000, 2000, 2400, 5000, 100_000]) {
    expect(dtdPaysOff(L, link, ratios)).toBe(expectedDtdMs(L, link, ratios) < expectedConvMs(L, link, ratios));
  }
  const lStar = breakEvenBytes(link, ratios);
  expect(dtdPaysOff(lStar * 0.99, link, ratios)).toBe(false);
  expect(dtdPaysOff(lStar * 1.01, link, ratios)).toBe(true);
});

test('mode choice follows the model: auto-proceed at the break-even size, proceed on slow links, abort on fast ones', () => {
  const ratios = hr(WEBTV);
  const modem = chooseMode({ link: { rttMs: 100, bytesPerSec: 7000 }, hitRatios: ratios, enabled: true });
  expect(modem.mode).toBe('auto-proceed');
  expect(modem.autoThresholdBytes).toBe(2326); // ⌈2325.1⌉: bodies of 2326 B and more are held
  const cell = chooseMode({ link: { rttMs: 100, bytesPerSec: 1250 }, hitRatios: ratios, enabled: true });
  expect(cell.mode).toBe('proceed'); // L* = 415 B ≤ 512 B: hold everything
  const lan = chooseMode({ link: { rttMs: 0.2, bytesPerSec: 125_000_000 }, hitRatios: ratios, enabled: true, abortAboveBytes: 64 * 1024 });
  expect(lan.mode).toBe('abort'); // L* = 83 KB: no body in this workload is worth a round trip
  expect(chooseMode({ link: { rttMs: 10, bytesPerSec: 1e6 }, hitRatios: { conv: 0, dtdOnly: 0 }, enabled: true }).mode).toBe('abort');
  expect(chooseMode({ link: { rttMs: 10, bytesPerSec: 1e6 }, hitRatios: ratios, enabled: false }).mode).toBe('plain');
});

test('the client policy measures the link and the hit ratio, and stops asking a digest-less origin', () => {
  const p = new DtdPolicy({ priorHits: 0, priorLookups: 0 });
  const o = 'dhttp://h:1';
  p.observeLookup(true);
  p.observeLookup(false); // hit ratio 50%
  for (let i = 0; i < 20; i++) p.observeRtt(o, 100);
  p.observeTransfer(o, 70_000, 10_100); // 70 kB in 10 s after one RTT: 7000 B/s
  const c = p.choose(o);
  expect(c.link.rttMs).toBeCloseTo(100, 5);
  expect(c.link.bytesPerSec).toBeCloseTo(7000, 0);
  expect(c.mode).toBe('auto-proceed');
  expect(c.autoThresholdBytes).toBe(700); // BW·RTT·(1 − ½)/½
  expect(c.headers).toEqual([['Want-Repr-Digest', 'sha-256=10'], ['Want-Digest', 'sha-256'], ['DTD-Mode', 'proceed;auto=700']]);
  for (let i = 0; i < 3; i++) p.observeDigest(o, false);
  const plain = p.choose(o);
  expect(plain.mode).toBe('plain');
  expect(plain.headers).toEqual([]);
  expect(plain.reason).toMatch(/no digest 3 times/);
  for (let i = 0; i < 49; i++) expect(p.choose(o).mode).toBe('plain');
  expect(p.choose(o).mode).toBe('auto-proceed'); // probes again
});
