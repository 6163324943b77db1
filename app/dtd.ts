// The host's side of DTD: which mode each request asks for (protocol/dtd/policy.ts, from the latency model
// and measured RTT / bandwidth), what to answer an announcement (the payload store's in-memory index,
// scoped by site), and what to do with each answer (verify its digest, store it). dhttp-host.ts calls it
// from its fetch path; it holds no sockets and no timers.
import { readFileSync, statSync } from 'node:fs';
import { rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import { parseTarget, type ClientEvent, type HttpHeaders, type HttpResponse } from '../protocol/dhttp';
import {
  DtdPolicy,
  digestToHex,
  dtdError,
  formatRate,
  responseDigest,
  type Choice,
  type DigestSource,
  type DtdError,
  type DtdMode,
  type DtdPolicyOptions,
} from '../protocol/dtd';
import { sha256 } from '../platform/sha256';
import { siteOf, type PayloadStore } from './payload-store';

export type DtdDecisionKind = 'hit' | 'miss' | 'no-digest' | 'not-eligible' | 'refetched' | 'mismatch';

/** What DTD did for one fetch (FetchResult.dtd, the `dtd:decision` diagnostics channel, `catp get -v`). */
export interface DtdOutcome {
  url: string;
  mode: DtdMode;
  /** Why this mode (the latency model's inputs and break-even size). */
  modeReason: string;
  breakEvenBytes: number;
  digest: string | null;
  digestSource: DigestSource | null;
  /** The server announced the answer before the body; `held`: it waited for our decision. */
  announced: boolean;
  held: boolean;
  decision: DtdDecisionKind;
  /** Why (local only; a cross-site miss reads the same on the wire as any miss). */
  decisionReason: string;
  /** Body bytes we did not receive, and an estimate of the time that saved (bytes / measured bandwidth). */
  savedBytes: number;
  savedMs: number;
  /** The payload went into the store (or was already there). */
  stored: boolean;
}

export interface DtdCounters {
  requests: number;
  byMode: Record<DtdMode, number>;
  announcements: number;
  hits: number;
  misses: number;
  crossSiteMisses: number;
  noDigest: number;
  refetches: number;
  digestMismatches: number;
  /** Origins whose path estimates came from the last run (`dtd-paths.json` beside the store). */
  pathsRestored: number;
  badDigestFields: Record<string, number>;
  savedBytes: number;
  savedMs: number;
}

/** Per-request DTD state, kept by the host beside its pending fetch. */
export interface DtdTrack {
  url: string;
  originKey: string;
  choice: Choice;
  announced: boolean;
  held: boolean;
  digest: Uint8Array | null;
  digestSource: DigestSource | null;
  announcedAtMs: number | null;
  /** The announcement's response head, used to answer from the store. */
  head: HttpResponse | null;
  /** Body length the announcement gave. */
  length: number;
  /** A hit whose body had already arrived with its announcement (nothing left to suppress). */
  lateHit?: boolean;
}

/** Beside the store: the DTD policy's path estimates from earlier runs. */
export const PATHS_FILE = 'dtd-paths.json';

export class DtdAgent {
  readonly policy: DtdPolicy;
  private readonly c: DtdCounters = {
    requests: 0,
    byMode: { plain: 0, proceed: 0, 'auto-proceed': 0, abort: 0 },
    announcements: 0,
    hits: 0,
    misses: 0,
    crossSiteMisses: 0,
    noDigest: 0,
    refetches: 0,
    digestMismatches: 0,
    pathsRestored: 0,
    badDigestFields: {},
    savedBytes: 0,
    savedMs: 0,
  };

  constructor(
    readonly store: PayloadStore,
    options: DtdPolicyOptions = {},
  ) {
    this.policy = new DtdPolicy(options);
    this.restorePaths();
  }

  /**
   * Path estimates (RTT, bandwidth per origin) and the hit ratio persist beside the store (`dtd-paths.json`), so a
   * fresh `catp get` models the link it has met before instead of assuming 50 ms / 10 Mb/s. Read once here
   * (a small file, at most 1 MiB; anything malformed is ignored), written by `savePaths`.
   */
  private restorePaths(): void {
    try {
      const file = join(this.store.dir, PATHS_FILE);
      if (statSync(file).size > 1024 * 1024) return;
      this.c.pathsRestored = this.policy.restore(JSON.parse(readFileSync(file, 'utf8')));
    } catch {
      // none yet, or unreadable: the defaults
    }
  }

  /** Writes the path estimates beside the store (a temp file renamed over the old one). */
  async savePaths(): Promise<void> {
    const file = join(this.store.dir, PATHS_FILE);
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      await writeFile(tmp, JSON.stringify(this.policy.snapshot()));
      await rename(tmp, file);
    } catch {
      await unlink(tmp).catch(() => undefined);
    }
  }

  /** Header fields and the client flag for a request; null when DTD does not apply (not a GET, a body...). */
  prepare(url: string, method: string, hasBody: boolean): { headers: HttpHeaders; track: DtdTrack } | null {
    if (method !== 'GET' || hasBody) return null;
    const t = parseTarget(url);
    const originKey = `${t.scheme === 'dhttpt' ? 'dhttp' : t.scheme}://${t.host}:${t.port}`;
    const choice = this.policy.choose(originKey);
    this.c.requests++;
    this.c.byMode[choice.mode]++;
    return {
      headers: choice.headers,
      track: { url, originKey, choice, announced: false, held: false, digest: null, digestSource: null, announcedAtMs: null, head: null, length: 0 },
    };
  }

  /**
   * An announcement: PROCEED or DON'T-BOTHER. Decided from memory only, in the same steps whether the digest
   * is absent or held for another site, so neither the messages nor their timing tell a server apart.
   */
  onAnnounce(track: DtdTrack, ev: Extract<ClientEvent, { type: 'dtd-announce' }>): { decision: 'proceed' | 'dont-bother'; reason: string } {
    this.c.announcements++;
    track.announced = true;
    track.held = ev.held;
    track.announcedAtMs = ev.receivedAtMs;
    track.head = ev.response;
    track.length = ev.length;
    this.policy.observeRtt(track.originKey, ev.receivedAtMs - ev.sentAtMs);
    const d = this.digestOf(ev.response.headers);
    if (d === null) return { decision: 'proceed', reason: 'the announcement names no usable sha-256 digest' };
    track.digest = d.sha256;
    track.digestSource = d.source;
    const look = this.store.lookup(d.sha256, track.url);
    this.policy.observeLookup(look.hit);
    if (look.hit) return { decision: 'dont-bother', reason: `payload ${digestToHex(d.sha256).slice(0, 16)}… is in the store` };
    if (look.reason === 'other-site') this.c.crossSiteMisses++;
    return {
      decision: 'proceed',
      reason: look.reason === 'other-site' ? 'held only from another site: a miss under the privacy scope' : 'not in the store',
    };
  }

  /** The stored payload for a hit, verified (null: gone or corrupt since the lookup). */
  async fromStore(track: DtdTrack): Promise<HttpResponse | null> {
    if (track.digest === null || track.head === null) return null;
    const body = await this.store.get(track.digest, track.url);
    if (body === null) return null;
    const head = track.head;
    const headers = head.headers.filter(([n]) => !/^(dtd-announce|content-length)$/i.test(n));
    headers.push(['Content-Length', String(body.length)]);
    return { status: head.status, reason: head.reason, headers, body, ...(head.version ? { version: head.version } : {}) };
  }

  /**
   * A full answer to a DTD-tracked request: checks the body against the digest the server gave (in the
   * answer or its announcement) and stores it. Throws DtdError DTD_ERR_DIGEST_MISMATCH for a lying server
   * (nothing is stored).
   */
  onResponse(track: DtdTrack, response: HttpResponse, sentAtMs: number, receivedAtMs: number, channel: string): DtdOutcome {
    const startMs = track.announcedAtMs ?? sentAtMs;
    if (!track.announced && channel === 'udp') this.policy.observeRtt(track.originKey, receivedAtMs - sentAtMs);
    this.policy.observeTransfer(track.originKey, response.body.length, receivedAtMs - startMs + (track.announced ? this.policy.linkOf(track.originKey).rttMs : 0));
    const base = this.outcome(track, 'miss', '');
    if (response.status !== 200) return { ...base, decision: 'not-eligible', decisionReason: `status ${response.status}` };
    const d = this.digestOf(response.headers);
    let digest = d?.sha256 ?? null;
    if (d !== null && track.digest !== null && digestToHex(d.sha256) !== digestToHex(track.digest)) {
      this.c.digestMismatches++;
      throw dtdError('DTD_ERR_DIGEST_MISMATCH', `${track.url}: the answer's digest differs from the one announced`);
    }
    digest ??= track.digest;
    const digestSource = d?.source ?? track.digestSource;
    if (track.choice.mode !== 'plain') this.policy.observeDigest(track.originKey, digest !== null);
    const actual = sha256(response.body);
    if (digest !== null && digestToHex(actual) !== digestToHex(digest)) {
      this.c.digestMismatches++;
      throw dtdError(
        'DTD_ERR_DIGEST_MISMATCH',
        `${track.url}: the body (sha-256 ${digestToHex(actual).slice(0, 16)}…) does not match the server's digest ` +
          `${digestToHex(digest).slice(0, 16)}…; not stored`,
      );
    }
    // Stored under its own hash when the server gave none: the content address verifies itself.
    void this.store.put(track.url, response.body, actual).catch(() => undefined);
    if (digest === null) {
      this.c.noDigest++;
      return { ...base, digest: digestToHex(actual), decision: 'no-digest', decisionReason: 'the server sent no digest; stored under our own sha-256', stored: true };
    }
    if (track.lateHit === true) {
      this.c.hits++;
      return { ...base, digest: digestToHex(digest), digestSource, decision: 'hit', decisionReason: 'in the store, but the body had already arrived behind its announcement', stored: true };
    }
    this.c.misses++;
    return {
      ...base,
      digest: digestToHex(digest),
      digestSource,
      decision: 'miss',
      decisionReason: track.announced ? 'not in the store: the body was transferred, verified and stored' : 'answered at once with a digest; verified and stored',
      stored: true,
    };
  }

  /** A hit that was served from the store. */
  hit(track: DtdTrack, reason: string): DtdOutcome {
    const size = track.length;
    const bw = this.policy.linkOf(track.originKey).bytesPerSec;
    // Held: the whole body was never sent. Sent at once: roughly one bandwidth-delay product got through.
    const saved = track.held ? size : Math.max(0, size - Math.round((bw * this.policy.linkOf(track.originKey).rttMs) / 1000));
    const savedMs = (saved / bw) * 1000;
    this.c.hits++;
    this.c.savedBytes += saved;
    this.c.savedMs += savedMs;
    return { ...this.outcome(track, 'hit', reason), savedBytes: saved, savedMs, stored: true };
  }

  /**
   * The answer to a tracked request did not match its digest, and was fetched again without DTD: `response` is
   * that second answer. It is checked against its own digest when it has one (a second mismatch throws
   * DTD_ERR_DIGEST_MISMATCH: the load fails); it is never stored (nothing announced vouches for it).
   */
  afterMismatch(track: DtdTrack, response: HttpResponse): DtdOutcome {
    this.c.refetches++;
    const d = response.status === 200 ? this.digestOf(response.headers) : null;
    if (d !== null && digestToHex(sha256(response.body)) !== digestToHex(d.sha256)) {
      this.c.digestMismatches++;
      throw dtdError('DTD_ERR_DIGEST_MISMATCH', `${track.url}: fetched again without DTD, the body still does not match the server's digest`);
    }
    return {
      ...this.outcome(track, 'mismatch', 'the first answer did not match its digest; fetched again without DTD (not stored)'),
      digest: d === null ? null : digestToHex(d.sha256),
      digestSource: d?.source ?? null,
    };
  }

  refetched(_track: DtdTrack): void {
    this.c.refetches++;
  }

  private outcome(track: DtdTrack, decision: DtdDecisionKind, reason: string): DtdOutcome {
    return {
      url: track.url,
      mode: track.choice.mode,
      modeReason: track.choice.reason,
      breakEvenBytes: track.choice.breakEvenBytes,
      digest: track.digest ? digestToHex(track.digest) : null,
      digestSource: track.digestSource,
      announced: track.announced,
      held: track.held,
      decision,
      decisionReason: reason,
      savedBytes: 0,
      savedMs: 0,
      stored: false,
    };
  }

  private digestOf(headers: HttpHeaders): ReturnType<typeof responseDigest> {
    try {
      return responseDigest(headers);
    } catch (e) {
      const code = (e as DtdError).code ?? 'DTD_ERR_SYNTAX';
      this.c.badDigestFields[code] = (this.c.badDigestFields[code] ?? 0) + 1;
      return null;
    }
  }

  counters(): DtdCounters & { policy: ReturnType<DtdPolicy['counters']>; store: ReturnType<PayloadStore['counters']> } {
    return { ...this.c, byMode: { ...this.c.byMode }, badDigestFields: { ...this.c.badDigestFields }, policy: this.policy.counters(), store: this.store.counters() };
  }

  describeLink(url: string): string {
    const t = parseTarget(url);
    const l = this.policy.linkOf(`${t.scheme === 'dhttpt' ? 'dhttp' : t.scheme}://${t.host}:${t.port}`);
    return `RTT ${l.rttMs.toFixed(1)} ms, ${formatRate(l.bytesPerSec)}`;
  }
}

export { siteOf };
