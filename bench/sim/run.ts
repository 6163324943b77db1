// Simulated-link benchmark: the real sans-IO sender (RepairSender, rate discovery) and client (CatpAssembler) of a
// CATP load, every corpus page as the server encodes it, through the lab's link model on a fake clock
// (lab/sim-link.ts: loss at arrival both ways, one FIFO tail-drop queue, delay; the first contact at 1× with its
// padding datagrams and proof). No processes, no sockets, no renderer: a whole sweep of the corpus runs in a minute
// or two, where the lab takes an hour, so a sender change can be looked at on every page before the lab judges it.
// What it cannot show: the client's own time (a busy renderer holds its acks), the browser's paints. Silent time is
// the lab's; here the proxy is the longest gap between useful frames, the wait for the first one included: frames
// whose events can change the screen (sweep.ts canShow: a piece of the body, visible text, a style once some body is
// there; not the head, deferred text, or a style before any body). Runs before 2026-11-28's session 38 counted every
// index piece and block fill, which made a style sent as one block of several frames look like a long wait.
//
// No oracle: the sender is told no rate. With the hint (the lab's case on a symmetric link), the server read the
// client's uplink rate from its first two datagrams' dispersion: 0.97 × the link's rate here.
//
//   npm run build && npm run bench:sim -- [--seeds 10] [--loss 0,0.1] [--links 10000/10,50000/40] [--hint both]
//   npm run bench:sim -- --compare bench/results/sim.json --out /tmp/sim-new.json     (the same sweep, and ratios)
import * as fs from 'node:fs';
import * as path from 'node:path';

import { encodeForMode, errorCode } from '../../server/catp-encode';
import { hostCodec } from '../../app/catp-codec';
import { sniffHtmlEncoding } from '../../protocol/html-encoding';
import { generatePage } from '../../lab/silent-time/pages';
import { BenchError, failureStatus, failureText } from '../errors';
import { gitCommit } from '../commit';
import { compare, type Load, nameSeed, type PagePoint, perPage, simulateLoad, summarize } from './sweep';

const HELP = `usage: node dist/bench/sim/run.js [options]      (npm run bench:sim -- [options])

CATP loads of every corpus page (and the lab's generated 10 KB and 50 KB pages) through a simulated link: the real
sender and client, the lab's link model, on a fake clock. Prints, per link, loss and hint: mean completion, the mean
longest gap between useful frames (those that can change the screen; the lab's silent time, network side), sends
per frame, loads with tail drops.
Times run from when the request reached the server (the lab's from when it was sent: one delay earlier).

options:
  --pages DIR|FILE[,FILE...]  HTML pages (default: ../shared/corpus/real-pages, all of it)
  --no-generated              leave out the generated 10 KB and 50 KB pages
  --links LIST                B/S/ONE-WAY-MS, comma-separated (default 10000/10,50000/40: the paper's, the issue's)
  --loss LIST                 random loss each way (default 0,0.05,0.1,0.2)
  --seeds N                   drop patterns a page and point (default 10)
  --hint both|yes|no          the server read the uplink's rate from the first contact (default both)
  --compare FILE              a previous run's JSON (the same settings): print new/old ratios per point and page
  --out FILE                  the JSON results (default bench/results/sim.json)
  -h, --help                  show this help`;

interface Options {
  pages: string[];
  generated: boolean;
  links: Array<{ rate: number; delayMs: number }>;
  losses: number[];
  seeds: number;
  hints: boolean[];
  compare: string | null;
  out: string;
}

