// The browser host: shell-independent. Takes BrowserCommands from a renderer (through any transport) and
// answers with BrowserEvents; owns the DhttpHost (native endpoint + DHTTP client + CATP assembler), the
// history, and the per-load bookkeeping (frame records on the kernel clock, missing / repaired counts).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { DhttpHost, type DhttpHostOptions, type FetchResult } from '../dhttp-host';
import type { FrameRecord, StreamEvent } from '../stream-session';
import { realtimeNs } from '../../native';
import { getHeader, parseTarget } from '../../protocol/dhttp';
import {
  isCommand,
  type BrowserCommand,
  type BrowserEvent,
  type DumpNode,
  type LoadRecord,
  type Transport,
  type WireFrame,
} from '../../protocol/browser/api';
import { httpStream, type HttpStream } from './http-stream';
import { toWireSkeleton } from './wire';

export interface BrowserServiceOptions {
  host?: DhttpHost;
  hostOptions?: DhttpHostOptions;
  /** Transport for dhttp:// HTML when a navigation names none. */
  defaultTransport?: 'catp' | 'inorder';
  /** Ask servers to pace CATP / in-order frames at this many bytes/s. */
  rateBytesPerSec?: number;
  /** Give up on a load after this long (ms). */
  loadTimeoutMs?: number;
  /** Where `save-record` writes (default ./catp-records). */
  recordDir?: string;
  /** The frame URL for a page URL (the shell's /view/ mapping). */
  viewUrl?: (url: string) => string;
  /** The shell's name, told to the renderer. */
  shell?: string;
}

interface HistoryEntry {
  url: string;
  transport: Transport | undefined;
}

interface ActiveLoad {
  loadId: number;
  url: string;
  transport: Transport;
  requestAtEpochMs: number;
  done: boolean;
  cancel?: () => void;
}

type Listener = (event: BrowserEvent) => void;

export class BrowserService {
  readonly host: DhttpHost;
  private readonly ownsHost: boolean;
  private readonly listeners = new Set<Listener>();
  private readonly history: HistoryEntry[] = [];
  private index = -1;
  private nextLoadId = 1;
  private current: ActiveLoad | null = null;
  private nextDumpId = 1;
  private readonly dumps = new Map<number, (tree: DumpNode | null) => void>();
  private readonly records = new Map<number, LoadRecord>();
  private readonly recordWaiters = new Map<number, ((r: LoadRecord) => void)[]>();
  private readyWaiters: (() => void)[] = [];
  private readyCount = 0;
  /** Commands refused by isCommand (bad input from the renderer side), counted. */
  refusedCommands = 0;
  closed = false;

  constructor(private readonly options: BrowserServiceOptions = {}) {
    this.ownsHost = options.host === undefined;
    this.host = options.host ?? new DhttpHost(options.hostOptions ?? { client: { initialTimeoutMs: 400, fallbackAfterResends: 3 } });
  }

  /** Attaches a renderer; returns the function that takes its (untrusted) commands, and a detach. */
  attach(listener: Listener): { handle: (command: unknown) => void; detach: () => void } {
    this.listeners.add(listener);
    return {
      handle: (command) => this.handle(command),
      detach: () => this.listeners.delete(listener),
    };
  }

  get defaultTransport(): 'catp' | 'inorder' {
    return this.options.defaultTransport ?? 'catp';
  }

  private emit(event: BrowserEvent): void {
    for (const l of this.listeners) {
      try {
        l(event);
      } catch {
        // a broken transport must not stop the others
      }
    }
  }

