// Server side of DTD transfer suppression (protocol/README.md, section DTD), the parts the DTD responder
// (dtd-responder.ts) is built of: which requests get an announcement, the table of held bodies waiting for
// PROCEED / DON'T-BOTHER, and the counters.
//
// Bounded: at most `maxHolds` bodies held (more: answered at once, counted `dtdHoldRefused`), each for at
// most `holdTimeoutMs` (then dropped, `dtdHoldExpired`); the last `recentMemory` decided holds are
// remembered so a repeated PROCEED (the client did not get the body) is answered again over TCP and a late
// or repeated decision is recognised instead of counted as unknown. With a body budget (body-budget.ts) every
// body kept (held, or remembered after a PROCEED) counts against its client's share until it is dropped.
import type { HttpResponse } from '../protocol/dhttp/http1';
import { bodyLength, type FileResponse } from './files';
import type { BodyBudget } from './body-budget';
import { bumpCode } from './errors';
import { DTD_ANNOUNCE_FIELD, formatAnnounce, parseDtdMode, type WireMode } from '../protocol/dtd/messages';

export interface DtdServerOptions {
  /** Answer DTD-Mode at all (default true). Digests are still sent when asked for. */
  enabled?: boolean;
  maxHolds?: number;
  holdTimeoutMs?: number;
  recentMemory?: number;
}

export interface DtdCounters {
  /** Body bytes of full responses sent (all channels; HEAD and announcements excluded). */
  payloadBytesSent: number;
  /** Full responses sent with a body. */
  payloadResponses: number;
  dtdRequests: number;
  dtdAnnounced: number;
  dtdHeld: number;
  /** Bodies sent at once after an announcement (abort mode / auto-proceed below the threshold). */
  dtdSentAtOnce: number;
  dtdProceeds: number;
  dtdDontBothers: number;
  /** DON'T-BOTHER while the body was still being written: the connection was cut. */
  dtdAborted: number;
  dtdRepeatedProceeds: number;
  dtdLateDecisions: number;
  dtdUnknownDecisions: number;
  dtdHoldExpired: number;
  dtdHoldRefused: number;
  /**
   * Requests over UDP that would have made a hold from an address not proven yet: answered with its token first (`421
   * DHTTP-Retry: token`), no hold made; the client repeats the request with the token.
   */
  dtdHoldsUnproven: number;
  /** Malformed DTD-Mode fields / decision messages, by error code. */
  dtdBadModes: Record<string, number>;
  dtdBadDecisions: Record<string, number>;
  digestsComputed: number;
  digestCacheHits: number;
}

/** The DTD counters the responder keeps (the digest ones are the file server's). */
export type DtdOwnCounters = Omit<DtdCounters, 'digestsComputed' | 'digestCacheHits'>;

export function newDtdCounters(): DtdOwnCounters {
  return {
    payloadBytesSent: 0,
    payloadResponses: 0,
    dtdRequests: 0,
    dtdAnnounced: 0,
    dtdHeld: 0,
    dtdSentAtOnce: 0,
    dtdProceeds: 0,
    dtdDontBothers: 0,
    dtdAborted: 0,
    dtdRepeatedProceeds: 0,
    dtdLateDecisions: 0,
    dtdUnknownDecisions: 0,
    dtdHoldExpired: 0,
    dtdHoldRefused: 0,
    dtdHoldsUnproven: 0,
    dtdBadModes: {},
    dtdBadDecisions: {},
  };
}

/** The body-less announcement of a response: same status and headers, DTD-Announce, Content-Length 0. */
export function announcement(res: FileResponse, held: boolean): HttpResponse {
  const headers = res.headers.filter(([n]) => n.toLowerCase() !== 'content-length');
  headers.push([DTD_ANNOUNCE_FIELD, formatAnnounce({ held, length: bodyLength(res) })]);
  return { status: res.status, reason: res.reason, headers, body: new Uint8Array(0) };
}

export type DtdPlan = 'none' | 'hold' | 'announce-and-send';

/**
 * What to do with a GET's answer under the request's DTD-Mode: hold it (proceed, body ≥ auto threshold),
 * announce it and send the body at once (abort, or auto-proceed below the threshold), or nothing (not a
 * 200 with a body, no DTD-Mode, or a malformed one — counted).
 */
