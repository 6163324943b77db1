// Transport benchmark: matched datagrams per second through the native addon vs. through Node's own
// dgram doing the same ID matching in JavaScript. A second process (sender.ts) blasts datagrams at the
// receiver over loopback, half with outstanding IDs, half without; the two receivers alternate for
// several rounds. Prints a table and writes bench/results/transport.json.
//
// Two figures per receiver: matched datagrams per wall-clock second while receiving (bounded by how
// fast the sender and the kernel's loopback path can go: on a small VM that is the sender), and the
// receiving process's CPU time per datagram arriving (user + system, process.cpuUsage), whose
// inverse, "capacity", is how many matched datagrams per second one core could take at that cost.
//
// A second phase measures a *burst*: the receiver's event loop is kept busy (a synchronous spin, as when a
// renderer is painting) while the sender queues --burst datagrams in the socket buffer; then the loop is
// released and the receiver drains the queue. That is the case batching exists for: the native endpoint
// takes the whole queue in a few crossings into JavaScript, dgram in one callback per datagram. Reported:
// drain rate (matched datagrams per second of draining) and CPU per datagram while draining.
//
//   npm run build && npm run bench:transport -- --count 200000 --rounds 5 --size 200 --burst 4000
import * as child_process from 'node:child_process';
import * as crypto from 'node:crypto';
import * as dgram from 'node:dgram';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Endpoint, packageRoot } from '../../native';
import type { SendJob, SendResult } from './sender';
import { BenchError, failureStatus, failureText } from '../errors';
import { gitCommit } from '../commit';

interface Options { count: number; rounds: number; size: number; burst: number }
interface BurstResult { mode: Mode; round: number; matched: number; kernelDrops: number; drainMs: number; cpuUs: number; batches?: number }
type Mode = 'native' | 'dgram';
interface RoundResult {
  round: number; mode: Mode; sent: number; matched: number; expectedMatched: number; kernelDrops: number;
  receiveMs: number; matchedPerSec: number; senderPerSec: number; cpuUsPerDatagram: number;
  capacityMatchedPerSec: number; batches?: number;
}

const HELP = `usage: node dist/bench/transport/run.js [options]      (npm run bench:transport -- [options])

Matched datagrams per second through the native addon against Node's own dgram doing the same ID matching in
JavaScript: a second process blasts datagrams at the receiver over loopback, half with outstanding IDs, half without;
the two receivers alternate for several rounds. Per receiver: matched datagrams per wall-clock second while
receiving, the receiving process's CPU time per datagram, and its inverse, capacity (matched datagrams per second one
core could take). Then a burst: the receiver's event loop is kept busy while the sender queues datagrams in the socket
buffer, then it drains them: matched datagrams per second of draining, CPU per datagram.
Prints tables and writes bench/results/transport.json.

options:
  --count N       datagrams sent to each receiver a round, steady phase (default 200000)
  --rounds N      rounds, each phase; the receivers alternate which goes first (default 5)
  --size BYTES    bytes a datagram, 8 to 1460 (default 200)
  --burst N       datagrams queued while the receiver is busy (default 4000)
  -h, --help      show this help`;

function parseArgs(argv: string[]): Options | 'help' {
  const opts: Options = { count: 200_000, rounds: 5, size: 200, burst: 4000 };
  const usage = (msg: string) => new BenchError('BENCH_ERR_USAGE', `${msg} (--help for the options)`);
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-h' || argv[i] === '--help') return 'help';
    const m = /^--(count|rounds|size|burst)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw usage(`unknown argument ${argv[i]}`);
    const value = Number(m[2] ?? argv[++i]);
    if (!Number.isInteger(value) || value <= 0) throw usage(`--${m[1]} needs a positive integer`);
    opts[m[1] as keyof Options] = value;
  }
  if (opts.size < 8 || opts.size > 1460) throw usage('--size must be 8..1460 (one DHTTP datagram)');
  return opts;
}

/** Kernel drop counter of the IPv4 UDP socket bound to `port` (the last column of /proc/net/udp). */
function kernelDrops(port: number): number {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const line of fs.readFileSync('/proc/net/udp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length > 12 && f[1].endsWith(`:${hexPort}`)) return Number(f[f.length - 1]);
  }
  return 0;
}

