// The DTD payload store: every payload the browser received, content-addressed by sha-256, on cacache
// (npm's content-addressable cache). See protocol/README.md, section DTD, and the DTD paper §4 and §10.
//
// - Content: cacache writes each payload to a temp file and renames it under its integrity (sha256-…), and
//   refuses a write whose bytes do not match the integrity given (EINTEGRITY). Reads go through
//   cacache.get.byDigest, which re-hashes the bytes; a payload that fails is removed and reported as a miss.
//   A crash mid-write leaves at most a stray temp file: never a torn payload under a final name.
// - Index: one cacache index key per payload (`dtd:<sha256 hex>`), whose metadata lists the sites it was
//   received from and the URLs it was received for (several payloads per URL), and when it was last used.
//   cacache appends index lines with a checksum each, so a torn line is ignored on the next open. Every update
//   appends a line, so opening a store whose index is mostly stale lines compacts it (`compactIndex`: one line
//   per payload, deleted ones none, each bucket rewritten to a temp file and renamed over it).
//   The index is mirrored in memory: the DTD decision (`lookup`) never touches the disk, so it takes the same
//   time whatever the store holds — a hit from another site looks exactly like a miss (§10).
// - Budget: total payload bytes ≤ budgetBytes; the least recently used payloads are evicted.
// - Privacy scope (§10): by default a digest counts as held for URL u only when the payload was received
//   from u's site (scheme + host + port); scope 'any' widens it to every site.
// - CATP blocks (block reuse, protocol/README.md "Block reuse"): the data blocks of CATP pages are payloads too,
//   marked `block` and found by their 16-byte block digest (the first half of their sha-256); they record
//   sites (for the scope) but no URLs, and their LRU time is written back at most once a minute.
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { lstat, readdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';

import cacache from 'cacache';
import { parseTarget } from '../protocol/dhttp/url';
import { sha256 } from '../platform/sha256';
import { HostError } from './errors';

export type PrivacyScope = 'site' | 'any';

export interface PayloadStoreOptions {
  /** Directory of the store. Default defaultStoreDir(). */
  dir?: string;
  /** Total payload bytes kept. Default 256 MiB. */
  budgetBytes?: number;
  /** 'site' (default): hits only for payloads received from the same site; 'any': from any site. */
  scope?: PrivacyScope;
  /** Payloads larger than this are not stored. Default budgetBytes / 4. */
  maxEntryBytes?: number;
  /** Sites and URLs remembered per payload. Default 16 each. */
  maxSitesPerEntry?: number;
  maxUrlsPerEntry?: number;
  /** Wall clock for LRU times (tests). Default Date.now. */
  now?: () => number;
}

export const DEFAULT_BUDGET_BYTES = 256 * 1024 * 1024;

/** `$XDG_CACHE_HOME/catp-browser/payloads`, else `~/.cache/catp-browser/payloads`. */
export function defaultStoreDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME && env.XDG_CACHE_HOME.startsWith('/') ? env.XDG_CACHE_HOME : join(homedir(), '.cache');
  return join(base, 'catp-browser', 'payloads');
}

/** STORE_ERR_INTEGRITY (bytes ≠ digest), STORE_ERR_TOO_LARGE, STORE_ERR_IO, STORE_ERR_BAD_OPTIONS, STORE_ERR_CLOSED. */
export class StoreError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
    this.name = 'StoreError';
  }
}

/** scheme://host:port of a URL (the port written out even when it is the scheme's default), as parseTarget reads it. */
export function siteOf(url: string): string {
  const t = parseTarget(url);
  return `${t.scheme}://${t.host}:${t.port}`;
}

function hex(d: Uint8Array): string {
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength).toString('hex');
}

function sri(digestHex: string): string {
  return `sha256-${Buffer.from(digestHex, 'hex').toString('base64')}`;
}

