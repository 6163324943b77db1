// Which character encoding turns an HTML document's bytes into text: the WHATWG encoding sniffing algorithm
// (https://html.spec.whatwg.org/#encoding-sniffing-algorithm) through jsdom's `html-encoding-sniffer` — a byte
// order mark, then the transport's `charset`, then the `<meta>` prescan of the first 1,024 bytes — and then a
// default. With the whole document at hand (the server before it encodes a CATP page or labels an answer) the
// default is UTF-8 when the bytes are valid UTF-8, else windows-1252: the spec's default for unlabelled pages,
// after the check browsers make in its "frequency analysis" step (a page whose `<meta charset>` comes after the
// first 1,024 bytes is nearly always UTF-8). With a prefix only (a stream), the same check on the prefix.
// Names are WHATWG encoding names, which TextDecoder accepts (Node with full ICU, Chromium).
import sniff from 'html-encoding-sniffer';
import { labelToName } from 'whatwg-encoding';

export type EncodingSource = 'bom' | 'transport' | 'meta' | 'utf-8-valid' | 'default';

export interface SniffedEncoding {
  /** A WHATWG encoding name (`UTF-8`, `windows-1252`, `Shift_JIS`, ...). */
  encoding: string;
  /** What decided it: the bytes or a label (`bom`, `transport`, `meta`), or a guess (`utf-8-valid`, `default`). */
  source: EncodingSource;
}

/** The `charset` parameter of a Content-Type value, or undefined. */
export function charsetParam(contentType: string | null | undefined): string | undefined {
  if (!contentType) return undefined;
  const m = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType);
  const v = (m?.[1] ?? m?.[2] ?? '').trim();
  return v === '' ? undefined : v;
}

const NOT_FOUND = '\u0000not-found';

/** `prefix`: a character cut at the end is no error. */
function validUtf8(bytes: Uint8Array, prefix: boolean): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: prefix });
    return true;
  } catch {
    return false;
  }
}

function bomEncoding(b: Uint8Array): string | null {
  if (b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) return 'UTF-8';
  if (b[0] === 0xfe && b[1] === 0xff) return 'UTF-16BE';
  if (b[0] === 0xff && b[1] === 0xfe) return 'UTF-16LE';
  return null;
}

const BOMS = [[0xef, 0xbb, 0xbf], [0xfe, 0xff], [0xff, 0xfe]];

/** The first `n` bytes of `chunks` (all of them when fewer). */
function concatHeld(chunks: readonly Uint8Array[], n: number): Uint8Array {
  let total = 0;
  for (const c of chunks) total += c.length;
  const out = new Uint8Array(Math.min(n, total));
  let off = 0;
  for (const c of chunks) {
    if (off === out.length) break;
    const part = c.subarray(0, out.length - off);
    out.set(part, off);
    off += part.length;
  }
  return out;
}

/** `start` (a stream's first bytes, fewer than a BOM's) may still become a BOM. */
function bomMayFollow(start: Uint8Array): boolean {
  return BOMS.some((bom) => start.length < bom.length && start.every((b, i) => b === bom[i]));
}

/**
 * The encoding of an HTML document. `complete`: `bytes` is the whole document (else a prefix of at least the
 * first 1,024 bytes, or all there will be). An unknown `charset` label counts as none (the spec's rule).
 */
export function sniffHtmlEncoding(bytes: Uint8Array, opts: { contentType?: string | null; complete: boolean }): SniffedEncoding {
  const bom = bomEncoding(bytes);
  if (bom !== null) return { encoding: bom, source: 'bom' };
  const label = charsetParam(opts.contentType);
  const named = label === undefined ? null : labelToName(label);
  if (named !== null) return { encoding: named, source: 'transport' };
  const meta = sniff(bytes, { defaultEncoding: NOT_FOUND });
  if (meta !== NOT_FOUND) return { encoding: meta, source: 'meta' };
  return validUtf8(bytes, !opts.complete) ? { encoding: 'UTF-8', source: 'utf-8-valid' } : { encoding: 'windows-1252', source: 'default' };
}

/** What decodes text: TextDecoder's shape (`decode(bytes, { stream })`). */
export interface TextDecoderLike {
  decode(bytes?: Uint8Array, opts?: { stream?: boolean }): string;
}