/** Resolves once `count()` has stopped growing for `quietMs`. */
async function quiesce(count: () => number, quietMs = 150): Promise<void> {
  let last = -1;
  let since = Date.now();
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    const now = count();
    if (now !== last) { last = now; since = Date.now(); } else if (Date.now() - since >= quietMs) return;
  }
}

/** CPU microseconds (user + system) this process used since `since`. */
function cpuSince(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since);
  return d.user + d.system;
}

function finish(res: SendResult, opts: Options, matched: number, drops: number, first: bigint, last: bigint,
  cpuUs: number, batches?: number): Omit<RoundResult, 'round' | 'mode'> {
  const receiveMs = Number(last - first) / 1e6;
  const arrived = res.sent - drops;
  const cpuUsPerDatagram = arrived > 0 ? cpuUs / arrived : 0;
  return {
    sent: res.sent, matched, expectedMatched: Math.ceil(opts.count / 2), kernelDrops: drops, receiveMs,
    matchedPerSec: receiveMs > 0 ? matched / (receiveMs / 1000) : 0, senderPerSec: res.sent / (res.elapsedMs / 1000),
    cpuUsPerDatagram, capacityMatchedPerSec: cpuUs > 0 ? matched / (cpuUs / 1e6) : 0,
    ...(batches === undefined ? {} : { batches }),
  };
}

class Sender {
  private readonly child = child_process.fork(path.join(__dirname, 'sender.js'), [], { stdio: 'inherit' });
  send(job: SendJob): Promise<SendResult> {
    return new Promise((resolve, reject) => {
      this.child.once('message', (m) => resolve(m as SendResult));
      this.child.once('error', reject);
      this.child.send(job);
    });
  }
  close(): void { this.child.send('exit'); }
}

/** A receiver under test: counts matched datagrams and when the first and the last reached JavaScript. */
interface Receiver {
  port: number;
  matched: number;
  first: bigint;
  last: bigint;
  /** Closes it; returns the kernel's drop count and, for the native endpoint, its crossings into JavaScript. */
  close(): Promise<{ kernelDrops: number; batches?: number }>;
}

function count(rx: Receiver, n: number): void {
  const t = process.hrtime.bigint();
  if (rx.first === 0n) rx.first = t;
  rx.last = t;
  rx.matched += n;
}

/** The native endpoint matching IDs in C++, or Node's dgram with the same matching in JavaScript. */
async function openReceiver(mode: Mode, ids: Buffer[]): Promise<Receiver> {
  if (mode === 'native') {
    const rx: Receiver = {
      port: 0, matched: 0, first: 0n, last: 0n,
      close: async () => {
        const c = ep.counters();
        ep.close();
        return { kernelDrops: c.kernelDrops, batches: c.batches };
      },
    };
    const ep = new Endpoint({ host: '127.0.0.1' }, (batch) => {
      let n = 0;
      for (const e of batch) if (e.kind === 'datagram') n++;
      if (n > 0) count(rx, n);
    });
    ids.forEach((id) => ep.expect(id));
    rx.port = ep.udpPort;
    return rx;
  }
  const table = new Set<bigint>(ids.map((b) => b.readBigUInt64LE(0)));
  const sock = dgram.createSocket({ type: 'udp4', recvBufferSize: 4 * 1024 * 1024 });
  const rx: Receiver = {
    port: 0, matched: 0, first: 0n, last: 0n,
    close: async () => {
      const drops = kernelDrops(rx.port);  // read before the socket (and its /proc/net/udp line) goes away
      await new Promise<void>((resolve) => sock.close(() => resolve()));
      return { kernelDrops: drops };
    },
  };
  sock.on('message', (msg) => {
    if (msg.length >= 8 && table.has(msg.readBigUInt64LE(0))) count(rx, 1);
  });
  await new Promise<void>((resolve) => sock.bind(0, '127.0.0.1', resolve));
  rx.port = sock.address().port;
  return rx;
}

/** Steady stream: the sender sends `opts.count` datagrams as fast as it can while the receiver keeps up. */
async function runSteady(mode: Mode, sender: Sender, opts: Options, ids: Buffer[]): Promise<Omit<RoundResult, 'round' | 'mode'>> {
  const rx = await openReceiver(mode, ids);
  const cpu0 = process.cpuUsage();
  const res = await sender.send({ port: rx.port, count: opts.count, size: opts.size, ids: ids.map((b) => b.toString('hex')) });
  const cpuUs = cpuSince(cpu0);  // the sender is done: everything it sent has arrived or was dropped
  await quiesce(() => rx.matched);
  const c = await rx.close();
  return finish(res, opts, rx.matched, c.kernelDrops, rx.first, rx.last, cpuUs, c.batches);
}