  handle(command: unknown): void {
    if (this.closed) return;
    if (!isCommand(command)) {
      this.refusedCommands++;
      return;
    }
    const c: BrowserCommand = command;
    switch (c.type) {
      case 'ready':
        this.readyCount++;
        for (const w of this.readyWaiters.splice(0)) w();
        this.emit({ type: 'hello', hostEpochMs: Number(realtimeNs()) / 1e6, version: 1, defaultTransport: this.defaultTransport, shell: this.options.shell ?? 'test' });
        return;
      case 'navigate':
        this.navigate(c.url, c.transport);
        return;
      case 'reload':
        if (this.index >= 0) this.start(this.history[this.index]!);
        return;
      case 'back':
        if (this.index > 0) this.start(this.history[--this.index]!);
        return;
      case 'forward':
        if (this.index < this.history.length - 1) this.start(this.history[++this.index]!);
        return;
      case 'stop':
        this.stop();
        return;
      case 'dump-tree': {
        const done = this.dumps.get(c.requestId);
        this.dumps.delete(c.requestId);
        done?.(c.tree);
        return;
      }
      case 'load-record': {
        this.records.set(c.record.loadId, c.record);
        const waiters = this.recordWaiters.get(c.record.loadId) ?? [];
        this.recordWaiters.delete(c.record.loadId);
        for (const w of waiters) w(c.record);
        return;
      }
      case 'save-record': {
        const dir = resolve(this.options.recordDir ?? 'catp-records');
        try {
          mkdirSync(dir, { recursive: true });
          const path = join(dir, `load-${new Date().toISOString().replace(/[:.]/g, '-')}-${Number(c.record.loadId) | 0}.json`);
          writeFileSync(path, JSON.stringify(c.record, null, 1));
          this.emit({ type: 'record-saved', path });
        } catch (err) {
          this.emit({ type: 'record-saved', path: `(not saved: ${(err as Error).message})` });
        }
        return;
      }
    }
  }

