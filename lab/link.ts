// The emulated link: starts catp-linkemu (native/linkemu), which creates two network namespaces, 'client'
// and 'server', each with a TUN device, and moves real kernel IPv4 packets between them with delay, rate
// limit, bounded tail-drop queue, loss and reordering per direction. No NAT, no iptables: both TUNs sit in
// one /24 (10.77.0.1 and 10.77.0.2 by default) and the kernel's subnet route sends everything across.
//
// Nothing outlives the Link: the namespaces are anonymous (never bind-mounted, so `ip netns list` never
// shows them) and are held only by the emulator process and what runs inside them. The emulator dies with
// its parent (PR_SET_PDEATHSIG) and on its way out SIGKILLs every process still inside its namespaces, so
// even a test process killed with SIGKILL leaves no namespace, device or process behind. The default
// per-packet log is a temp file unlinked as soon as the emulator has it open.
//
// Rootless: when not root (or with userns: 'always') the emulator first creates a user namespace in which
// it is root, and spawnIn() joins that user namespace too (nsenter --user). That needs unprivileged user
// namespaces and a /dev/net/tun the user may open (mode 0666, Debian's udev default).
//
// Clock: log times are CLOCK_MONOTONIC nanoseconds, the clock of process.hrtime.bigint() in any namespace
// on the host. realtimeMinusMonotonicNs maps CLOCK_REALTIME stamps (SO_TIMESTAMPNS) onto it.
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { LabError } from './errors';

export type Side = 'client' | 'server';
export type Dir = 'c2s' | 's2c';

/** Gilbert-Elliott loss: a two-state Markov chain stepped once per packet. */
export interface GilbertElliott {
  pGoodToBad: number;
  pBadToGood: number;
  /** loss probability in the bad state (default 1) */
  lossBad?: number;
  /** loss probability in the good state (default 0) */
  lossGood?: number;
}

export interface DirectionOptions {
  /** propagation delay, ms (fractions allowed) */
  delayMs?: number;
  /** bottleneck rate in IP bytes per second; 0 or absent = unlimited */
  rate?: number;
  /** queue bound in bytes, the packet on the wire included (default max(15000, 200 ms at the rate)) */
  queueBytes?: number;
  /** queue bound in packets (default none) */
  queuePackets?: number;
  /** Bernoulli loss probability */
  loss?: number;
  /** Gilbert-Elliott loss (not together with loss) */
  burst?: GilbertElliott;
  /** with probability p, hold a packet back by an extra extraMs */
  reorder?: { p: number; extraMs: number };
}

export interface LinkOptions extends DirectionOptions {
  /** overrides for the client-to-server direction */
  c2s?: DirectionOptions;
  /** overrides for the server-to-client direction */
  s2c?: DirectionOptions;
  /** seed of the loss and reorder streams (default 1) */
  seed?: number | bigint;
  /** keep the per-packet log in this file; default: an unlinked temp file read through log() */
  logPath?: string;
  /** false: no per-packet log at all */
  log?: boolean;
  /** 'auto' (default): a user namespace when not root */
  userns?: 'auto' | 'always' | 'never';
  clientAddress?: string;
  serverAddress?: string;
  prefix?: number;
  mtu?: number;
  /** the emulator binary (default build/Release/catp-linkemu, or $CATP_LINKEMU) */
  binary?: string;
  readyTimeoutMs?: number;
}

export interface DirectionCounters {
  packetsIn: number;
  bytesIn: number;
  delivered: number;
  bytesOut: number;
  droppedLoss: number;
  droppedQueue: number;
  droppedNonIp: number;
  droppedWrite: number;
  droppedOverflow: number;
  reordered: number;
  /** packets held in the delay line / queue right now (at exit: never delivered) */
  pending: number;
  maxBacklogBytes: number;
  /** how late deliveries were against their schedule (timer wake-up latency) */
  meanLateNs: number;
  maxLateNs: number;
}

export interface LinkCounters {
  c2s: DirectionCounters;
  s2c: DirectionCounters;
  /** only in close()'s answer: processes the emulator had to SIGKILL inside its namespaces on exit */
  killedLeftovers?: number;
}

export type DropReason = 'loss' | 'queue' | 'nonip' | 'write' | 'overflow';

