// The `catp` command as a user runs it: separate processes, real sockets, the built CLI.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CATP = join(__dirname, '..', '..', 'bin', 'catp.js');
let dir: string;
// `catp get` keeps a DTD payload store under $XDG_CACHE_HOME: keep the tests' one in their own temp dir.
const env = () => ({ ...process.env, XDG_CACHE_HOME: join(dir, 'cache') });
const run = (...args: string[]) => spawnSync(process.execPath, [CATP, ...args], { encoding: 'buffer', timeout: 20_000, env: env() });

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'catp-cli-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test.each(['', 'serve', 'get'])("catp %s --help explains itself", (cmd) => {
  const r = run(...(cmd ? [cmd] : []), '--help');
  expect(r.status).toBe(0);
  expect(r.stdout.toString()).toMatch(/^usage: catp/);
});

test('bad usage exits 2 with a pointer to --help', () => {
  const r = run('get');
  expect(r.status).toBe(2);
  expect(r.stderr.toString()).toContain("catp get --help");
  expect(run('frobnicate').status).toBe(2);
  expect(run('get', 'ftp://x/').stderr.toString()).toMatch(/scheme/i);
  const bind = run('get', '--bind', 'nowhere', 'dhttp://127.0.0.1:9/');
  expect(bind.status).toBe(2);
  expect(bind.stderr.toString()).toMatch(/--bind needs an IP address, not 'nowhere'/);
});

test('catp serve + catp get: small over UDP, large over TCP, -o FILE, --verbose, 404', async () => {
  const small = randomBytes(700);
  const large = randomBytes(100_000);
  writeFileSync(join(dir, 'small.bin'), small);
  writeFileSync(join(dir, 'large.bin'), large);
  const server = spawn(process.execPath, [CATP, 'serve', dir, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const port = await new Promise<number>((ok, fail) => {
      let out = '';
      server.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /dhttp:\/\/127\.0\.0\.1:(\d+)\//.exec(out);
        if (m) ok(Number(m[1]));
      });
      server.once('exit', (code) => fail(new Error(`serve exited ${code}`)));
    });
    const viaUdp = spawnSync(process.execPath, [CATP, 'get', '--verbose', `dhttp://127.0.0.1:${port}/small.bin`], { timeout: 20_000, env: env() });
    expect(viaUdp.status).toBe(0);
    expect(Buffer.compare(viaUdp.stdout, small)).toBe(0);
    const log = viaUdp.stderr.toString();
    expect(log).toMatch(/request id [0-9a-f]{16}/);
    expect(log).toMatch(/via UDP/);

    const out = join(dir, 'out.bin');
    const viaTcp = spawnSync(process.execPath, [CATP, 'get', '-v', '-o', out, `dhttp://127.0.0.1:${port}/large.bin`], { timeout: 20_000, env: env() });
    expect(viaTcp.status).toBe(0);
    expect(viaTcp.stdout.length).toBe(0);
    expect(viaTcp.stderr.toString()).toMatch(/via TCP/);
    expect(readFileSync(out).equals(large)).toBe(true);

    // from another local address (the lab's warm-up does this): the request leaves from it, and the large answer
    // comes over a connection the server opens back to it
    for (const [name, body] of [['small.bin', small], ['large.bin', large]] as const) {
      const bound = spawnSync(process.execPath, [CATP, 'get', '-v', '--bind', '127.0.0.3', `dhttp://127.0.0.1:${port}/${name}`], { timeout: 20_000, env: env() });
      expect(bound.status).toBe(0);
      expect(Buffer.compare(bound.stdout, body)).toBe(0);
      expect(bound.stderr.toString()).toMatch(/endpoint 127\.0\.0\.3 udp:\d+ tcp:\d+/);
    }

    const missing = spawnSync(process.execPath, [CATP, 'get', `dhttp://127.0.0.1:${port}/missing`], { timeout: 20_000, env: env() });
    expect(missing.status).toBe(1);
    expect(missing.stderr.toString()).toMatch(/404/);
  } finally {
    const exited = new Promise((ok) => server.once('exit', ok));
    server.kill('SIGINT');
    await exited;
  }
  expect(server.exitCode).toBe(0);
});

describe('catp browse for a newcomer: what is missing, and what to do', () => {
  const bare = (extra: Record<string, string>) => {
    const e: Record<string, string> = { XDG_CACHE_HOME: join(dir, 'cache'), HOME: dir, ...extra };
    return spawnSync(process.execPath, [CATP, 'browse'], { encoding: 'buffer', timeout: 20_000, env: e });
  };

  test('no browser anywhere: says what to install, exits non-zero', () => {
    const r = bare({ PATH: join(dir, 'empty-bin'), DISPLAY: ':99' });
    expect(r.status).toBe(1);
    const err = r.stderr.toString();
    expect(err).toContain('sudo apt-get install chromium');
    expect(err).toContain('node node_modules/electron/install.js');
    expect(err).toContain('BROWSE_ERR_NO_BROWSER');
  });

  // (CI installs Debian's chromium in /usr/bin.)
  test('a browser but no display: says so and suggests --headless or xvfb-run', () => {
    const r = bare({ PATH: '/usr/bin:/bin' });
    expect(r.status).toBe(1);
    const err = r.stderr.toString();
    expect(err).toContain('DISPLAY and WAYLAND_DISPLAY are unset');
    expect(err).toContain('--headless');
    expect(err).toContain('xvfb-run -a npm start');
    expect(err).toContain('BROWSE_ERR_NO_DISPLAY');
  });

  test('a display nobody serves: the browser exits at once and its own words are shown, exit 1', () => {
    const r = bare({ PATH: '/usr/bin:/bin', DISPLAY: ':987' });
    expect(r.status).toBe(1);
    expect(r.stderr.toString()).toMatch(/exited with code \d+ before showing the window:\n[^]*(X server|DISPLAY|display)/);
  });
});

test("catp get towards a server that drops DHTTP datagrams: three resends, as the browser waits, then HTTP/1.1 on the same port", async () => {
  const dgram = await import('node:dgram');
  const http = await import('node:http');
  // a plain HTTP/1.1 server, and a UDP socket on the same port that reads every datagram and answers none
  const web = http.createServer((_req, res) => res.end('plain answer'));
  await new Promise<void>((ok) => web.listen(0, '127.0.0.1', ok));
  const port = (web.address() as { port: number }).port;
  const silent = dgram.createSocket('udp4');
  let datagrams = 0;
  silent.on('message', () => datagrams++);
  await new Promise<void>((ok) => silent.bind(port, '127.0.0.1', ok));
  try {
    const child = spawn(process.execPath, [CATP, 'get', '--no-store', '-v', `dhttp://127.0.0.1:${port}/x`], { env: env() });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((ok) => child.once('exit', ok));
    expect(code).toBe(0);
    expect(out).toBe('plain answer');
    expect(err).toContain('resend #3');
    expect(err).not.toContain('resend #4');
    expect(err).toMatch(/falling back to plain HTTP\/1\.1/);
    expect(datagrams).toBe(4); // the request and its three resends
  } finally {
    silent.close();
    web.close();
  }
}, 20_000);
