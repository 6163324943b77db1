// `catp link`: run a command on the client side of an emulated link, with (optionally) a server command on
// the other side. The link is lab/link.ts; this is only its command line.
import { type ChildProcess } from 'node:child_process';

import { parse, UsageError, type Io } from '../args';
import { startLink, type GilbertElliott, type LinkCounters, type LinkOptions } from '../../lab/link';

const HELP = `usage: catp link [options] [--server-cmd 'SHELL COMMAND'] -- CMD [ARGS...]

Creates two network namespaces joined by an emulated link (no NAT, plain routes) and runs CMD on the
client side. The server side is reachable from CMD at the address in $CATP_LINK_SERVER (default 10.77.0.2);
the client's own address is $CATP_LINK_CLIENT (10.77.0.1). Real kernel packets cross the link, so TCP
meets real loss. Works as root and rootless (through a user namespace). Everything is removed on exit.

link options (both directions):
  --delay MS           one-way propagation delay in milliseconds (fractions allowed; default 0)
  --rate BYTES_PER_S   bottleneck rate in IP bytes per second (default unlimited)
  --queue BYTES        bottleneck queue bound, tail drop (default the larger of 15000 and 200 ms at the rate)
  --loss P             random (Bernoulli) loss probability, 0 to 1
  --burst PGB,PBG      bursty (Gilbert-Elliott) loss instead: P(good->bad), P(bad->good) per packet;
                       all packets in the bad state are lost (add ,LB,LG for other loss probabilities)
  --reorder P,MS       hold a packet back by an extra MS with probability P
  --seed N             seed of the loss and reorder draws (default 1): the same seed drops the same
                       packet indices in each direction, run after run
other options:
  --server-cmd CMD     a shell command to run on the server side first (stopped when CMD ends)
  --server-wait MS     how long to let the server command start before CMD (default 300)
  --log FILE           write the per-packet log (arrive/depart/drop, CLOCK_MONOTONIC ns) to FILE
  -q, --quiet          print nothing but errors (no banner, no counters)
  -h, --help           show this help

Prints the link's per-direction counters (JSON) on stderr at the end; exits with CMD's exit status.
example:
  catp link --delay 20 --rate 125000 --loss 0.02 --server-cmd 'catp serve demo/site --host 0.0.0.0' -- \\
    sh -c 'catp get --verbose dhttp://$CATP_LINK_SERVER:8080/index.html'
`;

const options = {
  delay: { type: 'string' },
  rate: { type: 'string' },
  queue: { type: 'string' },
  loss: { type: 'string' },
  burst: { type: 'string' },
  reorder: { type: 'string' },
  seed: { type: 'string' },
  log: { type: 'string' },
  'server-cmd': { type: 'string' },
  'server-wait': { type: 'string' },
  quiet: { type: 'boolean', short: 'q' },
  help: { type: 'boolean', short: 'h' },
} as const;

function number(v: string | undefined, name: string, min: number, max: number, integer = false): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    throw new UsageError(`--${name} must be ${integer ? 'a whole number' : 'a number'} from ${min} to ${max}, got '${v}'`);
  }
  return n;
}

function pair(v: string | undefined, name: string, shape: string, min: number): number[] | undefined {
  if (v === undefined) return undefined;
  const parts = v.split(',');
  if (parts.length < min || parts.length > 4) throw new UsageError(`--${name} takes ${shape}, got '${v}'`);
  return parts.map((p) => {
    const n = Number(p);
    if (p.trim() === '' || !Number.isFinite(n) || n < 0) throw new UsageError(`--${name} takes ${shape}, got '${v}'`);
    return n;
  });
}

