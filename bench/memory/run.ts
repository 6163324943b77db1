// The reference server's memory under hostile load, measured as its process's RSS (/proc/PID/status: VmRSS now,
// VmHWM at its peak), the server running as `catp serve` in a child process of its own:
//
//   1. slowloris: 1,000 client connections from 40 loopback addresses (25 each), each sending a request line and
//      then one header line every 2 s, held for 12 s (past the 10 s request-head deadline);
//   2. large files: N clients (default 1,000, 25 per loopback address) that ask for a 64 MiB file over plain
//      HTTP/1.1 and never read: what the server holds for answers nobody takes. Files above 1 MiB stream from disk
//      under the server's body budget (128 MiB in all, 16 MiB per address by default), so this should stay flat
//      in N; and meanwhile one client at another address that does read: it gets the whole file (time and rate).
//
//   npm run build && node dist/bench/memory/run.js [--large N]   (writes bench/results/memory.json)
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { BenchError, failureStatus, failureText } from '../errors';
import { gitCommit } from '../commit';

const MiB = 1024 * 1024;

const HELP = `usage: node dist/bench/memory/run.js [options]      (npm run bench:memory -- [options])

The reference server's memory under hostile load: the RSS of catp serve in a child process (/proc/PID/status:
VmRSS and VmHWM; Linux only) idle; under 1,000 slowloris connections from 40 loopback addresses, each sending a header
line every 2 s for 12 s; then under N clients (25 a loopback address) that ask for a 64 MiB file over HTTP/1.1 and
never read, while one client at another address reads the whole file (its time).
Prints the figures and writes bench/results/memory.json.

options:
  --large N    clients that never read the 64 MiB file (1 to 4000; default 1000)
  -h, --help   show this help`;

function parseArgs(argv: string[]): { large: number } | 'help' {
  let large = 1000;
  const usage = (msg: string) => new BenchError('BENCH_ERR_USAGE', `${msg} (--help for the options)`);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') return 'help';
    const m = /^--large(?:=(.*))?$/.exec(a);
    if (!m) throw usage(`unknown argument ${a}`);
    large = Number(m[1] ?? argv[++i]);
    if (!Number.isInteger(large) || large < 1 || large > 4000) throw usage('--large takes an integer from 1 to 4000');
  }
  return { large };
}

function status(pid: number): { rss: number; hwm: number } {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/** Resets VmHWM to the current RSS (Linux: write 5 to clear_refs), so each phase reports its own peak. */
function resetPeak(pid: number): void {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
  } catch {
    // not allowed here: the peak then covers every phase so far
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function startServe(root: string): Promise<{ child: ChildProcess; port: number }> {
  const bin = path.join(__dirname, '..', '..', '..', 'bin', 'catp.js');
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawn(process.execPath, [bin, 'serve', root, '--host', '0.0.0.0', '--port', String(port), '-q'], { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 100; i++) {
    const up = await new Promise<boolean>((ok) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        ok(true);
      });
      s.on('error', () => ok(false));
    });
    if (up) return { child, port };
    await sleep(100);
  }
  child.kill();
  throw new BenchError('BENCH_ERR_SERVER', 'catp serve did not start');
}

async function slowloris(port: number, pid: number): Promise<Record<string, number>> {
  const socks: net.Socket[] = [];
  let open = 0;
  let closedByServer = 0;
  for (let a = 0; a < 40; a++) {
    for (let k = 0; k < 25; k++) {
      const s = net.connect({ port, host: '127.0.0.1', localAddress: `127.0.1.${a + 1}` });
      s.on('connect', () => {
        open++;
        s.write('GET /small.bin HTTP/1.1\r\nHost: x\r\n');
      });
      s.on('error', () => undefined);
      s.on('close', () => closedByServer++);
      s.on('data', () => undefined);
      socks.push(s);
    }
  }
  const timer = setInterval(() => {
    for (const s of socks) if (!s.destroyed) s.write(`X-Slow-${Date.now() % 1000}: y\r\n`);
  }, 2000);
  let peak = 0;
  const t0 = Date.now();
  let atOpen = 0;
  while (Date.now() - t0 < 12_000) {
    await sleep(250);
    peak = Math.max(peak, status(pid).rss);
    if (atOpen === 0 && Date.now() - t0 > 1500) atOpen = open;
  }
  clearInterval(timer);
  const still = socks.filter((s) => !s.destroyed).length;
  for (const s of socks) s.destroy();
  return { connectionsAttempted: socks.length, connectedAfter1500ms: atOpen, stillOpenAfter12s: still, closedByServer, peakRssBytes: peak, hwmBytes: status(pid).hwm };
}

