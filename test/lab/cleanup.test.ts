// The link leaves nothing behind: no namespace, device, process or temp file, after close() and after the
// orchestrating process is SIGKILLed; as root and rootless (an unprivileged uid in a user namespace).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import * as ts from 'typescript';

import { linkemuPath, startLink } from '../../lab/link';
import { requireLab } from './helpers';

jest.setTimeout(60_000);

const root = path.resolve(__dirname, '..', '..');
const NOBODY = 65534;

/** Every pid whose network namespace is one of these inodes. */
function pidsIn(inodes: number[]): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (inodes.includes(fs.statSync(`/proc/${name}/ns/net`).ino)) out.push(Number(name));
    } catch {
      // gone, or not ours to look at
    }
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

const netnsList = () => spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout;
/** The emulator logs in the temp dir that `pids` created (a lab run beside the tests has its own: not ours to count). */
const tempLogs = (pids: readonly number[]) => fs.readdirSync(os.tmpdir()).filter((f) => pids.some((p) => f.startsWith(`catp-linkemu-${p}-`)));

async function eventually(pred: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

interface Up {
  step: 'up';
  uid: number;
  pid: number;
  rootless: boolean;
  inodes: { client: number; server: number };
  sleepers: number[];
  received: number;
  minOwdMs: number;
  clientAddr: string;
}

/** lab/link.ts and the child script, transpiled into a world-readable temp dir (an unprivileged uid may not reach the repo). */
function buildChildDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-lab-child-'));
  fs.chmodSync(dir, 0o755);
  for (const rel of ['lab/link.ts', 'lab/errors.ts', 'protocol/errors.ts', 'test/lab/programs.ts', 'test/lab/orchestrator-child.ts']) {
    const out = ts.transpileModule(fs.readFileSync(path.join(root, rel), 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
    }).outputText;
    const dest = path.join(dir, rel.replace(/\.ts$/, '.js'));
    fs.mkdirSync(path.dirname(dest), { recursive: true, mode: 0o755 });
    for (let d = path.dirname(dest); d !== dir; d = path.dirname(d)) fs.chmodSync(d, 0o755);
    fs.writeFileSync(dest, out, { mode: 0o644 });
  }
  fs.copyFileSync(linkemuPath(), path.join(dir, 'catp-linkemu'));
  fs.chmodSync(path.join(dir, 'catp-linkemu'), 0o755);
  return dir;
}

/**
 * Starts the child orchestrator. Rootless: as uid 65534 with every capability dropped. This machine's
 * /dev/net/tun is mode 0600 (stock Debian's udev makes it 0666), so the child runs in a private mount
 * namespace with a 0666 node of the same device over /dev/net: the emulator then meets exactly what an
 * unprivileged user meets on a stock system. The mount namespace (and that node) dies with the child.
 */