/** Where cacache keeps a payload's bytes (its content-v2 layout: algorithm / 2 / 2 / rest of the hex digest). */
function contentPath(dir: string, digestHex: string): string {
  return join(dir, 'content-v2', 'sha256', digestHex.slice(0, 2), digestHex.slice(2, 4), digestHex.slice(4));
}

interface Entry {
  digestHex: string;
  size: number;
  sites: string[];
  urls: string[];
  lastUsed: number;
  /** A CATP data block (found by its 16-byte digest; no URLs recorded). */
  block: boolean;
  /** When the index line on disk was last written (wall clock; 0 = never by this process). */
  persistedAt: number;
  /** A write in progress (reads wait for it; a failed write removes the entry). */
  pending: Promise<boolean> | null;
}

interface Metadata {
  v: 1;
  sites: string[];
  urls: string[];
  lastUsed: number;
  block?: boolean;
}

/** Bytes of a CATP block digest (sha-256 truncated, protocol/catp/skeleton.ts BLOCK_DIGEST_BYTES). */
export const BLOCK_DIGEST_BYTES = 16;
/** A block's LRU time is written to disk at most this often (a reload touches every block of a page). */
const BLOCK_TOUCH_PERSIST_MS = 60_000;

export type Lookup = { hit: true; size: number } | { hit: false; reason: 'absent' | 'other-site' };

export interface StoreCounters {
  entries: number;
  bytes: number;
  budgetBytes: number;
  lookups: number;
  hits: number;
  /** Digest present, but only from other sites: refused by the privacy scope (reported as a miss). */
  scopeRefusals: number;
  /** CATP block lookups, hits, and digests held only for other sites (a miss under the scope). */
  blockLookups: number;
  blockHits: number;
  blockScopeRefusals: number;
  /** CATP blocks stored (new or already held). */
  blockPuts: number;
  puts: number;
  /** Writes refused because the bytes did not match the digest they were announced with. */
  integrityRefusals: number;
  /** Reads that failed verification (or found the content gone): the entry was removed. */
  corruptRemoved: number;
  evictions: number;
  evictedBytes: number;
  tooLarge: number;
  ioErrors: number;
  /** Index compactions run, and the superseded or deleted index lines they dropped (see `compactIndex`). */
  indexCompactions: number;
  indexLinesDropped: number;
}

export interface StoredPayload {
  digestHex: string;
  size: number;
  sites: readonly string[];
  urls: readonly string[];
  lastUsed: number;
  /** A CATP data block. */
  block: boolean;
}

const KEY_PREFIX = 'dtd:';
/** Scanned instead of an entry's sites when the digest is absent (lookup does the same work either way). */
const ABSENT_SITES: readonly string[] = Array.from({ length: 2 }, (_, i) => `absent://${i}`);

export class PayloadStore {
  readonly dir: string;
  readonly budgetBytes: number;
  readonly scope: PrivacyScope;
  readonly maxEntryBytes: number;
  private readonly maxSites: number;
  private readonly maxUrls: number;
  private readonly now: () => number;
  private readonly entries = new Map<string, Entry>();
  private readonly urls = new Map<string, Set<string>>();
  /** Block digest (hex, 32 chars) → payload digest (hex), for CATP block entries. */
  private readonly blocks = new Map<string, string>();
  /** Sites → number of CATP block entries received from them. */
  private readonly blockSites = new Map<string, number>();
  private blockEntries = 0;
  private bytes = 0;
  /** Index appends and evictions run one at a time. */
  private chain: Promise<unknown> = Promise.resolve();
  private readonly c: Omit<StoreCounters, 'entries' | 'bytes' | 'budgetBytes'> = {
    lookups: 0,
    hits: 0,
    scopeRefusals: 0,
    blockLookups: 0,
    blockHits: 0,
    blockScopeRefusals: 0,
    blockPuts: 0,
    puts: 0,
    integrityRefusals: 0,
    corruptRemoved: 0,
    evictions: 0,
    evictedBytes: 0,
    tooLarge: 0,
    ioErrors: 0,
    indexCompactions: 0,
    indexLinesDropped: 0,
  };

