// The bytes of answers the server holds in memory at once: written to a socket and not yet taken by the kernel,
// or held for a DTD decision. A byte budget in total and per client address, so memory does not grow with the
// number of clients that ask and never read (issue 14: "budgets are in bytes and per address"). Files larger
// than the file server's streaming threshold are never read whole (files.ts): they are written from disk a
// chunk at a time, each chunk under this budget, so a reader that stops holds one chunk, not the file.

/**
 * An address that holds nothing may always take one piece this small, however full the budget: clients that stop
 * reading can fill the total, but not starve a client that reads (it gets a piece at a time). The total can be
 * passed by at most this much per address.
 */
export const FLOOR_PIECE_BYTES = 64 * 1024;

export interface BodyBudgetOptions {
  /** All addresses together (default 128 MiB). */
  totalBytes?: number;
  /** One address (default 16 MiB). */
  perAddressBytes?: number;
}

export interface BodyBudgetCounters {
  /** Bytes held now, and the most ever held at once. */
  heldBytes: number;
  peakBytes: number;
  /** Writes that had to wait for bytes to free up (total or the address's share), and those waiting now. */
  waits: number;
  waiting: number;
  /** Holds refused (tryTake) because they would pass the budget. */
  refused: number;
  refusedBytes: number;
}

interface Waiter {
  address: string;
  bytes: number;
  resolve: () => void;
}

export class BodyBudget {
  readonly totalBytes: number;
  readonly perAddressBytes: number;
  private held = 0;
  private peak = 0;
  private waits = 0;
  private refused = 0;
  private refusedBytes = 0;
  private readonly perAddress = new Map<string, number>();
  private readonly waiters: Waiter[] = [];

  constructor(o: BodyBudgetOptions = {}) {
    this.totalBytes = o.totalBytes ?? 128 * 1024 * 1024;
    this.perAddressBytes = o.perAddressBytes ?? 16 * 1024 * 1024;
    if (!(this.totalBytes > 0) || !(this.perAddressBytes > 0)) throw new RangeError('body budget sizes must be > 0');
  }

  /**
   * Would `bytes` more fit for `address`? An address that holds nothing may always have one floor piece; a single
   * piece larger than a share still goes when its address (and the total, for the total) holds nothing, so nothing
   * waits forever.
   */
  private fits(address: string, bytes: number): boolean {
    const mine = this.perAddress.get(address) ?? 0;
    if (mine === 0 && bytes <= FLOOR_PIECE_BYTES) return true;
    const totalOk = this.held + bytes <= this.totalBytes || this.held === 0;
    const mineOk = mine + bytes <= this.perAddressBytes || mine === 0;
    return totalOk && mineOk;
  }

  private add(address: string, bytes: number): void {
    this.held += bytes;
    if (this.held > this.peak) this.peak = this.held;
    this.perAddress.set(address, (this.perAddress.get(address) ?? 0) + bytes);
  }

  /** Take `bytes` now if they fit; false (counted) if not. */
  tryTake(address: string, bytes: number): boolean {
    if (this.fits(address, bytes)) {
      this.add(address, bytes);
      return true;
    }
    this.refused++;
    this.refusedBytes += bytes;
    return false;
  }

  /**
   * Take `bytes`, waiting until they fit; waiters are woken oldest first among those that fit. Whoever fits now
   * goes at once: those waiting are over their address's share or the total, and this does not change that.
   * Resolves true once taken; false, with nothing taken, when `signal` aborts first (the writer's socket closed:
   * a wait left behind kept the closed connection, and all it had queued, until its address's share had room).
   */
  take(address: string, bytes: number, signal?: AbortSignal): Promise<boolean> {
    if (this.fits(address, bytes)) {
      this.add(address, bytes);
      return Promise.resolve(true);
    }
    if (signal?.aborted === true) return Promise.resolve(false);
    this.waits++;
    return new Promise<boolean>((resolve) => {
      const stop = (): void => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(false);
      };
      const w: Waiter = {
        address,
        bytes,
        resolve: () => {
          signal?.removeEventListener('abort', stop);
          resolve(true);
        },
      };
      signal?.addEventListener('abort', stop, { once: true });
      this.waiters.push(w);
    });
  }

  /** Give back what `take`/`tryTake` took (once the kernel has the bytes, or they were dropped). */
  give(address: string, bytes: number): void {
    const mine = (this.perAddress.get(address) ?? 0) - bytes;
    if (mine <= 0) this.perAddress.delete(address);
    else this.perAddress.set(address, mine);
    this.held = Math.max(0, this.held - bytes);
    // Wake whoever fits now, oldest first; one address over its share does not hold up the others.
    for (let i = 0; i < this.waiters.length; ) {
      const w = this.waiters[i]!;
      if (this.fits(w.address, w.bytes)) {
        this.waiters.splice(i, 1);
        this.add(w.address, w.bytes);
        w.resolve();
      } else i++;
    }
  }

  counters(): BodyBudgetCounters {
    return { heldBytes: this.held, peakBytes: this.peak, waits: this.waits, waiting: this.waiters.length, refused: this.refused, refusedBytes: this.refusedBytes };
  }
}
