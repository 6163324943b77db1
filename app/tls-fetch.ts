// https:// fetches: a GET over TLS (app/browser/http-stream.ts: the system's CA store, SNI; a certificate that does
// not check out is an error that says why). Never DHTTP: what TLS promises (privacy, the origin's identity), DHTTP
// cannot, so an https:// URL and everything fetched for it stay on TLS. No DTD: a body arrives as it is.
import { performance } from 'node:perf_hooks';

import { refuseLessPublic } from './address-space';
import { httpStream, type HttpStreamHead } from './browser/http-stream';
import { HostError } from './errors';
import type { FetchOptions, FetchResult } from './host-api';

/** GETs `url` over TLS, its body bounded by `maxBodyBytes` (other methods are refused: HOST_ERR_UNSUPPORTED). */
export function fetchOverTls(url: string, options: FetchOptions, maxBodyBytes: number): Promise<FetchResult> {
  if ((options.method ?? 'GET').toUpperCase() !== 'GET') {
    return Promise.reject(new HostError('HOST_ERR_UNSUPPORTED', `https:// supports GET only (asked: ${options.method})`));
  }
  const startedAtMs = performance.now();
  const reachFrom = options.reachFrom;
  return new Promise<FetchResult>((resolve, reject) => {
    let head: HttpStreamHead | null = null;
    const chunks: Uint8Array[] = [];
    let lastRxNs: bigint | null = null;
    httpStream(url, {
      onHead: (h) => (head = h),
      onData: (bytes, rxNs) => {
        chunks.push(bytes);
        lastRxNs = rxNs;
      },
      onEnd: () => {
        const h = head as HttpStreamHead | null;
        if (h === null) return reject(new HostError('HTTP_ERR_TRUNCATED', `no answer from ${url}`));
        const body = Buffer.concat(chunks);
        // the stream undid any content coding: the head says what the body is now
        const headers = h.headers.filter(([n]) => !/^(content-encoding|content-length|transfer-encoding)$/i.test(n));
        headers.push(['Content-Length', String(body.length)]);
        resolve({
          url, requestId: '', response: { status: h.status, reason: h.reason, headers, body: new Uint8Array(body.buffer, body.byteOffset, body.length) },
          channel: 'https', resends: 0, fellBack: false, startedAtMs, completedAtMs: performance.now(), lastRxNs,
        });
      },
      onError: (err) => reject(new HostError(err.code, err.message)),
    }, {
      timeoutMs: options.timeoutMs ?? 30_000,
      ...(reachFrom !== undefined ? { checkAddress: (address: string) => refuseLessPublic(url, reachFrom, address) } : {}),
      maxBodyBytes }).catch((e: Error & { code?: string }) => reject(new HostError(e.code ?? 'HOST_ERR_TLS', e.message)));
  });
}