  private constructor(opts: PayloadStoreOptions) {
    this.dir = opts.dir ?? defaultStoreDir();
    this.budgetBytes = opts.budgetBytes ?? DEFAULT_BUDGET_BYTES;
    this.scope = opts.scope ?? 'site';
    this.maxEntryBytes = opts.maxEntryBytes ?? Math.floor(this.budgetBytes / 4);
    this.maxSites = opts.maxSitesPerEntry ?? 16;
    this.maxUrls = opts.maxUrlsPerEntry ?? 16;
    this.now = opts.now ?? Date.now;
    if (!(this.budgetBytes > 0) || !(this.maxEntryBytes > 0)) throw new StoreError('STORE_ERR_BAD_OPTIONS', 'budget and entry size must be positive');
    if (this.scope !== 'site' && this.scope !== 'any') throw new StoreError('STORE_ERR_BAD_OPTIONS', `scope ${String(this.scope)}`);
  }

  /** Opens (creating) the store and loads its index. Entries whose metadata is unreadable are ignored. */
  static async open(opts: PayloadStoreOptions = {}): Promise<PayloadStore> {
    const store = new PayloadStore(opts);
    let listing: Record<string, { integrity: string; size: number; metadata?: unknown }>;
    let lines = 0;
    try {
      ({ entries: listing, lines } = await readIndex(store.dir));
    } catch (e) {
      throw new StoreError('STORE_ERR_IO', `cannot read the store at ${store.dir}: ${(e as Error).message}`);
    }
    const loaded: Entry[] = [];
    for (const [key, info] of Object.entries(listing)) {
      if (!key.startsWith(KEY_PREFIX)) continue;
      const digestHex = key.slice(KEY_PREFIX.length);
      const m = info.metadata as Partial<Metadata> | undefined;
      if (!/^[0-9a-f]{64}$/.test(digestHex) || info.integrity !== sri(digestHex) || !Number.isSafeInteger(info.size)) continue;
      if (!m || m.v !== 1 || !Array.isArray(m.sites) || !Array.isArray(m.urls) || typeof m.lastUsed !== 'number') continue;
      const entry: Entry = {
        digestHex,
        size: info.size,
        sites: m.sites.filter((s): s is string => typeof s === 'string').slice(0, store.maxSites),
        urls: m.urls.filter((s): s is string => typeof s === 'string').slice(0, store.maxUrls),
        lastUsed: m.lastUsed,
        block: m.block === true,
        persistedAt: 0,
        pending: null,
      };
      loaded.push(entry);
    }
    // The map is kept in LRU order (least recently used first), so eviction takes the first entry.
    loaded.sort((a, b) => a.lastUsed - b.lastUsed);
    for (const entry of loaded) store.insert(entry);
    if (store.bytes > store.budgetBytes) await store.serial(() => store.evict(null));
    // Every update of an entry (a new site or URL, a use) appends a line: rewrite the index once most are stale.
    if (lines > 2 * Object.keys(listing).length + 64) void store.compactIndex().catch(() => undefined);
    return store;
  }

  /**
   * Rewrites cacache's index so that each key keeps only its latest line, and deleted keys none (cacache
   * appends a line per insert and per delete, and never shortens a bucket). Each bucket file is rewritten to a
   * temp file beside it and renamed over it (atomic), inside the store's write queue so no insert interleaves.
   * Written here rather than with cacache.index.compact for the reason readIndex is (and one pass for all keys).
   */
  async compactIndex(): Promise<{ before: number; after: number }> {
    return this.serial(async () => {
      let before = 0;
      let after = 0;
      await walkIndex(this.dir, async (file, text) => {
        const latest = new Map<string, string>();
        let n = 0;
        for (const line of text.split('\n')) {
          const parsed = parseIndexLine(line);
          if (parsed === null) continue;
          n++;
          latest.delete(parsed.key); // re-inserted below: the map keeps the order of last writes
          if (typeof parsed.entry.integrity === 'string') latest.set(parsed.key, line);
        }
        before += n;
        after += latest.size;
        if (latest.size === n) return;
        if (latest.size === 0) {
          await unlink(file).catch(() => undefined);
          return;
        }
        const tmp = `${file}.compact-${process.pid}-${Date.now()}`;
        await writeFile(tmp, `\n${[...latest.values()].join('\n')}`);
        await rename(tmp, file);
      });
      this.c.indexCompactions++;
      this.c.indexLinesDropped += before - after;
      return { before, after };
    });
  }