/** Builds the link's options from the parsed command line (exported for tests). */
export function linkOptionsFromArgs(values: Record<string, string | boolean | undefined>): LinkOptions {
  const str = (k: string) => values[k] as string | undefined;
  const o: LinkOptions = {};
  o.delayMs = number(str('delay'), 'delay', 0, 60000);
  o.rate = number(str('rate'), 'rate', 0, 1e11, true);
  o.queueBytes = number(str('queue'), 'queue', 1, 2 ** 32, true);
  o.loss = number(str('loss'), 'loss', 0, 1);
  const b = pair(str('burst'), 'burst', 'PGB,PBG[,LOSS_BAD[,LOSS_GOOD]]', 2);
  if (b) {
    if (b.some((x) => x > 1)) throw new UsageError(`--burst probabilities must be from 0 to 1, got '${str('burst')}'`);
    const ge: GilbertElliott = { pGoodToBad: b[0]!, pBadToGood: b[1]! };
    if (b[2] !== undefined) ge.lossBad = b[2];
    if (b[3] !== undefined) ge.lossGood = b[3];
    o.burst = ge;
  }
  if (o.loss !== undefined && o.burst) throw new UsageError('--loss and --burst: choose one');
  const r = pair(str('reorder'), 'reorder', 'P,MS', 2);
  if (r) {
    if (r.length !== 2 || r[0]! > 1 || r[1]! > 60000) throw new UsageError(`--reorder takes P,MS (P from 0 to 1, MS up to 60000), got '${str('reorder')}'`);
    o.reorder = { p: r[0]!, extraMs: r[1]! };
  }
  const seed = str('seed');
  if (seed !== undefined) {
    if (!/^\d+$/.test(seed) || BigInt(seed) >= 2n ** 64n) throw new UsageError(`--seed must be a whole number from 0 to 2^64-1, got '${seed}'`);
    o.seed = BigInt(seed);
  }
  if (o.queueBytes !== undefined && !o.rate) throw new UsageError('--queue needs --rate (no rate limit, no queue)');
  if (str('log') !== undefined) o.logPath = str('log');
  else o.log = false;
  for (const k of Object.keys(o) as (keyof LinkOptions)[]) if (o[k] === undefined) delete o[k];
  return o;
}

function describe(o: LinkOptions): string {
  const parts = [`delay ${o.delayMs ?? 0} ms`, o.rate ? `rate ${o.rate} B/s, queue ${o.queueBytes ?? Math.max(15000, Math.floor(o.rate / 5))} B` : 'rate unlimited'];
  if (o.loss !== undefined) parts.push(`loss ${o.loss}`);
  if (o.burst) parts.push(`burst loss p(g->b) ${o.burst.pGoodToBad}, p(b->g) ${o.burst.pBadToGood}`);
  if (o.reorder) parts.push(`reorder ${o.reorder.p} by +${o.reorder.extraMs} ms`);
  parts.push(`seed ${o.seed ?? 1}`);
  return parts.join(', ');
}

function exitStatus(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('error', () => resolve(127));
    child.once('close', (code, signal) => resolve(code ?? (signal ? 128 + (signalNumber(signal) ?? 1) : 1)));
  });
}

function signalNumber(name: NodeJS.Signals): number | undefined {
  return ({ SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as Partial<Record<NodeJS.Signals, number>>)[name];
}

export async function link(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, options);
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  if (positionals.length === 0) throw new UsageError('expected a command to run on the client side (after --)');
  let opts: LinkOptions;
  try {
    opts = linkOptionsFromArgs(values);
  } catch (err) {
    if (err instanceof RangeError) throw new UsageError(err.message);
    throw err;
  }
  const serverWait = number(values['server-wait'], 'server-wait', 0, 600000, true) ?? 300;

  const l = await startLink(opts);
  const env = { ...process.env, CATP_LINK_SERVER: l.serverAddress, CATP_LINK_CLIENT: l.clientAddress };
  const stopSignals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  let client: ChildProcess | undefined;
  const onSignal = () => client?.kill('SIGTERM');
  for (const s of stopSignals) process.on(s, onSignal);
  let status = 1;
  try {
    if (!values.quiet) {
      io.stderr.write(`catp link: client ${l.clientAddress} <-> server ${l.serverAddress} (${describe(opts)})` +
        `${l.rootless ? ' [rootless: user namespace]' : ''}\n`);
    }
    const serverCmd = values['server-cmd'];
    if (serverCmd !== undefined) {
      const server = l.spawnIn('server', 'sh', ['-c', serverCmd], { stdio: ['ignore', 'pipe', 'pipe'], env });
      server.stdout!.pipe(io.stdout, { end: false });
      server.stderr!.pipe(io.stderr, { end: false });
      await new Promise((resolve) => setTimeout(resolve, serverWait));
    }
    client = l.spawnIn('client', positionals[0]!, positionals.slice(1), { stdio: ['inherit', 'pipe', 'pipe'], env });
    client.stdout!.pipe(io.stdout, { end: false });
    client.stderr!.pipe(io.stderr, { end: false });
    status = await exitStatus(client);
  } finally {
    for (const s of stopSignals) process.off(s, onSignal);
    const counters: LinkCounters = await l.close();
    if (!values.quiet) io.stderr.write(`catp link: counters ${JSON.stringify({ c2s: counters.c2s, s2c: counters.s2c })}\n`);
  }
  return status;
}
