// A stream's first contact is two datagrams with one ID: the request, and right behind it a padded copy of it
// (wire.ts FLAG_COPY). The server takes whichever comes first as the request and the other as its padding: a lost
// request costs the copy's gap behind it instead of a resend timeout, and a copy whose request came adds only
// budget and the pair's dispersion. Sans-IO: the server asks, per tokenless fresh request (resends are never
// paired), and acts.

/** What a tokenless, fresh (not resent) request or copy is, given what came before it with the same key. */
export type PairArrival =
  /** the first of its pair: the request, whichever of the two it is */
  | 'first'
  /** the other one of a pair whose first came: padding for it */
  | 'partner'
  /** the same kind again, or a third: what a network duplicate always was (a request like any other) */
  | 'repeat';

type Seen = 'request' | 'copy' | 'paired';

/**
 * The last `capacity` (address, ID) keys of tokenless fresh requests and copies, and which of the pair came.
 * Bounded: the oldest keys are forgotten first; a copy whose request was forgotten is taken as a request again
 * (at worst a second answer, within the address's budget like any request's).
 */
export class FirstContactPairs {
  private readonly seen = new Map<string, Seen>(); // Map order = oldest first

  constructor(private readonly capacity = 16_384) {
    if (!(capacity >= 1)) throw new RangeError('capacity must be ≥ 1');
  }

  get size(): number {
    return this.seen.size;
  }

  arrive(key: string, copy: boolean): PairArrival {
    const kind: Seen = copy ? 'copy' : 'request';
    const had = this.seen.get(key);
    if (had === undefined) {
      if (this.seen.size >= this.capacity) this.seen.delete(this.seen.keys().next().value as string);
      this.seen.set(key, kind);
      return 'first';
    }
    if (had === 'paired' || had === kind) return 'repeat';
    this.seen.set(key, 'paired');
    return 'partner';
  }
}