function startChild(dir: string, mode: 'close' | 'die', rootless: boolean): {
  child: ChildProcess; closed: Promise<unknown>; next: (step: string) => Promise<Record<string, unknown>>;
} {
  const script = path.join(dir, 'test', 'lab', 'orchestrator-child.js');
  const env = { ...process.env, CATP_LINKEMU: path.join(dir, 'catp-linkemu') };
  let child: ChildProcess;
  if (rootless && process.getuid?.() === 0) {
    const sh = 'mount -t tmpfs -o mode=755 tmpfs /dev/net && mknod -m 666 /dev/net/tun c 10 200 && ' +
      `exec setpriv --reuid=${NOBODY} --regid=${NOBODY} --clear-groups --inh-caps=-all --bounding-set=-all "$@"`;
    child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', sh, 'sh', process.execPath, script, mode], {
      env, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'],
    });
  } else {
    child = spawn(process.execPath, [script, mode], { env, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  }
  const closed = new Promise((resolve) => child.once('close', resolve));
  const lines: string[] = [];
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const rl = readline.createInterface({ input: child.stdout! });
  rl.on('line', (l) => lines.push(l));
  const next = async (step: string) => {
    const ok = await eventually(() => lines.some((l) => l.includes(`"step":"${step}"`) || l.includes('"step":"error"')) || child.exitCode !== null, 30_000);
    const line = lines.find((l) => l.includes(`"step":"${step}"`));
    if (!ok || !line) throw new Error(`child orchestrator: no '${step}' step: ${lines.join('\n')} ${stderr}`);
    return JSON.parse(line) as Record<string, unknown>;
  };
  return { child, closed, next };
}

async function expectNothingLeft(up: { pid: number; inodes: { client: number; server: number }; sleepers: number[] }, netnsBefore: string, logsBefore: string[], logPids: readonly number[]): Promise<void> {
  const inodes = [up.inodes.client, up.inodes.server];
  // The emulator's exit sweep is synchronous, but the kernel reaps asynchronously: allow a moment.
  expect(await eventually(() => pidsIn(inodes).length === 0 && !alive(up.pid) && up.sleepers.every((p) => !alive(p)), 5000)).toBe(true);
  expect(pidsIn(inodes)).toEqual([]);
  expect(alive(up.pid)).toBe(false);
  expect(netnsList()).toBe(netnsBefore);
  expect(spawnSync('ip', ['link', 'show', 'catp0']).status).not.toBe(0);
  expect(tempLogs(logPids)).toEqual(logsBefore);
}

let childDir = '';
beforeAll(() => {
  requireLab();
  childDir = buildChildDir();
});
afterAll(() => {
  if (childDir) fs.rmSync(childDir, { recursive: true, force: true });
});

test('close() leaves no namespace, device, process or temp file behind', async () => {
  const netnsBefore = netnsList();
  const logsBefore = tempLogs([process.pid]);
  const link = await startLink({ delayMs: 1 });
  const inodes = [link.netnsInodes.client, link.netnsInodes.server];
  expect(link.netnsInodes.client).not.toBe(link.netnsInodes.server);
  // Loopback up and the TUN addressed in each namespace, MTU 1500; nothing of ours in the host's namespace.
  const c = await link.runIn('client', 'ip', ['-o', 'addr', 'show']);
  expect(c.stdout).toMatch(/lo\s+inet 127\.0\.0\.1\/8/);
  expect(c.stdout).toMatch(new RegExp(`catp0\\s+inet ${link.clientAddress.replace(/\./g, '\\.')}/24`));
  expect((await link.runIn('server', 'ip', ['-o', 'link', 'show', 'catp0'])).stdout).toMatch(/catp0: .*mtu 1500/);
  expect(netnsList()).toBe(netnsBefore); // anonymous namespaces: never named, never bind-mounted
  const sh = link.spawnIn('server', 'sh', ['-c', 'sleep 1000 & sleep 1000; wait'], { stdio: 'ignore' });
  const term = link.spawnIn('client', 'sh', ['-c', 'trap "" TERM; sleep 1000 & wait; sleep 1000'], { stdio: 'ignore' }); // ignores SIGTERM
  expect(await eventually(() => pidsIn(inodes).length >= 6, 5000)).toBe(true); // emulator, 2 shells, 3+ sleeps
  const inside = pidsIn(inodes);
  const counters = await link.close();
  expect(counters.c2s).toBeDefined();
  await expectNothingLeft({ pid: link.pid, inodes: link.netnsInodes, sleepers: [sh.pid!, term.pid!, ...inside] }, netnsBefore, logsBefore, [process.pid]);
  await expect(link.counters()).rejects.toThrow(/closed/);
  expect(() => link.spawnIn('client', 'true')).toThrow(/closed/);
});

for (const rootless of [false, true]) {
  const who = rootless ? `rootless (uid ${NOBODY}, user namespace)` : 'as the current user';
  describe(who, () => {
    test('a link works and close() leaves nothing behind', async () => {
      const netnsBefore = netnsList();
      const { child, closed: childClosed, next } = startChild(childDir, 'close', rootless);
      const logsBefore = tempLogs([child.pid!]);
      const up = (await next('up')) as unknown as Up;
      if (rootless) {
        expect(up.uid).toBe(NOBODY);
        expect(up.rootless).toBe(true);
      }
      expect(up.received).toBe(20);
      expect(up.minOwdMs).toBeGreaterThanOrEqual(10);
      expect(up.clientAddr).toMatch(/inet 10\.77\.0\.1\/24/);
      const closed = (await next('closed')) as { counters: { c2s: { delivered: number } } };
      expect(closed.counters.c2s.delivered).toBe(20);
      await childClosed;
      await expectNothingLeft(up, netnsBefore, logsBefore, [child.pid!]);
    });

    test('SIGKILL of the orchestrating process still leaves nothing behind', async () => {
      const netnsBefore = netnsList();
      const { child, closed: childClosed, next } = startChild(childDir, 'die', rootless);
      const logsBefore = tempLogs([child.pid!]);
      const up = (await next('up')) as unknown as Up;
      expect(pidsIn([up.inodes.client, up.inodes.server]).length).toBeGreaterThanOrEqual(5);
      child.kill('SIGKILL');
      await childClosed;
      await expectNothingLeft(up, netnsBefore, logsBefore, [child.pid!]);
    });
  });
}
