// A UDP GET answered with CATP frames (catp.ts) instead of a response: which answers a mode can carry, what of
// the request and the page starts a session, and a page too large for the file server to read unasked, read
// whole within the body budget (CATP's encoder needs every byte).
import { getHeader, type HttpRequest, type HttpResponse } from '../protocol/dhttp/http1';
import { sniffHtmlEncoding } from '../protocol/html-encoding';
import type { BodyBudget } from './body-budget';
import { parseCatpReuse, type CatpMode, type StartRequest } from './catp';
import { negotiate } from './content-coding';
import { resolveTarget, type FileResponse, type FileServer } from './files';

/** The page's and the request's part of a session's start; the caller adds who it goes to. */
export type CatpPage = Pick<StartRequest, 'mode' | 'rateHeader' | 'reuse' | 'cacheKey' | 'body' | 'encoding' | 'coding'>;

/** `res` as CATP frames in `mode`, or null when it is not a 200 the mode can carry (answered normally). */
export function catpPage(mode: CatpMode, req: HttpRequest, res: HttpResponse): CatpPage | null {
  if (res.status !== 200) return null;
  if (mode === 'catp') {
    const type = (getHeader(res.headers, 'content-type') ?? '').split(';')[0].trim().toLowerCase();
    if (type !== 'text/html') return null;
  }
  const etag = getHeader(res.headers, 'etag');
  const target = resolveTarget(req.target);
  // path + size + mtime (the ETag is "size-mtime"); the body length guards against a file that changed.
  const cacheKey = etag !== null && target.ok ? `${target.segments.join('/')}${target.trailingSlash ? '/' : ''}\0${etag}\0${res.body.length}` : null;
  return {
    mode,
    rateHeader: getHeader(req.headers, 'catp-rate'),
    reuse: parseCatpReuse(getHeader(req.headers, 'catp-reuse')),
    cacheKey,
    body: res.body,
    // the encoding the file server labelled the page with (or, for a page too large to sniff unasked, the bytes')
    ...(mode === 'catp' ? { encoding: sniffHtmlEncoding(res.body, { contentType: getHeader(res.headers, 'content-type'), complete: true }).encoding } : {}),
    // an in-order stream goes brotli-coded to a client that offered br, as the HTTP/1.1 side does (content-coding.ts);
    // gzip is not offered for it (CATP's codec is brotli), so a client that prefers gzip gets the page as it is
    ...(mode === 'inorder' && negotiate(getHeader(req.headers, 'accept-encoding')) === 'br' ? { coding: 'br' as const } : {}),
  };
}

/**
 * A CATP page too large for the file server to read unasked: read whole if the address's share of the body
 * budget has room for it (taken here; the caller gives it back once the page is encoded or refused); else the
 * answer as it was (a file, sent over TCP).
 */
export async function readPageWhole(files: FileServer, bodies: BodyBudget, res: FileResponse, client: string): Promise<FileResponse> {
  const file = res.file;
  if (file === undefined || !bodies.tryTake(client, file.size)) return res;
  let body: Uint8Array | null = null;
  try {
    body = await files.readWhole(file);
  } catch {
    body = null;
  }
  // unreadable, or changed under us: the file as it was (streamed over TCP, where a short file fails cleanly)
  if (body === null || body.length !== file.size) {
    bodies.give(client, file.size);
    return res;
  }
  return { status: res.status, reason: res.reason, headers: res.headers, body };
}