function parseArgs(argv: string[]): Options | 'help' {
  const root = path.join(__dirname, '..', '..', '..');
  const corpus = process.env.CATP_CORPUS ?? path.join(root, '..', 'shared', 'corpus');
  const o: Options = {
    pages: [path.join(corpus, 'real-pages')],
    generated: true,
    links: [{ rate: 10_000, delayMs: 10 }, { rate: 50_000, delayMs: 40 }],
    losses: [0, 0.05, 0.1, 0.2],
    seeds: 10,
    hints: [true, false],
    compare: null,
    out: path.join(root, 'bench', 'results', 'sim.json'),
  };
  const usage = (msg: string) => new BenchError('BENCH_ERR_USAGE', `${msg} (--help for the options)`);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') return 'help';
    if (a === '--no-generated') {
      o.generated = false;
      continue;
    }
    const m = /^--(pages|links|loss|seeds|hint|compare|out)(?:=(.*))?$/.exec(a);
    if (!m) throw usage(`unknown argument ${a}`);
    const v = m[2] ?? argv[++i];
    if (v === undefined) throw usage(`--${m[1]} needs a value`);
    if (m[1] === 'pages') o.pages = v.split(',');
    else if (m[1] === 'compare') o.compare = v;
    else if (m[1] === 'out') o.out = v;
    else if (m[1] === 'seeds') {
      o.seeds = Number(v);
      if (!Number.isInteger(o.seeds) || o.seeds < 1 || o.seeds > 1000) throw usage('--seeds takes a whole number from 1 to 1000');
    } else if (m[1] === 'loss') {
      o.losses = v.split(',').map(Number);
      if (!o.losses.every((x) => x >= 0 && x < 1)) throw usage('--loss takes fractions from 0 to below 1');
    } else if (m[1] === 'hint') {
      if (!['both', 'yes', 'no'].includes(v)) throw usage('--hint is both, yes or no');
      o.hints = v === 'both' ? [true, false] : [v === 'yes'];
    } else {
      o.links = v.split(',').map((l) => {
        const [rate, delayMs] = l.split('/').map(Number);
        if (!(rate >= 1000) || !(delayMs >= 0) || !Number.isFinite(rate) || !Number.isFinite(delayMs)) throw usage(`--links: '${l}' is not B/S/ONE-WAY-MS`);
        return { rate, delayMs };
      });
    }
  }
  return o;
}

/** The HTML files `--pages` names (a directory: every .html in it). */
function pageFiles(specs: string[]): string[] {
  const out: string[] = [];
  for (const s of specs) {
    if (!fs.existsSync(s)) throw new BenchError('BENCH_ERR_NO_PAGE', `${s} not found (set --pages or CATP_CORPUS)`);
    if (fs.statSync(s).isDirectory()) out.push(...fs.readdirSync(s).filter((f) => f.endsWith('.html')).sort().map((f) => path.join(s, f)));
    else out.push(s);
  }
  return out;
}