/** Keeps this thread busy (no event loop turns) for `ms`. */
function spin(ms: number): void {
  const until = process.hrtime.bigint() + BigInt(Math.round(ms * 1e6));
  while (process.hrtime.bigint() < until) { /* busy, like a long paint */ }
}

/**
 * One burst: ask the sender for `opts.burst` datagrams, keep the loop busy until they are all queued in the
 * socket buffer, then time the drain.
 */
async function runBurst(mode: Mode, sender: Sender, opts: Options, ids: Buffer[], round: number): Promise<BurstResult> {
  const rx = await openReceiver(mode, ids);
  const done = sender.send({ port: rx.port, count: opts.burst, size: opts.size, ids: ids.map((b) => b.toString('hex')) });
  spin(Math.max(100, opts.burst / 20));  // the sender needs ~10 µs a datagram; leave it ample time
  const cpu0 = process.cpuUsage();
  await done;
  await quiesce(() => rx.matched, 60);
  const cpuUs = cpuSince(cpu0);
  const c = await rx.close();
  return {
    mode, round, matched: rx.matched, kernelDrops: c.kernelDrops, drainMs: Number(rx.last - rx.first) / 1e6, cpuUs,
    ...(c.batches === undefined ? {} : { batches: c.batches }),
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main(): Promise<void> {
  const parsed = parseArgs(process.argv.slice(2));
  if (parsed === 'help') {
    console.log(HELP);
    return;
  }
  const opts = parsed;
  const commit = gitCommit();
  const ids = Array.from({ length: 512 }, () => { const b = crypto.randomBytes(8); b[0] |= 0x80; return b; });
  const sender = new Sender();
  let burstSender: Sender | null = null;
  const sender2 = (): Sender => (burstSender ??= new Sender());
  const results: RoundResult[] = [];
  const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
  console.log(`transport bench: ${opts.rounds} rounds x ${fmt(opts.count)} datagrams of ${opts.size} bytes, half matched, loopback`);
  console.log('round  receiver  matched/expected  kernelDrops  batches   matched/s   sender/s  cpu µs/dgram  capacity/s');
  try {
    for (let round = 1; round <= opts.rounds; round++) {
      // Alternate which goes first so neither always gets the warmer machine.
      const order: Mode[] = round % 2 ? ['native', 'dgram'] : ['dgram', 'native'];
      for (const mode of order) {
        const r = await runSteady(mode, sender, opts, ids);
        results.push({ round, mode, ...r });
        console.log(`${String(round).padStart(5)}  ${mode.padEnd(8)}  ${`${fmt(r.matched)}/${fmt(r.expectedMatched)}`.padStart(16)}` +
          `  ${fmt(r.kernelDrops).padStart(11)}  ${(r.batches === undefined ? '-' : fmt(r.batches)).padStart(7)}` +
          `  ${fmt(r.matchedPerSec).padStart(10)}  ${fmt(r.senderPerSec).padStart(9)}` +
          `  ${r.cpuUsPerDatagram.toFixed(2).padStart(12)}  ${fmt(r.capacityMatchedPerSec).padStart(10)}`);
      }
    }
  } finally {
    sender.close();
  }
  const med = (mode: Mode, key: 'matchedPerSec' | 'cpuUsPerDatagram' | 'capacityMatchedPerSec'): number =>
    median(results.filter((r) => r.mode === mode).map((r) => r[key]));
  const summary = {
    native: { matchedPerSec: med('native', 'matchedPerSec'), cpuUsPerDatagram: med('native', 'cpuUsPerDatagram'),
      capacityMatchedPerSec: med('native', 'capacityMatchedPerSec') },
    dgram: { matchedPerSec: med('dgram', 'matchedPerSec'), cpuUsPerDatagram: med('dgram', 'cpuUsPerDatagram'),
      capacityMatchedPerSec: med('dgram', 'capacityMatchedPerSec') },
    ratio: { matchedPerSec: 0, capacityMatchedPerSec: 0 },
  };
  const div = (a: number, b: number): number => (b > 0 ? a / b : 0);
  summary.ratio.matchedPerSec = div(summary.native.matchedPerSec, summary.dgram.matchedPerSec);
  summary.ratio.capacityMatchedPerSec = div(summary.native.capacityMatchedPerSec, summary.dgram.capacityMatchedPerSec);
  console.log('');
  console.log(`medians over ${opts.rounds} rounds   matched/s   cpu µs/dgram   capacity (matched/s per core)`);
  for (const mode of ['native', 'dgram'] as const) {
    const m = summary[mode];
    console.log(`${mode.padEnd(20)} ${fmt(m.matchedPerSec).padStart(10)}   ${m.cpuUsPerDatagram.toFixed(2).padStart(12)}   ${fmt(m.capacityMatchedPerSec).padStart(12)}`);
  }
  console.log(`${'native / dgram'.padEnd(20)} ${`${summary.ratio.matchedPerSec.toFixed(2)}x`.padStart(10)}   ${''.padStart(12)}   ${`${summary.ratio.capacityMatchedPerSec.toFixed(2)}x`.padStart(12)}`);

  console.log('');
  console.log(`burst drain: ${fmt(opts.burst)} datagrams queued while the receiver's loop is busy, half matched`);
  console.log('round  receiver  matched  kernelDrops  batches  drain ms  matched/s draining  cpu µs/dgram');
  const bursts: BurstResult[] = [];
  try {
    for (let round = 1; round <= opts.rounds; round++) {
      const order: Mode[] = round % 2 ? ['native', 'dgram'] : ['dgram', 'native'];
      for (const mode of order) {
        const b = await runBurst(mode, sender2(), opts, ids, round);
        bursts.push(b);
        console.log(`${String(round).padStart(5)}  ${mode.padEnd(8)}  ${fmt(b.matched).padStart(7)}  ${fmt(b.kernelDrops).padStart(11)}` +
          `  ${(b.batches === undefined ? '-' : fmt(b.batches)).padStart(7)}  ${b.drainMs.toFixed(2).padStart(8)}` +
          `  ${fmt(b.drainMs > 0 ? b.matched / (b.drainMs / 1000) : 0).padStart(18)}  ${(b.cpuUs / opts.burst).toFixed(2).padStart(12)}`);
      }
    }
  } finally {
    sender2().close();
  }
  const bmed = (mode: Mode, f: (b: BurstResult) => number): number => median(bursts.filter((b) => b.mode === mode).map(f));
  const drainRate = (b: BurstResult): number => (b.drainMs > 0 ? b.matched / (b.drainMs / 1000) : 0);
  const burstSummary = {
    native: { drainMatchedPerSec: bmed('native', drainRate), cpuUsPerDatagram: bmed('native', (b) => b.cpuUs / opts.burst) },
    dgram: { drainMatchedPerSec: bmed('dgram', drainRate), cpuUsPerDatagram: bmed('dgram', (b) => b.cpuUs / opts.burst) },
  };
  console.log('');
  console.log(`burst medians        matched/s draining   cpu µs/dgram`);
  for (const mode of ['native', 'dgram'] as const) {
    const m = burstSummary[mode];
    console.log(`${mode.padEnd(20)} ${fmt(m.drainMatchedPerSec).padStart(18)}   ${m.cpuUsPerDatagram.toFixed(2).padStart(12)}`);
  }
  console.log(`${'native / dgram'.padEnd(20)} ${`${div(burstSummary.native.drainMatchedPerSec, burstSummary.dgram.drainMatchedPerSec).toFixed(2)}x`.padStart(18)}` +
    `   ${`${div(burstSummary.dgram.cpuUsPerDatagram, burstSummary.native.cpuUsPerDatagram).toFixed(2)}x less`.padStart(12)}`);

  const out = path.join(packageRoot(), 'bench', 'results', 'transport.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({
    date: new Date().toISOString(), commit, node: process.version, cpus: os.cpus().length, cpu: os.cpus()[0]?.model,
    options: opts, median: summary, rounds: results, burst: { median: burstSummary, rounds: bursts },
  }, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), out) || out}`);
}

main().catch((err: unknown) => {
  console.error(failureText(err));
  process.exitCode = failureStatus(err);
});
