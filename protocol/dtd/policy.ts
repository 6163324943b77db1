/**
 * The client's DTD policy (sans-IO): per-origin memory, measured RTT and bandwidth, the observed hit ratio,
 * and the mode each request asks for (latency-model.ts). Time comes in as arguments.
 *
 * - RTT: smoothed (α = 1/8) from the first answer of each request (announcement or response).
 * - Bandwidth: smoothed (α = 1/4) from bodies ≥ `bwSampleMinBytes`: bytes / (transfer time − RTT).
 * - Hit ratio: DTD-only hits / digests looked up, with a prior of `priorHits` in `priorLookups` (default
 *   3 in 100, the paper's WebTV warm-start DTD-only ratio of 3.0%), so one lucky hit does not swing it.
 * - An origin that sends no digest in `noDigestTries` answers in a row is asked plainly (no DTD fields, so
 *   no held round trip can ever be spent on it) for the next `reprobeAfter` requests, then tried again.
 */
import type { HttpHeaders } from '../dhttp/http1';
import { chooseMode, type DtdMode, type HitRatios, type LinkEstimate, type ModeChoice } from './latency-model';
import { formatDtdMode } from './messages';

export interface DtdPolicyOptions {
  /** Default true. */
  enabled?: boolean;
  /** Use this mode for every DTD-capable request instead of the model (benchmarks, tests). */
  forcedMode?: DtdMode;
  /** With forcedMode 'auto-proceed': the threshold. Default 4096. */
  forcedAutoBytes?: number;
  /** Pin the link instead of measuring it. */
  link?: LinkEstimate;
  /** Assumed until the first measurement. Default 50 ms, 1.25 MB/s (10 Mb/s). */
  defaultLink?: LinkEstimate;
  hitRatioConv?: number;
  priorHits?: number;
  priorLookups?: number;
  noDigestTries?: number;
  reprobeAfter?: number;
  bwSampleMinBytes?: number;
  proceedBelowBytes?: number;
  abortAboveBytes?: number;
}

interface OriginState {
  srttMs: number | null;
  bw: number | null;
  /** Answers in a row without a digest. */
  noDigestRun: number;
  /** Requests left to send plainly before probing again (0 = DTD on). */
  plainLeft: number;
}

/** What a policy remembers across runs (per-origin path estimates and the hit ratio), as plain JSON. */
export interface PolicySnapshot {
  v: 1;
  hits: number;
  lookups: number;
  origins: Array<[string, { srttMs: number | null; bw: number | null }]>;
}

/** Origins a snapshot may carry (the policy's own bound). */
const MAX_ORIGINS = 4096;

export interface Choice extends ModeChoice {
  /** Request header fields that ask for it (empty for plain). */
  headers: HttpHeaders;
  link: LinkEstimate;
}

export class DtdPolicy {
  private readonly origins = new Map<string, OriginState>();
  private hits = 0;
  private lookups = 0;
  private readonly o: Required<Omit<DtdPolicyOptions, 'forcedMode' | 'link'>> & Pick<DtdPolicyOptions, 'forcedMode' | 'link'>;

  constructor(options: DtdPolicyOptions = {}) {
    this.o = {
      enabled: options.enabled ?? true,
      forcedMode: options.forcedMode,
      forcedAutoBytes: options.forcedAutoBytes ?? 4096,
      link: options.link,
      defaultLink: options.defaultLink ?? { rttMs: 50, bytesPerSec: 1_250_000 },
      hitRatioConv: options.hitRatioConv ?? 0,
      priorHits: options.priorHits ?? 3,
      priorLookups: options.priorLookups ?? 100,
      noDigestTries: options.noDigestTries ?? 3,
      reprobeAfter: options.reprobeAfter ?? 50,
      bwSampleMinBytes: options.bwSampleMinBytes ?? 16 * 1024,
      proceedBelowBytes: options.proceedBelowBytes ?? 512,
      abortAboveBytes: options.abortAboveBytes ?? 64 * 1024 * 1024,
    };
  }

  private origin(key: string): OriginState {
    let s = this.origins.get(key);
    if (s === undefined) {
      s = { srttMs: null, bw: null, noDigestRun: 0, plainLeft: 0 };
      this.origins.set(key, s);
      if (this.origins.size > MAX_ORIGINS) this.origins.delete(this.origins.keys().next().value as string);
    }
    return s;
  }

  linkOf(originKey: string): LinkEstimate {
    if (this.o.link) return this.o.link;
    const s = this.origins.get(originKey);
    return {
      rttMs: s?.srttMs ?? this.o.defaultLink.rttMs,
      bytesPerSec: s?.bw ?? this.o.defaultLink.bytesPerSec,
    };
  }

  hitRatios(): HitRatios {
    const d = (this.hits + this.o.priorHits) / (this.lookups + this.o.priorLookups);
    return { conv: this.o.hitRatioConv, dtdOnly: Math.min(d, 1 - this.o.hitRatioConv) };
  }