  /** Resolves once a renderer has said it is ready. */
  whenReady(timeoutMs = 30_000): Promise<void> {
    if (this.readyCount > 0) return Promise.resolve();
    return new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`the renderer did not connect within ${timeoutMs} ms`)), timeoutMs);
      this.readyWaiters.push(() => {
        clearTimeout(timer);
        ok();
      });
    });
  }

  /** Normalizes what a user typed: a missing scheme means dhttp://. */
  static normalizeUrl(input: string): string {
    const s = input.trim();
    if (/^[a-z][a-z0-9+.-]*:/i.test(s)) return s;
    return `dhttp://${s}`;
  }

  navigate(input: string, transport?: Transport): number {
    const entry: HistoryEntry = { url: BrowserService.normalizeUrl(input), transport };
    this.history.splice(this.index + 1);
    this.history.push(entry);
    this.index = this.history.length - 1;
    return this.start(entry);
  }

  stop(): void {
    const load = this.current;
    if (!load || load.done) return;
    load.done = true;
    load.cancel?.();
    this.emit({ type: 'stopped', loadId: load.loadId });
  }

  /** The record the renderer handed over for a load (waits for it). */
  recordOf(loadId: number, timeoutMs = 60_000): Promise<LoadRecord> {
    const have = this.records.get(loadId);
    if (have) return Promise.resolve(have);
    return new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`no load record for load ${loadId} within ${timeoutMs} ms`)), timeoutMs);
      const list = this.recordWaiters.get(loadId) ?? [];
      list.push((r) => {
        clearTimeout(timer);
        ok(r);
      });
      this.recordWaiters.set(loadId, list);
    });
  }

  /** Asks the renderer for its frame's DOM (--dump-dom). */
  requestDump(timeoutMs = 10_000): Promise<DumpNode | null> {
    const requestId = this.nextDumpId++;
    return new Promise((ok, fail) => {
      const timer = setTimeout(() => {
        this.dumps.delete(requestId);
        fail(new Error('the renderer did not answer the dump request'));
      }, timeoutMs);
      this.dumps.set(requestId, (tree) => {
        clearTimeout(timer);
        ok(tree);
      });
      this.emit({ type: 'dump-request', requestId });
    });
  }

  /** Sets the frame-URL mapping (the shell server knows its port only once it listens). */
  setViewUrl(fn: (url: string) => string): void {
    this.options.viewUrl = fn;
  }

  /** scheme://host:port of the page being shown (root-relative sub-resources resolve against it). */
  get currentOrigin(): string | null {
    if (!this.current) return null;
    try {
      return parseTarget(this.current.url).origin;
    } catch {
      return null;
    }
  }

  get currentLoadId(): number | null {
    return this.current?.loadId ?? null;
  }

  private transportFor(url: string, asked: Transport | undefined): Transport {
    let scheme: string;
    try {
      scheme = parseTarget(url).scheme;
    } catch {
      return 'whole';
    }
    if (scheme === 'http') return 'tcp';
    if (scheme === 'dhttpt') return 'whole';
    if (asked === 'catp' || asked === 'inorder' || asked === 'whole') return asked;
    return this.defaultTransport;
  }

  private start(entry: HistoryEntry): number {
    this.stop();
    const loadId = this.nextLoadId++;
    const transport = this.transportFor(entry.url, entry.transport);
    const requestNs = realtimeNs();
    const load: ActiveLoad = { loadId, url: entry.url, transport, requestAtEpochMs: Number(requestNs) / 1e6, done: false };
    this.current = load;
    this.emit({
      type: 'load-started',
      loadId,
      url: entry.url,
      transport,
      requestAtEpochMs: load.requestAtEpochMs,
      viewUrl: this.options.viewUrl ? this.options.viewUrl(entry.url) : entry.url,
      history: { canBack: this.index > 0, canForward: this.index < this.history.length - 1 },
    });
    let run: Promise<void>;
    try {
      parseTarget(entry.url);
      run = transport === 'catp' || transport === 'inorder' ? this.stream(load, requestNs)
        : transport === 'tcp' ? this.tcp(load, requestNs)
          : this.whole(load);
    } catch (err) {
      run = Promise.reject(err);
    }
    run.catch((err: Error & { code?: string }) => this.fail(load, err));
    return loadId;
  }

  private live(load: ActiveLoad): boolean {
    return !load.done && this.current === load && !this.closed;
  }

  private fail(load: ActiveLoad, err: Error & { code?: string }): void {
    if (!this.live(load)) return;
    load.done = true;
    this.emit({ type: 'error', loadId: load.loadId, code: err.code ?? 'HOST_ERR_LOAD', message: err.message, url: load.url });
  }

  private complete(load: ActiveLoad, counters: Record<string, number>): void {
    if (!this.live(load)) return;
    load.done = true;
    this.emit({ type: 'complete', loadId: load.loadId, atEpochMs: Number(realtimeNs()) / 1e6, counters });
  }

  private emitWhole(load: ActiveLoad, result: FetchResult): void {
    if (!this.live(load)) return;
    const res = result.response;
    const contentType = getHeader(res.headers, 'content-type') ?? 'application/octet-stream';
    const html = /^text\/html\b/i.test(contentType);
    const texty = html || /^(text\/|application\/(json|xml|javascript))|\+xml\b/i.test(contentType);
    const text = texty ? new TextDecoder().decode(res.body) : '';
    this.emit({ type: 'whole', loadId: load.loadId, status: res.status, contentType, text, html, atEpochMs: Number(realtimeNs()) / 1e6 });
    if (res.status >= 400) {
      this.fail(load, Object.assign(new Error(`${load.url}: the server answered ${res.status} ${res.reason}`), { code: `HTTP_${res.status}` }));
      return;
    }
    this.complete(load, { bytes: res.body.length, resends: result.resends });
  }

  private async whole(load: ActiveLoad): Promise<void> {
    const result = await this.host.fetch(load.url, { timeoutMs: this.options.loadTimeoutMs ?? 30_000 });
    this.emitWhole(load, result);
  }

  private async stream(load: ActiveLoad, requestNs: bigint): Promise<void> {
    const stats = new ArrivalStats();
    const decoder = new TextDecoder('utf-8');
    let textOffset = 0;
    const requestAt = load.requestAtEpochMs;
    const onFrame = (record: FrameRecord, events: StreamEvent[]) => {
      if (!this.live(load)) return;
      for (const ev of events) {
        switch (ev.type) {
          case 'skeleton-ready':
            this.emit({ type: 'skeleton', loadId: load.loadId, skeleton: toWireSkeleton(ev.skeleton) });
            break;
          case 'block-filled':
            this.emit({ type: 'block-filled', loadId: load.loadId, block: ev.block, fills: ev.fills.map((f) => ({ ...f })) });
            break;
          case 'prefix-extended': {
            const text = decoder.decode(ev.bytes, { stream: ev.length < ev.total });
            this.emit({ type: 'text', loadId: load.loadId, text, offset: textOffset, total: ev.total });
            textOffset += text.length;
            break;
          }
          default:
            break;
        }
      }
      const atEpochMs = record.kernelAtMs !== null ? requestAt + record.kernelAtMs : requestAt + record.atMs;
      this.emit({ type: 'frame', loadId: load.loadId, frame: stats.frame(record, atEpochMs) });
    };
    void requestNs;
    const stop = new AbortController();
    load.cancel = () => stop.abort();
    const result = await this.host.load(load.url, {
      mode: load.transport === 'inorder' ? 'inorder' : 'catp',
      ...(this.options.rateBytesPerSec !== undefined ? { rateBytesPerSec: this.options.rateBytesPerSec } : {}),
      timeoutMs: this.options.loadTimeoutMs ?? 60_000,
      onFrame,
      signal: stop.signal,
    });
    if (result.kind === 'response') {
      // the server answered without streaming (not HTML, an error, or no CATP): show the whole response
      this.emitWhole(load, result.result);
      return;
    }
    this.complete(load, { ...result.counters, frames: result.frames });
  }

  private async tcp(load: ActiveLoad, _requestNs: bigint): Promise<void> {
    const stats = new ArrivalStats();
    const decoder = new TextDecoder('utf-8');
    let offset = 0;
    let html = true;
    let status = 0;
    let contentType = '';
    const whole: Uint8Array[] = [];
    let total: number | null = null;
    await new Promise<void>((ok, fail) => {
      let stream: HttpStream | null = null;
      httpStream(load.url, {
        onHead: (head) => {
          status = head.status;
          contentType = head.headers.find(([n]) => n.toLowerCase() === 'content-type')?.[1] ?? '';
          const cl = head.headers.find(([n]) => n.toLowerCase() === 'content-length')?.[1];
          total = cl !== undefined && /^\d+$/.test(cl) ? Number(cl) : null;
          html = status === 200 && (contentType === '' || /^text\/html\b/i.test(contentType));
        },
        onData: (bytes, rxNs) => {
          if (!this.live(load)) return;
          const atEpochMs = Number(rxNs) / 1e6;
          if (!html) {
            whole.push(bytes);
            this.emit({ type: 'frame', loadId: load.loadId, frame: stats.chunk(bytes.length, atEpochMs, false) });
            return;
          }
          const text = decoder.decode(bytes, { stream: true });
          this.emit({ type: 'text', loadId: load.loadId, text, offset, total });
          offset += text.length;
          this.emit({ type: 'frame', loadId: load.loadId, frame: stats.chunk(bytes.length, atEpochMs, true) });
        },
        onEnd: () => {
          if (this.live(load)) {
            if (html) {
              const tail = decoder.decode();
              if (tail) this.emit({ type: 'text', loadId: load.loadId, text: tail, offset, total });
              this.complete(load, { chunks: stats.received, bytes: stats.bytes });
            } else {
              const body = Buffer.concat(whole);
              this.emitWhole(load, {
                url: load.url, requestId: '', response: { status, reason: '', headers: [['content-type', contentType]], body },
                channel: 'http', resends: 0, fellBack: false, startedAtMs: 0, completedAtMs: 0, lastRxNs: null,
              });
            }
          }
          ok();
        },
        onError: (err) => fail(err),
      }, { timeoutMs: this.options.loadTimeoutMs ?? 30_000 }).then((s) => {
        stream = s;
        load.cancel = () => stream?.cancel();
      }, fail);
    });
  }

  close(): void {
    if (this.closed) return;
    this.stop();
    this.closed = true;
    if (this.ownsHost) this.host.close();
    this.listeners.clear();
  }
}

