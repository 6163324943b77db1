// sha-256 representation digests of served files (RFC 9530 Repr-Digest, RFC 3230 Digest), cached under the
// same key as the file-contents cache (real path + ETag, which is size + mtime) plus the body length, so a
// file that changes gets a new digest and a stale one is never served. LRU, bounded by entry count
// (a digest is 32 bytes; 65,536 entries ≈ 6 MiB with the keys).
import { createHash } from 'crypto';
import { createReadStream } from 'fs';

import { sha256 } from '../platform/sha256';

export interface DigestCounters {
  digestsComputed: number;
  digestCacheHits: number;
}

export class DigestCache {
  private readonly map = new Map<string, Uint8Array>();
  private computed = 0;
  private hits = 0;

  constructor(private readonly maxEntries = 65_536) {}

  /** The digest of `body`, computed once per key. */
  of(key: string, body: Uint8Array): Uint8Array {
    const k = `${key}\0${body.length}`;
    return this.lookup(k) ?? this.store(k, sha256(body));
  }

  /** The digest of the first `size` bytes of the file at `path`, hashed as it streams; null if it is shorter now. */
  async ofFile(key: string, path: string, size: number): Promise<Uint8Array | null> {
    const k = `${key}\0${size}`;
    const hit = this.lookup(k);
    if (hit !== undefined) return hit;
    const h = createHash('sha256');
    let n = 0;
    if (size > 0) {
      for await (const chunk of createReadStream(path, { start: 0, end: size - 1 })) {
        h.update(chunk as Buffer);
        n += (chunk as Buffer).length;
      }
    }
    return n === size ? this.store(k, new Uint8Array(h.digest())) : null;
  }

  private lookup(k: string): Uint8Array | undefined {
    const hit = this.map.get(k);
    if (hit === undefined) return undefined;
    this.hits++;
    this.map.delete(k);
    this.map.set(k, hit);
    return hit;
  }

  private store(k: string, d: Uint8Array): Uint8Array {
    this.computed++;
    this.map.set(k, d);
    while (this.map.size > this.maxEntries) this.map.delete(this.map.keys().next().value as string);
    return d;
  }

  counters(): DigestCounters {
    return { digestsComputed: this.computed, digestCacheHits: this.hits };
  }
}