  private insert(entry: Entry): void {
    const old = this.entries.get(entry.digestHex);
    if (old) this.drop(old);
    this.entries.set(entry.digestHex, entry);
    this.bytes += entry.size;
    for (const u of entry.urls) {
      let set = this.urls.get(u);
      if (!set) this.urls.set(u, (set = new Set()));
      set.add(entry.digestHex);
    }
    if (entry.block) this.indexBlock(entry, entry.sites);
  }

  /** Adds a block entry (or new sites of one) to the block indexes. */
  private indexBlock(entry: Entry, sites: readonly string[]): void {
    if (!this.blocks.has(entry.digestHex.slice(0, 2 * BLOCK_DIGEST_BYTES))) this.blockEntries++;
    this.blocks.set(entry.digestHex.slice(0, 2 * BLOCK_DIGEST_BYTES), entry.digestHex);
    for (const site of sites) this.blockSites.set(site, (this.blockSites.get(site) ?? 0) + 1);
  }

  private drop(entry: Entry): void {
    if (this.entries.get(entry.digestHex) !== entry) return;
    this.entries.delete(entry.digestHex);
    this.bytes -= entry.size;
    for (const u of entry.urls) {
      const set = this.urls.get(u);
      set?.delete(entry.digestHex);
      if (set && set.size === 0) this.urls.delete(u);
    }
    if (entry.block) {
      const prefix = entry.digestHex.slice(0, 2 * BLOCK_DIGEST_BYTES);
      if (this.blocks.get(prefix) === entry.digestHex) {
        this.blocks.delete(prefix);
        this.blockEntries--;
      }
      for (const site of entry.sites) {
        const n = (this.blockSites.get(site) ?? 1) - 1;
        if (n > 0) this.blockSites.set(site, n);
        else this.blockSites.delete(site);
      }
    }
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.chain.then(fn, fn);
    this.chain = p.catch(() => undefined);
    return p;
  }

  private inScope(entry: Entry, url: string): boolean {
    return this.scope === 'any' || entry.sites.includes(siteOf(url));
  }

  /**
   * Does the store hold this payload for a request to `url`? In memory only, same work for every answer.
   * `reason` is for local diagnostics; never send it anywhere.
   */
  lookup(digest: Uint8Array, url: string): Lookup {
    this.c.lookups++;
    // Same steps whether the digest is absent or held for another site: parse the URL's site and scan a
    // site list either way (a dummy one when absent), so the decision's timing does not tell them apart.
    const site = siteOf(url);
    const entry = this.entries.get(hex(digest));
    const scoped = this.scope === 'any' || (entry?.sites ?? ABSENT_SITES).includes(site);
    if (entry === undefined) return { hit: false, reason: 'absent' };
    if (!scoped) {
      this.c.scopeRefusals++;
      return { hit: false, reason: 'other-site' };
    }
    this.c.hits++;
    return { hit: true, size: entry.size };
  }

  /**
   * Block reuse: might the store hold CATP blocks for a page at `url` (in scope)? In memory. Decides whether a
   * CATP request asks the server to hold its data frames (`Catp-Reuse: hold`), which tells that server only
   * what it could know anyway: that this client has loaded one of *its* pages before (under the default scope).
   */
  hasBlocksFor(url: string): boolean {
    return this.scope === 'any' ? this.blockEntries > 0 : (this.blockSites.get(siteOf(url)) ?? 0) > 0;
  }

