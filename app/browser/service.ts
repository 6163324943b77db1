// The browser host: shell-independent. Takes BrowserCommands from a renderer (through any transport) and
// answers with BrowserEvents; owns the DhttpHost (native endpoint + DHTTP client + CATP assembler), the
// history, and the per-load bookkeeping (frame records on the kernel clock, missing / repaired counts, what
// the payload store saved: CATP blocks reused, DTD hits).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { DhttpHost, type DhttpHostOptions, type FetchResult } from '../dhttp-host';
import type { ReuseOutcome } from '../block-reuse';
import type { PayloadStore } from '../payload-store';
import type { FrameRecord, StreamEvent } from '../stream-session';
import { realtimeNs } from '../../native';
import { getHeader, parseTarget } from '../../protocol/dhttp';
import {
  isCommand,
  type BrowserCommand,
  type BrowserEvent,
  type DumpNode,
  type LoadRecord,
  type LoadSavings,
  type Transport,
  type WireFrame,
} from '../../protocol/browser/api';
import { httpStream, type HttpStream } from './http-stream';
import { CatpTreeBuilder } from '../../protocol/catp';
import { StreamingHtmlDecoder, decodeHtml, textDecoderFor, textEncoding } from '../../protocol/html-encoding';
import { DomOpRecorder } from './dom-recorder';
import { HtmlNameScanner, PageNames } from './page-names';
import { HostError } from '../errors';

export interface BrowserServiceOptions {
  host?: DhttpHost;
  hostOptions?: DhttpHostOptions;
  /**
   * The payload store (DTD and CATP block reuse) for the host this service creates; none: no store, every
   * byte comes over the network. (startBrowserSession opens the per-user one by default.)
   */
  store?: PayloadStore | null;
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
  /**
   * Opens a page in the side-by-side demo (the command line starts `catp demo URL`); resolves with what to tell
   * the user. Absent: the renderer offers no Compare button.
   */
  openCompare?: (url: string) => Promise<string>;
}

interface HistoryEntry {
  url: string;
  transport: Transport | undefined;
}

