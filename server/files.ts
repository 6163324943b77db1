// Static files under a root directory, answered as HTTP responses. Every target is hostile: percent-decoding,
// NUL bytes, `..` segments (raw or encoded), encoded separators, absolute-form tricks and symlinks that
// resolve outside the root are refused before the file system is asked for anything but a realpath.
import { promises as fsp } from 'fs';
import * as path from 'path';
import type { HttpResponse } from '../protocol/dhttp/http1';
import { formatDigest, formatReprDigest, wantedDigests } from '../protocol/dtd/digest-fields';
import { DigestCache, type DigestCounters } from './digests';
import { sniffHtmlEncoding } from '../protocol/html-encoding';
import { ServerError } from './errors';

/** Bytes of a file too large to read whole that its charset is sniffed from. */
const SNIFF_PREFIX_BYTES = 64 * 1024;

/**
 * `text/html; charset=X`, X what the page's bytes say (BOM, `<meta>`), else UTF-8 if they are valid UTF-8, else
 * windows-1252 (protocol/html-encoding.ts): the encoding the CATP encoder decodes the page with, announced so every
 * client (stock Chromium included) reads the same text. `complete`: `bytes` is the whole file, not a prefix.
 */
export function htmlContentType(bytes: Uint8Array, complete: boolean): string {
  return `text/html; charset=${sniffHtmlEncoding(bytes, { complete }).encoding.toLowerCase()}`;
}

export interface FileRequest {
  method: string;
  target: string;
  headers: readonly (readonly [string, string])[];
}

/** A file too large to read whole: its bytes go from disk a chunk at a time (body-writer.ts). */
export interface FileBody {
  /** The real path, checked to be a regular file under the root. */
  path: string;
  /** Bytes to send (the size at `stat`; Content-Length says so). */
  size: number;
}

/**
 * An HttpResponse (protocol/dhttp/http1.ts) ready for serializeResponse; with `file`, `body` is empty and the
 * body is that file: serialize the head with `{ bodyLength: file.size }` and write the file after it.
 */
export type FileResponse = HttpResponse & { file?: FileBody };

/** The length of an answer's body, in memory or on disk. */
export function bodyLength(res: FileResponse): number {
  return res.file?.size ?? res.body.length;
}

export interface FileServerOptions {
  root: string;
  /** Files larger than this are refused with 500 (responses are buffered in memory). Default 64 MiB. */
  maxFileBytes?: number;
  /** Total bytes of file contents kept in the LRU cache. Default 32 MiB; 0 disables the cache. */
  cacheBytes?: number;
  /** Files larger than this are never cached. Default 4 MiB. */
  cacheEntryMaxBytes?: number;
  /**
   * With `HandleOptions.stream`, files larger than this are not read whole: the answer names the file and its
   * writer streams it (body-writer.ts). Default 1 MiB.
   */
  streamAboveBytes?: number;
  /** sha-256 digests remembered (DTD). Default 65,536. */
  digestCacheEntries?: number;
  /**
   * Serve paths with a segment that starts with a dot (`.git/`, `.env`, `.htpasswd`), asked for or reached through
   * a symlink. Default false: they answer 404, as if absent.
   */
  serveDotfiles?: boolean;
}

export interface HandleOptions {
  /** Add Repr-Digest to a 200 even when the request has no Want-Repr-Digest (DTD-Mode implies it). */
  reprDigest?: boolean;
  /** The caller can write a file body (`FileResponse.file`): files above `streamAboveBytes` are not read whole. */
  stream?: boolean;
}

export const ALLOWED_METHODS = 'GET, HEAD';
const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'TRACE', 'CONNECT']);

const MIME: Record<string, string> = {
  // the charset is the one sniffed from the page's bytes (htmlContentType)
  '.html': 'text/html',
  '.htm': 'text/html',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.xml': 'application/xml',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.avif': 'image/avif',
  '.ico': 'image/x-icon',
  '.woff': 'font/woff',
  '.woff2': 'font/woff2',
  '.ttf': 'font/ttf',
  '.otf': 'font/otf',
  '.wasm': 'application/wasm',
  '.pdf': 'application/pdf',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
  '.mp3': 'audio/mpeg',
};

