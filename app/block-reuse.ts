// CATP block reuse, the host's side (protocol/README.md, CATP, "Block reuse"): which loads ask the server to
// hold their data frames, which blocks of a page the payload store already holds (same-site scope), reading
// them (verified), storing a completed page's blocks for the next load, and the bytes / time that saved.
// The protocol's stream load stays sans-IO: this file does the store's IO and hands it bytes (through the client).
import { parseTarget } from '../protocol/dhttp';
import { HEADER_BYTES, type BlockInfo, type ReceivedBlock } from '../protocol/catp';
import type { PayloadStore } from './payload-store';

/** What reuse did for one CATP load (LoadResult.reuse, the `catp:reuse` channel, `catp get -v`, the HUD). */
export interface ReuseOutcome {
  url: string;
  /** The request asked the server to hold its data frames (`Catp-Reuse: hold`): the store held blocks of this site. */
  asked: boolean;
  /** The server acknowledged (FRAME_FLAG_REUSE on its frames): blocks the store filled were never sent. */
  acked: boolean;
  /** Blocks of the page. */
  blocks: number;
  /** Blocks found in the store and filled locally (verified). */
  reused: number;
  /** Block digests held only for another site: misses under the privacy scope (never read, never reported). */
  crossSiteMisses: number;
  /** Hits whose stored copy failed verification: removed from the store and fetched over the network. */
  corrupt: number;
  /** Of the reused blocks, how many the server sent anyway (old server, or its hold ran out first). */
  arrivedAnyway: number;
  /** Data-frame bytes (CATP header included) the network did not carry because the store had them. */
  bytesSaved: number;
  /** bytesSaved at `rateBytesPerSec`: the transfer time those frames would have taken. */
  savedMs: number;
  rateBytesPerSec: number;
  /** Where the rate comes from: this origin's measured CATP arrival rate, the pacing rate asked for, or assumed. */
  rateSource: 'measured' | 'paced' | 'assumed';
  /** ms from skeleton-ready until the local fill was done and reported (store lookups and reads). */
  fillMs: number;
}

export interface BlockReuseOptions {
  /** Rate assumed for the time estimate before any CATP load from an origin was measured (B/s, default 1,250,000). */
  assumedBytesPerSec?: number;
  /**
   * When to ask the server to hold its data frames (`Catp-Reuse: hold`) for a site the store holds blocks of:
   * 'auto' (default) when the latency model says it pays (`wantsHold`), 'always' (tests of the mechanism on
   * loopback, where a hold never pays).
   */
  hold?: 'auto' | 'always';
  /** Store reads in flight at once during a local fill (default 16). */
  readConcurrency?: number;
  /**
   * Verified block payloads kept in memory (bytes, default 8 MiB; 0: none), so a reload in the same process
   * skips the disk. Used only for blocks the store still holds in scope: every lookup goes through the store.
   */
  memoryBytes?: number;
}

/** Per origin: CATP arrival rate (B/s), data frames' wire bytes per decompressed block byte, request-to-first-frame
 *  time and the transfer time reused blocks saved or would have saved (ms). */
interface OriginMeasures {
  rate?: number;
  wireRatio?: number;
  rttMs?: number;
  savedMs?: number;
}

const MAX_ORIGINS = 4096;

/** A measured arrival rate counts only with this many data frames spread over this long. */
const MIN_RATE_FRAMES = 8;
const MIN_RATE_SPAN_MS = 5;

export interface LocalFill {
  /** Verified payloads by block number. */
  payloads: Map<number, Uint8Array>;
  crossSiteMisses: number;
  corrupt: number;
}

export class BlockReuse {
  /** What earlier loads measured, per origin (each smoothed, α = 1/4; the 4096 most recently measured origins). */
  private readonly origins = new Map<string, OriginMeasures>();
  private readonly writes = new Set<Promise<unknown>>();
  private readonly assumed: number;
  private readonly holdRule: 'auto' | 'always';
  private readonly concurrency: number;
  /** Verified payloads by block digest (hex), least recently used first. */
  private readonly memory = new Map<string, Uint8Array>();
  private memoryUsed = 0;
  private readonly memoryBytes: number;
  private readonly c = { loads: 0, asked: 0, acked: 0, blocks: 0, reused: 0, crossSiteMisses: 0, corrupt: 0, bytesSaved: 0, savedMs: 0, stored: 0, holdsSkipped: 0 };

