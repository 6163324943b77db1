// A fresh browser runs a generated page through the code every page load's frames go through, in memory, while its
// shell starts: CATP (frames → StreamLoad → the tree builder → DOM operations) and in-order (raw frames → the
// decoder → the name scanner). V8 compiles a function on its first call and optimizes it after it has run long
// enough, so without this the first page a user opens pays that on its first frames, at the moment they wait for its
// first paint: from a real page's first frame to its `dom` event, a fresh process took 12–29 ms (mean per page, the
// lab's 50,000 B/s link, `catp silent-time --trace`), 5–15 with three rounds of a small page. Rounds of a page of
// real size and variety, a frame a turn of the event loop until a load begins (warmUpInBackground), take a large
// page's host path further. Nothing is sent, counted or stored: the frames never touch a socket, and the events go
// nowhere, except the first round's DOM operations, which the renderer builds out of sight for its own warm-up
// (BrowserService.setWarmUpOps, renderer/frame-agent.ts).
import type { DomOps } from '../../protocol/browser/api';
import { encodePage, encodeRaw, StreamLoad, type StreamMode } from '../../protocol/catp';
import { HostError } from '../errors';
import { sha256 } from '../../platform/sha256';
import { catpCodec, hostCodec } from '../catp-codec';
import { HtmlNameScanner, PageNames } from './page-names';
import { StreamLoadEvents } from './stream-events';

/** Words for the warm-up page's text: mostly English, some in scripts that take two, three and four UTF-8 bytes. */
const WORDS = ('the of and to in a is that for it as was with be by on not he this are or his from at which but have an ' +
  'they you were her she there been one all we their has would when if so no what up said out about who into them ' +
  'more can time some could these two may first then do any like other how its our over than only see also new ' +
  'Straße café naïve Zürich déjà Москва данные 東京 日本語 ページ 한국어 العربية 😀').split(' ');

/** A deterministic stream of words (the page must be the same every round and in every process). */
function words(seed: number, n: number): string {
  let x = seed * 2654435761 >>> 0;
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out.push(WORDS[(x >>> 8) % WORDS.length]!);
  }
  return out.join(' ');
}

/** One section of the warm-up page; `i` picks its kind, so the page holds each kind several times. */
function section(i: number): string {
  const text = (n: number) => words(i * 31 + n, n);
  switch (i % 6) {
    case 0: // an article: long paragraphs (a text longer than a frame arrives in parts), inline markup, links
      return `<article id="a${i}" class="story story--lead" data-id="${i}"><h2 class="story__title">${text(7)}</h2>
<p class="lede">${text(60)} <a href="/news/${i}/${text(3).replace(/ /g, '-')}?utm_source=warm&amp;ref=${i}" class="link" title="${text(5)}">${text(4)}</a>,
<em>${text(6)}</em>, <strong>${text(5)}</strong> &amp; <code>${text(2)}</code>. ${text(120)}</p>
<p>${text(180)}</p><!-- story ${i} --></article>`;
    case 1: // navigation: many short links with long attribute values
      return `<nav class="menu" aria-label="section ${i}"><ul class="menu__list">${Array.from({ length: 24 }, (_, k) =>
        `<li class="menu__item menu__item--${k}"><a class="menu__link js-track" href="https://www.example.com/section/${i}/${k}/index.html" data-track="nav.${i}.${k}" rel="noopener">${text(2 + (k % 3))}</a></li>`).join('')}</ul></nav>`;
    case 2: // a table
      return `<table class="data"><caption>${text(6)}</caption><thead><tr>${Array.from({ length: 6 }, (_, c) => `<th scope="col">${text(1 + c % 2)}</th>`).join('')}</tr></thead>
<tbody>${Array.from({ length: 14 }, (_, r) => `<tr class="${r % 2 ? 'odd' : 'even'}">${Array.from({ length: 6 }, (_, c) => `<td>${c === 0 ? text(3) : (r * 7 + c * 13) % 1000}</td>`).join('')}</tr>`).join('\n')}</tbody></table>`;
    case 3: // images, a figure, SVG with path data, a form
      return `<figure class="media"><picture><source type="image/webp" srcset="/img/${i}-480.webp 480w, /img/${i}-960.webp 960w"><img src="/img/${i}.jpg" srcset="/img/${i}-480.jpg 480w, /img/${i}-960.jpg 960w" sizes="(max-width: 600px) 480px, 960px" alt="${text(6)}" width="960" height="540" loading="lazy"></picture>
<figcaption>${text(14)}</figcaption></figure>
<svg class="icon" width="24" height="24" viewBox="0 0 24 24" aria-hidden="true"><path d="M12 2C6.48 2 2 6.48 2 12s4.48 10 10 10 10-4.48 10-10S17.52 2 12 2zm1 15h-2v-6h2v6zm0-8h-2V7h2v2z"/><circle cx="12" cy="12" r="3"/></svg>
<form action="/search" method="get" class="search"><label for="q${i}">${text(2)}</label><input id="q${i}" name="q" type="search" placeholder="${text(3)}"><button type="submit">${text(1)}</button></form>`;
    case 4: // deep nesting: wrappers of wrappers, as page builders make them
      return `${Array.from({ length: 14 }, (_, d) => `<div class="wrap wrap--${d}">`).join('')}<span class="badge">${text(3)}</span> ${text(40)}${'</div>'.repeat(14)}
<ol>${Array.from({ length: 10 }, (_, k) => `<li>${text(8 + k)} <small>(${k})</small></li>`).join('')}</ol><pre>  ${text(12)}\n    ${text(9)}</pre>`;
    default: // a sidebar: a template, a script and a style of its own, entities
      return `<aside class="sidebar"><h3>${text(4)} &mdash; &copy; &lt;${i}&gt;</h3><template id="t${i}"><div class="card">${text(5)}</div></template>
<script type="application/json" id="data${i}">{"section":${i},"items":[${Array.from({ length: 12 }, (_, k) => `{"id":${k},"name":"${text(2)}"}`).join(',')}]}</script>
<style>.sidebar .card-${i}{margin:0 0 ${i}px;color:#${(i * 4099 % 4096).toString(16).padStart(3, '0')}}</style><p>${text(50)}</p></aside>`;
  }
}

