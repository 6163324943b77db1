// The runner: for every (page, loss, repetition) one seed, and for every transport one fresh link with
// that seed (the emulator's replay guarantee: packet k of a direction is dropped iff the k-th loss draw
// says so, so every transport meets the same drop pattern), the origin server on the server side, a
// packet capture on the client side, then the transport's load. The request time and the network floor
// come from the emulator's per-packet log for every transport alike.
import { startLink, type GilbertElliott, type Link, type LinkOptions } from '../link';
import { startCapture, type Capture } from './capture';
import { firstDeliveryNs, networkFloor } from './floor';
import { startOrigin, warmOrigin, type Origin, type ServerKind } from './origin';
import { type PageSpec } from './pages';
import { type LoadContext, type Transport } from './transports';
import { DEFAULT_CAPTURE, type CaptureMode } from './updates';
import { loadKey } from './load-log';
import { type LoadResult } from './load-result';

export type { LoadResult } from './load-result';
import { longestGap } from './stats';
import { traceBrowser, tracePackets, traceUpdates, writeLoadTrace } from './trace';
import { type FrameChange } from './frames';

export interface RunOptions {
  pages: PageSpec[];
  losses: number[];
  transports: Transport[];
  reps: number;
  /** base seed: load (page i, loss j, rep r) uses seed + (i * losses + j) * reps + r */
  seed: number;
  delayMs: number;
  /** IP bytes per second */
  rate: number;
  /**
   * Ablation: hand our UDP senders the link's rate (0.95 ×, as Catp-Rate) and have the server pace at it
   * (`catp serve --pacing fixed`), wave 1's oracle. Off (default): the senders find the rate themselves.
   */
  oracleRate?: boolean;
  /** mean loss-burst length in packets (Gilbert-Elliott at the same stationary loss); undefined = Bernoulli */
  burst?: number;
  queueBytes?: number;
  server: ServerKind;
  port?: number;
  viewport?: { width: number; height: number };
  timeoutMs?: number;
  settleMs?: number;
  /** how compositor frames are captured (updates.ts; default DEFAULT_CAPTURE, frames only on change) */
  capture?: CaptureMode;
  /** called before (done = false) and after (done = true) each load */
  onProgress?: (p: Progress) => void;
  /** loads measured before (a resumed run, by loadKey): taken as they are, not measured again */
  previous?: ReadonlyMap<string, LoadResult>;
  /** called with every load measured now, as it finishes (the load log) */
  onResult?: (r: LoadResult) => void;
  /** write each measured load's packet timeline beside its updates into this directory (trace.ts) */
  traceDir?: string;
}

export interface Progress {
  done: number;
  total: number;
  page: string;
  transport: string;
  loss: number;
  rep: number;
  finished: boolean;
  result?: LoadResult;
  /** loads so far taken from a previous run instead of measured (for the ETA) */
  reused: number;
}


/** The largest distance (ms) from an update to the nearest marker; null when either list is empty. */
export function crossCheck(updatesMs: readonly number[], markersMs: readonly number[]): number | null {
  if (!updatesMs.length || !markersMs.length) return null;
  let worst = 0;
  for (const u of updatesMs) {
    let best = Infinity;
    for (const m of markersMs) best = Math.min(best, Math.abs(u - m));
    worst = Math.max(worst, best);
  }
  return worst;
}

export function linkOptionsFor(o: Pick<RunOptions, 'delayMs' | 'rate' | 'burst' | 'queueBytes'>, loss: number, seed: number): LinkOptions {
  const lo: LinkOptions = { delayMs: o.delayMs, seed };
  if (o.rate > 0) lo.rate = o.rate;
  if (o.queueBytes !== undefined) lo.queueBytes = o.queueBytes;
  if (loss > 0) {
    if (o.burst !== undefined && o.burst > 1) {
      const pBadToGood = 1 / o.burst;
      const ge: GilbertElliott = { pGoodToBad: Math.min(1, (loss * pBadToGood) / (1 - loss)), pBadToGood };
      lo.burst = ge;
    } else {
      lo.loss = loss;
    }
  }
  return lo;
}

const ms = (ns: bigint) => Number(ns) / 1e6;