  constructor(
    readonly store: PayloadStore,
    options: BlockReuseOptions = {},
  ) {
    this.assumed = options.assumedBytesPerSec ?? 1_250_000;
    this.holdRule = options.hold ?? 'auto';
    this.concurrency = Math.max(1, options.readConcurrency ?? 16);
    this.memoryBytes = Math.max(0, options.memoryBytes ?? 8 * 1024 * 1024);
  }

  private remember(key: string, payload: Uint8Array): void {
    if (this.memoryBytes === 0 || payload.length > this.memoryBytes) return;
    const old = this.memory.get(key);
    if (old) {
      this.memory.delete(key);
      this.memoryUsed -= old.length;
    }
    this.memory.set(key, payload);
    this.memoryUsed += payload.length;
    for (const [k, v] of this.memory) {
      if (this.memoryUsed <= this.memoryBytes) break;
      this.memory.delete(k);
      this.memoryUsed -= v.length;
    }
  }

  /** A block's verified payload: from memory when there, else from the store (which verifies it). */
  private async read(key: string, url: string): Promise<Uint8Array | null> {
    const mem = this.memory.get(key);
    if (mem) {
      this.remember(key, mem); // most recently used
      return mem;
    }
    const bytes = await this.store.getBlock(Buffer.from(key, 'hex'), url);
    if (bytes !== null) this.remember(key, bytes);
    return bytes;
  }

  /**
   * Ask the server to hold its data frames? Only when the store holds blocks of this site (in memory), and when
   * the latency model says the hold pays: it delays every data frame by about a round trip (the server waits for
   * our exhaustive report), and saves the transfer time of the blocks we hold. Per origin, from the loads so far:
   * the round trip (request to first frame) against the transfer time the reused blocks would have taken. With no
   * load from the origin yet, ask (the only way to learn it).
   */
  wantsHold(url: string): boolean {
    if (!this.store.hasBlocksFor(url)) return false;
    if (this.holdRule === 'always') return true;
    const m = this.origins.get(originOf(url));
    if (m?.rttMs === undefined || m.savedMs === undefined || m.savedMs >= m.rttMs) return true;
    this.c.holdsSkipped++;
    return false;
  }

  /**
   * A completed CATP load from `url`: its first frame came `rttMs` after the request, and the blocks it reused
   * would have taken `savedMs` on the network (whether or not the server held them).
   */
  noteLoad(url: string, rttMs: number | null, savedMs: number): void {
    if (rttMs === null || !(rttMs >= 0) || !(savedMs >= 0)) return;
    this.measure(url, { rttMs, savedMs });
  }

  /** Folds new samples into `url`'s origin measures (smoothed), keeping the origin most recently measured. */
  private measure(url: string, samples: OriginMeasures): void {
    const key = originOf(url);
    const m = this.origins.get(key) ?? {};
    this.origins.delete(key);
    for (const k of Object.keys(samples) as (keyof OriginMeasures)[]) {
      const x = samples[k] as number;
      const old = m[k];
      m[k] = old === undefined ? x : 0.75 * old + 0.25 * x;
    }
    this.origins.set(key, m);
    if (this.origins.size > MAX_ORIGINS) this.origins.delete(this.origins.keys().next().value as string);
  }

