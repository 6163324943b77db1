// What address validation costs a client: a fresh client's first small request and first CATP load, against the
// same client's next ones (its address token cached), through a relay that adds 40 ms each way on loopback (no
// loss). Small answers fit the 3× budget of a padded first request; a stream waits one round trip for the token.
//
//   npm run build && node dist/bench/address-validation/run.js [--reps N]   (writes bench/results/address-validation.json)
import * as fs from 'node:fs';
import * as path from 'node:path';

import { DhttpHost } from '../../app/dhttp-host';
import { startLossyRelay } from '../../app/browser/lossy-relay';
import { startServer } from '../../server';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

async function main(): Promise<void> {
  const i = process.argv.indexOf('--reps');
  const reps = i > 0 ? Number(process.argv[i + 1]) : 9;
  if (!Number.isInteger(reps) || reps < 1) throw new Error('--reps takes a positive integer');
  const root = path.join(__dirname, '..', '..', '..');
  const server = await startServer({ root: path.join(root, 'demo', 'site'), port: 0, host: '127.0.0.1' });
  const relay = await startLossyRelay(server.port, { loss: 0, seed: 1, host: '127.0.0.1', delayMs: 40 });
  const url = (p: string) => `dhttp://127.0.0.1:${relay.port}/${p}`;
  const rows: { firstSmall: number; nextSmall: number; firstCatp: number; nextCatp: number; tokenRetries: number }[] = [];
  try {
    for (let r = 0; r < reps; r++) {
      // a fresh client each time: no token yet
      const a = new DhttpHost();
      const b = new DhttpHost();
      try {
        let t = performance.now();
        await a.fetch(url('index.html'));
        const firstSmall = performance.now() - t;
        t = performance.now();
        await a.fetch(url('logo.svg'));
        const nextSmall = performance.now() - t;
        t = performance.now();
        await a.load(url('article.html'), { mode: 'catp', onFrame: () => undefined });
        const nextCatp = performance.now() - t;
        t = performance.now();
        await b.load(url('article.html'), { mode: 'catp', onFrame: () => undefined });
        const firstCatp = performance.now() - t;
        rows.push({ firstSmall, nextSmall, firstCatp, nextCatp, tokenRetries: b.counters().lanes[0]?.client.retriesWithToken ?? 0 });
      } finally {
        a.close();
        b.close();
      }
    }
  } finally {
    await relay.close();
    await server.close();
  }
  const summary = {
    firstSmallMs: median(rows.map((x) => x.firstSmall)),
    nextSmallMs: median(rows.map((x) => x.nextSmall)),
    firstCatpMs: median(rows.map((x) => x.firstCatp)),
    nextCatpMs: median(rows.map((x) => x.nextCatp)),
  };
  console.log(`address validation, ${reps} fresh clients, 40 ms each way (RTT 80 ms), medians:`);
  console.log(`  small page (index.html, one datagram): first request ${summary.firstSmallMs.toFixed(1)} ms, with the token ${summary.nextSmallMs.toFixed(1)} ms`);
  console.log(`  CATP load (article.html): first ${summary.firstCatpMs.toFixed(1)} ms, with the token ${summary.nextCatpMs.toFixed(1)} ms ` +
    `(+${(summary.firstCatpMs - summary.nextCatpMs).toFixed(1)} ms: the round trip for the token)`);
  const out = path.join(root, 'bench', 'results', 'address-validation.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), reps, summary, rows }, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
});