export interface LogEvent {
  /** CLOCK_MONOTONIC ns */
  tNs: bigint;
  dir: Dir;
  ev: 'arrive' | 'depart' | 'drop';
  /** index of the packet in its direction (k-th IPv4 packet read); -1 for non-IPv4 */
  idx: number;
  /** IP packet length */
  len: number;
  proto: number;
  src: string;
  sport: number;
  dst: string;
  dport: number;
  ipId: number;
  /** depart: actual minus scheduled departure */
  lateNs?: number;
  /** depart: this packet was held back for reordering */
  heldBack?: boolean;
  /** drop: why */
  reason?: DropReason;
}

export interface LinkLog {
  realtimeMinusMonotonicNs: bigint;
  seed: string;
  events: LogEvent[];
}

export interface Link {
  readonly clientAddress: string;
  readonly serverAddress: string;
  /** the emulator's pid */
  readonly pid: number;
  /** true when the namespaces live in a user namespace of their own (rootless mode) */
  readonly rootless: boolean;
  readonly realtimeMinusMonotonicNs: bigint;
  /** inode numbers of the two network namespaces (for checking that they are gone) */
  readonly netnsInodes: { client: number; server: number };
  /** the nsenter arguments (before '--') that put a command into a side */
  nsenterArgs(side: Side): string[];
  /** runs cmd inside a side's network namespace; the returned process is the command itself */
  spawnIn(side: Side, cmd: string, args?: readonly string[], opts?: SpawnOptions): ChildProcess;
  /** runs cmd to completion inside a side; resolves with its exit code and output */
  runIn(side: Side, cmd: string, args?: readonly string[], timeoutMs?: number): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** the emulator's per-direction counters now */
  counters(): Promise<LinkCounters>;
  /** the per-packet log so far (flushed first); after close() only with logPath */
  log(): Promise<LinkLog>;
  /** stops the processes started with spawnIn, then the emulator; resolves with the final counters */
  close(): Promise<LinkCounters>;
}

/** Where the project keeps the built emulator. */
export function linkemuPath(): string {
  if (process.env.CATP_LINKEMU) return process.env.CATP_LINKEMU;
  let dir = __dirname;
  for (let i = 0; i < 5; i++) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'binding.gyp'))) {
      return path.join(dir, 'build', 'Release', 'catp-linkemu');
    }
    dir = path.dirname(dir);
  }
  return path.resolve(__dirname, '..', 'build', 'Release', 'catp-linkemu');
}

/**
 * Whether this machine and user can run the link: the emulator is built, nsenter is there, and either we
 * are root or unprivileged user namespaces and /dev/net/tun are open to us. `reason` says what is missing.
 */
export function labSupport(binary = linkemuPath()): { ok: true; mode: 'root' | 'userns' } | { ok: false; reason: string } {
  if (process.platform !== 'linux') return { ok: false, reason: 'the link emulator needs Linux (network namespaces, TUN)' };
  if (!fs.existsSync(binary)) return { ok: false, reason: `the link emulator is not built: ${binary} is missing (npm install / npx node-gyp rebuild)` };
  if (spawnSync('nsenter', ['--version']).status !== 0) return { ok: false, reason: 'nsenter (util-linux) is not installed' };
  if (process.getuid?.() === 0) return { ok: true, mode: 'root' };
  try {
    fs.accessSync('/dev/net/tun', fs.constants.R_OK | fs.constants.W_OK);
  } catch {
    return { ok: false, reason: 'not root, and /dev/net/tun is not readable and writable by this user (rootless needs mode 0666)' };
  }
  const r = spawnSync('unshare', ['--user', '--map-root-user', '--net', 'true'], { encoding: 'utf8' });
  if (r.status !== 0) return { ok: false, reason: `not root, and unprivileged user namespaces do not work here: ${(r.stderr || String(r.error)).trim()}` };
  return { ok: true, mode: 'userns' };
}

function num(name: string, v: number, lo: number, hi: number): string {
  if (!Number.isFinite(v) || v < lo || v > hi) throw new RangeError(`${name} must be a number from ${lo} to ${hi}, got ${v}`);
  return String(v);
}

function int(name: string, v: number, lo: number, hi: number): string {
  if (!Number.isInteger(v) || v < lo || v > hi) throw new RangeError(`${name} must be a whole number from ${lo} to ${hi}, got ${v}`);
  return String(v);
}

