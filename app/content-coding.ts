// Content codings on answers the host receives (issue "Browse the real web", item 3): a plain HTTP/1.1 request asks
// for gzip, deflate and br (Accept-Encoding), and an answer that says Content-Encoding is decoded with Node's zlib
// before anything reads it, bounded like any body. A coding we do not know, or a body that does not decode, is
// an error with a code (as Chromium's ERR_CONTENT_DECODING_FAILED), never garbage shown as a page.
import * as zlib from 'node:zlib';

import type { HttpHeaders, HttpResponse } from '../protocol/dhttp';
import { HostError } from './errors';

/** What the host asks for: the codings Node's zlib can undo (whole here, as they arrive in http-stream.ts). */
export const ACCEPT_ENCODING = 'gzip, deflate, br';

/** The codings Content-Encoding says were applied, in the order they were applied (identity left out). */
export function codingsOf(headers: HttpHeaders): string[] {
  return headers
    .filter(([n]) => n.toLowerCase() === 'content-encoding')
    .flatMap(([, v]) => v.split(','))
    .map((v) => v.trim().toLowerCase())
    .filter((v) => v !== '' && v !== 'identity');
}

/**
 * `res` with its content codings undone (Content-Encoding and Content-Length dropped), or `res` itself when it has
 * none or no body. Throws HostError HOST_ERR_UNKNOWN_CODING or HOST_ERR_BAD_CODING (corrupt, or decoding to more
 * than `maxBytes`).
 */
export function decodeContent(res: HttpResponse, maxBytes: number): HttpResponse {
  const codings = codingsOf(res.headers);
  if (codings.length === 0 || res.body.length === 0) return res;
  let body: Uint8Array = res.body;
  for (const c of [...codings].reverse()) {
    const opts = { maxOutputLength: maxBytes };
    try {
      if (c === 'gzip' || c === 'x-gzip') body = zlib.gunzipSync(body, opts);
      else if (c === 'deflate') body = inflateEither(body, opts);
      else if (c === 'br') body = zlib.brotliDecompressSync(body, opts);
      else throw new HostError('HOST_ERR_UNKNOWN_CODING', `the answer is coded "${c}", which this browser cannot decode`);
    } catch (err) {
      if (err instanceof HostError) throw err;
      throw new HostError('HOST_ERR_BAD_CODING', `the answer's ${c} body does not decode: ${(err as Error).message}`);
    }
  }
  const headers = res.headers.filter(([n]) => !/^(content-encoding|content-length)$/i.test(n));
  headers.push(['Content-Length', String(body.length)]);
  return { ...res, headers, body };
}

/** "deflate" is zlib-wrapped by the spec, raw DEFLATE from some servers: both, as browsers accept. */
function inflateEither(body: Uint8Array, opts: zlib.ZlibOptions): Buffer {
  try {
    return zlib.inflateSync(body, opts);
  } catch {
    return zlib.inflateRawSync(body, opts);
  }
}