  /**
   * Does the store hold the CATP block with this 16-byte digest for a page at `url`? In memory only, the same
   * steps whether the block is absent or held only for another site (as `lookup`).
   */
  lookupBlock(blockDigest: Uint8Array, url: string): Lookup {
    this.c.blockLookups++;
    const site = siteOf(url);
    const full = this.blocks.get(hex(blockDigest.subarray(0, BLOCK_DIGEST_BYTES)));
    const entry = full === undefined ? undefined : this.entries.get(full);
    const scoped = this.scope === 'any' || (entry?.sites ?? ABSENT_SITES).includes(site);
    if (entry === undefined) return { hit: false, reason: 'absent' };
    if (!scoped) {
      this.c.blockScopeRefusals++;
      return { hit: false, reason: 'other-site' };
    }
    this.c.blockHits++;
    return { hit: true, size: entry.size };
  }

  /**
   * The CATP block with this 16-byte digest, verified against its full sha-256, for a page at `url`; null when
   * not held, out of scope, or corrupt (then removed: the caller fetches it over the network).
   */
  async getBlock(blockDigest: Uint8Array, url: string): Promise<Uint8Array | null> {
    const full = this.blocks.get(hex(blockDigest.subarray(0, BLOCK_DIGEST_BYTES)));
    if (full === undefined) return null;
    return this.get(Buffer.from(full, 'hex'), url);
  }

  /**
   * The payload with this digest, verified, for a request to `url` (which is then recorded as one of its
   * URLs), or null: not held, out of scope, or failed verification (then removed).
   */
  async get(digest: Uint8Array, url: string): Promise<Uint8Array | null> {
    const digestHex = hex(digest);
    let entry = this.entries.get(digestHex);
    if (entry?.pending) {
      await entry.pending;
      entry = this.entries.get(digestHex);
    }
    if (entry === undefined || !this.inScope(entry, url)) return null;
    let data: Buffer;
    try {
      // Only a regular file is opened: a FIFO (or a device) planted under a content name would block the read
      // in the thread pool for ever, and the load with it, past any deadline.
      if (!(await lstat(contentPath(this.dir, digestHex))).isFile()) throw new HostError('ENOTREG', 'not a regular file');
      data = await cacache.get.byDigest(this.dir, sri(digestHex));
    } catch (e) {
      // EINTEGRITY, EBADSIZE, ENOENT: whatever is there is not the payload.
      await this.remove(entry, (e as { code?: string }).code ?? 'EIO');
      return null;
    }
    if (!sha256Equals(data, digestHex)) {
      await this.remove(entry, 'EINTEGRITY');
      return null;
    }
    this.touch(entry, entry.block && entry.urls.length === 0 ? null : url, null);
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }

  private async remove(entry: Entry, _why: string): Promise<void> {
    this.c.corruptRemoved++;
    this.drop(entry);
    await this.serial(async () => {
      await cacache.rm.entry(this.dir, KEY_PREFIX + entry.digestHex).catch(() => undefined);
      await cacache.rm.content(this.dir, sri(entry.digestHex)).catch(() => undefined);
    });
  }