/** One client that reads the whole file: bytes received and how long it took (ms). */
function readAll(port: number, localAddress: string): Promise<{ bytes: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let bytes = 0;
    const s = net.connect({ port, host: '127.0.0.1', localAddress }, () => s.write('GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    s.on('data', (d) => (bytes += d.length));
    s.on('error', reject);
    s.on('close', () => resolve({ bytes, ms: performance.now() - t0 }));
  });
}

async function largeFiles(port: number, pid: number, n: number): Promise<Record<string, number>> {
  const socks: net.Socket[] = [];
  let connected = 0;
  for (let i = 0; i < n; i++) {
    const s = net.connect({ port, host: '127.0.0.1', localAddress: `127.0.${2 + Math.floor(i / 25 / 250)}.${1 + (Math.floor(i / 25) % 250)}` });
    s.on('connect', () => {
      connected++;
      s.write('GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n');
      s.pause(); // never reads: the answer piles up on the server's side
    });
    s.on('error', () => undefined);
    socks.push(s);
  }
  let peak = 0;
  for (let t = 0; t < 20; t++) {
    await sleep(250);
    peak = Math.max(peak, status(pid).rss);
  }
  // meanwhile, a client at an address of its own that reads
  const sampler = setInterval(() => (peak = Math.max(peak, status(pid).rss)), 250);
  const reader = await readAll(port, '127.0.9.1');
  clearInterval(sampler);
  for (let t = 0; t < 8; t++) {
    await sleep(250);
    peak = Math.max(peak, status(pid).rss);
  }
  for (const s of socks) s.destroy();
  return { clients: n, connected, fileBytes: 64 * MiB, peakRssBytes: peak, hwmBytes: status(pid).hwm, readerBytes: reader.bytes, readerMs: Math.round(reader.ms) };
}

async function main(): Promise<void> {
  const parsed = parseArgs(process.argv.slice(2));
  if (parsed === 'help') {
    console.log(HELP);
    return;
  }
  const { large } = parsed;
  const commit = gitCommit();
  if (os.platform() !== 'linux') throw new BenchError('BENCH_ERR_PLATFORM', 'bench:memory reads /proc: Linux only');
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-bench-memory-'));
  fs.writeFileSync(path.join(root, 'small.bin'), Buffer.alloc(500, 1));
  const fd = fs.openSync(path.join(root, 'big.bin'), 'w');
  const chunk = Buffer.alloc(MiB, 7);
  for (let k = 0; k < 64; k++) fs.writeSync(fd, chunk);
  fs.closeSync(fd);
  const { child, port } = await startServe(root);
  const pid = child.pid as number;
  try {
    await sleep(500);
    const idle = status(pid).rss;
    resetPeak(pid);
    const loris = await slowloris(port, pid);
    await sleep(1000);
    const afterLoris = status(pid).rss;
    resetPeak(pid);
    const big = await largeFiles(port, pid, large);
    await sleep(1000);
    const summary = {
      idleRssMiB: +(idle / MiB).toFixed(1),
      slowloris: { ...loris, peakRssMiB: +(loris.peakRssBytes / MiB).toFixed(1), growthMiB: +((loris.peakRssBytes - idle) / MiB).toFixed(1) },
      afterSlowlorisRssMiB: +(afterLoris / MiB).toFixed(1),
      largeFiles: { ...big, peakRssMiB: +(big.peakRssBytes / MiB).toFixed(1), growthMiB: +((big.peakRssBytes - afterLoris) / MiB).toFixed(1) },
    };
    console.log(`server RSS idle: ${summary.idleRssMiB} MiB`);
    console.log(`1,000 slowloris connections from 40 addresses (25 each), 12 s: peak ${summary.slowloris.peakRssMiB} MiB (+${summary.slowloris.growthMiB}); ` +
      `${loris.connectedAfter1500ms} connected, ${loris.stillOpenAfter12s} still open after 12 s`);
    console.log(`${large} clients that never read a 64 MiB file (${big.connected} connected): peak ${summary.largeFiles.peakRssMiB} MiB ` +
      `(+${summary.largeFiles.growthMiB} MiB); meanwhile a reader at another address got ${(big.readerBytes / MiB).toFixed(1)} MiB in ${big.readerMs} ms`);
    const out = path.join(__dirname, '..', '..', '..', 'bench', 'results', 'memory.json');
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), commit, summary }, null, 2)}\n`);
    console.log(`wrote ${path.relative(process.cwd(), out)}`);
  } finally {
    child.kill('SIGINT');
    fs.rmSync(root, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(failureText(err));
  process.exitCode = failureStatus(err);
});
