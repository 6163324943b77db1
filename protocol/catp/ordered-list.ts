// A list kept in ascending order of a number key, in chunks of at most CHUNK_MAX items: an insert anywhere moves at
// most a chunk, a lookup is two binary searches. The tree builder keeps each parent's present children in one, and
// the assembler its slot and block spans, the pieces here and the pieces waiting for their slots: an index whose
// frames arrive in reverse (or a hostile one that interleaves them) inserts before everything already there, and a
// plain array moved all of it each time — quadratic in the page (7,137 index frames reversed: 7.1 s, against 0.64 s
// in order). Appending, what a page in order does, stays a push onto the last chunk.

/** Items a chunk holds before it is split in two. */
export const CHUNK_MAX = 512;

export class OrderedList<T> {
  private readonly chunks: T[][] = [[]];
  private count = 0;

  constructor(private readonly key: (item: T) => number) {}

  get size(): number {
    return this.count;
  }

  /** The last item whose key is at most `k`, or undefined. */
  floor(k: number): T | undefined {
    const c = this.chunkAt(k, true);
    if (c < 0) return undefined;
    const ch = this.chunks[c];
    return ch[this.bound(ch, k, true) - 1];
  }

  /** The first item whose key is greater than `k`, or undefined. */
  higher(k: number): T | undefined {
    const last = this.chunks[this.chunks.length - 1];
    if (last.length === 0 || this.key(last[last.length - 1]) <= k) return undefined;
    const c = Math.max(0, this.chunkAt(k, true));
    const ch = this.chunks[c];
    const i = this.bound(ch, k, true);
    return i < ch.length ? ch[i] : c + 1 < this.chunks.length ? this.chunks[c + 1][0] : undefined;
  }

  /** The items whose key is at least `k`, in order. */
  *from(k: number): Generator<T> {
    // (from the last chunk that starts before k: equal keys may run over from the chunk before)
    let c = Math.max(0, this.chunkAt(k, false));
    for (let i = this.bound(this.chunks[c], k, false); c < this.chunks.length; c++, i = 0) {
      const ch = this.chunks[c];
      for (; i < ch.length; i++) yield ch[i];
    }
  }

  /** Puts `item` after every item whose key is at most its own. */
  insert(item: T): void {
    const k = this.key(item);
    const last = this.chunks[this.chunks.length - 1];
    let c: number;
    let ch: T[];
    if (last.length === 0 || this.key(last[last.length - 1]) <= k) {
      c = this.chunks.length - 1;
      ch = last;
      ch.push(item);
    } else {
      c = Math.max(0, this.chunkAt(k, true));
      ch = this.chunks[c];
      ch.splice(this.bound(ch, k, true), 0, item);
    }
    this.count++;
    if (ch.length > CHUNK_MAX) this.chunks.splice(c + 1, 0, ch.splice(ch.length >> 1));
  }

  /** Every item, in order (tests). */
  toArray(): T[] {
    return ([] as T[]).concat(...this.chunks);
  }

  /** Index of the last chunk whose first key is at most `k` (`orEqual`) or below it, or -1. */
  private chunkAt(k: number, orEqual: boolean): number {
    let lo = 0;
    let hi = this.chunks.length - 1;
    let at = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const ch = this.chunks[mid];
      if (ch.length > 0 && (orEqual ? this.key(ch[0]) <= k : this.key(ch[0]) < k)) {
        at = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return at;
  }

  /** Index of the first item of `ch` whose key is greater than `k` (`past`), or at least `k`. */
  private bound(ch: readonly T[], k: number, past: boolean): number {
    let lo = 0;
    let hi = ch.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (past ? this.key(ch[mid]) <= k : this.key(ch[mid]) < k) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
