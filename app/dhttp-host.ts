// The host's fetches over DHTTP: resolves names, picks a lane (app/dhttp-lane.ts: the native endpoint and the
// sans-IO client for one bind address), and turns the client's events into answers and DTD decisions. Page loads
// (app/page-loads.ts, with block reuse), https:// (app/tls-fetch.ts), name resolution (app/name-resolver.ts) and
// the private-network rule (app/address-space.ts) are files of their own; the public types and diagnostics
// channels are in app/host-api.ts. Calls go down to the lanes; everything comes back up as client events.
import { performance } from 'node:perf_hooks';

import type { Endpoint } from '../native';
import {
  type ClientEvent,
  type HttpResponse,
  type StreamInit,
  DEFAULT_MAX_BODY_BYTES,
  parseTarget,
} from '../protocol/dhttp';
import { HostError } from './errors';
import { ACCEPT_ENCODING, decodeContent } from './content-coding';
import { DtdAgent, type DtdOutcome, type DtdTrack } from './dtd';
import { BlockReuse } from './block-reuse';
import { Lane } from './dhttp-lane';
import { bindAddressFor } from './bind-address';
import { addressSpaceOf, refuseLessPublic, type AddressSpace } from './address-space';
import {
  channels,
  type DhttpHostOptions,
  type FetchOptions,
  type FetchResult,
  type HostCounters,
  type LoadOptions,
  type LoadResult,
} from './host-api';
import { fetchOverTls } from './tls-fetch';
import { NameResolver } from './name-resolver';
import { PageLoads, type StartedRequest } from './page-loads';

interface Pending {
  url: string;
  resolve: (r: FetchResult) => void;
  reject: (e: Error) => void;
  startedAtMs: number;
  fellBack: boolean;
  timer: NodeJS.Timeout | undefined;
  dtd?: DtdTrack;
  /** DTD: the same request again without DTD (once, when the answer does not match its digest). */
  refetch?: () => Promise<FetchResult>;
}

/**
 * Fetches dhttp://, dhttpt:// and http:// URLs. One host serves many concurrent fetches; close() frees the
 * sockets.
 */
export class DhttpHost {
  private readonly lanes = new Map<string, Lane>();
  private readonly pending = new Map<string, Pending>();
  private readonly resolver = new NameResolver();
  private readonly pageLoads: PageLoads;
  private closed = false;
  /** DTD (with a store). */
  readonly dtd: DtdAgent | null;
  /** CATP block reuse (with a store). */
  readonly reuse: BlockReuse | null;

  constructor(private readonly options: DhttpHostOptions = {}) {
    this.dtd = options.store ? new DtdAgent(options.store, options.dtd) : null;
    this.reuse = options.store && options.reuse !== false ? new BlockReuse(options.store, options.reuse) : null;
    this.pageLoads = new PageLoads({
      reuse: this.reuse,
      begin: (url, fetchOptions, stream) => this.begin(url, fetchOptions, stream),
      forget: (requestId) => this.pending.delete(requestId),
    });
  }

  /** The endpoint ports used for a bind address (opening the endpoint if needed), for tools and tests. */
  laneFor(bind: string): { udpPort: number; tcpPort: number; endpoint: Endpoint } {
    const lane = this.lane(bind);
    return { udpPort: lane.endpoint.udpPort, tcpPort: lane.endpoint.tcpPort, endpoint: lane.endpoint };
  }

  async fetch(url: string, options: FetchOptions = {}): Promise<FetchResult> {
    if (parseTarget(url).scheme === 'https') return this.fetchTls(url, options);
    return (await this.begin(url, options, null)).answer;
  }

  /** An https:// GET over TLS (app/tls-fetch.ts): never DHTTP, no DTD. */
  private fetchTls(url: string, options: FetchOptions): Promise<FetchResult> {
    if (this.closed) return Promise.reject(new HostError('HOST_ERR_CLOSED', 'the host is closed'));
    return fetchOverTls(url, options, this.options.client?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES);
  }

  /**
   * Loads a page as a stream of CATP frames (or, in 'inorder' mode, raw datagrams), reporting every frame
   * (app/page-loads.ts). Resolves when the page is complete and verified, or with the server's ordinary answer
   * when it sent one.
   */
  load(url: string, options: LoadOptions): Promise<LoadResult> {
    return this.pageLoads.load(url, options);
  }