/**
 * What real pages are made of, generated: a long head (metadata, icons, preloads, a stylesheet, a style and a script
 * of their own), then articles, navigation, tables, images and SVG, deep wrappers, lists, templates and comments,
 * with text in several scripts. ~60 KB, 29 CATP frames at quality 2: each part of the path runs long enough for V8
 * to optimize it (after thirty rounds of the 6 KB page this replaces, the first large page's host path took ~1.8x as
 * long).
 */
export const WARM_UP_PAGE = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>catp-browser warm-up</title>
${Array.from({ length: 12 }, (_, k) => `<meta property="og:warm:${k}" content="${words(k, 8)}">`).join('\n')}
<link rel="stylesheet" href="/warm/site.css"><link rel="icon" href="/warm/icon.png"><link rel="preload" href="/warm/font.woff2" as="font" crossorigin>
<style>body{font:16px/1.5 sans-serif;margin:0 auto;max-width:60em}nav a{margin-right:1em}.story__title{font-size:1.4em}
${Array.from({ length: 30 }, (_, k) => `.menu__item--${k} .menu__link{padding:${k % 5}px ${k % 7}px;color:#${(k * 257 % 4096).toString(16).padStart(3, '0')}}`).join('\n')}</style>
<script>var warm = { sections: 30, started: Date.now() }; function track(e) { return e && e.target; }</script></head>
<body class="page"><header id="top"><h1>${words(99, 6)}</h1></header>
<main>${Array.from({ length: 30 }, (_, i) => section(i)).join('\n')}</main>
<footer><p class="note">© warm-up</p></footer></body></html>`;

const PAGE_URL = 'dhttp://127.0.0.1/warm-up.html';

/** What one warm-up load went through. */
export interface WarmUpLoad {
  frames: number;
  /** CATP: of them, index frames */
  indexFrames: number;
  /** CATP: `dom` events and their operations; in-order: characters of text */
  domEvents: number;
  domOps: number;
  textChars: number;
}

/**
 * One load of `frames` in `mode`, in send order, through StreamLoad and the renderer's events: a step a frame (what a
 * real load's frame costs the event loop), then what the load did.
 */
function* loadSteps(mode: StreamMode, frames: readonly Uint8Array[], onDom?: (ops: DomOps) => void): Generator<void, WarmUpLoad> {
  const done: WarmUpLoad = { frames: frames.length, indexFrames: 0, domEvents: 0, domOps: 0, textChars: 0 };
  const requestId = new Uint8Array([0x80, 0x57, 0x41, 0x52, 0x4d, 0x55, 0x50, 0x31]);
  const load = new StreamLoad({ mode, requestId, otherPort: 0, sha256, codec: catpCodec, sentAtMs: 0, sentRealtimeNs: null });
  const names = new PageNames(PAGE_URL);
  const scanner = new HtmlNameScanner(names);
  const events = new StreamLoadEvents(-1, 0, names);
  let complete = false;
  for (let i = 0; i < frames.length; i++) {
    const f = frames[i]!.slice();
    f.set(requestId, 0);
    const { record, step } = load.receive(f, i + 1, null);
    if (record.kind === 'index') done.indexFrames++;
    for (const ev of events.frame(record, step.events)) {
      if (ev.type === 'text') {
        scanner.write(ev.text);
        done.textChars += ev.text.length;
      } else if (ev.type === 'dom') {
        done.domEvents++;
        done.domOps += ev.ops.length;
        onDom?.(ev.ops);
      }
    }
    if (step.ended?.outcome === 'complete') complete = true;
    yield;
  }
  scanner.write('', true);
  if (!complete) throw new HostError('HOST_ERR_WARM_UP', `the warm-up page did not complete (${mode})`);
  return done;
}

/** One round: the page over CATP, then over in-order, a step a frame; returns what both loads did. */
type Round = Generator<void, { catp: WarmUpLoad; inorder: WarmUpLoad }>;

/** The warm-up page's frames, CATP and in-order; each call of the result is a new round (`onDom`: its CATP load's DOM operations). */
function warmUpRounds(): (onDom?: (ops: DomOps) => void) => Round {
  const bytes = new TextEncoder().encode(WARM_UP_PAGE);
  // frames of a real page's size, encoded at brotli's quality 2, not the wire's 11: the same decoder reads both, and
  // this encode holds the event loop once, while the shell starts (~30 ms here; quality 11 ~140)
  const codec = hostCodec({ finalQuality: 2 });
  const page = encodePage(bytes, { sha256, codec });
  // in-order as a load gets it (brotli-coded, protocol/catp/raw.ts), so the stream decoder is warm too
  const raw = encodeRaw(bytes, { sha256, codec });
  return function* round(onDom?: (ops: DomOps) => void) {
    const catp = yield* loadSteps('catp', page.frames, onDom);
    const inorder = yield* loadSteps('inorder', raw.frames);
    return { catp, inorder };
  };
}

/** Runs a round to its end at once. */
function finish(round: Round): { catp: WarmUpLoad; inorder: WarmUpLoad } {
  for (;;) {
    const r = round.next();
    if (r.done === true) return r.value;
  }
}

/**
 * Runs the warm-up page through the CATP and in-order paths `rounds` times at once; returns what the last round
 * did, and throws if a load did not complete.
 */
export function warmUpLoadPath(rounds = 3): { catp: WarmUpLoad; inorder: WarmUpLoad } {
  const round = warmUpRounds();
  let last = finish(round());
  for (let i = 1; i < rounds; i++) last = finish(round());
  return last;
}

/**
 * Rounds the background warm-up runs at most. V8 optimizes a function after it has run long enough: thirty rounds
 * of a 6 KB page left the first large page's host path (wikipedia-2, a fresh process) at 147–182 ms; ten rounds of
 * this page at 85–124 (twenty and thirty no better).
 */
export const WARM_UP_ROUNDS = 12;

/**
 * Warms the load path while the process waits for its shell: a frame a turn of the event loop (what a real load's
 * frame holds it for, so the shell's connection is never kept waiting), until `rounds` are done or `busy()` says a
 * page load has begun (its own frames warm the code from then on). Errors end it quietly: a load runs the same code
 * and reports its own. Resolves with the rounds it finished.
 */
export function warmUpInBackground(busy: () => boolean, rounds = WARM_UP_ROUNDS, onDomBatches?: (batches: DomOps[]) => void): Promise<number> {
  let next: ((onDom?: (ops: DomOps) => void) => Round) | null = null;
  let round: Round | null = null;
  let ran = 0;
  // the first round's CATP operations, for the renderer's own warm-up (renderer/frame-agent.ts)
  const batches: DomOps[] = [];
  return new Promise((done) => {
    const step = (): void => {
      if (busy() || ran >= rounds) return done(ran);
      try {
        next ??= warmUpRounds();
        round ??= next(ran === 0 && onDomBatches ? (ops) => batches.push(ops) : undefined);
        if (round.next().done === true) {
          round = null;
          if (ran === 0) onDomBatches?.(batches);
          ran++;
        }
      } catch {
        return done(ran);
      }
      // (not unref'd: an unref'd immediate runs only when something else wakes the event loop, so on a process
      // waiting for its shell a step came about once a second; the rounds end within a second either way)
      setImmediate(step);
    };
    setImmediate(step);
  });
}
