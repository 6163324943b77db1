// A tcp load (plain HTTP/1.1 or https) as the renderer's events: an HTML page's body is decoded and handed over
// as `text` in order, as it arrives (painted like a stock browser over TCP); anything else is collected and shown
// whole at the end. Every chunk becomes a `frame` record on its kernel receive time.
import type { BrowserEvent } from '../../protocol/browser/api';
import { getHeaders } from '../../protocol/dhttp';
import { StreamingHtmlDecoder } from '../../protocol/html-encoding';
import type { FetchResult } from '../host-api';
import { ArrivalStats } from './arrival-stats';
import type { HttpStreamHead } from './http-stream';

/** A header's first value (a repeated one is not joined), null when absent. */
export function firstHeader(head: HttpStreamHead, name: string): string | null {
  return getHeaders(head.headers, name)[0] ?? null;
}

export class TcpLoadEvents {
  private readonly stats = new ArrivalStats();
  private decoder = new StreamingHtmlDecoder();
  private offset = 0;
  /** Whether the body is an HTML page (painted as it arrives); else it is shown whole at the end. */
  html = true;
  private status = 0;
  private contentType = '';
  private readonly body: Uint8Array[] = [];
  /** The page's length, when the head says it (text events carry it). */
  private total: number | null = null;

  constructor(private readonly loadId: number) {}

  /** The response's head (a redirect's is not given: it is followed instead). */
  head(head: HttpStreamHead): void {
    this.status = head.status;
    this.contentType = firstHeader(head, 'content-type') ?? '';
    const cl = firstHeader(head, 'content-length');
    const coded = head.headers.some(([n, v]) => n.toLowerCase() === 'content-encoding' && v.trim().toLowerCase() !== 'identity');
    // a coded body's Content-Length counts coded bytes, not the page's
    this.total = cl !== null && /^\d+$/.test(cl) && !coded ? Number(cl) : null;
    this.html = this.status === 200 && (this.contentType === '' || /^text\/html\b/i.test(this.contentType));
    this.decoder = new StreamingHtmlDecoder(this.contentType);
  }

  /** Body bytes, in order, with their kernel receive time. */
  data(bytes: Uint8Array, rxNs: bigint): BrowserEvent[] {
    const atEpochMs = Number(rxNs) / 1e6;
    if (!this.html) {
      this.body.push(bytes);
      return [{ type: 'frame', loadId: this.loadId, frame: this.stats.chunk(bytes.length, atEpochMs, false) }];
    }
    const out: BrowserEvent[] = [];
    const text = this.decoder.push(bytes);
    if (text.length > 0) out.push({ type: 'text', loadId: this.loadId, text, offset: this.offset, total: this.total });
    this.offset += text.length;
    out.push({ type: 'frame', loadId: this.loadId, frame: this.stats.chunk(bytes.length, atEpochMs, true) });
    return out;
  }

  /** An HTML page's end: the text the decoder still held. */
  endText(): BrowserEvent[] {
    const tail = this.decoder.push(new Uint8Array(0), true);
    return tail ? [{ type: 'text', loadId: this.loadId, text: tail, offset: this.offset, total: this.total }] : [];
  }

  /** The counters of a completed HTML page. */
  get counters(): Record<string, number> {
    return { chunks: this.stats.received, bytes: this.stats.bytes };
  }

  /** Anything but an HTML page, at its end: the whole response, as the other transports hand theirs over. */
  whole(url: string): FetchResult {
    return {
      url, requestId: '', response: { status: this.status, reason: '', headers: [['content-type', this.contentType]], body: Buffer.concat(this.body) },
      channel: 'http', resends: 0, fellBack: false, startedAtMs: 0, completedAtMs: 0, lastRxNs: null,
    };
  }
}
