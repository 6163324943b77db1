// The browser host: shell-independent. Takes BrowserCommands from a renderer (through any transport) and
// answers with BrowserEvents; owns the DhttpHost (native endpoint + DHTTP client + CATP assembler). This file
// coordinates: commands, navigation, the load being shown and its end; the pieces are history.ts,
// redirects.ts, the per-transport event makers (stream-events.ts, tcp-events.ts, whole-event.ts),
// load-savings.ts (what the payload store saved) and load-records.ts (the records renderers hand over).
import { DhttpHost } from '../dhttp-host';
import { FIRST_CONTACT, type DhttpHostOptions, type FetchResult } from '../host-api';
import type { PayloadStore } from '../payload-store';
import { realtimeNs } from '../../native';
import { getHeader, parseTarget } from '../../protocol/dhttp';
import {
  isCommand,
  type BrowserCommand,
  type BrowserEvent,
  type DomOps,
  type DumpNode,
  type LoadRecord,
  type LoadSavings,
  type Transport,
} from '../../protocol/browser/api';
import { httpStream, type HttpStream } from './http-stream';
import { HtmlNameScanner, PageNames } from './page-names';
import { HostError } from '../errors';
import { History, type HistoryEntry } from './history';
import { redirectStep } from './redirects';
import { LoadRecords, writeRecordFile } from './load-records';
import { addSavings, dtdSavings, noSavings, reuseSavings, type SavingsUpdate } from './load-savings';
import { StreamLoadEvents } from './stream-events';
import { TcpLoadEvents, firstHeader } from './tcp-events';
import { wholeEvent } from './whole-event';