/** Per-load arrival bookkeeping: which seqs came, how many are missing below the highest, how many filled a gap. */
class ArrivalStats {
  private readonly seen = new Set<number>();
  private maxSeq = -1;
  private repaired = 0;
  received = 0;
  bytes = 0;

  frame(record: FrameRecord, atEpochMs: number): WireFrame {
    this.received++;
    this.bytes += record.bytes;
    if (record.accepted && record.seq !== null && !this.seen.has(record.seq)) {
      this.seen.add(record.seq);
      if (record.seq < this.maxSeq) this.repaired++;
      if (record.seq > this.maxSeq) this.maxSeq = record.seq;
    }
    const f: WireFrame = {
      atEpochMs,
      seq: record.seq,
      kind: record.kind,
      bytes: record.bytes,
      accepted: record.accepted,
      useful: record.displayable.length > 0,
      missing: this.maxSeq + 1 - this.seen.size,
      repaired: this.repaired,
      received: this.received,
    };
    if (record.code !== undefined) f.code = record.code;
    return f;
  }

  chunk(bytes: number, atEpochMs: number, useful: boolean): WireFrame {
    this.received++;
    this.bytes += bytes;
    return { atEpochMs, seq: this.received - 1, kind: 'tcp', bytes, accepted: true, useful, missing: 0, repaired: 0, received: this.received };
  }
}