  private async begin(url: string, options: FetchOptions, stream: StreamInit | null): Promise<StartedRequest> {
    if (this.closed) throw new HostError('HOST_ERR_CLOSED', 'the host is closed');
    const target = parseTarget(url);
    const address = await this.resolver.resolve(target.host);
    // closed while the name resolved: a lane opened now would hold its socket open after close(), and the process
    // with it (a browser closed right after it began a navigation never exited)
    if (this.closed) throw new HostError('HOST_ERR_CLOSED', 'the host was closed before the request went');
    if (options.reachFrom !== undefined) refuseLessPublic(url, options.reachFrom, address);
    const bind = this.options.bind && this.options.bind !== 'auto'
      ? this.options.bind
      : bindAddressFor(address, 'dhttp');
    const lane = this.lane(bind);
    const method = (options.method ?? 'GET').toUpperCase();
    const dtd = this.dtd !== null && stream === null && options.dtd !== false
      ? this.dtd.prepare(url, method, options.body !== undefined && options.body.length > 0)
      : null;
    const startedAtMs = performance.now();
    // Plain HTTP/1.1 answers come compressed when we ask, as real servers send them (decoded in onEvent) — unless
    // the request wants a digest (DTD, Want-Digest): a server sends none with a coded body (ours), or one over the
    // coded bytes (RFC 9530), and DTD digests and stores the identity body.
    const named = new Set((options.headers ?? []).map(([n]) => n.toLowerCase()));
    const wantsDigest = dtd !== null || named.has('want-repr-digest') || named.has('want-digest');
    const coding: [string, string][] = target.scheme === 'http' && !named.has('accept-encoding') && !wantsDigest ? [['Accept-Encoding', ACCEPT_ENCODING]] : [];
    const requestId = lane.request(
      {
        url,
        method: options.method ?? 'GET',
        headers: [...(options.headers ?? []), ...coding, ...(dtd?.headers ?? [])],
        ...(options.body ? { body: options.body } : {}),
        ...(stream !== null ? { stream } : {}),
        ...(dtd !== null && dtd.track.choice.mode !== 'plain' ? { dtd: true } : {}),
      },
      address,
      startedAtMs,
    );
    const answer = new Promise<FetchResult>((resolve, reject) => {
      const entry: Pending = {
        url, resolve, reject, startedAtMs, fellBack: false, timer: undefined,
        ...(dtd ? { dtd: dtd.track, refetch: () => this.fetch(url, { ...options, dtd: false }) } : {}),
      };
      if (options.timeoutMs !== undefined) {
        entry.timer = setTimeout(() => {
          lane.cancel(requestId);
          this.pending.delete(requestId);
          reject(new HostError('HOST_ERR_TIMEOUT', `no answer for ${url} within ${options.timeoutMs} ms`));
        }, options.timeoutMs);
      }
      this.pending.set(requestId, entry);
    });
    channels.request.publish({ url, requestId, atMs: startedAtMs });
    return { lane, requestId, startedAtMs, answer };
  }

  /** Every client event of a lane, in order (the one way anything comes back from a lane). */
  private onEvent(lane: Lane, event: ClientEvent): void {
    switch (event.type) {
      case 'response': {
        const entry = this.take(event.requestId);
        if (!entry) return;
        // a coded answer is decoded before anything reads it (the DTD store keeps, and digests, what was meant)
        let response: HttpResponse;
        try {
          response = decodeContent(event.response, this.options.client?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES);
        } catch (err) {
          entry.reject(err as Error);
          return;
        }
        let dtd: DtdOutcome | undefined;
        if (entry.dtd && this.dtd) {
          try {
            dtd = this.dtd.onResponse(entry.dtd, response, event.sentAtMs, event.receivedAtMs, event.channel);
          } catch (err) {
            if ((err as { code?: unknown }).code === 'DTD_ERR_DIGEST_MISMATCH' && entry.refetch !== undefined) {
              // A body that does not match its digest (a broken cache, a lying server): once more, without DTD,
              // before the load fails.
              const [agent, track] = [this.dtd, entry.dtd];
              entry.refetch().then(
                (again) => {
                  try {
                    const outcome = agent.afterMismatch(track, again.response);
                    channels.dtd.publish(outcome);
                    entry.resolve({ ...again, dtd: outcome });
                  } catch (e) {
                    entry.reject(e as Error);
                  }
                },
                () => entry.reject(err as Error),
              );
              return;
            }
            entry.reject(err as Error);
            return;
          }
          channels.dtd.publish(dtd);
        }
        const result: FetchResult = {
          url: entry.url,
          requestId: event.requestId,
          response,
          channel: event.channel,
          resends: event.resends,
          fellBack: entry.fellBack,
          startedAtMs: entry.startedAtMs,
          completedAtMs: performance.now(),
          lastRxNs: event.rxNs ?? null,
          ...(dtd ? { dtd } : {}),
        };
        channels.response.publish(result);
        entry.resolve(result);
        return;
      }
      case 'dtd-announce': {
        const entry = this.pending.get(event.requestId);
        if (!entry?.dtd || !this.dtd) {
          lane.dtdDecide(event.requestId, 'proceed');
          return;
        }
        const { decision, reason } = this.dtd.onAnnounce(entry.dtd, event);
        const taken = lane.dtdDecide(event.requestId, decision);
        // Not taken: the body arrived right behind its announcement (abort mode on a fast link) and its
        // 'response' event follows; it is used as it is.
        if (!taken) entry.dtd.lateHit = decision === 'dont-bother';
        if (decision === 'dont-bother' && taken) {
          this.take(event.requestId);
          void this.answerFromStore(event, entry, reason);
        }
        return;
      }
      case 'request-failed': {
        const entry = this.take(event.requestId);
        entry?.reject(event.error);
        return;
      }
      case 'resend':
        channels.resend.publish(event);
        return;
      case 'fallback': {
        const entry = this.pending.get(event.requestId);
        if (entry) entry.fellBack = true;
        channels.fallback.publish(event);
        return;
      }
      case 'dropped':
        channels.dropped.publish(event);
        return;
      case 'stream-frame':
      case 'stream-blocks-known':
      case 'stream-local-fill':
      case 'stream-complete':
      case 'stream-failed':
        this.pageLoads.onEvent(event);
        return;
      default:
        channels.resend.publish(event);
    }
  }