  /**
   * Stores `body` received for `url`. With `expected` (the digest the server announced) a mismatch throws
   * STORE_ERR_INTEGRITY and nothing is written. Resolves when the payload is on disk (lookups see it at
   * once; reads wait for the write). Returns the digest and whether it was stored (false: too large).
   */
  async put(url: string, body: Uint8Array, expected?: Uint8Array, opts: { block?: boolean } = {}): Promise<{ digest: Uint8Array; stored: boolean }> {
    const block = opts.block === true;
    const digest = sha256(body);
    const digestHex = hex(digest);
    if (expected !== undefined && hex(expected) !== digestHex) {
      this.c.integrityRefusals++;
      throw new StoreError('STORE_ERR_INTEGRITY', `the body of ${url} does not match its digest`);
    }
    if (body.length > this.maxEntryBytes || body.length > this.budgetBytes) {
      this.c.tooLarge++;
      return { digest, stored: false };
    }
    this.c.puts++;
    if (block) this.c.blockPuts++;
    const site = siteOf(url);
    const existing = this.entries.get(digestHex);
    if (existing !== undefined) {
      if (existing.pending) await existing.pending;
      if (this.entries.get(digestHex) === existing) {
        if (block && !existing.block) {
          existing.block = true;
          this.indexBlock(existing, existing.sites);
        }
        this.touch(existing, block ? null : url, site);
        return { digest, stored: true };
      }
    }
    const entry: Entry = {
      digestHex, size: body.length, sites: [site], urls: block ? [] : [url], lastUsed: this.now(), block, persistedAt: this.now(), pending: null,
    };
    this.insert(entry);
    const write = this.serial(async () => {
      try {
        // cacache hashes the bytes again and refuses them if they do not match the integrity (EINTEGRITY).
        await cacache.put(this.dir, KEY_PREFIX + digestHex, Buffer.from(body.buffer, body.byteOffset, body.byteLength), {
          integrity: sri(digestHex),
          algorithms: ['sha256'],
          metadata: this.metadata(entry),
        });
        await this.evict(entry);
        return true;
      } catch {
        this.c.ioErrors++;
        this.drop(entry);
        return false;
      }
    });
    entry.pending = write;
    const ok = await write;
    entry.pending = null;
    if (!ok) throw new StoreError('STORE_ERR_IO', `could not write the payload of ${url}`);
    return { digest, stored: this.entries.get(digestHex) === entry };
  }

  /**
   * Records a use (LRU), with `site` that the payload was received in full from that site, with `url` that it
   * was received for that URL (null for CATP blocks: they keep no URLs).
   */
  private touch(entry: Entry, url: string | null, site: string | null): void {
    entry.lastUsed = Math.max(this.now(), entry.lastUsed + 1e-3);
    // most recently used last: eviction takes the first entry
    this.entries.delete(entry.digestHex);
    this.entries.set(entry.digestHex, entry);
    let changed = false;
    if (site !== null && !entry.sites.includes(site) && entry.sites.length < this.maxSites) {
      entry.sites.push(site);
      if (entry.block) this.indexBlock(entry, [site]);
      changed = true;
    }
    if (url !== null && !entry.urls.includes(url)) {
      changed = true;
      entry.urls.unshift(url);
      if (entry.urls.length > this.maxUrls) {
        const gone = entry.urls.pop() as string;
        this.urls.get(gone)?.delete(entry.digestHex);
      }
      let set = this.urls.get(url);
      if (!set) this.urls.set(url, (set = new Set()));
      set.add(entry.digestHex);
    }
    // A page reload touches every block it reuses: their LRU time alone goes to disk at most once a minute.
    if (!changed && entry.block && entry.urls.length === 0 && this.now() - entry.persistedAt < BLOCK_TOUCH_PERSIST_MS) return;
    entry.persistedAt = this.now();
    void this.serial(async () => {
      if (this.entries.get(entry.digestHex) !== entry) return;
      await cacache.index
        .insert(this.dir, KEY_PREFIX + entry.digestHex, sri(entry.digestHex), { size: entry.size, metadata: this.metadata(entry) })
        .catch(() => {
          this.c.ioErrors++;
        });
    });
  }

  private metadata(entry: Entry): Metadata {
    return { v: 1, sites: [...entry.sites], urls: [...entry.urls], lastUsed: entry.lastUsed, ...(entry.block ? { block: true } : {}) };
  }

  /** Evicts least recently used payloads (never `keep`) until the budget holds. Runs inside serial(). */
  private async evict(keep: Entry | null): Promise<void> {
    while (this.bytes > this.budgetBytes) {
      // The map is in LRU order: the first entry that is neither being written nor kept.
      let victim: Entry | null = null;
      for (const e of this.entries.values()) {
        if (e === keep || e.pending) continue;
        victim = e;
        break;
      }
      if (victim === null) break;
      this.drop(victim);
      this.c.evictions++;
      this.c.evictedBytes += victim.size;
      await cacache.rm.entry(this.dir, KEY_PREFIX + victim.digestHex).catch(() => undefined);
      await cacache.rm.content(this.dir, sri(victim.digestHex)).catch(() => undefined);
    }
  }

