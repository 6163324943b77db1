// Encodes pages for CATP off the server's thread. A page's first request must not stall the server: encoding
// a 1 MB page took 3.7 s of one core at brotli's best quality, during which no other client got a frame or an
// answer, and the requesting client gave up on CATP and fell back. So a cold page is encoded in a worker
// thread at a fast setting (brotli 5: about 4× faster, about 9% more bytes) and served from that; the
// best-quality copy follows in the background and replaces it in the cache when nothing more urgent waits.
//
// Bounded: one worker by default, a FIFO of jobs whose bodies total at most `maxQueuedBytes` (a request
// beyond it is answered without CATP, counted), one job per (page version, quality) however many ask for it.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { encodedBytes, encodeForMode, errorCode, type CatpMode, type EncodeJob, type EncodeQuality, type EncodeReply, type Encoded, type StreamCoding } from './catp-encode';

export interface EncoderOptions {
  /** Worker threads (default 1); 0 encodes on the calling thread (tests; a server with no CPU to spare). */
  workers?: number;
  /** Bytes of page bodies waiting to be encoded beyond which a job is refused (default 32 MiB). */
  maxQueuedBytes?: number;
  /** The worker script (default: catp-encode-worker.js beside this file, or in dist/ when run from the sources). */
  workerScript?: string;
}

export type EncodeOutcome = Encoded | { failed: string };

export interface EncoderCounters {
  /** Pages encoded, by quality. */
  catpEncodesFast: number;
  catpEncodesBest: number;
  /** Jobs refused because the queue was full (the request is answered without CATP). */
  catpEncodeQueueFull: number;
  /** Workers that died mid-job (the job failed; a new worker takes the next one). */
  catpEncoderCrashes: number;
}

interface Job extends Omit<EncodeJob, 'id'> {
  key: string;
  done: (r: EncodeOutcome) => void;
}

interface Slot {
  worker: Worker;
  job: (Job & { id: number }) | null;
}

const WORKER_FILE = 'catp-encode-worker.js';

function defaultWorkerScript(): string | null {
  for (const p of [join(__dirname, WORKER_FILE), join(__dirname, '..', 'dist', 'server', WORKER_FILE)]) if (existsSync(p)) return p;
  return null;
}

export class CatpEncoder {
  private readonly script: string | null;
  private readonly maxWorkers: number;
  private readonly maxQueuedBytes: number;
  private readonly slots: Slot[] = [];
  /** Waiting jobs: fast ones (a client waits) before best ones (a cache upgrade). */
  private readonly waiting: Record<EncodeQuality, Job[]> = { fast: [], best: [] };
  private queuedBytes = 0;
  private readonly inflight = new Map<string, Promise<EncodeOutcome>>();
  private nextId = 1;
  private closed = false;
  readonly c: EncoderCounters = { catpEncodesFast: 0, catpEncodesBest: 0, catpEncodeQueueFull: 0, catpEncoderCrashes: 0 };

  constructor(opts: EncoderOptions = {}) {
    this.maxWorkers = Math.max(0, Math.floor(opts.workers ?? 1));
    this.maxQueuedBytes = opts.maxQueuedBytes ?? 32 * 1024 * 1024;
    this.script = this.maxWorkers === 0 ? null : opts.workerScript ?? defaultWorkerScript();
  }

  /** Whether encoding runs off this thread (false: no worker script was found, or workers: 0). */
  get threaded(): boolean {
    return this.script !== null;
  }

  /**
   * Encodes `body`; one job per `key` (page version) and quality, however many callers ask. Null when the
   * queue is full or the encoder is closed (the caller answers without CATP).
   */
  encode(
    key: string,
    mode: CatpMode,
    body: Uint8Array,
    blockCut: 'content' | 'packed',
    quality: EncodeQuality,
    encoding = 'UTF-8',
    coding: StreamCoding = null,
  ): Promise<EncodeOutcome> | null {
    const k = `${quality}\0${key}`;
    const known = this.inflight.get(k);
    if (known !== undefined) return known;
    if (this.closed) return null;
    if (this.queuedBytes + body.length > this.maxQueuedBytes) {
      this.c.catpEncodeQueueFull++;
      return null;
    }
    const p = new Promise<EncodeOutcome>((done) => {
      this.queuedBytes += body.length;
      this.waiting[quality].push({ key: k, mode, body, blockCut, quality, encoding, coding, done });
    });
    this.inflight.set(k, p);
    void p.then(() => this.inflight.delete(k));
    this.pump();
    return p;
  }

  close(): void {
    this.closed = true;
    for (const q of [this.waiting.fast, this.waiting.best]) for (const j of q.splice(0)) j.done({ failed: 'CATP_ERR_ENCODER_CLOSED' });
    for (const s of this.slots.splice(0)) {
      s.job?.done({ failed: 'CATP_ERR_ENCODER_CLOSED' });
      void s.worker.terminate();
    }
    this.queuedBytes = 0;
  }

  private take(): Job | undefined {
    const j = this.waiting.fast.shift() ?? this.waiting.best.shift();
    if (j !== undefined) this.queuedBytes -= j.body.length;
    return j;
  }

  private finish(j: Job, r: EncodeOutcome): void {
    if (!('failed' in r)) {
      if (j.quality === 'fast') this.c.catpEncodesFast++;
      else this.c.catpEncodesBest++;
    }
    j.done(r);
  }

  private pump(): void {
    if (this.closed) return;
    if (this.script === null) {
      // No worker: encode here, one job per turn of the event loop.
      const j = this.take();
      if (j === undefined) return;
      setImmediate(() => {
        let r: EncodeOutcome;
        try {
          r = encodeForMode(j.mode, j.body, j.blockCut, j.quality, j.encoding, j.coding);
        } catch (err) {
          r = { failed: errorCode(err) };
        }
        this.finish(j, r);
        this.pump();
      });
      return;
    }
    while (this.waiting.fast.length + this.waiting.best.length > 0) {
      let slot = this.slots.find((s) => s.job === null);
      if (slot === undefined && this.slots.length < this.maxWorkers) slot = this.spawn();
      if (slot === undefined) return;
      const j = this.take() as Job;
      const id = this.nextId++;
      slot.job = { ...j, id };
      slot.worker.ref();
      // The body is copied: the caller's buffer may be a view into a file cache that must stay intact.
      const msg: EncodeJob = { id, mode: j.mode, body: j.body, blockCut: j.blockCut, quality: j.quality, encoding: j.encoding, coding: j.coding };
      slot.worker.postMessage(msg);
    }
  }

  private spawn(): Slot {
    const worker = new Worker(this.script as string);
    const slot: Slot = { worker, job: null };
    worker.unref(); // an idle encoder never keeps the process alive
    worker.on('message', (m: EncodeReply) => {
      const j = slot.job;
      if (j === null || m.id !== j.id) return;
      slot.job = null;
      worker.unref();
      this.finish(j, m.ok ? { frames: m.frames, indexFrames: m.indexFrames, bytes: encodedBytes(m.frames), quality: j.mode === 'catp' ? j.quality : 'best' } : { failed: m.code });
      this.pump();
    });
    const lost = (): void => {
      const i = this.slots.indexOf(slot);
      if (i < 0) return;
      this.slots.splice(i, 1);
      if (this.closed) return;
      this.c.catpEncoderCrashes++;
      slot.job?.done({ failed: 'CATP_ERR_ENCODER_CRASHED' });
      slot.job = null;
      this.pump();
    };
    worker.on('error', lost);
    worker.on('exit', lost);
    this.slots.push(slot);
    return slot;
  }
}
