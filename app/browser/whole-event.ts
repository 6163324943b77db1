// A whole answer (dhttpt://, anything but an HTML page, a server that answered without streaming) as the
// renderer's `whole` event, its text decoded.
import type { BrowserEvent } from '../../protocol/browser/api';
import { getHeader, type HttpResponse } from '../../protocol/dhttp';
import { decodeHtml, textDecoderFor, textEncoding } from '../../protocol/html-encoding';
import { realtimeNs } from '../../native';

export type WholeEvent = Extract<BrowserEvent, { type: 'whole' }>;

export function wholeEvent(loadId: number, res: HttpResponse): WholeEvent {
  const contentType = getHeader(res.headers, 'content-type') ?? 'application/octet-stream';
  const html = /^text\/html\b/i.test(contentType);
  const texty = html || /^(text\/|application\/(json|xml|javascript))|\+xml\b/i.test(contentType);
  // HTML as a browser sniffs it (BOM, charset, <meta>, ...); other text by its charset, else UTF-8
  const text = !texty ? '' : html ? decodeHtml(res.body, contentType).text : textDecoderFor(textEncoding(contentType)).decode(res.body);
  return { type: 'whole', loadId, status: res.status, contentType, text, html, atEpochMs: Number(realtimeNs()) / 1e6 };
}
