// What the page in the frame names: the URLs in its own tree (attributes that load something, CSS in style
// attributes and <style>) and in the stylesheets it loaded (url(), @import). The shell answers a /view/ fetch only
// for a URL named here (issue "safe on the open Internet", item 6): the host fetches what the page asks for in its
// markup, not whatever a request to the shell spells out. Names are recorded before the markup that holds them
// reaches the frame (the CATP tree's operations, the in-order text), so the frame never asks first.
import { Tokenizer, TokenizerMode, type Token } from 'parse5';

/** Attributes whose value is a URL the frame may load (any element; `xlink:href` arrives as `href` or whole). */
const URL_ATTRS = new Set(['href', 'src', 'poster', 'data', 'background', 'xlink:href', 'lowsrc', 'icon', 'manifest', 'longdesc', 'cite', 'action', 'formaction']);
/** Attributes holding a list of image candidates (`url 2x, url 640w`). */
const SRCSET_ATTRS = new Set(['srcset', 'imagesrcset']);
/** Most names one page may hold; past it nothing more is allowed (a page of a million URLs is not a page). */
export const MAX_PAGE_NAMES = 20_000;
/** Longest CSS text scanned at once: longer runs are scanned in pieces that overlap by a URL's worth. */
const CSS_WINDOW = 1 << 20;
const CSS_OVERLAP = 4096;

const CSS_URL = /url\(\s*(?:"([^"]*)"|'([^']*)'|([^)'"\s]*))\s*\)|@import\s+(?:"([^"]*)"|'([^']*)')/gi;
const WS = /[\t\n\f\r ]/;

/** The URLs of a srcset value (the HTML standard's candidate list, without the descriptors). */
export function srcsetUrls(value: string): string[] {
  const out: string[] = [];
  let i = 0;
  const n = value.length;
  while (i < n) {
    while (i < n && (WS.test(value[i]!) || value[i] === ',')) i++;
    if (i >= n) break;
    const start = i;
    while (i < n && !WS.test(value[i]!)) i++;
    let url = value.slice(start, i);
    if (url.endsWith(',')) url = url.replace(/,+$/, '');
    else {
      // descriptors up to the next comma outside parentheses
      let depth = 0;
      while (i < n && !(value[i] === ',' && depth === 0)) {
        if (value[i] === '(') depth++;
        else if (value[i] === ')') depth = Math.max(0, depth - 1);
        i++;
      }
    }
    if (url !== '') out.push(url);
  }
  return out;
}