/** Answers that send the browser on to their Location (RFC 9110 §15.4). */
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Redirects followed in one navigation before it fails (as Chromium's net::ERR_TOO_MANY_REDIRECTS). */
export const MAX_REDIRECTS = 20;

interface ActiveLoad {
  loadId: number;
  url: string;
  /** The URLs that redirected to this one, first first (empty: not a redirect). */
  redirectedFrom: string[];
  transport: Transport;
  requestAtEpochMs: number;
  done: boolean;
  cancel?: () => void;
  /** What the store saved on this load (null: the host has no store). */
  savings: LoadSavings | null;
  /** The URLs the page names: the only ones the frame may have the host fetch (page-names.ts). */
  names: PageNames;
  /** Reads the markup handed to the frame's own parser (in-order, TCP, a whole answer) for those names. */
  scanner: HtmlNameScanner;
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
  /** A load that redirected → the load of its next hop (bounded): its record is the final hop's. */
  private readonly redirectedTo = new Map<number, number>();
  /** Savings of recent loads (bounded), for the records the renderer hands over. */
  private readonly savingsByLoad = new Map<number, LoadSavings>();
  private readyWaiters: (() => void)[] = [];
  private readyCount = 0;
  /** Commands refused by isCommand (bad input from the renderer side), counted. */
  refusedCommands = 0;
  closed = false;

  constructor(private readonly options: BrowserServiceOptions = {}) {
    this.ownsHost = options.host === undefined;
    const hostOptions = options.hostOptions ?? { client: { initialTimeoutMs: 400, fallbackAfterResends: 3 } };
    this.host = options.host ?? new DhttpHost(options.store ? { ...hostOptions, store: options.store } : hostOptions);
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
    // markup the frame will parse is read for the URLs it names before the frame has it
    const load = this.current;
    if (load !== null && 'loadId' in event && event.loadId === load.loadId) {
      if (event.type === 'text') load.scanner.write(event.text);
      else if (event.type === 'whole' && event.html) load.scanner.write(event.text, true);
    }
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
        this.emit({
          type: 'hello', hostEpochMs: Number(realtimeNs()) / 1e6, version: 1, defaultTransport: this.defaultTransport, shell: this.options.shell ?? 'test',
          ...(this.options.openCompare ? { canCompare: true } : {}),
        });
        return;
      case 'compare': {
        // the page the host is showing, not a URL the renderer names: a page frame must not start processes
        const entry = this.history[this.index];
        const open = this.options.openCompare;
        if (!entry || !open) return;
        open(entry.url).then(
          (message) => this.emit({ type: 'compare-opened', url: entry.url, message }),
          (err: Error) => this.emit({ type: 'compare-opened', url: entry.url, message: `the demo could not start: ${err.message}` }),
        );
        return;
      }
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
        // the host's figures are the reference (a sub-resource's DTD hit may have come after the renderer's last)
        const mine = this.savingsByLoad.get(c.record.loadId);
        if (mine) c.record.savings = { ...mine };
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
      const timer = setTimeout(() => fail(new HostError('HOST_ERR_RENDERER_TIMEOUT', `the renderer did not connect within ${timeoutMs} ms`)), timeoutMs);
      timer.unref(); // waiting for a renderer never keeps a process alive that has nothing else to do
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

  /** The record the renderer handed over for a load (waits for it); for a load that redirected, its last hop's. */
  recordOf(first: number, timeoutMs = 60_000): Promise<LoadRecord> {
    let loadId = first;
    for (let next = this.redirectedTo.get(loadId); next !== undefined; next = this.redirectedTo.get(loadId)) loadId = next;
    const have = this.records.get(loadId);
    if (have) return Promise.resolve(have);
    return new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new HostError('HOST_ERR_RECORD_TIMEOUT', `no load record for load ${loadId} within ${timeoutMs} ms`)), timeoutMs);
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
        fail(new HostError('HOST_ERR_DUMP_UNANSWERED', 'the renderer did not answer the dump request'));
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

  /**
   * Whether the page being shown names `target` (its tree, or a stylesheet it loaded): the shell fetches nothing
   * else for the frame.
   */
  named(target: string): boolean {
    return this.current?.names.allows(target) ?? false;
  }

  /** A stylesheet the page loaded (the shell fetched it): the URLs it names become the page's too. */
  noteStylesheet(url: string, css: string): void {
    this.current?.names.stylesheet(css, url);
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
    if (scheme === 'http' || scheme === 'https') return 'tcp';
    if (scheme === 'dhttpt') return 'whole';
    if (asked === 'catp' || asked === 'inorder' || asked === 'whole') return asked;
    return this.defaultTransport;
  }

  private start(entry: HistoryEntry, redirectedFrom: string[] = []): number {
    this.stop();
    const loadId = this.nextLoadId++;
    const transport = this.transportFor(entry.url, entry.transport);
    const requestNs = realtimeNs();
    const names = new PageNames(entry.url);
    const load: ActiveLoad = {
      loadId, url: entry.url, redirectedFrom, transport, requestAtEpochMs: Number(requestNs) / 1e6, done: false,
      names, scanner: new HtmlNameScanner(names),
      savings: this.host.reuse !== null || this.host.dtd !== null
        ? { blocks: 0, blocksReused: 0, dtdHits: 0, bytesSaved: 0, savedMs: 0, estimate: 'nothing saved yet' }
        : null,
    };
    this.current = load;
    this.emit({
      type: 'load-started',
      loadId,
      url: entry.url,
      transport,
      requestAtEpochMs: load.requestAtEpochMs,
      viewUrl: this.options.viewUrl ? this.options.viewUrl(entry.url) : entry.url,
      history: { canBack: this.index > 0, canForward: this.index < this.history.length - 1 },
      ...(redirectedFrom.length > 0 ? { redirectedFrom } : {}),
    });
    let run: Promise<void>;
    try {
      parseTarget(entry.url);
      run = transport === 'catp' || transport === 'inorder' ? this.stream(load)
        : transport === 'tcp' ? this.tcp(load, requestNs)
          : this.whole(load);
    } catch (err) {
      run = Promise.reject(err);
    }
    run.catch((err: Error & { code?: string }) => this.fail(load, err));
    return loadId;
  }

  /**
   * A 3xx answer with a Location: the next hop starts as a new load in this one's place, and the history entry
   * becomes the URL it leads to (what the address bar shows, what Back returns to). True when the answer was a
   * redirect (followed, or the navigation failed: a loop, more than MAX_REDIRECTS, a Location we cannot open).
   */
  private redirect(load: ActiveLoad, status: number, location: string | null): boolean {
    if (!REDIRECT_STATUSES.has(status) || location === null) return false;
    if (!this.live(load)) return true;
    const failWith = (code: string, message: string) => this.fail(load, new HostError(code, message));
    let next: string;
    try {
      next = new URL(location.trim(), load.url).href; // relative Locations resolve against the URL that answered
      parseTarget(next);
    } catch {
      failWith('HOST_ERR_BAD_REDIRECT', `${load.url} redirects to ${JSON.stringify(location)}, which this browser cannot open`);
      return true;
    }
    const chain = [...load.redirectedFrom, load.url];
    if (chain.includes(next)) {
      failWith('HOST_ERR_REDIRECT_LOOP', `${load.url} redirects in a loop (${[...chain, next].join(' → ')})`);
      return true;
    }
    if (chain.length > MAX_REDIRECTS) {
      failWith('HOST_ERR_TOO_MANY_REDIRECTS', `more than ${MAX_REDIRECTS} redirects from ${chain[0]}`);
      return true;
    }
    load.done = true;
    load.cancel?.();
    const entry = this.history[this.index];
    if (entry === undefined) return true;
    entry.url = next;
    const hop = this.start(entry, chain);
    this.redirectedTo.set(load.loadId, hop);
    if (this.redirectedTo.size > 256) this.redirectedTo.delete(this.redirectedTo.keys().next().value as number);
    // whoever waits for this load's record gets the next hop's
    const waiting = this.recordWaiters.get(load.loadId);
    if (waiting !== undefined) {
      this.recordWaiters.delete(load.loadId);
      this.recordWaiters.set(hop, [...(this.recordWaiters.get(hop) ?? []), ...waiting]);
    }
    return true;
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

  /** Adds to a load's savings and tells the renderer. */
  private saved(load: ActiveLoad, add: Partial<LoadSavings> & { estimate?: string }): void {
    const s = load.savings;
    if (s === null) return;
    s.blocks = add.blocks ?? s.blocks;
    s.blocksReused = add.blocksReused ?? s.blocksReused;
    s.dtdHits += add.dtdHits ?? 0;
    s.bytesSaved += add.bytesSaved ?? 0;
    s.savedMs += add.savedMs ?? 0;
    if (add.estimate !== undefined) s.estimate = s.estimate === 'nothing saved yet' ? add.estimate : `${s.estimate}; ${add.estimate}`;
    this.savingsByLoad.set(load.loadId, { ...s });
    if (this.savingsByLoad.size > 64) this.savingsByLoad.delete(this.savingsByLoad.keys().next().value as number);
    if (!this.closed) this.emit({ type: 'savings', loadId: load.loadId, savings: { ...s } });
  }

  /** A DTD hit on a fetch of this load (the page itself, or a sub-resource the page frame asked for). */
  private dtdSaved(load: ActiveLoad, result: FetchResult): void {
    const d = result.dtd;
    if (!d || d.decision !== 'hit' || d.savedBytes <= 0) return;
    this.saved(load, {
      dtdHits: 1,
      bytesSaved: d.savedBytes,
      savedMs: d.savedMs,
      estimate: `DTD ${d.savedBytes} B / the DTD agent's measured bandwidth`,
    });
  }

  /** A sub-resource fetched for the page in the frame (the shell server calls this): counts its DTD hit. */
  noteSubresource(result: FetchResult): void {
    if (this.current) this.dtdSaved(this.current, result);
  }

  private emitWhole(load: ActiveLoad, result: FetchResult): void {
    if (!this.live(load)) return;
    this.dtdSaved(load, result);
    const res = result.response;
    if (this.redirect(load, res.status, getHeader(res.headers, 'location'))) return;
    const contentType = getHeader(res.headers, 'content-type') ?? 'application/octet-stream';
    const html = /^text\/html\b/i.test(contentType);
    const texty = html || /^(text\/|application\/(json|xml|javascript))|\+xml\b/i.test(contentType);
    // HTML as a browser sniffs it (BOM, charset, <meta>, ...); other text by its charset, else UTF-8
    const text = !texty ? '' : html ? decodeHtml(res.body, contentType).text : textDecoderFor(textEncoding(contentType)).decode(res.body);
    this.emit({ type: 'whole', loadId: load.loadId, status: res.status, contentType, text, html, atEpochMs: Number(realtimeNs()) / 1e6 });
    if (res.status >= 400) {
      this.fail(load, new HostError(`HTTP_${res.status}`, `${load.url}: the server answered ${res.status} ${res.reason}`));
      return;
    }
    this.complete(load, { bytes: res.body.length, resends: result.resends });
  }

  private async whole(load: ActiveLoad): Promise<void> {
    const result = await this.host.fetch(load.url, { timeoutMs: this.options.loadTimeoutMs ?? 30_000 });
    this.emitWhole(load, result);
  }

  private async stream(load: ActiveLoad): Promise<void> {
    const stats = new ArrivalStats();
    // in-order: the page's raw bytes, no headers: its encoding from the bytes (BOM, <meta>), else UTF-8
    const decoder = new StreamingHtmlDecoder();
    let textOffset = 0;
    const requestAt = load.requestAtEpochMs;
    // CATP: the tree is built here, as DOM operations the renderer only applies (one `dom` event per frame).
    const recorder = new DomOpRecorder(load.names);
    const tree = new CatpTreeBuilder(recorder);
    let blockCount = -1;
    let filled: number[] = [];
    const sendDom = (pieces: number, blocks: number): void => {
      if (recorder.pending > 0) this.emit({ type: 'dom', loadId: load.loadId, atEpochMs: Number(realtimeNs()) / 1e6, ops: recorder.take(), pieces, blocks, filled, blockCount });
      filled = [];
    };
    const onFrame = (record: FrameRecord, events: StreamEvent[]) => {
      if (!this.live(load)) return;
      let pieces = 0;
      let blocks = 0;
      for (const ev of events) {
        switch (ev.type) {
          case 'index-piece':
            tree.apply(ev);
            pieces++;
            break;
          case 'index-complete':
            blockCount = ev.blocks;
            break;
          case 'block-filled':
            tree.apply(ev);
            blocks++;
            filled.push(ev.block);
            break;
          case 'prefix-extended': {
            const text = decoder.push(ev.bytes, ev.length >= ev.total);
            if (text.length === 0) break; // held until the <meta> prescan has its 1,024 bytes
            this.emit({ type: 'text', loadId: load.loadId, text, offset: textOffset, total: ev.total });
            textOffset += text.length;
            break;
          }
          default:
            break;
        }
      }
      sendDom(pieces, blocks);
      const atEpochMs = record.kernelAtMs !== null ? requestAt + record.kernelAtMs : requestAt + record.atMs;
      this.emit({ type: 'frame', loadId: load.loadId, frame: stats.frame(record, atEpochMs) });
    };
    const stop = new AbortController();
    load.cancel = () => stop.abort();
    let reused = 0;
    const onLocalFill = (events: StreamEvent[]) => {
      if (!this.live(load)) return;
      let blocks = 0;
      for (const ev of events) {
        if (ev.type !== 'block-filled') continue;
        reused++;
        tree.apply(ev);
        blocks++;
        filled.push(ev.block);
      }
      sendDom(0, blocks);
      this.saved(load, { blocksReused: reused });
    };
    const result = await this.host.load(load.url, {
      mode: load.transport === 'inorder' ? 'inorder' : 'catp',
      ...(this.options.rateBytesPerSec !== undefined ? { rateBytesPerSec: this.options.rateBytesPerSec } : {}),
      timeoutMs: this.options.loadTimeoutMs ?? 60_000,
      onFrame,
      onLocalFill,
      signal: stop.signal,
    });
    if (result.kind === 'response') {
      // the server answered without streaming (not HTML, an error, or no CATP): show the whole response
      this.emitWhole(load, result.result);
      return;
    }
    if (result.reuse && this.live(load)) this.saved(load, reuseSavings(result.reuse));
    this.complete(load, { ...result.counters, frames: result.frames, ...(result.reuse ? { blocksReused: result.reuse.reused, bytesSaved: result.reuse.bytesSaved } : {}) });
  }

  private async tcp(load: ActiveLoad, _requestNs: bigint): Promise<void> {
    const stats = new ArrivalStats();
    let decoder = new StreamingHtmlDecoder();
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
          if (this.redirect(load, status, head.headers.find(([n]) => n.toLowerCase() === 'location')?.[1] ?? null)) return;
          contentType = head.headers.find(([n]) => n.toLowerCase() === 'content-type')?.[1] ?? '';
          const cl = head.headers.find(([n]) => n.toLowerCase() === 'content-length')?.[1];
          const coded = head.headers.some(([n, v]) => n.toLowerCase() === 'content-encoding' && v.trim().toLowerCase() !== 'identity');
          // a coded body's Content-Length counts coded bytes, not the page's
          total = cl !== undefined && /^\d+$/.test(cl) && !coded ? Number(cl) : null;
          html = status === 200 && (contentType === '' || /^text\/html\b/i.test(contentType));
          decoder = new StreamingHtmlDecoder(contentType);
        },
        onData: (bytes, rxNs) => {
          if (!this.live(load)) return;
          const atEpochMs = Number(rxNs) / 1e6;
          if (!html) {
            whole.push(bytes);
            this.emit({ type: 'frame', loadId: load.loadId, frame: stats.chunk(bytes.length, atEpochMs, false) });
            return;
          }
          const text = decoder.push(bytes);
          if (text.length > 0) this.emit({ type: 'text', loadId: load.loadId, text, offset, total });
          offset += text.length;
          this.emit({ type: 'frame', loadId: load.loadId, frame: stats.chunk(bytes.length, atEpochMs, true) });
        },
        onEnd: () => {
          if (this.live(load)) {
            if (html) {
              const tail = decoder.push(new Uint8Array(0), true);
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

/** A CATP load's reuse figures as LoadSavings fields (its blocks, how many came from the store, bytes, time). */
function reuseSavings(r: ReuseOutcome): Partial<LoadSavings> & { estimate: string } {
  const rate = r.rateBytesPerSec >= 1e6 ? `${(r.rateBytesPerSec / 1e6).toFixed(2)} MB/s` : `${(r.rateBytesPerSec / 1e3).toFixed(1)} kB/s`;
  const from = { measured: "measured from this origin's CATP frames", paced: 'the pacing rate asked for', assumed: 'assumed (no measurement yet)' }[r.rateSource];
  return {
    blocks: r.blocks,
    blocksReused: r.reused,
    bytesSaved: r.bytesSaved,
    savedMs: r.savedMs,
    estimate: r.acked || r.reused === 0
      ? `CATP ${r.bytesSaved} B / ${rate} ${from}`
      : `CATP: ${r.reused} blocks painted from the store, but the server sent them anyway (it did not acknowledge reuse)`,
  };
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