  /** A DTD hit: the answer is the announcement's head with the stored body; if the store lost it, refetch. */
  private async answerFromStore(event: Extract<ClientEvent, { type: 'dtd-announce' }>, entry: Pending, reason: string): Promise<void> {
    const agent = this.dtd as DtdAgent;
    const track = entry.dtd as DtdTrack;
    let response: HttpResponse | null = null;
    try {
      response = await agent.fromStore(track);
    } catch {
      response = null;
    }
    if (response === null) {
      // Evicted or corrupt since the lookup (the bad copy is gone now): fetch it again, without DTD.
      agent.refetched(track);
      try {
        const again = await this.fetch(entry.url, { dtd: false });
        const outcome: DtdOutcome = { ...agent.hit(track, reason), decision: 'refetched', decisionReason: 'the stored copy failed verification; fetched again', savedBytes: 0, savedMs: 0 };
        channels.dtd.publish(outcome);
        entry.resolve({ ...again, startedAtMs: entry.startedAtMs, dtd: outcome });
      } catch (err) {
        entry.reject(err as Error);
      }
      return;
    }
    const dtd = agent.hit(track, reason);
    channels.dtd.publish(dtd);
    const result: FetchResult = {
      url: entry.url,
      requestId: event.requestId,
      response,
      channel: event.channel,
      resends: 0,
      fellBack: entry.fellBack,
      startedAtMs: entry.startedAtMs,
      completedAtMs: performance.now(),
      lastRxNs: event.rxNs ?? null,
      dtd,
    };
    channels.response.publish(result);
    entry.resolve(result);
  }

  counters(): HostCounters {
    const lanes = [...this.lanes.values()].map((lane) => lane.counters());
    return {
      lanes: lanes.map(({ sendErrors: _, ...lane }) => lane),
      sendErrors: lanes.reduce((n, lane) => n + lane.sendErrors, 0),
      ...(this.dtd ? { dtd: this.dtd.counters() } : {}),
      ...(this.reuse ? { reuse: this.reuse.counters() } : {}),
    };
  }

  /** Waits for the payload store's pending writes (block reuse stores a page's blocks after it completes). */
  async flushStore(): Promise<void> {
    if (this.reuse) await this.reuse.flush();
    else await this.options.store?.flush();
    await this.dtd?.savePaths();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const lane of this.lanes.values()) lane.close();
    this.lanes.clear();
    for (const [, entry] of this.pending) {
      if (entry.timer) clearTimeout(entry.timer);
      entry.reject(new HostError('HOST_ERR_CLOSED', 'the host was closed before the answer came'));
    }
    this.pending.clear();
    this.pageLoads.close();
  }

  private take(requestId: string): Pending | undefined {
    const entry = this.pending.get(requestId);
    if (!entry) return undefined;
    this.pending.delete(requestId);
    if (entry.timer) clearTimeout(entry.timer);
    return entry;
  }

  private lane(bind: string): Lane {
    let lane = this.lanes.get(bind);
    if (!lane) {
      const { client, acceptDeadlineMs } = this.options;
      const created: Lane = new Lane(
        bind,
        { ...(client !== undefined ? { client } : {}), ...(acceptDeadlineMs !== undefined ? { acceptDeadlineMs } : {}) },
        (event) => this.onEvent(created, event),
      );
      lane = created;
      this.lanes.set(bind, lane);
    }
    return lane;
  }

  /**
   * The dhttp:// URL to fetch an http:// URL as, when its server (the same host and port) has answered this host
   * over DHTTP before; else the URL itself.
   */
  overDhttpIfSpoken(url: string): string {
    const t = parseTarget(url);
    if (t.scheme !== 'http') return url;
    for (const lane of this.lanes.values()) {
      if (lane.speaksDhttp(t.host, t.port)) return `dhttp://${t.host}:${t.port}${t.path}`;
    }
    return url;
  }

  /** The address space `host` resolves to (the address later fetches from it connect to). */
  async addressSpaceOf(host: string): Promise<AddressSpace> {
    return addressSpaceOf(await this.resolver.resolve(host));
  }
}
