// The host's page loads: a page asked for as a stream of CATP frames (or, in 'inorder' mode, raw datagrams). A
// load's request goes out through the host (DhttpHost.begin), its frames come back as the lane's stream events,
// and it settles once: complete and verified, the server's ordinary answer, a failure, a stop or a timeout. With a
// store, CATP block reuse rides along: blocks the store holds are filled locally, and a completed page's blocks
// go into the store.
import { performance } from 'node:perf_hooks';

import { realtimeNs } from '../native';
import type { ClientEvent, StreamInit } from '../protocol/dhttp';
import type { BlockInfo, StreamSummary } from '../protocol/catp';
import { HostError } from './errors';
import type { BlockReuse, LocalFill, ReuseOutcome } from './block-reuse';
import type { Lane } from './dhttp-lane';
import { channels, type FetchOptions, type FetchResult, type LoadOptions, type LoadResult } from './host-api';

/** A request the host has sent: the lane it went out on, its ID, when it left, and its ordinary answer. */
export interface StartedRequest {
  lane: Lane;
  requestId: string;
  startedAtMs: number;
  answer: Promise<FetchResult>;
}

export interface PageLoadsDeps {
  /** Block reuse against the host's store (null: none). */
  reuse: BlockReuse | null;
  /** Sends a request through the host (its lane, its pending answers). */
  begin: (url: string, options: FetchOptions, stream: StreamInit) => Promise<StartedRequest>;
  /** The host forgets a request's pending answer (the load settled without it). */
  forget: (requestId: string) => void;
}

interface Load {
  requestId: string;
  lane: Lane;
  options: LoadOptions;
  url: string;
  /** performance.now() when the request left. */
  startedAtMs: number;
  resolve: (r: LoadResult) => void;
  reject: (e: Error) => void;
  settled: boolean;
  /** Block reuse state (null: this load does not reuse). */
  reuse: { asked: boolean; filling: boolean; fillMs: number; crossSiteMisses: number; corrupt: number } | null;
}

/** The stream events of a lane's client: they belong to page loads. */
export type StreamClientEvent = Extract<ClientEvent, { type: 'stream-frame' | 'stream-blocks-known' | 'stream-local-fill' | 'stream-complete' | 'stream-failed' }>;

export class PageLoads {
  private readonly loads = new Map<string, Load>();
  private readonly loadTimers = new Map<string, NodeJS.Timeout>();
  private closed = false;

  constructor(private readonly deps: PageLoadsDeps) {}

  /**
   * Loads a page as a stream of CATP frames (or, in 'inorder' mode, raw datagrams), reporting every frame.
   * Resolves when the page is complete and verified, or with the server's ordinary answer when it sent one.
   */
  async load(url: string, options: LoadOptions): Promise<LoadResult> {
    const headers: [string, string][] = [['Catp-Mode', options.mode]];
    // an in-order stream may come brotli-coded, as an HTTP server's answer would (protocol/catp/raw.ts)
    if (options.mode === 'inorder') headers.push(['Accept-Encoding', 'br']);
    if (options.rateBytesPerSec !== undefined) headers.push(['Catp-Rate', String(Math.round(options.rateBytesPerSec))]);
    // Block reuse: only when someone applies the local fills, and the server is asked to hold its data frames
    // only when the store has blocks of this site (in scope) — otherwise the hold could only cost time.
    const reusing = this.deps.reuse !== null && options.mode === 'catp' && options.onLocalFill !== undefined && options.reuse !== false;
    const asked = reusing && (this.deps.reuse as BlockReuse).wantsHold(url);
    if (asked) headers.push(['Catp-Reuse', 'hold']);
    // the clock of the kernel receive times, read before the request leaves (the frame records' kernelAtMs)
    const sentRealtimeNs = realtimeNs();
    const { lane, requestId, startedAtMs, answer } = await this.deps.begin(url, { headers }, { mode: options.mode, sentRealtimeNs });
    return new Promise<LoadResult>((resolve, reject) => {
      const load: Load = {
        requestId, lane, options, url, startedAtMs, resolve, reject, settled: false,
        reuse: asked ? { asked, filling: false, fillMs: 0, crossSiteMisses: 0, corrupt: 0 } : null,
      };
      this.loads.set(requestId, load);
      answer.then(
        (result) => this.settle(load, null, { kind: 'response', url, requestId, result }),
        (err: Error) => this.settle(load, err, null),
      );
      if (options.signal) {
        const stop = () => this.settle(load, new HostError('HOST_ERR_STOPPED', `${url}: stopped`), null);
        if (options.signal.aborted) stop();
        else options.signal.addEventListener('abort', stop, { once: true });
      }
      // (a load stopped before this point, its signal aborted while the request was being set up, arms no timer:
      // nothing would clear it, and it would keep the process alive for timeoutMs)
      // (settle, which every outcome of `answer` reaches, clears it)
      if (options.timeoutMs !== undefined && !load.settled) this.armTimeout(load);
    });
  }