  /** Payloads received for `url`, most recently used first. */
  byUrl(url: string): StoredPayload[] {
    const set = this.urls.get(url);
    if (!set) return [];
    return [...set]
      .map((d) => this.entries.get(d))
      .filter((e): e is Entry => e !== undefined)
      .sort((a, b) => b.lastUsed - a.lastUsed)
      .map((e) => this.info(e));
  }

  list(): StoredPayload[] {
    return [...this.entries.values()].map((e) => this.info(e));
  }

  private info(e: Entry): StoredPayload {
    return { digestHex: e.digestHex, size: e.size, sites: [...e.sites], urls: [...e.urls], lastUsed: e.lastUsed, block: e.block };
  }

  counters(): StoreCounters {
    return { ...this.c, entries: this.entries.size, bytes: this.bytes, budgetBytes: this.budgetBytes };
  }

  /** Waits for queued index writes and evictions. */
  async flush(): Promise<void> {
    await this.serial(async () => undefined);
  }
}

function sha256Equals(data: Uint8Array, digestHex: string): boolean {
  return hex(sha256(data)) === digestHex;
}

/**
 * cacache's index (index-v5/…/<bucket>: one `<sha1 of json>\t<json>` line per insert, the last line of a key
 * wins, a null integrity deletes), read directly: cacache.ls loads p-map with a dynamic import(), which
 * some hosts (jest's VM, bundlers) cannot run. Lines whose checksum fails (a torn append) are skipped, as
 * cacache itself does.
 */
async function readIndex(dir: string): Promise<{ entries: Record<string, { integrity: string; size: number; metadata?: unknown }>; lines: number }> {
  const out: Record<string, { integrity: string; size: number; metadata?: unknown }> = {};
  let lines = 0;
  await walkIndex(dir, (_file, text) => {
    for (const line of text.split('\n')) {
      const parsed = parseIndexLine(line);
      if (parsed === null) continue;
      lines++;
      const entry = parsed.entry;
      if (typeof entry.integrity !== 'string') {
        delete out[parsed.key];
        continue;
      }
      out[parsed.key] = { integrity: entry.integrity, size: Number(entry.size), metadata: entry.metadata };
    }
    return Promise.resolve();
  });
  return { entries: out, lines };
}

/** One index line (`<sha1 of json>\t<json>`), or null when torn, tampered or keyless. */
function parseIndexLine(line: string): { key: string; entry: { integrity?: unknown; size?: unknown; metadata?: unknown } } | null {
  const tab = line.indexOf('\t');
  if (tab <= 0) return null;
  const json = line.slice(tab + 1);
  if (createHash('sha1').update(json).digest('hex') !== line.slice(0, tab)) return null;
  let entry: { key?: unknown; integrity?: unknown; size?: unknown; metadata?: unknown };
  try {
    entry = JSON.parse(json) as typeof entry;
  } catch {
    return null;
  }
  return typeof entry.key === 'string' ? { key: entry.key, entry } : null;
}

/** Calls `each` with every bucket file of cacache's index (index-v5/xx/yy/<bucket>) and its text. */
async function walkIndex(dir: string, each: (file: string, text: string) => Promise<void>): Promise<void> {
  const root = join(dir, 'index-v5');
  const walk = async (d: string, depth: number): Promise<void> => {
    let names: string[];
    try {
      names = await readdir(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return;
      throw e;
    }
    for (const name of names) {
      const p = join(d, name);
      if (depth < 2) {
        await walk(p, depth + 1);
        continue;
      }
      if (name.includes('.compact-')) continue; // a compaction's temp file (a crash mid-rename)
      let text: string;
      try {
        text = await readFile(p, 'utf8');
      } catch {
        continue;
      }
      await each(p, text);
    }
  };
  await walk(root, 0);
}
