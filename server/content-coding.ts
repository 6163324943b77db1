// Content codings on the plain HTTP/1.1 side (RFC 9110 §8.4, §12.5.3): real servers compress, so the baselines
// we measure CATP against (our `tcp` transport, stock Chromium) get what users get today. `br` when offered,
// else `gzip`; `identity` and `q=0` honoured. Compressed bodies are cached per file version (the ETag), bounded
// in bytes, so a page is compressed once: brotli at quality 11 and gzip at level 9, as static files are
// precompressed (nginx's gzip_static / brotli_static) — the strongest baseline, not a handicapped one.
// DHTTP answers stay identity: their DTD digests are over the identity body.
import * as zlib from 'node:zlib';

import { getHeader, type HttpResponse } from '../protocol/dhttp/http1';

export type Coding = 'br' | 'gzip';

const COMPRESSIBLE = /^(text\/|application\/(javascript|json|xml|xhtml\+xml|rss\+xml|atom\+xml)|image\/svg\+xml)|\+xml\b/i;
/** Bodies shorter than this are sent as they are (a coding costs more than it saves). */
export const MIN_COMPRESS_BYTES = 256;

/**
 * The coding to use for an Accept-Encoding field value, or null for identity. Codings we do not know are
 * ignored; `*` stands for any coding not named; the highest q wins, br before gzip on a tie.
 */
export function negotiate(accept: string | null): Coding | null {
  if (accept === null) return null;
  const q = new Map<string, number>();
  for (const part of accept.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    let weight = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*([0-9](?:\.[0-9]{0,3})?)\s*$/.exec(p);
      if (m) weight = Math.min(1, Number(m[1]));
    }
    q.set(name.trim(), weight);
  }
  const of = (c: string): number => q.get(c) ?? q.get('*') ?? 0;
  const br = of('br');
  const gz = Math.max(of('gzip'), q.get('x-gzip') ?? 0);
  if (br <= 0 && gz <= 0) return null;
  return br >= gz ? 'br' : 'gzip';
}

export function compress(coding: Coding, body: Uint8Array): Uint8Array {
  const out =
    coding === 'br'
      ? zlib.brotliCompressSync(body, {
          params: {
            [zlib.constants.BROTLI_PARAM_QUALITY]: 11,
            [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
            [zlib.constants.BROTLI_PARAM_SIZE_HINT]: body.length,
          },
        })
      : zlib.gzipSync(body, { level: 9 });
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/** Compressed bodies by (ETag, coding), least recently used first out, bounded in bytes. */
export class CodedBodyCache {
  private readonly map = new Map<string, Uint8Array>();
  private size = 0;
  hits = 0;
  misses = 0;

  constructor(private readonly maxBytes = 32 * 1024 * 1024) {}

  get(key: string, make: () => Uint8Array): Uint8Array {
    const have = this.map.get(key);
    if (have !== undefined) {
      this.hits++;
      this.map.delete(key);
      this.map.set(key, have);
      return have;
    }
    this.misses++;
    const made = make();
    if (made.length <= this.maxBytes) {
      this.map.set(key, made);
      this.size += made.length;
      for (const [k, v] of this.map) {
        if (this.size <= this.maxBytes) break;
        this.map.delete(k);
        this.size -= v.length;
      }
    }
    return made;
  }
}

/**
 * The response as it goes to a plain HTTP/1.1 client that sent `acceptEncoding`: a compressible 200 answer is
 * coded (Content-Encoding, Vary, a coding-specific ETag: the coded body is another representation), anything
 * else is returned as it is (with Vary on compressible types, so caches keep the variants apart).
 */
export function codeResponse(res: HttpResponse, acceptEncoding: string | null, cache: CodedBodyCache): HttpResponse {
  const type = getHeader(res.headers, 'content-type') ?? '';
  if (!COMPRESSIBLE.test(type) || getHeader(res.headers, 'content-encoding') !== null) return res;
  const vary: [string, string] = ['Vary', 'Accept-Encoding'];
  const coding = res.status === 200 && res.body.length >= MIN_COMPRESS_BYTES ? negotiate(acceptEncoding) : null;
  if (coding === null) return { ...res, headers: [...res.headers, vary] };
  const etag = getHeader(res.headers, 'etag');
  const body = etag === null ? compress(coding, res.body) : cache.get(`${etag}\0${coding}`, () => compress(coding, res.body));
  const headers = res.headers
    .filter(([n]) => !/^(etag|repr-digest|digest|content-length)$/i.test(n))
    .concat([['Content-Encoding', coding], vary]);
  if (etag !== null) headers.push(['ETag', etag.replace(/"$/, `-${coding}"`)]);
  return { ...res, headers, body };
}
