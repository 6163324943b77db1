// A load's timeline for a person asking "why did this load paint when it did": every packet the emulator saw
// (arrive, depart, drop; both directions), in ms from the request, beside the load's visible updates (each with
// where on screen it changed pixels, so "what was that late update?" has an answer). One
// JSON file per load (`catp silent-time --trace DIR`). For our browser, also its own account: when each frame
// reached the host and when each `dom` event was sent, received, applied and painted.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { LinkLog } from '../link';
import type { FrameChange, Rect } from './frames';
import type { LoadResult } from './load-result';
import type { BrowserTimeline } from './transports';

export interface TracePacket {
  /** ms from the request (negative: before it) */
  t: number;
  dir: string;
  ev: 'arrive' | 'depart' | 'drop';
  /** IP bytes */
  len: number;
  proto: 'udp' | 'tcp' | number;
  /** the server's port on the packet (its source going to the client, its destination going to the server) */
  serverSide: boolean;
  reason?: string;
}

/** Our browser's account of the load (catp, inorder, tcp), ms from the request. */
export interface TraceBrowser {
  /** frames (or TCP reads) as the host's socket received them */
  arrivals: Array<{ t: number; seq: number | null; kind: string | null; bytes: number; useful: boolean }>;
  /** CATP: each `dom` event (a frame that made something displayable), its stages in order */
  dom: Array<{ sent: number | null; received: number | null; applied: number | null; painted: number | null }>;
}

/** A visible update the load counted: when, and where on screen (the page area's pixels; null where not known). */
export interface TraceUpdate {
  /** ms from the request */
  t: number;
  /** pixels that differ from the frame before */
  changed: number | null;
  /** their bounding box, in the page area's CSS pixels (0,0 its top left) */
  box: Rect | null;
}

export interface LoadTrace {
  load: LoadResult;
  /** the load's visible updates (load.updateTimesMs), each with what it changed */
  updates: TraceUpdate[];
  packets: TracePacket[];
  browser?: TraceBrowser;
}

/**
 * The updates a load counted (`shownNs`, CLOCK_MONOTONIC ns), each with the frame change that made it: `shown[i]` made
 * `shownNs[i]` (empty where the changes are not known). By position, not by time: frames whose stamps came out of
 * order share one time (`monotoneFrames`), and each is its own change.
 */
export function traceUpdates(shownNs: readonly bigint[], shown: readonly FrameChange[], requestNs: bigint): TraceUpdate[] {
  return shownNs.map((t, i) => {
    const c = shown[i];
    return { t: Math.round(Number(t - requestNs) / 1e3) / 1e3, changed: c?.changed ?? null, box: c?.box ?? null };
  });
}

/** A browser timeline in ms from the request, rounded to µs. */
export function traceBrowser(t: BrowserTimeline, requestNs: bigint): TraceBrowser {
  const ms = (ns: bigint | undefined) => (ns === undefined ? null : Math.round(Number(ns - requestNs) / 1e3) / 1e3);
  const n = Math.max(t.domSentNs.length, t.domReceivedNs.length, t.domAppliedNs.length, t.domPaintedNs.length);
  const dom: TraceBrowser['dom'] = [];
  for (let i = 0; i < n; i++) dom.push({ sent: ms(t.domSentNs[i]), received: ms(t.domReceivedNs[i]), applied: ms(t.domAppliedNs[i]), painted: ms(t.domPaintedNs[i]) });
  return { arrivals: t.arrivals.map((a) => ({ t: ms(a.atNs)!, seq: a.seq, kind: a.kind, bytes: a.bytes, useful: a.useful })), dom };
}

/** The trace file's name for a load: page, transport, loss and repetition, safe for any file system. */
export function traceFileName(r: Pick<LoadResult, 'page' | 'transport' | 'loss' | 'rep'>): string {
  return `${r.page.replace(/[^A-Za-z0-9._-]+/g, '_')}.${r.transport}.loss${r.loss}.rep${r.rep}.json`;
}

/** The packets of one load (from 100 ms before the request to its end), in ms from the request. */
export function tracePackets(log: LinkLog, requestNs: bigint, endNs: bigint, server: { address: string; port: number }): TracePacket[] {
  const from = requestNs - 100_000_000n;
  const out: TracePacket[] = [];
  for (const e of log.events) {
    if (e.tNs < from || e.tNs > endNs) continue;
    const serverSide = (e.dst === server.address && e.dport === server.port) || (e.src === server.address && e.sport === server.port);
    out.push({
      t: Math.round(Number(e.tNs - requestNs) / 1e3) / 1e3,
      dir: e.dir,
      ev: e.ev,
      len: e.len,
      proto: e.proto === 17 ? 'udp' : e.proto === 6 ? 'tcp' : e.proto,
      serverSide,
      ...(e.reason !== undefined ? { reason: e.reason } : {}),
    });
  }
  return out;
}

export function writeLoadTrace(dir: string, trace: LoadTrace): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, traceFileName(trace.load));
  writeFileSync(file, `${JSON.stringify(trace)}\n`);
  return file;
}