/** The URLs a piece of CSS loads (url(...), @import "..."), as written. */
export function cssUrls(css: string): string[] {
  const out: string[] = [];
  if (!/url\(|@import/i.test(css)) return out;
  for (const m of css.matchAll(CSS_URL)) {
    const u = m[1] ?? m[2] ?? m[3] ?? m[4] ?? m[5] ?? '';
    if (u !== '') out.push(u);
  }
  return out;
}

/** The URL as the shell would fetch it: absolute, no fragment. Null when it does not parse. */
function normal(raw: string, base: string): string | null {
  try {
    const u = new URL(raw.trim(), base);
    u.hash = '';
    return u.href;
  } catch {
    return null;
  }
}

/** Elements whose `src` (and `srcset`) loads an image or media: a sub-resource another origin may serve. */
const SRC_SUBRESOURCE = new Set(['img', 'image', 'source', 'video', 'audio', 'track', 'input', 'feimage']);
/** `<link rel>` values that make the link load a passive sub-resource (not prefetch, preconnect, manifest, script). */
const LINK_SUBRESOURCE = new Set(['stylesheet', 'icon', 'apple-touch-icon', 'apple-touch-icon-precomposed', 'mask-icon', 'preload']);

/** Elements whose `src` is a document a nested frame navigates to. */
const FRAME_TAGS = new Set(['iframe', 'frame']);
/** Most frame URLs one page may name (each may open a tunnel that answers its navigation with no document). */
export const MAX_FRAME_NAMES = 1024;

/** Elements whose tag decides what a URL attribute set on them later loads (a <base> included). */
const TAGS_THAT_MATTER = new Set([...SRC_SUBRESOURCE, ...FRAME_TAGS, 'link', 'use', 'video', 'base']);

/** Whether `tagName` must be remembered for attributes a CATP slot fills later (others read the same untagged). */
export function tagMatters(tagName: string): boolean {
  return TAGS_THAT_MATTER.has(tagName);
}

/**
 * Whether this attribute of this element loads a passive sub-resource (an image, a stylesheet, a font, media):
 * the only names the frame may have the host fetch from another origin than the page's. A link, a frame, a form,
 * an object, a script or a prefetch is never fetched from another origin (frames and navigation leave the page).
 */
function loadsSubresource(tagName: string, name: string, attrs: readonly { name: string; value: string }[]): boolean {
  if (SRCSET_ATTRS.has(name)) return tagName === 'img' || tagName === 'source' || tagName === 'link';
  if (name === 'src') return SRC_SUBRESOURCE.has(tagName);
  if (name === 'poster') return tagName === 'video';
  if (name === 'background') return true;
  if (name === 'href' || name === 'xlink:href') {
    if (tagName === 'image' || tagName === 'use' || tagName === 'feimage') return true;
    if (tagName !== 'link') return false;
    const rel = attrs.find((a) => a.name.toLowerCase() === 'rel')?.value.toLowerCase().split(/[\t\n\f\r ]+/) ?? [];
    return rel.some((r) => LINK_SUBRESOURCE.has(r));
  }
  return false;
}

export class PageNames {
  private readonly names = new Set<string>();
  /** The names that load a passive sub-resource (an image, a stylesheet, a font): another origin may serve these. */
  private readonly subresources = new Set<string>();
  /** The origins of those (a tunnel to an https:// origin is answered only for one of them). */
  private readonly subOrigins = new Set<string>();
  /** The `src` of the page's frames, as written, and the origins they resolve to (FRAME_TAGS). */
  private readonly frames = new Set<string>();
  private readonly frameOrigins = new Set<string>();
  /** What the page wrote, as written, and whether it loads a sub-resource (a <base> that arrives later re-resolves them). */
  private readonly raw = new Map<string, boolean>();
  private readonly bases: string[];
  /** Names not kept because the page already had MAX_PAGE_NAMES. */
  dropped = 0;

  constructor(readonly pageUrl: string) {
    this.bases = [pageUrl];
    this.keep(normal(pageUrl, pageUrl), false); // the frame shows a page that is not HTML (an image) by loading it
  }

  get size(): number {
    return this.names.size;
  }

  /** Whether the frame may have the host fetch `target` (absolute; its fragment is ignored). */
  allows(target: string): boolean {
    const t = normal(target, this.pageUrl);
    return t !== null && this.names.has(t);
  }

  /**
   * Whether the frame may have the host fetch `target` from another origin than the page's: the page names it
   * where it loads an image, a stylesheet, a font or media (or a stylesheet it loaded names it).
   */
  allowsSubresource(target: string): boolean {
    const t = normal(target, this.pageUrl);
    return t !== null && this.subresources.has(t);
  }

  /** Whether the page names a sub-resource on `origin` (scheme://host:port, as the WHATWG URL parser writes it). */
  namesSubresourcesOn(origin: string): boolean {
    return this.subOrigins.has(origin);
  }

  /**
   * Whether the page names a frame on `origin`: a tunnel to it is opened too, so that the frame's navigation is
   * answered with no document (frame-origin.ts, nestedFrame) instead of failing into Chromium's error page.
   */
  namesFramesOn(origin: string): boolean {
    return this.frameOrigins.has(origin);
  }

  /** A frame's `src`, relative to the page (or its <base>). */
  private frame(raw: string): void {
    if (this.frames.has(raw) || this.frames.size >= MAX_FRAME_NAMES) return;
    this.frames.add(raw);
    for (const b of this.bases) this.frameOrigin(normal(raw, b));
  }

  private frameOrigin(n: string | null): void {
    if (n === null) return;
    const origin = new URL(n).origin;
    if (origin !== 'null') this.frameOrigins.add(origin);
  }

  /** A URL the page wrote, relative to the page (or its <base>); `sub`: it loads a sub-resource. */
  add(raw: string, sub = false): void {
    const had = this.raw.get(raw);
    if (had === true || (had === false && !sub)) return;
    if (had === undefined && this.raw.size >= MAX_PAGE_NAMES) {
      this.dropped++;
      return;
    }
    this.raw.set(raw, sub);
    for (const b of this.bases) this.keep(normal(raw, b), sub);
  }

  /** A URL a loaded resource (a stylesheet at `base`) names: an import, an image, a font. */
  addFrom(raw: string, base: string): void {
    this.keep(normal(raw, base), true);
  }

  /** The page's <base href>: what it names resolves against it too (the first one wins in a browser; both are kept). */
  addBase(href: string): void {
    const b = normal(href, this.pageUrl);
    if (b === null || this.bases.includes(b) || this.bases.length > 4) return;
    this.bases.push(b);
    for (const [r, sub] of this.raw) this.keep(normal(r, b), sub);
    for (const r of this.frames) this.frameOrigin(normal(r, b));
  }

  /** An element of the page's tree: its URL attributes and inline style. */
  element(tagName: string, attrs: readonly { name: string; value: string; prefix?: string }[]): void {
    for (const a of attrs) {
      const name = a.name.toLowerCase();
      if (tagName === 'base' && name === 'href') this.addBase(a.value);
      if (name === 'src' && FRAME_TAGS.has(tagName)) this.frame(a.value);
      if (URL_ATTRS.has(name)) this.add(a.value, loadsSubresource(tagName, name, attrs));
      else if (SRCSET_ATTRS.has(name)) {
        const sub = loadsSubresource(tagName, name, attrs);
        for (const u of srcsetUrls(a.value)) this.add(u, sub);
      } else if (name === 'style') this.css(a.value);
    }
  }

  /** CSS in the page (a style attribute, a <style> element's text, any text that could be one). */
  css(text: string): void {
    for (const u of cssUrls(text)) this.add(u, true);
  }

  /** A stylesheet the page loaded, from `url`: what it imports and uses. */
  stylesheet(text: string, url: string): void {
    for (const u of cssUrls(text)) this.addFrom(u, url);
  }

  private keep(n: string | null, sub: boolean): void {
    if (n === null) return;
    if (!this.names.has(n)) {
      if (this.names.size >= MAX_PAGE_NAMES) {
        this.dropped++;
        return;
      }
      this.names.add(n);
    }
    if (sub && !this.subresources.has(n)) {
      this.subresources.add(n);
      const origin = new URL(n).origin; // "null" for a scheme the URL standard gives no origin (dhttp:)
      if (origin !== 'null') this.subOrigins.add(origin);
    }
  }
}

/** Start tags whose content the tokenizer reads as text until the matching end tag (HTML content only). */
const TEXT_MODES: Record<string, number> = {
  style: TokenizerMode.RAWTEXT, xmp: TokenizerMode.RAWTEXT, iframe: TokenizerMode.RAWTEXT, noembed: TokenizerMode.RAWTEXT,
  noframes: TokenizerMode.RAWTEXT, noscript: TokenizerMode.RAWTEXT, title: TokenizerMode.RCDATA, textarea: TokenizerMode.RCDATA,
  script: TokenizerMode.SCRIPT_DATA, plaintext: TokenizerMode.PLAINTEXT,
};

/** parse5's tokenizer, and the run of characters it holds back until the next token (a <style>'s text so far). */
class HtmlTokenizer extends Tokenizer {
  heldText(): string {
    return this.currentCharacterToken?.chars ?? '';
  }
}

/**
 * Reads streamed HTML (the in-order and TCP loads, whose markup goes to the frame's own parser) for the URLs it
 * names, with parse5's tokenizer, one chunk at a time, before the chunk is handed on. The tokenizer is switched
 * into text modes the way the tree builder would for HTML content (so a script's `a<b` does not swallow the tags
 * after it); a text run is read as CSS as it grows, so a stylesheet in <style> is named before its end tag.
 */
export class HtmlNameScanner {
  private readonly tokenizer: HtmlTokenizer;
  private foreign = 0;
  /** The current text run (characters since the last tag), and how much of it, with what the tokenizer holds, was read. */
  private text = '';
  private scanned = 0;

  constructor(private readonly names: PageNames) {
    this.tokenizer = new HtmlTokenizer({}, {
      onStartTag: (t: Token.TagToken) => this.startTag(t),
      onEndTag: (t: Token.TagToken) => {
        this.flush();
        if ((t.tagName === 'svg' || t.tagName === 'math') && this.foreign > 0) this.foreign--;
        this.tokenizer.inForeignNode = this.foreign > 0;
      },
      onCharacter: (t: Token.CharacterToken) => this.chars(t.chars),
      onWhitespaceCharacter: (t: Token.CharacterToken) => this.chars(t.chars),
      onNullCharacter: () => {},
      onComment: () => this.flush(),
      onDoctype: () => {},
      onEof: () => this.flush(),
    });
  }

  /** The next decoded piece of the document; `last` on its final piece. */
  write(chunk: string, last = false): void {
    this.tokenizer.write(chunk, last);
    this.scanText();
  }

  private startTag(t: Token.TagToken): void {
    this.flush();
    this.names.element(t.tagName, t.attrs);
    if (t.tagName === 'svg' || t.tagName === 'math') {
      if (!t.selfClosing) this.foreign++;
    } else if (this.foreign === 0) {
      const mode = TEXT_MODES[t.tagName];
      if (mode !== undefined) this.tokenizer.state = mode as Tokenizer['state'];
    }
    this.tokenizer.inForeignNode = this.foreign > 0;
  }

  private chars(s: string): void {
    this.text += s;
    if (this.text.length > CSS_WINDOW) {
      this.scanText();
      this.text = this.text.slice(-CSS_OVERLAP);
      this.scanned = this.text.length;
    }
  }

  /**
   * Reads what the current text run (with what the tokenizer still holds of it) gained since the last look, with
   * an overlap: a URL split across chunks.
   */
  private scanText(): void {
    const held = this.tokenizer.heldText();
    const length = this.text.length + held.length;
    if (length === this.scanned) return;
    const from = Math.max(0, this.scanned - CSS_OVERLAP);
    this.names.css(from >= this.text.length ? held.slice(from - this.text.length) : this.text.slice(from) + held);
    this.scanned = length;
  }

  private flush(): void {
    this.scanText();
    this.text = '';
    this.scanned = 0;
  }
}