  /** Starts a load's silence deadline (LoadOptions.timeoutMs) at the request; every frame restarts it (`refresh`). */
  private armTimeout(load: Load): void {
    const ms = load.options.timeoutMs;
    if (ms === undefined || load.settled) return;
    const timer = setTimeout(() => {
      this.settle(load, new HostError('HOST_ERR_TIMEOUT', `${load.url}: no frame for ${ms} ms`), null);
    }, ms);
    this.loadTimers.set(load.requestId, timer);
  }

  /** Ends a load once: resolves or rejects it and, on failure, releases its request ID at once. */
  private settle(load: Load, error: Error | null, result: LoadResult | null): void {
    if (load.settled) return;
    load.settled = true;
    const id = load.requestId;
    this.loads.delete(id);
    const timer = this.loadTimers.get(id);
    if (timer) clearTimeout(timer);
    this.loadTimers.delete(id);
    if (error || result?.kind === 'response') {
      load.lane.endStream(id);
      this.deps.forget(id);
    }
    if (error) load.reject(error);
    else load.resolve(result as LoadResult);
  }

  /** A streamed load's page is complete and verified (its final report is already out). */
  private streamComplete(event: Extract<ClientEvent, { type: 'stream-complete' }>): void {
    const load = this.loads.get(event.requestId);
    if (!load) return;
    this.deps.forget(event.requestId);
    const summary = event.summary;
    const reuse = this.finishReuse(load, summary);
    this.settle(load, null, {
      kind: 'stream',
      url: load.url,
      requestId: load.requestId,
      mode: load.options.mode,
      frames: summary.frames,
      startedAtMs: load.startedAtMs,
      firstFrameAtMs: summary.firstFrameAtMs,
      completedAtMs: event.atMs,
      counters: summary.counters,
      ...(reuse ? { reuse } : {}),
    });
  }

  /**
   * Block reuse, once the page's index is verified: looks its blocks up in the store, reads the hits, fills them
   * through the assembler and tells the server what is held. Runs beside the frames still arriving.
   */
  private async fillFromStore(load: Load, blocks: readonly BlockInfo[]): Promise<void> {
    const state = load.reuse;
    const reuse = this.deps.reuse;
    if (state === null || reuse === null || state.filling) return;
    state.filling = true;
    const t0 = performance.now();
    let fill: LocalFill;
    try {
      fill = await reuse.fill(load.url, blocks);
    } catch {
      fill = { payloads: new Map(), crossSiteMisses: 0, corrupt: 0 };
    }
    if (load.settled || this.closed) return;
    state.fillMs = performance.now() - t0;
    state.crossSiteMisses = fill.crossSiteMisses;
    state.corrupt = fill.corrupt;
    // the fill's events come back as 'stream-local-fill' (then 'stream-complete' if it finished the page)
    load.lane.fillLocal(load.requestId, fill.payloads);
  }

