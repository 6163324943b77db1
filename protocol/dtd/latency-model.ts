/**
 * The DTD paper's latency model (section 7) and the transfer-suppression mode it implies.
 *
 * With T_lookup = 0 and headers ignored (the paper's simplifications):
 *
 *   T_ConvHit   = 0                         T_ConvMiss = RTT + L/BW
 *   T_DTDOnlyHit = RTT                      T_DTDMiss  = RTT + T_ConvMiss
 *   E_Conv = HRc·T_ConvHit + (1 − HRc)·T_ConvMiss
 *   E_DTD  = HRc·T_ConvHit + HRd·T_DTDOnlyHit + (1 − (HRc + HRd))·T_DTDMiss
 *
 * and E_DTD < E_Conv exactly when (equation 1)
 *
 *   BW < L·HRd / (RTT·(1 − (HRc + HRd)))
 *
 * Solved for L this is the break-even response size L* = BW·RTT·(1 − (HRc + HRd)) / HRd: holding a
 * response for a PROCEED pays off (in expectation) only for responses longer than L*. Table 3 of the
 * paper lists L* for four links; test/unit/dtd/latency-model.test.ts reproduces it.
 *
 * Mode choice (ours, from the model): the client does not know L before the server answers, so it hands
 * L* to the server (`DTD-Mode: proceed;auto=L*`): bodies shorter than L* are sent at once (auto-proceed,
 * still cut short on a hit, as in abort mode), longer ones are held for PROCEED / DON'T-BOTHER.
 *   - L* ≤ `proceedBelowBytes` (a slow link or a high hit ratio): every response is held → `proceed`.
 *   - L* ≥ `abortAboveBytes` (a fast link, or no hits expected, L* = ∞): nothing is worth a round trip →
 *     `abort` (announce + body at once; a hit closes the transfer).
 *   - otherwise `auto-proceed` with threshold ⌈L*⌉.
 *   - `plain` when DTD is off for the origin (no store, or it never sends digests).
 */

export interface LinkEstimate {
  /** Round-trip time client ↔ server, ms. */
  rttMs: number;
  /** Effective bandwidth, bytes per second. */
  bytesPerSec: number;
}

export interface HitRatios {
  /** Conventional-cache hit ratio (answered without the network at all). */
  conv: number;
  /** DTD-only hit ratio (a conventional miss whose payload the store holds). */
  dtdOnly: number;
}

export type DtdMode = 'plain' | 'proceed' | 'auto-proceed' | 'abort';

function check(link: LinkEstimate, hr: HitRatios): void {
  if (!(link.rttMs >= 0) || !(link.bytesPerSec > 0)) throw new RangeError('link needs rttMs >= 0 and bytesPerSec > 0');
  if (!(hr.conv >= 0 && hr.dtdOnly >= 0 && hr.conv + hr.dtdOnly <= 1)) throw new RangeError('hit ratios must be in [0, 1] and sum to at most 1');
}

/** Expected latency (ms) of a conventional cache for responses of `lengthBytes`. */
export function expectedConvMs(lengthBytes: number, link: LinkEstimate, hr: HitRatios): number {
  check(link, hr);
  const miss = link.rttMs + (lengthBytes / link.bytesPerSec) * 1000;
  return (1 - hr.conv) * miss;
}

/** Expected latency (ms) of a pure-proceed DTD cache for responses of `lengthBytes`. */
export function expectedDtdMs(lengthBytes: number, link: LinkEstimate, hr: HitRatios): number {
  check(link, hr);
  const convMiss = link.rttMs + (lengthBytes / link.bytesPerSec) * 1000;
  return hr.dtdOnly * link.rttMs + (1 - (hr.conv + hr.dtdOnly)) * (link.rttMs + convMiss);
}

/** Equation 1 as written: true when DTD lowers the expected latency for responses of `lengthBytes`. */
export function dtdPaysOff(lengthBytes: number, link: LinkEstimate, hr: HitRatios): boolean {
  check(link, hr);
  const missRatio = 1 - (hr.conv + hr.dtdOnly);
  const bwBits = link.bytesPerSec * 8;
  const rttS = link.rttMs / 1000;
  if (missRatio <= 0 || rttS === 0) return hr.dtdOnly > 0;
  return bwBits < (lengthBytes * 8 * hr.dtdOnly) / (rttS * missRatio);
}

/** Break-even response size in bytes (equation 1 solved for L): ∞ when no DTD hits are expected. */
export function breakEvenBytes(link: LinkEstimate, hr: HitRatios): number {
  check(link, hr);
  if (hr.dtdOnly <= 0) return Infinity;
  const missRatio = Math.max(0, 1 - (hr.conv + hr.dtdOnly));
  return (link.bytesPerSec * (link.rttMs / 1000) * missRatio) / hr.dtdOnly;
}

export interface ModeInputs {
  link: LinkEstimate;
  hitRatios: HitRatios;
  /** DTD is usable for this request (a store, a GET, an origin not known to ignore digests). */
  enabled: boolean;
  /** Why it is not, for the explanation. */
  disabledReason?: string;
  /** L* at or below this → hold everything (`proceed`). Default 512 (about one response header). */
  proceedBelowBytes?: number;
  /** L* at or above this → hold nothing (`abort`). Default 64 MiB. */
  abortAboveBytes?: number;
}

export interface ModeChoice {
  mode: DtdMode;
  /** auto-proceed: bodies shorter than this are sent at once. */
  autoThresholdBytes: number | null;
  breakEvenBytes: number;
  /** One line, for `catp get --verbose`. */
  reason: string;
}

export function chooseMode(inp: ModeInputs): ModeChoice {
  if (!inp.enabled) {
    return { mode: 'plain', autoThresholdBytes: null, breakEvenBytes: Infinity, reason: inp.disabledReason ?? 'DTD disabled' };
  }
  const lStar = breakEvenBytes(inp.link, inp.hitRatios);
  const lo = inp.proceedBelowBytes ?? 512;
  const hi = inp.abortAboveBytes ?? 64 * 1024 * 1024;
  const why =
    `RTT ${inp.link.rttMs.toFixed(1)} ms, ${formatRate(inp.link.bytesPerSec)}, hit ratio ${(inp.hitRatios.dtdOnly * 100).toFixed(1)}% ` +
    `(conv ${(inp.hitRatios.conv * 100).toFixed(1)}%) → break-even ${Number.isFinite(lStar) ? `${Math.round(lStar)} B` : '∞'}`;
  if (lStar <= lo) return { mode: 'proceed', autoThresholdBytes: null, breakEvenBytes: lStar, reason: `${why} ≤ ${lo} B: hold every body` };
  if (lStar >= hi) return { mode: 'abort', autoThresholdBytes: null, breakEvenBytes: lStar, reason: `${why}: no body is worth a round trip; cut hits short` };
  const t = Math.ceil(lStar);
  return { mode: 'auto-proceed', autoThresholdBytes: t, breakEvenBytes: lStar, reason: `${why}: hold bodies ≥ ${t} B, send shorter ones at once` };
}

export function formatRate(bytesPerSec: number): string {
  const bits = bytesPerSec * 8;
  if (bits >= 1e9) return `${(bits / 1e9).toFixed(1)} Gb/s`;
  if (bits >= 1e6) return `${(bits / 1e6).toFixed(1)} Mb/s`;
  return `${(bits / 1e3).toFixed(1)} kb/s`;
}