async function oneLoad(o: RunOptions, page: PageSpec, transport: Transport, loss: number, rep: number, seed: number): Promise<LoadResult> {
  const base: LoadResult = {
    page: page.name, pageBytes: page.bytes, transport: transport.name, loss, rep, seed, ok: false,
    silentMs: null, silentGap: null, firstPaintMs: null, completionMs: null, loadEventMs: null, updates: 0, updateTimesMs: [],
    frames: 0, samplingMaxMs: null, samplingMedianMs: null, floorMs: null, floorGap: null, meanGapMs: null, expectedMs: null,
    usefulPackets: 0, duplicatePackets: 0, unmatchedPackets: 0, droppedToClient: { loss: 0, queue: 0, other: 0 },
    requestSource: 'navigation', navToRequestMs: null, warnings: [],
  };
  const why = await transport.unavailable();
  if (why) return { ...base, error: why };
  const port = o.port ?? 8080;
  let link: Link | undefined;
  let origin: Origin | undefined;
  let capture: Capture | undefined;
  try {
    link = await startLink(linkOptionsFor(o, loss, seed));
    origin = await startOrigin(link, transport.origin ?? o.server, page.root, port, undefined, o.oracleRate === true ? 'fixed' : 'discover');
    await warmOrigin(link, origin, page.urlPath, transport.name);
    capture = await startCapture(link, 'client');
    const ctx: LoadContext = {
      link, host: link.serverAddress, port, urlPath: page.urlPath,
      viewport: o.viewport ?? { width: 1280, height: 800 },
      timeoutMs: o.timeoutMs ?? 120_000, settleMs: o.settleMs ?? 1000, capture: o.capture ?? DEFAULT_CAPTURE, rate: o.oracleRate === true ? o.rate : 0,
      ...(origin.spki !== undefined ? { spki: origin.spki } : {}),
    };
    const load = await transport.load(ctx);
    const packets = await capture.stop();
    capture = undefined;
    const log = await link.log();

    // The request: the client's first packet toward the server's port after the navigation was issued
    // (for HTTP the SYN), as the emulator saw it arrive.
    const first = log.events.find((e) => e.dir === 'c2s' && e.ev === 'arrive' && e.dport === port && e.dst === link!.serverAddress && e.tNs >= load.navStartNs);
    let requestNs = load.navStartNs;
    let requestSource: LoadResult['requestSource'] = 'navigation';
    if (first) {
      requestNs = first.tNs;
      requestSource = 'link-log';
    } else if (load.requestHintNs !== undefined) {
      requestNs = load.requestHintNs;
      requestSource = 'transport';
    }
    const r: LoadResult = { ...base, method: load.method, requestSource, navToRequestMs: ms(requestNs - load.navStartNs), pageHeight: load.pageHeight };
    if (load.warnings) r.warnings.push(...load.warnings);
    if (load.protocol !== undefined) r.protocol = load.protocol;
    if (transport.protocol !== undefined && load.protocol !== transport.protocol) {
      // e.g. an h3 load that Chromium quietly made over TCP: not a measurement of this transport
      r.error = `came over ${load.protocol ?? 'an unknown protocol'}, not ${transport.protocol}`;
      return r;
    }

    // Visible updates count from the first server packet's arrival on (firstDeliveryNs); the first gap still
    // starts at the request.
    const replyNs = firstDeliveryNs(log, { serverAddress: link.serverAddress, clientAddress: link.clientAddress, serverPort: port, afterNs: requestNs }) ?? requestNs;
    let changedNs: bigint[];
    let changes: FrameChange[] = [];
    if (load.reanalyze) {
      const u = load.reanalyze(requestNs);
      changes = u.updates;
      changedNs = u.updates.map((x) => x.tNs);
      r.frames = u.frames;
      r.samplingMaxMs = u.sampling?.maxMs ?? null;
      r.samplingMedianMs = u.sampling?.medianMs ?? null;
      if (u.clockViolations > 0) r.warnings.push(`${u.clockViolations} frames stamped after their receipt (clock alignment?)`);
    } else {
      changedNs = load.updateNs.filter((t) => t > requestNs);
    }
    const afterReply = (t: bigint): boolean => t > replyNs;
    const shownNs = changedNs.filter(afterReply);
    // the frame change that made each shown update, position for position (the trace pairs them so)
    const shownChanges = changes.filter((c) => afterReply(c.tNs));
    if (shownNs.length < changedNs.length) r.changesBeforeReply = changedNs.length - shownNs.length;
    const updateTimes = shownNs.map((t) => ms(t - requestNs));
    if (load.markerNs) {
      const markers = load.markerNs.filter((t) => t > requestNs).map((t) => ms(t - requestNs));
      r.markerTimesMs = markers.map((t) => Math.round(t * 100) / 100);
      r.markerSilentMs = longestGap(0, markers)?.ms ?? null;
      r.crossCheckMs = crossCheck(updateTimes, markers);
    }
    const g = longestGap(0, updateTimes);
    r.updates = updateTimes.length;
    r.updateTimesMs = updateTimes.map((t) => Math.round(t * 100) / 100);
    r.silentMs = g ? g.ms : null;
    r.silentGap = g ? { fromMs: g.from, toMs: g.to } : null;
    r.firstPaintMs = updateTimes.length ? updateTimes[0]! : null;
    r.completionMs = updateTimes.length ? updateTimes[updateTimes.length - 1]! : null;
    r.loadEventMs = load.loadEventNs !== null ? ms(load.loadEventNs - requestNs) : null;

    // The load ends at its last visible update or its load event, whichever is later.
    const endMs = Math.max(r.completionMs ?? 0, r.loadEventMs ?? 0);
    const f = networkFloor(log, packets, {
      serverAddress: link.serverAddress, clientAddress: link.clientAddress, serverPort: port,
      startNs: requestNs, endNs: requestNs + BigInt(Math.round(endMs * 1e6)), loss,
    });
    r.floorMs = f.floorMs;
    r.floorGap = f.floorGap ? { fromMs: ms(f.floorGap.fromNs - requestNs), toMs: ms(f.floorGap.toNs - requestNs) } : null;
    r.meanGapMs = f.meanGapMs;
    r.expectedMs = f.expectedMs;
    r.usefulPackets = f.useful.length;
    r.duplicatePackets = f.duplicates;
    r.unmatchedPackets = f.unmatched;
    r.droppedToClient = f.dropped;
    if (f.unmatched > 0) r.warnings.push(`${f.unmatched} departures not found in the capture (classified by length)`);
    if (load.pageHeight !== undefined && load.pageHeight > ctx.viewport.height) {
      r.warnings.push(`page is ${load.pageHeight} px tall, the viewport ${ctx.viewport.height} px: content below it is not on screen`);
    }
    if (updateTimes.length === 0) r.error = 'no visible update';
    else r.ok = true;
    if (o.traceDir !== undefined) {
      const endNs = requestNs + BigInt(Math.round((endMs + 500) * 1e6));
      const packets = tracePackets(log, requestNs, endNs, { address: link.serverAddress, port });
      writeLoadTrace(o.traceDir, { load: r, updates: traceUpdates(shownNs, shownChanges, requestNs), packets, ...(load.timeline ? { browser: traceBrowser(load.timeline, requestNs) } : {}) });
    }
    return r;
  } catch (err) {
    return { ...base, error: (err as Error).message.split('\n')[0] };
  } finally {
    if (capture) await capture.stop().catch(() => undefined);
    if (origin) await origin.close().catch(() => undefined);
    if (link) await link.close().catch(() => undefined);
  }
}