  /** The mode for the next request to `originKey` (counts down the plain stretch of a digest-less origin). */
  choose(originKey: string): Choice {
    const s = this.origin(originKey);
    const link = this.linkOf(originKey);
    let choice: ModeChoice;
    if (!this.o.enabled) {
      choice = chooseMode({ link, hitRatios: this.hitRatios(), enabled: false, disabledReason: 'DTD off' });
    } else if (s.plainLeft > 0) {
      s.plainLeft--;
      choice = chooseMode({
        link,
        hitRatios: this.hitRatios(),
        enabled: false,
        disabledReason: `origin sent no digest ${this.o.noDigestTries} times in a row; asking plainly (${s.plainLeft + 1} more before a new try)`,
      });
    } else if (this.o.forcedMode !== undefined) {
      const m = this.o.forcedMode;
      choice = {
        mode: m,
        autoThresholdBytes: m === 'auto-proceed' ? this.o.forcedAutoBytes : null,
        breakEvenBytes: NaN,
        reason: `mode forced to ${m}${m === 'auto-proceed' ? ` (threshold ${this.o.forcedAutoBytes} B)` : ''}`,
      };
    } else {
      choice = chooseMode({
        link,
        hitRatios: this.hitRatios(),
        enabled: true,
        proceedBelowBytes: this.o.proceedBelowBytes,
        abortAboveBytes: this.o.abortAboveBytes,
      });
    }
    return { ...choice, link, headers: headersFor(choice) };
  }

  /** First answer (announcement or response) of a request: an RTT sample. */
  observeRtt(originKey: string, rttMs: number): void {
    if (!(rttMs >= 0) || !Number.isFinite(rttMs)) return;
    const s = this.origin(originKey);
    s.srttMs = s.srttMs === null ? rttMs : s.srttMs + (rttMs - s.srttMs) / 8;
  }

  /** A body of `bytes` took `ms` from request to completion. */
  observeTransfer(originKey: string, bytes: number, ms: number): void {
    if (bytes < this.o.bwSampleMinBytes || !(ms > 0)) return;
    const s = this.origin(originKey);
    const rtt = s.srttMs ?? 0;
    const sample = bytes / (Math.max(ms - rtt, ms / 10, 0.5) / 1000);
    s.bw = s.bw === null ? sample : s.bw + (sample - s.bw) / 4;
  }

  /** An answer to a DTD request came with (true) or without (false) a digest. */
  observeDigest(originKey: string, had: boolean): void {
    const s = this.origin(originKey);
    if (had) {
      s.noDigestRun = 0;
      return;
    }
    if (++s.noDigestRun >= this.o.noDigestTries) {
      s.noDigestRun = 0;
      s.plainLeft = this.o.reprobeAfter;
    }
  }

  /** A digest was looked up in the store (hit = honoured within the privacy scope). */
  observeLookup(hit: boolean): void {
    this.lookups++;
    if (hit) this.hits++;
  }

  /** Path estimates and hit ratio to keep for the next run (origins measured at least once, most recent last). */
  snapshot(): PolicySnapshot {
    const origins: PolicySnapshot['origins'] = [];
    for (const [k, st] of this.origins) if (st.srttMs !== null || st.bw !== null) origins.push([k, { srttMs: st.srttMs, bw: st.bw }]);
    return { v: 1, hits: this.hits, lookups: this.lookups, origins };
  }

  /**
   * Takes back what `snapshot` gave (read from disk: anything malformed is skipped, never thrown); measurements
   * made since this policy started win over restored ones. Returns how many origins were restored.
   */
  restore(data: unknown): number {
    if (typeof data !== 'object' || data === null || (data as { v?: unknown }).v !== 1) return 0;
    const d = data as Partial<Record<keyof PolicySnapshot, unknown>>;
    const count = (x: unknown) => (typeof x === 'number' && Number.isSafeInteger(x) && x >= 0 ? x : null);
    const hits = count(d.hits);
    const lookups = count(d.lookups);
    if (hits !== null && lookups !== null && hits <= lookups && this.lookups === 0) {
      this.hits = hits;
      this.lookups = lookups;
    }
    if (!Array.isArray(d.origins)) return 0;
    const rtt = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) && x >= 0 && x <= 60_000 ? x : null);
    const bw = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) && x > 0 && x <= 1e12 ? x : null);
    let n = 0;
    for (const item of d.origins.slice(-MAX_ORIGINS)) {
      if (!Array.isArray(item) || item.length !== 2 || typeof item[0] !== 'string' || item[0].length > 300) continue;
      const v = item[1] as { srttMs?: unknown; bw?: unknown } | null;
      if (typeof v !== 'object' || v === null) continue;
      const [r, b] = [rtt(v.srttMs), bw(v.bw)];
      if ((r === null && b === null) || this.origins.has(item[0])) continue;
      const st = this.origin(item[0]);
      st.srttMs = r;
      st.bw = b;
      n++;
    }
    return n;
  }

  counters(): { hits: number; lookups: number; origins: number } {
    return { hits: this.hits, lookups: this.lookups, origins: this.origins.size };
  }
}

export const WANT_HEADERS: HttpHeaders = [
  ['Want-Repr-Digest', 'sha-256=10'],
  ['Want-Digest', 'sha-256'],
];

export function headersFor(choice: Pick<ModeChoice, 'mode' | 'autoThresholdBytes'>): HttpHeaders {
  switch (choice.mode) {
    case 'plain':
      return [];
    case 'abort':
      return [...WANT_HEADERS, ['DTD-Mode', formatDtdMode({ mode: 'abort' })]];
    case 'proceed':
      return [...WANT_HEADERS, ['DTD-Mode', formatDtdMode({ mode: 'proceed', autoBelowBytes: 0 })]];
    case 'auto-proceed':
      return [...WANT_HEADERS, ['DTD-Mode', formatDtdMode({ mode: 'proceed', autoBelowBytes: choice.autoThresholdBytes ?? 0 })]];
  }
}