function directionArgs(prefix: string, o: DirectionOptions): string[] {
  const a: string[] = [];
  const opt = (name: string, value: string) => a.push(`--${prefix}${name}=${value}`);
  if (o.delayMs !== undefined) opt('delay', num('delayMs', o.delayMs, 0, 60000));
  if (o.rate !== undefined) opt('rate', int('rate', o.rate, 0, 1e11));
  if (o.queueBytes !== undefined) opt('queue', int('queueBytes', o.queueBytes, 1, 2 ** 32));
  if (o.queuePackets !== undefined) opt('queue-packets', int('queuePackets', o.queuePackets, 1, 1e6));
  if (o.loss !== undefined) opt('loss', num('loss', o.loss, 0, 1));
  if (o.burst !== undefined) {
    const b = o.burst;
    opt('burst', [num('pGoodToBad', b.pGoodToBad, 0, 1), num('pBadToGood', b.pBadToGood, 0, 1),
      num('lossBad', b.lossBad ?? 1, 0, 1), num('lossGood', b.lossGood ?? 0, 0, 1)].join(','));
  }
  if (o.reorder !== undefined) opt('reorder', `${num('reorder.p', o.reorder.p, 0, 1)},${num('reorder.extraMs', o.reorder.extraMs, 0, 60000)}`);
  return a;
}

/** The emulator's command-line arguments for these options (no log, no userns: startLink adds those). */
export function emulatorArgs(o: LinkOptions): string[] {
  const a = directionArgs('', o);
  if (o.c2s) a.push(...directionArgs('c2s-', o.c2s));
  if (o.s2c) a.push(...directionArgs('s2c-', o.s2c));
  if (o.seed !== undefined) {
    const s = BigInt(o.seed);
    if (s < 0n || s >= 2n ** 64n) throw new RangeError(`seed must be from 0 to 2^64-1, got ${s}`);
    a.push(`--seed=${s}`);
  }
  if (o.clientAddress !== undefined) a.push(`--client-addr=${o.clientAddress}`);
  if (o.serverAddress !== undefined) a.push(`--server-addr=${o.serverAddress}`);
  if (o.prefix !== undefined) a.push(`--prefix=${int('prefix', o.prefix, 8, 30)}`);
  if (o.mtu !== undefined) a.push(`--mtu=${int('mtu', o.mtu, 576, 9000)}`);
  return a;
}

const REASONS: ReadonlySet<string> = new Set(['loss', 'queue', 'nonip', 'write', 'overflow']);

/** Parses the emulator's per-packet log (format in lab/README.md). */
export function parseLog(text: string): LinkLog {
  const out: LinkLog = { realtimeMinusMonotonicNs: 0n, seed: '', events: [] };
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /realtime_minus_monotonic_ns (-?\d+)/.exec(line);
      if (m) out.realtimeMinusMonotonicNs = BigInt(m[1]!);
      const s = /^# seed (\d+)/.exec(line);
      if (s) out.seed = s[1]!;
      continue;
    }
    const f = line.split(' ');
    if (f.length < 12) continue;  // a line cut short by a crash
    const e: LogEvent = {
      tNs: BigInt(f[0]!),
      dir: f[1] as Dir,
      ev: f[2] === 'A' ? 'arrive' : f[2] === 'D' ? 'depart' : 'drop',
      idx: Number(f[3]),
      len: Number(f[4]),
      proto: Number(f[5]),
      src: f[6]!,
      sport: Number(f[7]),
      dst: f[8]!,
      dport: Number(f[9]),
      ipId: Number(f[10]),
    };
    if (e.ev === 'depart') {
      e.lateNs = Number(f[11]);
      e.heldBack = f[12] === 'r';
    } else if (e.ev === 'drop') {
      if (!REASONS.has(f[11]!)) continue;
      e.reason = f[11] as DropReason;
    }
    out.events.push(e);
  }
  return out;
}

