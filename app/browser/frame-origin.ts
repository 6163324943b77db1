// The frame origin's routes (the shell server's second port; see shell-server.ts): the agent frame's document, the
// page frame under /view/<encoded origin>/<path> (an empty document the agent fills), and the page's sub-resources:
// its own origin's, root-relative or under /view/, fetched through the host only when the page names them
// (page-names.ts), and another origin's (a proxied http:// request, or one inside a CONNECT tunnel,
// connect-tunnel.ts), fetched only when the page names them as an image, stylesheet, font or media.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

import { getHeader, parseTarget } from '../../protocol/dhttp';
import { textDecoderFor, textEncoding } from '../../protocol/html-encoding';
import { HostError } from '../errors';
import type { FetchOptions, FetchResult } from '../host-api';
import type { BrowserService } from './service';

export const VIEW_CSP = [
  "default-src 'self' data:",
  "script-src 'none'",
  "object-src 'none'",
  // A frame the page nests goes to the shell (the frame's proxy, or this origin), which answers it with no document
  // (nestedFrame below). Blocked here instead, each one became Chromium's error page, with its scripts, in the
  // page's renderer: 24 of them on gmw, ~0.7 s of its main thread while the page was being built.
  "frame-src 'self' http: https:",
  "worker-src 'none'",
  "connect-src 'none'",
  "form-action 'none'",
  // another origin's images, styles, fonts and media come through the shell server as the frame's proxy (shell-server.ts)
  "style-src 'self' 'unsafe-inline' data: http: https:",
  "img-src 'self' data: http: https:",
  "font-src 'self' data: http: https:",
  "media-src 'self' data: http: https:",
].join('; ');

const EMPTY_VIEW = '<!DOCTYPE html><html><head></head><body></body></html>';

/**
 * A navigation: Chromium's Sec-Fetch-Mode, or, where it sends no Sec-Fetch-* (a proxied http:// request: not a
 * potentially trustworthy URL), Upgrade-Insecure-Requests, which it sends with navigation requests only.
 */
export function isNavigation(req: IncomingMessage): boolean {
  const mode = req.headers['sec-fetch-mode'];
  if (mode !== undefined) return mode === 'navigate';
  return req.headers['upgrade-insecure-requests'] === '1';
}

/**
 * The agent frame's document: our one script, admitted by a nonce made for this document, and the page frame —
 * sandboxed without scripts (the page's <script>s are inert to its parser, as in parse5's scripting-disabled
 * trees) and with allow-same-origin, so that the agent, on the same frame origin, can build it.
 */
function agentDocument(): { html: string; csp: string } {
  const nonce = randomBytes(18).toString('base64');
  return {
    html: '<!DOCTYPE html><html><head>'
      + `<style nonce="${nonce}">html,body{margin:0;height:100%;overflow:hidden}iframe{display:block;border:0;width:100%;height:100%}</style>`
      + '</head><body><iframe id="page" title="page" sandbox="allow-same-origin" src="/view/blank/"></iframe>'
      + `<script src="/__catp/frame.js" nonce="${nonce}"></script></body></html>`,
    csp: `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; frame-src 'self'; base-uri 'none'; form-action 'none'`,
  };
}

/** The frame URL for a page: /view/<encoded origin><path>, so relative URLs resolve under it. */
export function viewUrlFor(origin: string, pageUrl: string): string {
  try {
    const t = parseTarget(pageUrl);
    return `${origin}/view/${encodeURIComponent(t.origin)}${t.path}`;
  } catch {
    return `${origin}/view/invalid/`;
  }
}

export interface FrameRoutesOptions {
  service: BrowserService;
  /** http://host:framePort (known once the listener is up). */
  frameOrigin: () => string;
  /** Sub-resource fetch deadline (ms). */
  resourceTimeoutMs: number;
  /** Counts a refusal by reason (ShellServer.refused). */
  count: (reason: string) => void;
  /** Sub-resources fetched from other origins than the page's, by channel (ShellServer.otherOrigins). */
  otherOrigins: Record<string, number>;
}

/** What fetchFor fetches, and how it answers the frame. */
interface FetchFor {
  /** The sub-resource's URL as the page names it. */
  target: string;
  req: IncomingMessage;
  res: ServerResponse;
  fetchOptions?: FetchOptions;
  /** The page's origin, for a CORS-mode request (a font): the answer's Access-Control-Allow-Origin is checked against it. */
  corsFrom?: string | null;
  /** The URL to fetch it as (default: target; dhttp:// where the origin speaks DHTTP). */
  fetchAs?: string;
}

export class FrameRoutes {
  constructor(private readonly options: FrameRoutesOptions) {}