  /** A completed CATP load: its blocks go into the store, and what reuse saved is counted and published. */
  private finishReuse(load: Load, summary: StreamSummary): ReuseOutcome | null {
    const reuse = this.deps.reuse;
    const blocks = summary.blocks;
    if (reuse === null || blocks === null) return null;
    reuse.storeBlocks(load.url, blocks.received);
    const span = summary.arrival;
    reuse.noteArrivals(load.url, span.frames, span.bytes, span.spanMs);
    reuse.noteDataBytes(load.url, blocks.dataBytes.wire, blocks.dataBytes.plain);
    const local = blocks.local;
    const acked = blocks.reuseAcked;
    // Frames the server never sent: reused blocks, unless it sent them anyway (then the network carried them);
    // their payloads are known decompressed, so their wire size is estimated with the origin's compression ratio.
    const savedFrames = acked ? local.reused - local.arrivedAnyway : 0;
    const bytesSaved = acked ? reuse.wireBytes(load.url, savedFrames, local.payloadBytes - local.arrivedAnywayBytes) : 0;
    const { rate, source } = reuse.rateFor(load.url, load.options.rateBytesPerSec);
    // what the reused blocks would have cost on the network, held or not: the hold model's evidence (only from
    // loads that could reuse: a first visit, with nothing of the site in the store, says nothing about it)
    if (load.reuse?.asked === true || local.reused > 0) {
      const firstFrameDelayMs = summary.firstFrameAtMs === null ? null : summary.firstFrameAtMs - load.startedAtMs;
      reuse.noteLoad(load.url, firstFrameDelayMs, (reuse.wireBytes(load.url, local.reused, local.payloadBytes) / rate) * 1000);
    }
    const outcome: ReuseOutcome = {
      url: load.url,
      asked: load.reuse?.asked ?? false,
      acked,
      blocks: blocks.total,
      reused: local.reused,
      crossSiteMisses: load.reuse?.crossSiteMisses ?? 0,
      corrupt: load.reuse?.corrupt ?? 0,
      arrivedAnyway: local.arrivedAnyway,
      bytesSaved,
      savedMs: (bytesSaved / rate) * 1000,
      rateBytesPerSec: rate,
      rateSource: source,
      fillMs: load.reuse?.fillMs ?? 0,
    };
    reuse.record(outcome);
    if (channels.reuse.hasSubscribers) channels.reuse.publish(outcome);
    return outcome;
  }

  /** A stream event of a lane's client (the one way a load hears of its frames). */
  onEvent(event: StreamClientEvent): void {
    switch (event.type) {
      case 'stream-frame': {
        // a frame restarts the load's silence deadline: the same timer, re-armed in place
        this.loadTimers.get(event.requestId)?.refresh();
        this.loads.get(event.requestId)?.options.onFrame?.(event.record, event.events);
        // frames of a finished page's tail too (the load is settled; its ID stays to repeat the final report)
        if (channels.frame.hasSubscribers) channels.frame.publish({ requestId: event.requestId, record: event.record });
        return;
      }
      case 'stream-blocks-known': {
        // the index is complete: every block's digest is known
        const load = this.loads.get(event.requestId);
        if (load?.reuse && !load.reuse.filling) void this.fillFromStore(load, event.blocks);
        return;
      }
      case 'stream-local-fill':
        try {
          this.loads.get(event.requestId)?.options.onLocalFill?.(event.events);
        } catch {
          // the consumer's own failure; the load goes on
        }
        return;
      case 'stream-complete':
        this.streamComplete(event);
        return;
      case 'stream-failed': {
        const load = this.loads.get(event.requestId);
        if (load) this.settle(load, new HostError(event.code, `${load.url}: ${event.message}`), null);
        return;
      }
    }
  }

  /** Ends every load (the host is closing): each rejects with HOST_ERR_CLOSED. */
  close(): void {
    this.closed = true;
    for (const load of [...this.loads.values()]) {
      this.settle(load, new HostError('HOST_ERR_CLOSED', 'the host was closed before the page completed'), null);
    }
  }
}