export function mimeType(filePath: string): string {
  return MIME[path.extname(filePath).toLowerCase()] ?? 'application/octet-stream';
}

const REASONS: Record<number, string> = {
  200: 'OK',
  301: 'Moved Permanently',
  304: 'Not Modified',
  400: 'Bad Request',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  421: 'Misdirected Request',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
};

export function reasonPhrase(status: number): string {
  return REASONS[status] ?? 'Unknown';
}

/** A small text/plain response (status line repeated in the body), for errors. */
export function simpleResponse(status: number, extraHeaders: [string, string][] = []): FileResponse {
  const body = new TextEncoder().encode(`${status} ${reasonPhrase(status)}\n`);
  return {
    status,
    reason: reasonPhrase(status),
    headers: [
      ['Content-Type', 'text/plain; charset=utf-8'],
      ['Content-Length', String(body.length)],
      ...extraHeaders,
    ],
    body,
  };
}

export type TargetResolution =
  | { ok: true; segments: string[]; trailingSlash: boolean; pathname: string }
  | { ok: false; status: 400 | 403 | 404; why: string };

/**
 * Maps a request target to decoded path segments relative to the root, without touching the file system.
 * Accepts origin-form (`/a/b?q`) and absolute-form (`http://host/a/b`). Refuses (403) NUL, `..`, encoded
 * `/` or `\`, and anything that would leave the root; malformed percent-encoding is 400.
 */
