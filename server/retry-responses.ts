// The two 421 Misdirected Request answers that send a client elsewhere instead of answering: "resend over TCP"
// (DHTTP paper III-A, VI-B3) and "ask again with this token" (address validation). Both are small, body-less and
// fit one datagram, so they may go to an address that has not proven it receives there.
import { RETRY_TOKEN, TOKEN_HEADER } from '../protocol/dhttp/address-validation';
import type { HttpResponse } from '../protocol/dhttp/http1';

/** Too large an answer for an unproven address: the token, and "ask again with it" (address-validation.ts). */
export function retryWithTokenResponse(token: string): HttpResponse {
  return misdirected([
    ['DHTTP-Retry', RETRY_TOKEN],
    [TOKEN_HEADER, token],
  ]);
}

/** Not to be answered from a datagram (non-idempotent, too large a file, overload): "resend over TCP". */
export function retryOverTcpResponse(): HttpResponse {
  return misdirected([['DHTTP-Retry', 'tcp']]);
}

function misdirected(headers: [string, string][]): HttpResponse {
  return { status: 421, reason: 'Misdirected Request', headers: [...headers, ['Content-Length', '0']], body: new Uint8Array(0) };
}