// WHATWG windows-1252 differs from ISO-8859-1 only in 0x80-0x9F (the € sign, curly quotes, dashes...). Node's
// TextDecoder('windows-1252') decodes those as C1 controls (it treats the label as latin1, nodejs/node#56542);
// Chromium's is right. So this one encoding is decoded here, from the spec's index.
const CP1252_80_9F = [
  0x20ac, 0x81, 0x201a, 0x192, 0x201e, 0x2026, 0x2020, 0x2021, 0x2c6, 0x2030, 0x160, 0x2039, 0x152, 0x8d, 0x17d, 0x8f,
  0x90, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014, 0x2dc, 0x2122, 0x161, 0x203a, 0x153, 0x9d, 0x17e, 0x178,
];

class Windows1252Decoder implements TextDecoderLike {
  decode(bytes?: Uint8Array): string {
    if (bytes === undefined) return '';
    let out = '';
    for (let i = 0; i < bytes.length; i += 8192) {
      const part = bytes.subarray(i, i + 8192);
      const codes = new Array<number>(part.length);
      for (let k = 0; k < part.length; k++) {
        const b = part[k]!;
        codes[k] = b >= 0x80 && b <= 0x9f ? CP1252_80_9F[b - 0x80]! : b;
      }
      out += String.fromCharCode(...codes);
    }
    return out;
  }
}

/** A decoder for a WHATWG encoding name, right on every platform (see Windows1252Decoder). */
export function textDecoderFor(encoding: string): TextDecoderLike {
  return encoding.toLowerCase() === 'windows-1252' ? new Windows1252Decoder() : new TextDecoder(encoding);
}

/** The encoding of a text answer that is not HTML: its `charset` if it names one, else UTF-8. */
export function textEncoding(contentType: string | null | undefined): string {
  const label = charsetParam(contentType);
  return (label === undefined ? null : labelToName(label)) ?? 'UTF-8';
}

/** Decode a whole HTML document as a browser would (`sniffHtmlEncoding` with `complete`). */
export function decodeHtml(bytes: Uint8Array, contentType?: string | null): { text: string; encoding: string } {
  const { encoding } = sniffHtmlEncoding(bytes, { contentType, complete: true });
  return { text: textDecoderFor(encoding).decode(bytes), encoding };
}

/** Bytes the prescan looks at: a stream holds its text back until it has this many (or the end). */
export const PRESCAN_BYTES = 1024;

/**
 * An HTML byte stream to text, chunk by chunk: unless the transport's charset or a BOM decides it at once, the
 * first text waits for PRESCAN_BYTES (or the end), so the `<meta>` prescan sees what the spec lets it see; a
 * character split between chunks comes out whole.
 */
export class StreamingHtmlDecoder {
  private decoder: TextDecoderLike | null = null;
  private held: Uint8Array[] = [];
  private heldBytes = 0;
  /** Decided once the first text is out. */
  encoding: string | null = null;

  constructor(private readonly contentType?: string | null) {}

  /** Text for `bytes` (possibly ''), everything held included when `last`. */
  push(bytes: Uint8Array, last = false): string {
    if (this.decoder === null) {
      if (bytes.length > 0) {
        this.held.push(bytes);
        this.heldBytes += bytes.length;
      }
      const label = charsetParam(this.contentType);
      const labelled = label !== undefined && labelToName(label) !== null;
      // Whatever the chunks: a BOM beats the label, so neither decides while the first bytes may still become one
      // (a BOM cut between chunks), and the prescan and the UTF-8 check see the first PRESCAN_BYTES, no more, however
      // many came in before the decision (the whole stream only when it is shorter).
      const start = concatHeld(this.held, 3);
      const bom = bomEncoding(start) !== null;
      if (!last && !bom && (bomMayFollow(start) || (!labelled && this.heldBytes < PRESCAN_BYTES))) return '';
      const all = concatHeld(this.held, this.heldBytes);
      this.held = [];
      const prefix = this.heldBytes >= PRESCAN_BYTES;
      this.encoding = sniffHtmlEncoding(prefix ? all.subarray(0, PRESCAN_BYTES) : all, { contentType: this.contentType, complete: last && !prefix }).encoding;
      this.decoder = textDecoderFor(this.encoding);
      return this.decoder.decode(all, { stream: !last });
    }
    return this.decoder.decode(bytes, { stream: !last });
  }
}