export function resolveTarget(target: string): TargetResolution {
  let t = target;
  const abs = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(t);
  if (abs) t = t.slice(abs[0].length) || '/';
  const cut = t.search(/[?#]/);
  if (cut >= 0) t = t.slice(0, cut);
  if (!t.startsWith('/')) return { ok: false, status: 400, why: 'not-origin-form' };
  if (t.length > 4096) return { ok: false, status: 400, why: 'target-too-long' };
  const raw = t.split('/');
  const segments: string[] = [];
  for (const r of raw) {
    let s: string;
    try {
      s = decodeURIComponent(r);
    } catch {
      return { ok: false, status: 400, why: 'bad-percent-encoding' };
    }
    if (s.includes('\0')) return { ok: false, status: 403, why: 'nul' };
    if (s.includes('/') || s.includes('\\')) return { ok: false, status: 403, why: 'encoded-separator' };
    if (s === '..') return { ok: false, status: 403, why: 'dot-dot' };
    if (s === '' || s === '.') continue;
    segments.push(s);
  }
  const trailingSlash = t.endsWith('/');
  return { ok: true, segments, trailingSlash, pathname: t };
}

interface CacheEntry {
  key: string;
  body: Uint8Array;
}

/**
 * Serves GET/HEAD for files under one root. Create with `FileServer.create`.
 * Responses always carry the full body, HEAD included: serialize with `serializeResponse(res, { head })`,
 * which writes Content-Length from the body and omits the body for HEAD.
 */
export class FileServer {
  private readonly maxFileBytes: number;
  private readonly cacheBytes: number;
  private readonly cacheEntryMaxBytes: number;
  readonly streamAboveBytes: number;
  private readonly cache = new Map<string, CacheEntry>(); // real path -> entry; Map order = LRU order
  private cached = 0;
  private readonly digests: DigestCache;
  private readonly serveDotfiles: boolean;
  /** Requests answered 404 because their path (asked for, or its real path) has a dot segment. */
  dotfilesRefused = 0;

  private constructor(readonly root: string, opts: FileServerOptions) {
    this.serveDotfiles = opts.serveDotfiles ?? false;
    this.digests = new DigestCache(opts.digestCacheEntries ?? 65_536);
    this.maxFileBytes = opts.maxFileBytes ?? 64 * 1024 * 1024;
    this.cacheBytes = opts.cacheBytes ?? 32 * 1024 * 1024;
    this.cacheEntryMaxBytes = opts.cacheEntryMaxBytes ?? 4 * 1024 * 1024;
    this.streamAboveBytes = opts.streamAboveBytes ?? 1024 * 1024;
  }

  static async create(opts: FileServerOptions): Promise<FileServer> {
    const root = await fsp.realpath(path.resolve(opts.root));
    const st = await fsp.stat(root);
    if (!st.isDirectory()) throw new ServerError('SERVER_ERR_ROOT_NOT_DIRECTORY', `server root is not a directory: ${root}`);
    return new FileServer(root, opts);
  }

  /** Answers one request. Never throws; file system trouble becomes 404/403/500. */
  async handle(req: FileRequest, opts: HandleOptions = {}): Promise<FileResponse> {
    const method = req.method;
    if (method !== 'GET' && method !== 'HEAD') {
      return KNOWN_METHODS.has(method) ? simpleResponse(405, [['Allow', ALLOWED_METHODS]]) : simpleResponse(501);
    }
    const r = resolveTarget(req.target);
    if (!r.ok) return simpleResponse(r.status);
    try {
      return await this.serve(r.segments, r.trailingSlash, r.pathname, req, opts);
    } catch {
      return simpleResponse(500);
    }
  }

  private inRoot(p: string): boolean {
    return p === this.root || p.startsWith(this.root.endsWith(path.sep) ? this.root : this.root + path.sep);
  }

  private async realInRoot(p: string): Promise<string | 403 | 404> {
    let real: string;
    try {
      real = await fsp.realpath(p);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      return code === 'EACCES' ? 403 : 404;
    }
    return this.inRoot(real) ? real : 403;
  }

  digestCounters(): DigestCounters {
    return this.digests.counters();
  }

  /** A path under the root with a segment starting with '.' (checked on what was asked for and on the real path). */
  private hidden(segments: readonly string[]): boolean {
    return !this.serveDotfiles && segments.some((s) => s.startsWith('.'));
  }

  private async serve(segments: string[], trailingSlash: boolean, pathname: string, req: FileRequest, opts: HandleOptions): Promise<FileResponse> {
    const joined = path.join(this.root, ...segments);
    if (!this.inRoot(joined)) return simpleResponse(403);
    if (this.hidden(segments)) {
      this.dotfilesRefused++;
      return simpleResponse(404);
    }
    let real = await this.realInRoot(joined);
    if (typeof real === 'number') return simpleResponse(real);
    if (this.hidden(path.relative(this.root, real).split(path.sep))) {
      this.dotfilesRefused++; // a symlink in the root that points into .git/ or at .env
      return simpleResponse(404);
    }
    let st = await fsp.stat(real);
    if (st.isDirectory()) {
      if (!trailingSlash) {
        // Relative links inside the index page only resolve against the directory with a trailing slash.
        return simpleResponse(301, [['Location', encodeLocation(pathname + '/')]]);
      }
      real = await this.realInRoot(path.join(real, 'index.html'));
      if (typeof real === 'number') return simpleResponse(real);
      if (this.hidden(path.relative(this.root, real).split(path.sep))) {
        this.dotfilesRefused++;
        return simpleResponse(404);
      }
      st = await fsp.stat(real);
    }
    if (!st.isFile()) return simpleResponse(404); // FIFOs, devices, sockets: never opened
    if (st.size > this.maxFileBytes) return simpleResponse(500);

    const etag = `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
    const headers: [string, string][] = [
      ['Content-Type', mimeType(real)],
      ['Content-Length', String(st.size)],
      ['Last-Modified', st.mtime.toUTCString()],
      ['ETag', etag],
    ];
    const inm = headerValue(req.headers, 'if-none-match');
    if (inm !== undefined && inm.split(',').some((v) => v.trim() === etag || v.trim() === '*')) {
      // No body and no Content-Length (serializeResponse writes neither for 304).
      const notModified = headers.filter(([n]) => n !== 'Content-Length' && n !== 'Content-Type');
      return { status: 304, reason: reasonPhrase(304), headers: notModified, body: new Uint8Array(0) };
    }
    const want = wantedDigests(req.headers);
    const digestKey = `${real}\0${etag}`;
    const html = headers[0]![1] === 'text/html';
    if (opts.stream === true && st.size > this.streamAboveBytes) {
      // Not read whole: the writer streams it (HEAD included: it writes the head alone).
      if (html) headers[0] = ['Content-Type', htmlContentType(await this.readPrefix(real, SNIFF_PREFIX_BYTES), false)];
      if (want.repr || want.legacy || opts.reprDigest === true) {
        const digest = await this.digests.ofFile(digestKey, real, st.size);
        if (digest === null) return simpleResponse(500); // changed under us while hashed
        if (want.repr || opts.reprDigest === true) headers.push(['Repr-Digest', formatReprDigest(digest)]);
        if (want.legacy) headers.push(['Digest', formatDigest(digest)]);
      }
      return { status: 200, reason: reasonPhrase(200), headers, body: new Uint8Array(0), file: { path: real, size: st.size } };
    }
    // HEAD gets the body too: serializeResponse(res, { head: true }) derives Content-Length from it and
    // leaves it out of the wire (the cache makes this cheap).
    const body = await this.read(real, etag, st.size);
    if (body.length !== st.size) {
      // The file changed between stat and read; describe what we actually send.
      headers[1] = ['Content-Length', String(body.length)];
    }
    if (html) headers[0] = ['Content-Type', htmlContentType(body, true)];
    // DTD: representation digests (RFC 9530; RFC 3230 for clients that ask the old way), cached by file key.
    if (want.repr || want.legacy || opts.reprDigest === true) {
      const digest = this.digests.of(digestKey, body);
      if (want.repr || opts.reprDigest === true) headers.push(['Repr-Digest', formatReprDigest(digest)]);
      if (want.legacy) headers.push(['Digest', formatDigest(digest)]);
    }
    return { status: 200, reason: reasonPhrase(200), headers, body };
  }

  private async readPrefix(real: string, n: number): Promise<Uint8Array> {
    const fh = await fsp.open(real, 'r');
    try {
      const buf = Buffer.alloc(n);
      const { bytesRead } = await fh.read(buf, 0, n, 0);
      return new Uint8Array(buf.buffer, buf.byteOffset, bytesRead);
    } finally {
      await fh.close();
    }
  }

  /** A streamed answer's file read whole after all (a CATP page: its encoder needs every byte). */
  async readWhole(file: FileBody): Promise<Uint8Array> {
    const st = await fsp.stat(file.path);
    return this.read(file.path, `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`, Math.min(st.size, file.size));
  }

  private async read(real: string, etag: string, size: number): Promise<Uint8Array> {
    const key = `${real}\0${etag}`;
    const hit = this.cache.get(real);
    if (hit && hit.key === key) {
      this.cache.delete(real);
      this.cache.set(real, hit);
      return hit.body;
    }
    const fh = await fsp.open(real, 'r');
    let body: Uint8Array;
    try {
      const buf = Buffer.allocUnsafe(size);
      let off = 0;
      while (off < size) {
        const { bytesRead } = await fh.read(buf, off, size - off, off);
        if (bytesRead === 0) break;
        off += bytesRead;
      }
      body = new Uint8Array(buf.buffer, buf.byteOffset, off);
    } finally {
      await fh.close();
    }
    if (hit) {
      this.cache.delete(real);
      this.cached -= hit.body.length;
    }
    if (this.cacheBytes > 0 && body.length <= this.cacheEntryMaxBytes && body.length <= this.cacheBytes) {
      this.cache.set(real, { key, body });
      this.cached += body.length;
      for (const [k, e] of this.cache) {
        if (this.cached <= this.cacheBytes) break;
        this.cache.delete(k);
        this.cached -= e.body.length;
      }
    }
    return body;
  }
}

function headerValue(headers: readonly (readonly [string, string])[], name: string): string | undefined {
  for (const [n, v] of headers) if (n.toLowerCase() === name) return v;
  return undefined;
}

function encodeLocation(p: string): string {
  // Re-encode each decoded segment so the Location header stays a valid, header-safe URI path.
  return p
    .split('/')
    .map((s) => {
      try {
        return encodeURIComponent(decodeURIComponent(s));
      } catch {
        return '';
      }
    })
    .join('/');
}