async function main(): Promise<void> {
  const parsed = parseArgs(process.argv.slice(2));
  if (parsed === 'help') {
    console.log(HELP);
    return;
  }
  const o = parsed;
  const commit = gitCommit();
  let old: PagePoint[] | null = null;
  if (o.compare !== null) {
    let read: unknown;
    try {
      read = JSON.parse(fs.readFileSync(o.compare, 'utf8'));
    } catch (e) {
      throw new BenchError('BENCH_ERR_COMPARE', `--compare ${o.compare}: ${e instanceof Error ? e.message : e}`);
    }
    const p = (read as { pages?: unknown }).pages;
    if (!Array.isArray(p)) throw new BenchError('BENCH_ERR_COMPARE', `--compare ${o.compare}: not a bench:sim result (no per-page means)`);
    old = p as PagePoint[];
  }
  const codec = hostCodec();
  const t0 = performance.now();
  const pages: Array<{ name: string; frames: Uint8Array[]; indexFrames: number }> = [];
  for (const file of pageFiles(o.pages)) {
    const body = new Uint8Array(fs.readFileSync(file));
    const { encoding } = sniffHtmlEncoding(body, { complete: true });
    try {
      const e = encodeForMode('catp', body, 'content', 'best', encoding);
      pages.push({ name: path.basename(file, '.html'), frames: e.frames, indexFrames: e.indexFrames });
    } catch (err) {
      // as the server does with such a page (it sends it in order): not a CATP load, so not in this sweep
      process.stderr.write(`bench:sim: ${file} left out: the encoder refused it (${errorCode(err)})\n`);
    }
  }
  if (pages.length === 0 && !o.generated) throw new BenchError('BENCH_ERR_NO_PAGE', 'no page to load');
  if (o.generated) {
    for (const kb of [10, 50]) {
      const e = encodeForMode('catp', new TextEncoder().encode(generatePage(kb * 1000)), 'content', 'best');
      pages.push({ name: `generated-${kb}k`, frames: e.frames, indexFrames: e.indexFrames });
    }
  }
  process.stderr.write(`bench:sim: ${pages.length} pages encoded as the server does (brotli 11) in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
    `${pages.length * o.links.length * o.losses.length * o.hints.length * o.seeds} loads\n`);
  const loads: Load[] = [];
  for (const link of o.links) {
    for (const loss of o.losses) {
      const t = performance.now();
      for (const hint of o.hints) {
        for (const p of pages) {
          for (let s = 1; s <= o.seeds; s++) {
            const seed = (nameSeed(p.name) + s * 7919 + Math.round(loss * 1000)) >>> 0;
            loads.push({ page: p.name, rate: link.rate, delayMs: link.delayMs, loss, hint, seed, ...simulateLoad(p.frames, p.indexFrames, link, loss, hint, seed, codec) });
          }
        }
      }
      process.stderr.write(`  ${link.rate} B/s, ${link.delayMs} ms, loss ${loss}: ${((performance.now() - t) / 1000).toFixed(1)} s\n`);
    }
  }
  const points = summarize(loads, o);
  console.log('CATP through the simulated link (lab/sim-link.ts), means over pages and drop patterns; ms after the request reached the server ' +
    '(the lab counts from its sending: one delay more); gap = the longest wait for a useful frame, the first included');
  console.log('B/s      ms  loss  hint  loads  failed  completion ms  gap ms  first ms  sends/frame  loads with tail drops');
  for (const p of points) {
    console.log(`${String(p.rate).padEnd(8)} ${String(p.delayMs).padStart(2)}  ${p.loss.toFixed(2)}  ${p.hint ? 'yes ' : 'no  '}  ${String(p.loads).padStart(5)}  ${String(p.failed).padStart(6)}` +
      `  ${p.completeMs.toFixed(0).padStart(13)}  ${p.gapMs.toFixed(0).padStart(6)}  ${p.firstMs.toFixed(0).padStart(8)}  ${p.sendsPerFrame.toFixed(3).padStart(11)}  ${String(p.loadsWithQueueDrops).padStart(21)}`);
  }
  const byPage = perPage(loads);
  // written before the comparison, so a comparison that cannot be made does not lose the run
  fs.mkdirSync(path.dirname(o.out), { recursive: true });
  fs.writeFileSync(o.out, `${JSON.stringify({ date: new Date().toISOString(), commit, options: { ...o, pages: pages.map((p) => p.name) }, points, pages: byPage })}\n`);
  console.log(`wrote ${path.relative(process.cwd(), o.out)} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  if (old !== null) {
    console.log("\nnew / old (geometric mean of the pages' ratios of means; better / worse: pages beyond 2%)");
    console.log('B/s      ms  loss  hint  pages  completion  better/worse  longest gap  better/worse  first  worst gaps');
    for (const r of compare(byPage, old)) {
      console.log(`${String(r.rate).padEnd(8)} ${String(r.delayMs).padStart(2)}  ${r.loss.toFixed(2)}  ${r.hint ? 'yes ' : 'no  '}  ${String(r.pages).padStart(5)}  ${r.completion.toFixed(3).padStart(10)}  ` +
        `${`${r.completionBetter}/${r.completionWorse}`.padStart(12)}  ${r.gap.toFixed(3).padStart(11)}  ${`${r.gapBetter}/${r.gapWorse}`.padStart(12)}  ${r.first === null ? '    -' : r.first.toFixed(3)}  ` +
        r.worstGaps.map(([page, x]) => `${page} ${x.toFixed(2)}`).join(', '));
    }
  }
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(failureText(err));
    process.exitCode = failureStatus(err);
  });
}