  /** /__catp/agent.html: the agent frame's document, with a nonce of its own. */
  agent(res: ServerResponse): void {
    const { html, csp } = agentDocument();
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': csp, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' }).end(html);
  }

  /**
   * Any other request on the frame origin: the page frame (a document under /view/), else a sub-resource of the
   * page, under /view/ or root-relative (the page that asked for it, by Referer, else the current load).
   */
  async page(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { service, count } = this.options;
    const frameOrigin = this.options.frameOrigin();
    const dest = req.headers['sec-fetch-dest'];
    const view = /^\/view\/([^/]+)(\/.*)?$/.exec(req.url ?? '');
    if (view && (dest === 'iframe' || dest === 'document' || dest === 'frame')) {
      res.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': VIEW_CSP,
        'cache-control': 'no-store',
        'x-content-type-options': 'nosniff',
      }).end(EMPTY_VIEW);
      return;
    }
    if (!view && isNavigation(req)) return this.nestedFrame(res);
    let target: string | null = null;
    if (view) {
      target = decodeURIComponent(view[1]!) + (view[2] ?? '/');
    } else {
      // root-relative: the page that asked for it (Referer), else the current load's origin
      const referer = String(req.headers.referer ?? '');
      const ref = referer.startsWith(`${frameOrigin}/view/`) ? /^\/view\/([^/]+)/.exec(referer.slice(frameOrigin.length)) : null;
      const origin = ref ? decodeURIComponent(ref[1]!) : service.currentOrigin;
      if (origin) target = origin + (req.url ?? '/');
    }
    if (target === null) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    let targetOrigin: string;
    try {
      targetOrigin = parseTarget(target).origin; // a target we cannot parse is refused here, not by the fetch
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('bad target');
      return;
    }
    if (targetOrigin !== service.currentOrigin) {
      // The frame's own URLs all resolve under the current page's origin; another origin named under /view/ is
      // a page making the host fetch for it (any host and port: request forgery past Chromium's own rules).
      count('cross-origin');
      res.writeHead(403, { 'content-type': 'text/plain' }).end('another origin than the page');
      return;
    }
    if (!service.named(target)) {
      // the page's tree (or a stylesheet it loaded) does not name it: a request the page's markup did not make
      count('not-named');
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not named by the page');
      return;
    }
    await this.fetchFor({ target, req, res });
  }

  /**
   * A sub-resource on another origin than the page's (a proxied http:// request, or a request inside a tunnel
   * this server answers for an https:// origin): fetched only when the page names it as an image, stylesheet,
   * font or media, never over http:// for an https:// page, never from a less public address than the page's.
   */
  async anotherOrigin(target: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { service, count, otherOrigins } = this.options;
    const refuse = (status: number, reason: string, why: string) => {
      count(reason);
      res.writeHead(status, { 'content-type': 'text/plain' }).end(why);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return refuse(405, 'proxied', 'GET and HEAD only');
    if (isNavigation(req)) return this.nestedFrame(res);
    const page = service.currentUrl;
    let pageTarget: ReturnType<typeof parseTarget>;
    let wanted: ReturnType<typeof parseTarget>;
    try {
      if (page === null) return refuse(404, 'not-named', 'no page is shown');
      pageTarget = parseTarget(page);
      wanted = parseTarget(target);
    } catch {
      return refuse(400, 'proxied', 'bad target');
    }
    if (pageTarget.scheme === 'https' && wanted.scheme !== 'https') return refuse(403, 'mixed-content', 'an http:// sub-resource of an https:// page');
    if (!service.namedSubresource(target)) return refuse(404, 'not-named', 'not named by the page as an image, stylesheet, font or media');
    let reachFrom: FetchOptions['reachFrom'];
    try {
      reachFrom = await service.host.addressSpaceOf(pageTarget.host);
    } catch {
      return refuse(502, 'dns', 'the page\'s own host does not resolve');
    }
    // A font is fetched in CORS mode: the origin is asked for the page's origin, as Chromium would ask it, and its
    // answer for that origin is passed on for the frame's (the frame origin).
    const corsFrom = req.headers.origin !== undefined ? pageTarget.origin : null;
    try {
      // over DHTTP where that server speaks it (it answered this host over DHTTP before), else as asked
      const channel = await this.fetchFor({
        target, req, res, corsFrom, fetchAs: service.host.overDhttpIfSpoken(target),
        fetchOptions: { reachFrom, ...(corsFrom !== null ? { headers: [['Origin', corsFrom]] } : {}) },
      });
      otherOrigins[channel] = (otherOrigins[channel] ?? 0) + 1;
    } catch (err) {
      if (err instanceof HostError && err.code === 'HOST_ERR_PRIVATE_NETWORK') return refuse(403, 'private-network', err.message);
      throw err;
    }
  }

  /**
   * A frame the page nests (an `<iframe>` of an ad, a video, a widget) navigating anywhere but to the page frame's
   * /view/ document: answered with no content, which ends a navigation where it starts (the frame keeps its empty
   * about:blank document), counted as `nested-frame`. The host fetches documents for the page frame alone.
   */
  private nestedFrame(res: ServerResponse): void {
    this.options.count('nested-frame');
    res.writeHead(204, { 'cache-control': 'no-store' }).end();
  }

  /** Fetches `target` through the host and answers the frame with it. */
  private async fetchFor({ target, req, res, fetchOptions = {}, corsFrom = null, fetchAs = target }: FetchFor): Promise<FetchResult['channel']> {
    const { service } = this.options;
    const result = await service.host.fetch(fetchAs, { timeoutMs: this.options.resourceTimeoutMs, ...fetchOptions });
    service.noteSubresource(result); // a DTD hit counts towards the page's savings (HUD, load record)
    const r = result.response;
    const type = getHeader(r.headers, 'content-type') ?? '';
    if (r.status === 200 && /^text\/css\b/i.test(type)) service.noteStylesheet(target, textDecoderFor(textEncoding(type)).decode(r.body));
    const headers: Record<string, string> = {
      'content-type': getHeader(r.headers, 'content-type') ?? 'application/octet-stream',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      // a sub-resource opened on its own (e.g. an SVG) must not run either
      'content-security-policy': VIEW_CSP,
    };
    // an answer that allows the page's origin (or any) allows the frame (the frame origin stands for the page's)
    const allowed = getHeader(r.headers, 'access-control-allow-origin');
    if (corsFrom !== null && allowed !== undefined && (allowed === '*' || allowed === corsFrom)) headers['access-control-allow-origin'] = '*';
    res.writeHead(r.status, headers).end(req.method === 'HEAD' ? undefined : Buffer.from(r.body));
    return result.channel;
  }
}