/** The indices k < n that the loss generator drops in one direction for these settings (no network needed). */
export async function dryRunLoss(o: { n: number; dir?: Dir; seed?: number | bigint; loss?: number; burst?: GilbertElliott; binary?: string }): Promise<number[]> {
  const args = [...emulatorArgs({ seed: o.seed, loss: o.loss, burst: o.burst }), `--dry-run-loss=${int('n', o.n, 0, 1e8)}`, `--dry-run-dir=${o.dir ?? 'c2s'}`];
  const bin = o.binary ?? linkemuPath();
  const { code, stdout, stderr } = await collect(spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
  if (code !== 0) throw new LabError('LAB_ERR_LINKEMU', `catp-linkemu --dry-run-loss failed (${code}): ${stderr.trim()}`);
  return (JSON.parse(stdout) as { dropped: number[] }).dropped;
}

function collect(child: ChildProcess, timeoutMs = 0): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = timeoutMs > 0 ? setTimeout(() => child.kill('SIGKILL'), timeoutMs) : undefined;
    child.on('error', (err) => {
      if (timer) clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

interface ReadyLine {
  event: 'ready';
  pid: number;
  userns: boolean;
  realtimeMinusMonotonicNs: number;
  client: { address: string; netnsFd: number; netnsIno: number };
  server: { address: string; netnsFd: number; netnsIno: number };
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (exited(child)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** Starts the emulated link; resolves once both namespaces are up. */
export async function startLink(options: LinkOptions = {}): Promise<Link> {
  const args = emulatorArgs(options);
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const userns = options.userns === 'always' || (options.userns !== 'never' && !isRoot);
  if (userns) args.push('--userns');

  // The log: the caller's file, or a temp file that we unlink as soon as the emulator holds it open, so
  // that nothing is left even if this process is killed. We read it through our own descriptor.
  let logFd: number | undefined;
  let tempLog: string | undefined;
  const wantLog = options.log !== false;
  if (wantLog) {
    if (options.logPath) {
      logFd = fs.openSync(options.logPath, 'w+', 0o644);
    } else {
      tempLog = path.join(os.tmpdir(), `catp-linkemu-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}.log`);
      logFd = fs.openSync(tempLog, 'wx+', 0o600);
    }
    args.push('--log-fd=3');
  }
  const bin = options.binary ?? linkemuPath();
  if (!fs.existsSync(bin)) {
    if (logFd !== undefined) fs.closeSync(logFd);
    if (tempLog) fs.rmSync(tempLog, { force: true });
    throw new LabError('LAB_ERR_LINKEMU_NOT_BUILT', `the link emulator is not built: ${bin} is missing (run npm install or npx node-gyp rebuild)`);
  }
  let emu: ChildProcess;
  try {
    emu = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe', ...(logFd !== undefined ? [logFd] : [])] });
  } finally {
    if (tempLog) fs.rmSync(tempLog, { force: true });
  }

  let stderr = '';
  emu.stderr!.setEncoding('utf8').on('data', (d: string) => {
    if (stderr.length < 8192) stderr += d;
  });
  const lines = readline.createInterface({ input: emu.stdout! });
  const countersWaiters: Array<{ resolve: (c: LinkCounters) => void; reject: (e: Error) => void }> = [];
  let exitCounters: LinkCounters | undefined;
  let onReady: ((r: ReadyLine) => void) | undefined;
  lines.on('line', (line) => {
    let msg: { event?: string };
    try {
      msg = JSON.parse(line) as { event?: string };
    } catch {
      return;
    }
    if (msg.event === 'ready') onReady?.(msg as ReadyLine);
    else if (msg.event === 'counters') countersWaiters.shift()?.resolve(msg as unknown as LinkCounters);
    else if (msg.event === 'exit') exitCounters = msg as unknown as LinkCounters;
  });
  const emuClosed = new Promise<void>((resolve) => emu.once('close', () => resolve()));
  emu.once('exit', () => {
    for (const w of countersWaiters.splice(0)) w.reject(new LabError('LAB_ERR_LINKEMU_EXITED', `the link emulator has exited: ${stderr.trim() || 'no message'}`));
  });

  const ready = await new Promise<ReadyLine>((resolve, reject) => {
    const timer = setTimeout(() => {
      emu.kill('SIGKILL');
      reject(new LabError('LAB_ERR_LINKEMU_TIMEOUT', `the link emulator did not come up within ${options.readyTimeoutMs ?? 10000} ms: ${stderr.trim()}`));
    }, options.readyTimeoutMs ?? 10000);
    onReady = (r) => {
      clearTimeout(timer);
      resolve(r);
    };
    emu.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    emu.once('exit', (code, signal) => {
      clearTimeout(timer);
      void emuClosed.then(() =>
        reject(new LabError('LAB_ERR_LINKEMU_EXITED', `the link emulator exited during set-up (${signal ?? `code ${code}`}): ${stderr.trim() || 'no message'}`)),
      );
    });
  }).catch((err: unknown) => {
    if (logFd !== undefined) fs.closeSync(logFd);
    throw err;
  });

  const pid = ready.pid;
  const children = new Set<ChildProcess>();
  const nsenterArgs = (side: Side): string[] => {
    const fd = side === 'client' ? ready.client.netnsFd : ready.server.netnsFd;
    const a = [`--net=/proc/${pid}/fd/${fd}`];
    // --preserve-credentials: no setgroups() (denied in a rootless user namespace); our uid maps to root there.
    if (ready.userns) a.unshift(`--user=/proc/${pid}/ns/user`, '--preserve-credentials');
    return a;
  };
  let closing: Promise<LinkCounters> | undefined;
  let chain: Promise<unknown> = Promise.resolve();

  const counters = (): Promise<LinkCounters> => {
    const next = chain.then(
      () =>
        new Promise<LinkCounters>((resolve, reject) => {
          if (closing || exited(emu)) {
            reject(new LabError('LAB_ERR_LINK_CLOSED', 'the link is closed'));
            return;
          }
          const timer = setTimeout(() => reject(new LabError('LAB_ERR_LINKEMU_TIMEOUT', 'the link emulator did not answer SIGUSR1 within 5 s')), 5000);
          countersWaiters.push({
            resolve: (c) => {
              clearTimeout(timer);
              resolve(c);
            },
            reject: (e) => {
              clearTimeout(timer);
              reject(e);
            },
          });
          emu.kill('SIGUSR1');
        }),
    );
    chain = next.catch(() => undefined);
    return next;
  };

  const readLog = (): LinkLog => {
    if (logFd === undefined) {
      if (!wantLog) throw new LabError('LAB_ERR_NO_LOG', 'this link keeps no log (log: false)');
      if (options.logPath) return parseLog(fs.readFileSync(options.logPath, 'utf8'));
      throw new LabError('LAB_ERR_NO_LOG', 'the link is closed and its temporary log is gone: call log() before close(), or pass logPath');
    }
    const size = fs.fstatSync(logFd).size;
    const buf = Buffer.alloc(size);
    let off = 0;
    while (off < size) {
      const n = fs.readSync(logFd, buf, off, size - off, off);
      if (n === 0) break;
      off += n;
    }
    return parseLog(buf.subarray(0, off).toString('utf8'));
  };

  const link: Link = {
    clientAddress: ready.client.address,
    serverAddress: ready.server.address,
    pid,
    rootless: ready.userns,
    realtimeMinusMonotonicNs: BigInt(ready.realtimeMinusMonotonicNs),
    netnsInodes: { client: ready.client.netnsIno, server: ready.server.netnsIno },
    nsenterArgs,
    spawnIn(side, cmd, cmdArgs = [], opts = {}) {
      if (closing || exited(emu)) throw new LabError('LAB_ERR_LINK_CLOSED', 'the link is closed');
      const child = spawn('nsenter', [...nsenterArgs(side), '--', cmd, ...cmdArgs], opts);
      children.add(child);
      child.once('exit', () => children.delete(child));
      child.once('error', () => children.delete(child));
      return child;
    },
    runIn(side, cmd, cmdArgs = [], timeoutMs = 30000) {
      return collect(link.spawnIn(side, cmd, cmdArgs, { stdio: ['ignore', 'pipe', 'pipe'] }), timeoutMs);
    },
    counters,
    async log() {
      if (!closing && !exited(emu)) await counters(); // SIGUSR1 flushes the log first
      else if (closing) await closing.catch(() => undefined);
      return readLog();
    },
    close() {
      closing ??= (async () => {
        // Ask the processes we started to stop, give them a moment, then stop the emulator, which
        // SIGKILLs whatever is still inside its namespaces (descendants included) before it exits.
        for (const c of children) if (!exited(c)) c.kill('SIGTERM');
        await Promise.all([...children].map((c) => waitExit(c, 1000)));
        if (!exited(emu)) emu.kill('SIGTERM');
        if (!(await waitExit(emu, 5000))) emu.kill('SIGKILL');
        await emuClosed;
        await Promise.all([...children].map((c) => waitExit(c, 2000)));
        if (logFd !== undefined) fs.closeSync(logFd);
        logFd = undefined;
        if (!exitCounters) throw new LabError('LAB_ERR_LINKEMU_EXITED', `the link emulator ended without its counters: ${stderr.trim() || 'no message'}`);
        return exitCounters;
      })();
      return closing;
    },
  };
  return link;
}
