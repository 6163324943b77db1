// The DTD responder (protocol/README.md, "Transfer suppression"): reads a request's DTD-Mode, holds bodies until
// the client's PROCEED / DON'T-BOTHER, remembers bodies being sent at once so that a DON'T-BOTHER can cut them
// short, and keeps the counters. It sends nothing itself: it says what to send, and its caller picks the channel.
//
// One class for both paths. The UDP path has one server-wide responder: keys are (client address, ID), holds
// expire, and a PROCEED repeated because its body was lost is answered again. Each client-opened DHTTP
// connection has its own: keys are IDs, its holds end with the connection, and since nothing is lost on it a
// repeated PROCEED is late.
import type { HttpRequest, HttpResponse } from '../protocol/dhttp/http1';
import { parseDecision, type WireMode } from '../protocol/dtd/messages';
import type { BodyBudget } from './body-budget';
import { HoldTable, announcement, readMode, type DtdOwnCounters } from './dtd';
import { bumpCode, errorCode } from './errors';
import { bodyLength, type FileResponse } from './files';

export interface DtdResponderOptions<T> {
  /** Answer DTD-Mode at all; false: every request is answered as if it had none. */
  enabled: boolean;
  /** Bodies held at once; more are sent at once (dtdHoldRefused). Also bounds the bodies tracked while sent at once. */
  maxHolds: number;
  /** A body is held this long (ms) at most; `expire()` drops older ones. */
  holdTimeoutMs: number;
  /** Decided holds remembered, so that a late or repeated decision is told apart from an unknown one. */
  recentMemory: number;
  /** Keep a body after PROCEED, and send it again for a PROCEED repeated with the resend flag (the UDP path). */
  repeatProceeds: boolean;
  /** The server's totals: every responder counts into the same object. */
  counters: DtdOwnCounters;
  /** Held bodies count against their client's share of this budget. */
  budget: BodyBudget;
  addressOf: (ctx: T) => string;
  now: () => number;
}

/** A held body to send now; `resend`: it answers a repeated PROCEED, so its channel is chosen as for a resend. */
export interface Proceed<T> {
  res: FileResponse;
  ctx: T;
  resend: boolean;
}

export class DtdResponder<T> {
  private readonly holds: HoldTable<T>;
  /** Bodies being written at once after their announcement, by key: how to cut each short (true: it was cut). */
  private readonly sending = new Map<string, () => boolean>();

  constructor(private readonly o: DtdResponderOptions<T>) {
    this.holds = new HoldTable(o.maxHolds, o.holdTimeoutMs, o.recentMemory, { budget: o.budget, addressOf: o.addressOf }, o.repeatProceeds);
  }

  get holdTimeoutMs(): number {
    return this.o.holdTimeoutMs;
  }

  /** The request's DTD-Mode, counted; null when it has none, a malformed one (counted by code) or DTD is off. */
  mode(headers: HttpRequest['headers']): WireMode | null {
    return this.o.enabled ? readMode(headers, this.o.counters) : null;
  }

  /** A repeat of a request whose body is held: the announcement again (the first was lost), with the hold's context. */
  reannouncement(key: string): { res: HttpResponse; ctx: T } | undefined {
    const h = this.holds.get(key);
    return h === undefined ? undefined : { res: announcement(h.res, true), ctx: h.ctx };
  }

  /** Holds `res` for a decision: the "held" announcement to send, or null when there is no room (counted: send it at once). */
  hold(key: string, res: FileResponse, ctx: T): HttpResponse | null {
    const c = this.o.counters;
    if (!this.holds.add(key, res, ctx, this.o.now())) {
      c.dtdHoldRefused++;
      return null;
    }
    c.dtdAnnounced++;
    c.dtdHeld++;
    return announcement(res, true);
  }

  /** `res` goes at once, right behind its "sending" announcement (returned); its body is counted as sent. */
  announceSending(res: FileResponse): HttpResponse {
    this.o.counters.dtdAnnounced++;
    this.o.counters.dtdSentAtOnce++;
    this.countPayload(res, 'GET');
    return announcement(res, false);
  }

  /** The body announced under `key` is being written: a DON'T-BOTHER calls `cut` (true: the transfer was cut short). */
  cutOnDontBother(key: string, cut: () => boolean): void {
    this.sending.set(key, cut);
    while (this.sending.size > this.o.maxHolds) this.sending.delete(this.sending.keys().next().value as string);
  }

  /**
   * A PROCEED / DON'T-BOTHER for `key` (`resend`: the decision carried the resend flag): the body to send, or null.
   * Hostile decisions are counted by code and dropped; ones naming no hold are counted as late or unknown.
   */
  decide(req: HttpRequest, key: string, resend: boolean): Proceed<T> | null {
    const c = this.o.counters;
    let decision;
    try {
      decision = parseDecision(req);
    } catch (e) {
      bumpCode(c.dtdBadDecisions, errorCode(e));
      return null;
    }
    const hold = this.holds.decide(key, decision);
    if (hold !== undefined) {
      if (decision === 'dont-bother') {
        c.dtdDontBothers++;
        return null;
      }
      c.dtdProceeds++;
      return { res: hold.res, ctx: hold.ctx, resend };
    }
    const cut = this.sending.get(key);
    if (cut !== undefined) {
      this.sending.delete(key);
      if (decision === 'proceed') {
        c.dtdLateDecisions++; // its body is on its way already
      } else {
        c.dtdDontBothers++;
        if (cut()) c.dtdAborted++;
      }
      return null;
    }
    const past = this.holds.decided(key);
    if (past === undefined) {
      c.dtdUnknownDecisions++;
      return null;
    }
    if (this.o.repeatProceeds && resend && past.decision === 'proceed' && decision === 'proceed') {
      // Our body did not arrive: send it again, as an answer to a resend.
      c.dtdRepeatedProceeds++;
      return { res: past.res, ctx: past.ctx, resend: true };
    }
    c.dtdLateDecisions++;
    return null;
  }

  /** A full response with a body is being sent (every channel; HEAD and announcements are not counted). */
  countPayload(res: FileResponse, method: string): void {
    const n = bodyLength(res);
    if (method === 'HEAD' || n === 0) return;
    this.o.counters.payloadBytesSent += n;
    this.o.counters.payloadResponses++;
  }

  /** Drops holds older than holdTimeoutMs (counted). */
  expire(): void {
    this.o.counters.dtdHoldExpired += this.holds.expire(this.o.now());
  }

  /** Drops every hold and the memory of decided ones, giving their bytes back to the budget. */
  close(): void {
    this.holds.clear();
    this.sending.clear();
  }
}
