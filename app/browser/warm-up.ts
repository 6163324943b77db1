// A fresh browser runs one small page through the code every page load's frames go through, in memory, while its
// shell starts: CATP (frames → StreamLoad → the tree builder → DOM operations) and in-order (raw frames → the
// decoder → the name scanner). V8 compiles a function on its first call and optimizes it after many, so without
// this the first page a user opens pays that on its first frames, at the moment they wait for its first paint:
// from a real page's first frame to its `dom` event, a fresh process took 12–29 ms (mean per page, the lab's
// 50,000 B/s link, `catp silent-time --trace`), 5–15 with three rounds of it. Thirty rounds, one a turn of the event
// loop until a load begins (warmUpInBackground), take a large page's host path further (bench:render at 1,000,000 B/s,
// three rounds interleaved: p95 560 → 508 ms, host p50 down by a third). Nothing is sent, counted or stored: the
// frames never touch a socket, and the events go nowhere.
import { encodePage, encodeRaw, StreamLoad, type StreamMode } from '../../protocol/catp';
import { HostError } from '../errors';
import { sha256 } from '../../platform/sha256';
import { catpCodec } from '../catp-codec';
import { HtmlNameScanner, PageNames } from './page-names';
import { StreamLoadEvents } from './stream-events';

/** What a page is made of, in small: head, styles, links, lists, a table, inline markup, an image, SVG, a comment. */
export const WARM_UP_PAGE = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>catp-browser warm-up</title>
<link rel="stylesheet" href="/warm/site.css"><link rel="icon" href="/warm/icon.png">
<style>body{font:16px/1.5 sans-serif;margin:0 auto;max-width:40em}nav a{margin-right:1em}.note{color:#555}</style>
<script>var warm = 1;</script></head>
<body class="page"><header id="top"><nav><a href="/">Home</a><a href="/about">About</a><a href="#top">Top</a></nav>
<h1>A page to warm up with</h1></header>
<main><article>${Array.from({ length: 8 }, (_, i) => `<section id="s${i}"><h2>Section ${i}</h2>
<p>Paragraph ${i} has <a href="/p/${i}?q=${i}&amp;x=y">a link</a>, <em>emphasis</em>, <strong>strong words</strong> and
<code>code</code>. ${'The quick brown fox jumps over the lazy dog. '.repeat(6)}</p>
<ul><li>one</li><li>two &amp; three</li><li><img src="/img/${i}.png" srcset="/img/${i}@2x.png 2x" alt="picture ${i}" width="32" height="32"></li></ul>
<!-- section ${i} -->`).join('\n')}
<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr></tbody></table>
<svg width="10" height="10" viewBox="0 0 10 10"><path d="M0 0L10 10"/></svg>
</article></main><footer><p class="note">© warm-up</p></footer></body></html>`;

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

/** One load of `frames` in `mode`, in send order, through StreamLoad and the renderer's events. */
function loadOnce(mode: StreamMode, frames: readonly Uint8Array[]): WarmUpLoad {
  const done: WarmUpLoad = { frames: frames.length, indexFrames: 0, domEvents: 0, domOps: 0, textChars: 0 };
  const requestId = new Uint8Array([0x80, 0x57, 0x41, 0x52, 0x4d, 0x55, 0x50, 0x31]);
  const load = new StreamLoad({ mode, requestId, otherPort: 0, sha256, codec: catpCodec, sentAtMs: 0, sentRealtimeNs: null });
  const names = new PageNames(PAGE_URL);
  const scanner = new HtmlNameScanner(names);
  const events = new StreamLoadEvents(-1, 0, names);
  let complete = false;
  frames.forEach((frame, i) => {
    const f = frame.slice();
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
      }
    }
    if (step.ended?.outcome === 'complete') complete = true;
  });
  scanner.write('', true);
  if (!complete) throw new HostError('HOST_ERR_WARM_UP', `the warm-up page did not complete (${mode})`);
  return done;
}

/** The warm-up page's frames, CATP and in-order, and one round through both paths. */
function warmUpRound(): () => { catp: WarmUpLoad; inorder: WarmUpLoad } {
  const bytes = new TextEncoder().encode(WARM_UP_PAGE);
  // small frames: several index and data frames, as a real page has (this one compresses to two or three)
  const page = encodePage(bytes, { sha256, codec: catpCodec, maxPayload: 400 });
  // in-order as a load gets it (brotli-coded, protocol/catp/raw.ts), so the stream decoder is warm too; it codes
  // to under 1 kB, so small frames again for several of them
  const raw = encodeRaw(bytes, { sha256, codec: catpCodec, maxPayload: 160 });
  return () => ({ catp: loadOnce('catp', page.frames), inorder: loadOnce('inorder', raw.frames) });
}

/**
 * Runs the warm-up page through the CATP and in-order paths `rounds` times (a few tens of ms in all); returns what
 * the last round did, and throws if a load did not complete.
 */
export function warmUpLoadPath(rounds = 3): { catp: WarmUpLoad; inorder: WarmUpLoad } {
  const round = warmUpRound();
  let last = round();
  for (let i = 1; i < rounds; i++) last = round();
  return last;
}

/**
 * Rounds the background warm-up runs at most. V8 optimizes a function after many calls: three rounds left the first
 * large page's tree building at 148–174 ms (wikipedia-2, a fresh process), thirty at 92–112.
 */
export const WARM_UP_ROUNDS = 30;

/**
 * Warms the load path while the process waits for its shell: a round a turn of the event loop (a few ms each, so
 * the shell's connection is never kept waiting), until `rounds` are done or `busy()` says a page load has begun
 * (its own frames warm the code from then on). Errors end it quietly: a load runs the same code and reports its own.
 * Resolves with the rounds it ran.
 */
export function warmUpInBackground(busy: () => boolean, rounds = WARM_UP_ROUNDS): Promise<number> {
  let round: (() => unknown) | null = null;
  let ran = 0;
  return new Promise((done) => {
    const step = (): void => {
      if (busy() || ran >= rounds) return done(ran);
      try {
        round ??= warmUpRound();
        round();
      } catch {
        return done(ran);
      }
      ran++;
      setImmediate(step).unref();
    };
    setImmediate(step).unref();
  });
}
