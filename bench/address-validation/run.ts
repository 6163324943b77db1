// What address validation costs a client: a fresh client's first small request and first CATP loads, against the
// same client's next ones (its address token cached), through relays that add 40 ms each way on loopback (no
// loss). Every client has its own loopback address (its own relay), as clients on the Internet have, so no client
// spends another's budget. Small answers fit the budget of a padded first request (a full datagram: no more than it
// sent); a CATP stream's first flight (what its request and the copy behind it pay for: the token answer and a
// frame) goes at once, the rest once the token request proves the address.
//
//   npm run build && node dist/bench/address-validation/run.js [--reps N]   (writes bench/results/address-validation.json)
import * as fs from 'node:fs';
import * as path from 'node:path';

import { DhttpHost } from '../../app/dhttp-host';
import { startLossyRelay, type LossyRelay } from '../../app/browser/lossy-relay';
import { startServer, type DhttpServer } from '../../server';
import { BenchError, failureStatus, failureText } from '../errors';
import { gitCommit } from '../commit';

const HELP = `usage: node dist/bench/address-validation/run.js [options]      (npm run bench:address-validation -- [options])

What address validation costs a client: fresh clients' first small request (the demo site's index.html) and first
CATP loads (the demo article, and ../shared/corpus's lemonde-1.html when it is there) against the same clients' next
ones (the address token cached), through relays that add 40 ms each way on loopback (no loss), each client on a
loopback address of its own.
Prints medians and writes bench/results/address-validation.json.

options:
  --reps N     rounds of fresh clients, one after another, the figures their medians (1 to 100; default 9)
  -h, --help   show this help`;

function parseArgs(argv: string[]): { reps: number } | 'help' {
  let reps = 9;
  const usage = (msg: string) => new BenchError('BENCH_ERR_USAGE', `${msg} (--help for the options)`);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') return 'help';
    const m = /^--reps(?:=(.*))?$/.exec(a);
    if (!m) throw usage(`unknown argument ${a}`);
    reps = Number(m[1] ?? argv[++i]);
    if (!Number.isInteger(reps) || reps < 1 || reps > 100) throw usage('--reps takes an integer from 1 to 100');
  }
  return { reps };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

/** A CATP load: when its first frame came and when it completed (ms after the request). */
async function catpLoad(host: DhttpHost, url: string): Promise<{ firstFrame: number; complete: number }> {
  const t = performance.now();
  let firstFrame = NaN;
  await host.load(url, {
    mode: 'catp',
    onFrame: () => {
      if (Number.isNaN(firstFrame)) firstFrame = performance.now() - t;
    },
  });
  return { firstFrame, complete: performance.now() - t };
}

interface Row {
  firstSmall: number;
  nextSmall: number;
  /** per page: the first load (no token) and the next (token cached) */
  pages: Record<string, { first: { firstFrame: number; complete: number }; next: { firstFrame: number; complete: number } }>;
  tokenRetries: number;
}

async function main(): Promise<void> {
  const parsed = parseArgs(process.argv.slice(2));
  if (parsed === 'help') {
    console.log(HELP);
    return;
  }
  const { reps } = parsed;
  const commit = gitCommit();
  const root = path.join(__dirname, '..', '..', '..');
  const real = path.resolve(root, '..', 'shared', 'corpus', 'real-pages');
  // listening on every address: each client comes from its own loopback address
  const servers: { name: string; server: DhttpServer; page: string }[] = [
    { name: 'article.html (demo site, 7 frames)', server: await startServer({ root: path.join(root, 'demo', 'site'), port: 0, host: '0.0.0.0' }), page: 'article.html' },
  ];
  if (fs.existsSync(path.join(real, 'lemonde-1.html'))) {
    servers.push({ name: 'lemonde-1.html (real page, 87 KB)', server: await startServer({ root: real, port: 0, host: '0.0.0.0' }), page: 'lemonde-1.html' });
  }
  const relays: LossyRelay[] = [];
  let nextAddress = 10;
  /** A relay on a loopback address of its own in front of `server`: a client behind it has that address. */
  const via = async (server: DhttpServer): Promise<(p: string) => string> => {
    const host = `127.0.0.${nextAddress++}`;
    const relay = await startLossyRelay(server.port, { loss: 0, seed: 1, host, delayMs: 40 });
    relays.push(relay);
    return (p) => `dhttp://${host}:${relay.port}/${p}`;
  };
  const rows: Row[] = [];
  try {
    // the first load of a page encodes it: once, before anything is timed
    for (const s of servers) {
      const warm = new DhttpHost();
      await warm.load(`dhttp://127.0.0.1:${s.server.port}/${s.page}`, { mode: 'catp', onFrame: () => undefined }).finally(() => warm.close());
    }
    for (let r = 0; r < reps; r++) {
      const row: Row = { firstSmall: NaN, nextSmall: NaN, pages: {}, tokenRetries: 0 };
      const small = new DhttpHost();
      try {
        const url = await via(servers[0].server);
        let t = performance.now();
        await small.fetch(url('index.html'));
        row.firstSmall = performance.now() - t;
        t = performance.now();
        await small.fetch(url('logo.svg'));
        row.nextSmall = performance.now() - t;
      } finally {
        small.close();
      }
      for (const s of servers) {
        const host = new DhttpHost(); // a fresh client: no token yet
        try {
          const url = await via(s.server);
          const first = await catpLoad(host, url(s.page));
          const next = await catpLoad(host, url(s.page));
          row.pages[s.name] = { first, next };
          row.tokenRetries += host.counters().lanes[0]?.client.retriesWithToken ?? 0;
        } finally {
          host.close();
        }
      }
      rows.push(row);
      process.stderr.write(`\r${r + 1}/${reps}`);
    }
    process.stderr.write('\n');
  } finally {
    await Promise.all(relays.map((r) => r.close()));
    for (const s of servers) await s.server.close();
  }
  const pages: Record<string, { first: { firstFrameMs: number; completeMs: number }; next: { firstFrameMs: number; completeMs: number } }> = {};
  for (const s of servers) {
    const of = (k: 'first' | 'next', m: 'firstFrame' | 'complete') => median(rows.map((x) => x.pages[s.name][k][m]));
    pages[s.name] = { first: { firstFrameMs: of('first', 'firstFrame'), completeMs: of('first', 'complete') }, next: { firstFrameMs: of('next', 'firstFrame'), completeMs: of('next', 'complete') } };
  }
  const summary = { firstSmallMs: median(rows.map((x) => x.firstSmall)), nextSmallMs: median(rows.map((x) => x.nextSmall)), pages };
  const f = (x: number) => x.toFixed(1);
  console.log(`address validation, ${reps} fresh clients (each its own loopback address), 40 ms each way (RTT 80 ms), medians:`);
  console.log(`  small page (index.html, one datagram): first request ${f(summary.firstSmallMs)} ms, with the token ${f(summary.nextSmallMs)} ms`);
  for (const [name, p] of Object.entries(pages)) {
    console.log(`  CATP load of ${name}: first frame ${f(p.first.firstFrameMs)} ms on first contact, ${f(p.next.firstFrameMs)} ms with the token; ` +
      `complete ${f(p.first.completeMs)} ms / ${f(p.next.completeMs)} ms (+${f(p.first.completeMs - p.next.completeMs)} ms)`);
  }
  const out = path.join(root, 'bench', 'results', 'address-validation.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), commit, reps, summary, rows }, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

main().catch((err: unknown) => {
  console.error(failureText(err));
  process.exitCode = failureStatus(err);
});