export function planFor(mode: WireMode | null, method: string, res: FileResponse): DtdPlan {
  const n = bodyLength(res);
  if (mode === null || method !== 'GET' || res.status !== 200 || n === 0) return 'none';
  if (mode.mode === 'proceed' && n >= mode.autoBelowBytes) return 'hold';
  return 'announce-and-send';
}

export function readMode(headers: HttpResponse['headers'], counters: DtdOwnCounters): WireMode | null {
  try {
    const m = parseDtdMode(headers);
    if (m !== null) counters.dtdRequests++;
    return m;
  } catch (e) {
    bumpCode(counters.dtdBadModes, (e as { code?: string }).code ?? 'DTD_ERR_BAD_MODE');
    return null;
  }
}

export interface Hold<T> {
  res: FileResponse;
  at: number;
  ctx: T;
}

type Decided<T> = { res: FileResponse; ctx: T; decision: 'proceed' | 'dont-bother' };

/** Held bodies keyed by (client address, request ID), plus a memory of decided ones. */
export class HoldTable<T> {
  private readonly holds = new Map<string, Hold<T>>();
  private readonly recent = new Map<string, Decided<T>>();

  constructor(
    readonly maxHolds: number,
    readonly holdTimeoutMs: number,
    readonly recentMemory: number,
    /** Charge kept bodies to their client's share of this budget. */
    private readonly bodies?: { budget: BodyBudget; addressOf: (ctx: T) => string },
    /** Keep a body after PROCEED until it leaves the memory of decided holds (false: drop it at once). */
    private readonly keepAfterProceed = true,
  ) {}

  private give(res: FileResponse, ctx: T): void {
    if (this.bodies !== undefined && res.body.length > 0) this.bodies.budget.give(this.bodies.addressOf(ctx), res.body.length);
  }

  get size(): number {
    return this.holds.size;
  }

  has(key: string): boolean {
    return this.holds.has(key);
  }

  get(key: string): Hold<T> | undefined {
    return this.holds.get(key);
  }

  /** false when the table is full, or the body does not fit its client's share of the budget. */
  add(key: string, res: FileResponse, ctx: T, now: number): boolean {
    const old = this.holds.get(key);
    if (old === undefined && this.holds.size >= this.maxHolds) return false;
    if (this.bodies !== undefined && res.body.length > 0 && !this.bodies.budget.tryTake(this.bodies.addressOf(ctx), res.body.length)) return false;
    if (old !== undefined) this.give(old.res, old.ctx);
    this.holds.set(key, { res, at: now, ctx });
    return true;
  }

  decide(key: string, decision: 'proceed' | 'dont-bother'): Hold<T> | undefined {
    const h = this.holds.get(key);
    if (h === undefined) return undefined;
    this.holds.delete(key);
    this.remember(key, h.res, h.ctx, decision);
    return h;
  }

  /**
   * `res` was held (charged): kept after a PROCEED when `keepAfterProceed` (its body may be asked for again),
   * else dropped; the decision is remembered either way.
   */
  private remember(key: string, res: FileResponse, ctx: T, decision: 'proceed' | 'dont-bother'): void {
    const old = this.recent.get(key);
    if (old !== undefined) {
      this.recent.delete(key);
      this.give(old.res, old.ctx);
    }
    if (decision === 'dont-bother' || !this.keepAfterProceed) {
      this.give(res, ctx);
      res = { ...res, body: new Uint8Array(0) };
    }
    this.recent.set(key, { res, ctx, decision });
    while (this.recent.size > this.recentMemory) this.dropRecent(this.recent.keys().next().value as string);
  }

  private dropRecent(key: string): void {
    const d = this.recent.get(key);
    if (d === undefined) return;
    this.recent.delete(key);
    this.give(d.res, d.ctx);
  }

  decided(key: string): Decided<T> | undefined {
    return this.recent.get(key);
  }

  /** Drops holds older than the timeout; returns how many. */
  expire(now: number): number {
    let n = 0;
    for (const [k, h] of this.holds) {
      if (now - h.at < this.holdTimeoutMs) continue;
      this.holds.delete(k);
      this.give(h.res, h.ctx);
      n++;
    }
    return n;
  }

  clear(): void {
    for (const h of this.holds.values()) this.give(h.res, h.ctx);
    for (const d of this.recent.values()) this.give(d.res, d.ctx);
    this.holds.clear();
    this.recent.clear();
  }
}