/** Runs every load; transports innermost, so the loads that share a seed run back to back. */
export async function runSilentTime(o: RunOptions): Promise<LoadResult[]> {
  if (o.reps < 1) throw new RangeError('reps must be at least 1');
  const total = o.pages.length * o.losses.length * o.reps * o.transports.length;
  const results: LoadResult[] = [];
  let done = 0;
  let reused = 0;
  for (let i = 0; i < o.pages.length; i++) {
    const page = o.pages[i]!;
    for (let j = 0; j < o.losses.length; j++) {
      const loss = o.losses[j]!;
      for (let rep = 0; rep < o.reps; rep++) {
        const seed = o.seed + (i * o.losses.length + j) * o.reps + rep;
        for (const t of o.transports) {
          const before = o.previous?.get(loadKey({ page: page.name, transport: t.name, loss, rep, seed }));
          if (before) {
            results.push(before);
            done++;
            reused++;
            continue;
          }
          const p = { done, total, page: page.name, transport: t.name, loss, rep, finished: false, reused };
          o.onProgress?.(p);
          const r = await oneLoad(o, page, t, loss, rep, seed);
          results.push(r);
          o.onResult?.(r);
          done++;
          o.onProgress?.({ ...p, done, finished: true, result: r });
        }
      }
    }
  }
  return results;
}