export { MAX_REDIRECTS } from './redirects';

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
  /** Give up on a load after this long (ms): a CATP / in-order load after this long without a frame. */
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
  private readonly history = new History();
  private nextLoadId = 1;
  private current: ActiveLoad | null = null;
  private nextDumpId = 1;
  private readonly dumps = new Map<number, (tree: DumpNode | null) => void>();
  private readonly records = new LoadRecords();
  private readyWaiters: (() => void)[] = [];
  private readyCount = 0;
  /** The warm-up page's DOM operations (warm-up.ts), for a renderer that is ready before any load (setWarmUpOps). */
  private warmUpOps: DomOps[] | null = null;
  /** Commands refused by isCommand (bad input from the renderer side), counted. */
  refusedCommands = 0;
  closed = false;

  constructor(private readonly options: BrowserServiceOptions = {}) {
    this.ownsHost = options.host === undefined;
    const hostOptions = options.hostOptions ?? { client: FIRST_CONTACT };
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

  private emitAll(events: readonly BrowserEvent[]): void {
    for (const e of events) this.emit(e);
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
        if (this.warmUpOps !== null && this.current === null) this.emit({ type: 'warm-up', batches: this.warmUpOps });
        return;
      case 'compare': {
        // the page the host is showing, not a URL the renderer names: a page frame must not start processes
        const entry = this.history.current;
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
        this.startIfAny(this.history.current);
        return;
      case 'back':
        this.startIfAny(this.history.back());
        return;
      case 'forward':
        this.startIfAny(this.history.forward());
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
      case 'load-record':
        this.records.deliver(c.record);
        return;
      case 'save-record': {
        let path: string;
        try {
          path = writeRecordFile(this.options.recordDir ?? 'catp-records', c.record);
        } catch (err) {
          path = `(not saved: ${(err as Error).message})`;
        }
        this.emit({ type: 'record-saved', path });
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
    return this.start(this.history.push({ url: BrowserService.normalizeUrl(input), transport }));
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
    return this.records.recordOf(first, timeoutMs);
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

  /**
   * Whether the page being shown names `target` as an image, stylesheet, font or media it loads (its tree, or a
   * stylesheet it loaded): the only URLs on another origin the shell fetches for the frame.
   */
  namedSubresource(target: string): boolean {
    return this.current?.names.allowsSubresource(target) ?? false;
  }

  /** Whether the page being shown names any sub-resource on `origin` (an https:// origin the frame may tunnel to). */
  namesSubresourcesOn(origin: string): boolean {
    return this.current?.names.namesSubresourcesOn(origin) ?? false;
  }

  /** Whether the page being shown names a frame on `origin` (an https:// origin whose navigation a tunnel answers). */
  namesFramesOn(origin: string): boolean {
    return this.current?.names.namesFramesOn(origin) ?? false;
  }

  /** The URL of the page being shown. */
  get currentUrl(): string | null {
    return this.current?.url ?? null;
  }

  /** A stylesheet the page loaded (the shell fetched it): the URLs it names become the page's too. */
  noteStylesheet(url: string, css: string): void {
    this.current?.names.stylesheet(css, url);
  }

  /**
   * The warm-up page's DOM operations, batch by batch: a renderer that is ready before any load builds them in a
   * document of its own (renderer/frame-agent.ts), so that the first page's operations meet compiled code there as
   * the host's do here. Sent at once when a renderer is already waiting.
   */
  setWarmUpOps(batches: DomOps[]): void {
    this.warmUpOps = batches;
    if (this.readyCount > 0 && this.current === null && !this.closed) this.emit({ type: 'warm-up', batches });
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

  private startIfAny(entry: HistoryEntry | undefined): void {
    if (entry !== undefined) this.start(entry);
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
      savings: this.host.reuse !== null || this.host.dtd !== null ? noSavings() : null,
    };
    this.current = load;
    this.emit({
      type: 'load-started',
      loadId,
      url: entry.url,
      transport,
      requestAtEpochMs: load.requestAtEpochMs,
      viewUrl: this.options.viewUrl ? this.options.viewUrl(entry.url) : entry.url,
      history: { canBack: this.history.canBack, canForward: this.history.canForward },
      ...(redirectedFrom.length > 0 ? { redirectedFrom } : {}),
    });
    let run: Promise<void>;
    try {
      parseTarget(entry.url);
      run = transport === 'catp' || transport === 'inorder' ? this.stream(load)
        : transport === 'tcp' ? this.tcp(load)
          : this.whole(load);
    } catch (err) {
      run = Promise.reject(err);
    }
    run.catch((err: Error & { code?: string }) => this.fail(load, err));
    return loadId;
  }

  /**
   * A 3xx answer with a Location: the next hop starts as a new load in this one's place, and the history entry
   * becomes the URL it leads to. True when the answer was a redirect (followed, or the navigation failed:
   * redirects.ts says when).
   */
  private redirect(load: ActiveLoad, status: number, location: string | null): boolean {
    const step = redirectStep(load.url, load.redirectedFrom, status, location);
    if (step === null) return false;
    if (!this.live(load)) return true;
    if ('error' in step) {
      this.fail(load, step.error);
      return true;
    }
    load.done = true;
    load.cancel?.();
    const entry = this.history.redirectCurrent(step.next);
    if (entry === undefined) return true;
    this.records.redirected(load.loadId, this.start(entry, step.chain));
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
  private saved(load: ActiveLoad, add: SavingsUpdate): void {
    const s = load.savings;
    if (s === null) return;
    addSavings(s, add);
    this.records.noteSavings(load.loadId, s);
    if (!this.closed) this.emit({ type: 'savings', loadId: load.loadId, savings: { ...s } });
  }

  /** A DTD hit on a fetch of this load (the page itself, or a sub-resource the page frame asked for). */
  private dtdSaved(load: ActiveLoad, result: FetchResult): void {
    const add = dtdSavings(result);
    if (add !== null) this.saved(load, add);
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
    this.emit(wholeEvent(load.loadId, res));
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
    const events = new StreamLoadEvents(load.loadId, load.requestAtEpochMs, load.names);
    const stop = new AbortController();
    load.cancel = () => stop.abort();
    const result = await this.host.load(load.url, {
      mode: load.transport === 'inorder' ? 'inorder' : 'catp',
      ...(this.options.rateBytesPerSec !== undefined ? { rateBytesPerSec: this.options.rateBytesPerSec } : {}),
      timeoutMs: this.options.loadTimeoutMs ?? 60_000,
      onFrame: (record, frameEvents) => {
        if (this.live(load)) this.emitAll(events.frame(record, frameEvents));
      },
      onLocalFill: (fillEvents) => {
        if (!this.live(load)) return;
        this.emitAll(events.localFill(fillEvents));
        this.saved(load, { blocksReused: events.reused });
      },
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

  private async tcp(load: ActiveLoad): Promise<void> {
    const events = new TcpLoadEvents(load.loadId);
    await new Promise<void>((ok, fail) => {
      let stream: HttpStream | null = null;
      httpStream(load.url, {
        onHead: (head) => {
          if (!this.redirect(load, head.status, firstHeader(head, 'location'))) events.head(head);
        },
        onData: (bytes, rxNs) => {
          if (this.live(load)) this.emitAll(events.data(bytes, rxNs));
        },
        onEnd: () => {
          if (this.live(load)) {
            if (events.html) {
              this.emitAll(events.endText());
              this.complete(load, events.counters);
            } else {
              this.emitWhole(load, events.whole(load.url));
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