  /**
   * Looks every block of a page whose index is complete up in the store and reads the hits (each read verifies the
   * bytes against their sha-256; a bad copy is removed and counted `corrupt`). Lookups are in memory and
   * scoped to the page's site: a block held only for another site is a miss, decided in the same steps.
   */
  async fill(url: string, blocks: readonly BlockInfo[]): Promise<LocalFill> {
    const wanted = new Map<string, number[]>();
    let crossSiteMisses = 0;
    blocks.forEach((b) => {
      const i = b.block;
      const look = this.store.lookupBlock(b.digest, url);
      if (!look.hit) {
        if (look.reason === 'other-site') crossSiteMisses++;
        return;
      }
      const key = Buffer.from(b.digest).toString('hex');
      const list = wanted.get(key);
      if (list) list.push(i);
      else wanted.set(key, [i]);
    });
    const payloads = new Map<number, Uint8Array>();
    let corrupt = 0;
    const jobs = [...wanted.entries()];
    const worker = async (): Promise<void> => {
      for (let job = jobs.pop(); job !== undefined; job = jobs.pop()) {
        const [key, blocks] = job;
        let bytes: Uint8Array | null = null;
        try {
          bytes = await this.read(key, url);
        } catch {
          bytes = null;
        }
        if (bytes === null) corrupt++;
        else for (const b of blocks) payloads.set(b, bytes);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, jobs.length) }, worker));
    return { payloads, crossSiteMisses, corrupt };
  }

  /** Stores the blocks of a completed page that came over the network (reused ones are already held). */
  storeBlocks(url: string, received: readonly ReceivedBlock[]): number {
    let n = 0;
    const seen = new Set<string>();
    for (const { digest, payload } of received) {
      const key = Buffer.from(digest).toString('hex');
      if (seen.has(key)) continue;
      seen.add(key);
      this.remember(key, payload); // verified by the assembler against the index
      const w = this.store.put(url, payload, undefined, { block: true }).catch(() => undefined);
      this.writes.add(w);
      void w.finally(() => this.writes.delete(w));
      n++;
    }
    this.c.stored += n;
    return n;
  }

  /** Waits for the block writes started so far (and the store's queued index writes). */
  async flush(): Promise<void> {
    await Promise.all([...this.writes]);
    await this.store.flush();
  }

  /** A completed CATP load from `url` delivered `bytes` of frames between its first and last frame. */
  noteArrivals(url: string, frames: number, bytes: number, spanMs: number): void {
    if (frames < MIN_RATE_FRAMES || spanMs < MIN_RATE_SPAN_MS) return;
    const rate = (bytes / spanMs) * 1000;
    this.measure(url, { rate });
  }

  /** A load from `url` received data frames of `wire` bytes carrying blocks of `plain` decompressed bytes. */
  noteDataBytes(url: string, wire: number, plain: number): void {
    if (!(wire > 0) || !(plain > 0)) return;
    this.measure(url, { wireRatio: wire / plain });
  }

  /**
   * The wire bytes of `frames` data frames whose blocks hold `payloadBytes` decompressed (reused blocks are known
   * decompressed only): scaled by the origin's measured compression ratio, 1 before one was measured (an
   * overestimate of what reuse saved, never an underestimate).
   */
  wireBytes(url: string, frames: number, payloadBytes: number): number {
    return Math.round(frameBytes(0) * frames + payloadBytes * (this.origins.get(originOf(url))?.wireRatio ?? 1));
  }

  /** The rate the time estimate uses for `url`: measured from this origin, else the pacing asked for, else assumed. */
  rateFor(url: string, pacedBytesPerSec?: number): { rate: number; source: ReuseOutcome['rateSource'] } {
    const measured = this.origins.get(originOf(url))?.rate;
    if (measured !== undefined) return { rate: measured, source: 'measured' };
    if (pacedBytesPerSec !== undefined && pacedBytesPerSec > 0) return { rate: pacedBytesPerSec, source: 'paced' };
    return { rate: this.assumed, source: 'assumed' };
  }

  /** Counts a finished load's outcome. */
  record(o: ReuseOutcome): void {
    this.c.loads++;
    if (o.asked) this.c.asked++;
    if (o.acked) this.c.acked++;
    this.c.blocks += o.blocks;
    this.c.reused += o.reused;
    this.c.crossSiteMisses += o.crossSiteMisses;
    this.c.corrupt += o.corrupt;
    this.c.bytesSaved += o.bytesSaved;
    this.c.savedMs += o.savedMs;
  }

  counters(): typeof this.c {
    return { ...this.c };
  }
}

function originOf(url: string): string {
  const t = parseTarget(url);
  return `${t.scheme}://${t.host}:${t.port}`;
}

/** Bytes a data frame carrying `payloadBytes` takes on the wire above UDP (CATP header included). */
export function frameBytes(payloadBytes: number): number {
  return HEADER_BYTES + payloadBytes;
}
