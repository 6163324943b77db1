/** Small byte helpers (no Buffer: protocol/ runs anywhere). */

export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const p of parts) total += p.length;
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** Bytes -> string, one char per byte (ISO-8859-1; unlike TextDecoder('latin1'), which is windows-1252). */
export function latin1Decode(bytes: Uint8Array, start = 0, end = bytes.length): string {
  let s = '';
  const STEP = 8192;
  for (let i = start; i < end; i += STEP) {
    s += String.fromCharCode.apply(null, Array.from(bytes.subarray(i, Math.min(end, i + STEP))));
  }
  return s;
}

/** String -> bytes, one byte per char; returns null when a char is above U+00FF. */
export function latin1Encode(s: string): Uint8Array | null {
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff) return null;
    out[i] = c;
  }
  return out;
}

const HEX = '0123456789abcdef';

export function toHex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += HEX[b >> 4] + HEX[b & 15];
  return s;
}

/** Growable FIFO of bytes with O(1) amortised append and consume. */
export class ByteQueue {
  private buf = new Uint8Array(0);
  private start = 0;
  private end = 0;

  get length(): number {
    return this.end - this.start;
  }

  push(data: Uint8Array): void {
    if (data.length === 0) return;
    if (this.end + data.length > this.buf.length) {
      const live = this.end - this.start;
      const need = live + data.length;
      if (need <= this.buf.length && this.start >= this.buf.length / 2) {
        this.buf.copyWithin(0, this.start, this.end);
      } else {
        const next = new Uint8Array(Math.max(need, this.buf.length * 2, 1024));
        next.set(this.buf.subarray(this.start, this.end));
        this.buf = next;
      }
      this.start = 0;
      this.end = live;
    }
    this.buf.set(data, this.end);
    this.end += data.length;
  }

  at(i: number): number {
    return this.buf[this.start + i];
  }

  /** A view of the first n bytes (valid until the next push). */
  peek(n: number): Uint8Array {
    return this.buf.subarray(this.start, this.start + n);
  }

  /** Copy out and consume the first n bytes. */
  take(n: number): Uint8Array {
    const out = this.buf.slice(this.start, this.start + n);
    this.skip(n);
    return out;
  }

  skip(n: number): void {
    this.start += n;
    if (this.start === this.end) {
      this.start = 0;
      this.end = 0;
    }
  }
}
