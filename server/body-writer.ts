// Answers onto one client-opened TCP connection, in order, with every byte queued in Node charged to the
// server's body budget for the peer's address (body-budget.ts) until the kernel has taken it. A file body
// (files.ts FileBody) goes from disk a chunk at a time: a client that stops reading holds one chunk and the
// socket's high-water mark, never the file.
import { promises as fsp } from 'fs';
import type * as net from 'net';
import { FLOOR_PIECE_BYTES, type BodyBudget } from './body-budget';
import type { FileBody } from './files';

/** Bytes per write (and read from a file body): the budget's floor piece, so a client that reads always progresses. */
export const CHUNK_BYTES = FLOOR_PIECE_BYTES;

export class BodyWriter {
  /** Aborted when the socket closes: a write waiting for the budget then stops waiting, holding nothing. */
  private readonly closed = new AbortController();

  constructor(
    private readonly sock: net.Socket,
    private readonly address: string,
    private readonly budget: BodyBudget,
    /** Unsent bytes on the socket above which a write waits for 'drain'. */
    private readonly highWater: number,
  ) {
    sock.once('close', () => this.closed.abort());
  }

  get open(): boolean {
    return !this.sock.destroyed && this.sock.writable;
  }

  /** Queue `bytes`, a chunk at a time: each waits for room in the budget, then for the socket to drain below its mark. */
  async write(bytes: Uint8Array): Promise<void> {
    for (let off = 0; off < bytes.length && this.open; off += CHUNK_BYTES) {
      const piece = bytes.subarray(off, Math.min(bytes.length, off + CHUNK_BYTES));
      if (!(await this.budget.take(this.address, piece.length, this.closed.signal))) return; // the socket closed
      this.queue(piece);
      if (this.sock.writableLength > this.highWater) await this.drained();
    }
  }

  /**
   * Write the first `file.size` bytes of the file. False when it could not: the file is shorter now, or cannot be
   * read; the connection is then destroyed, since the Content-Length already sent cannot be kept. A connection that
   * closes before the end (its client hung up) is not that: true.
   */
  async writeFile(file: FileBody): Promise<boolean> {
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(file.path, 'r');
    } catch {
      this.sock.destroy();
      return false;
    }
    try {
      let off = 0;
      while (off < file.size && this.open) {
        const n = Math.min(CHUNK_BYTES, file.size - off);
        if (!(await this.budget.take(this.address, n, this.closed.signal))) break; // the socket closed
        const buf = Buffer.allocUnsafe(n);
        let got = 0;
        try {
          while (got < n) {
            const { bytesRead } = await fh.read(buf, got, n - got, off + got);
            if (bytesRead === 0) break;
            got += bytesRead;
          }
        } catch {
          got = -1;
        }
        if (got !== n) {
          this.budget.give(this.address, n);
          this.sock.destroy();
          return false;
        }
        this.queue(buf);
        off += n;
        if (this.sock.writableLength > this.highWater) await this.drained();
      }
      // the loop ends at the end of the file or with the connection; a client that hangs up is no failure of ours
      return off === file.size || !this.open;
    } finally {
      await fh.close().catch(() => undefined);
    }
  }

  /** `bytes` were taken from the budget: queue them, and give them back once the kernel has them (or they died with the socket). */
  private queue(bytes: Uint8Array): void {
    if (!this.open) {
      this.budget.give(this.address, bytes.length);
      return;
    }
    this.sock.write(bytes, () => this.budget.give(this.address, bytes.length));
  }

  private drained(): Promise<void> {
    if (!this.open) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        this.sock.off('drain', done);
        this.sock.off('close', done);
        resolve();
      };
      this.sock.on('drain', done);
      this.sock.on('close', done);
    });
  }
}
