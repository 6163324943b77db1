// `catp browse --headless` from the command line: a load that needs only the host's record and the page's tree
// runs Chromium as the window shell does, with no DevTools client attached (no copy of every socket message into a
// DevTools event) and leaves no temporary profile behind, and a browser that exits during the load ends the command
// at once with its own words.
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { ROOT, CORPUS_PAGES, buildRenderer, chromiumPresent, parse5Of } from './helpers';
import { describeIf } from '../helpers/requires';
import { startServer, type DhttpServer } from '../../server';

const CHROMIUM = process.env.CATP_CHROMIUM ?? '/usr/bin/chromium';
const ready = chromiumPresent && existsSync(join(ROOT, 'dist', 'cli', 'main.js')) && CORPUS_PAGES.length > 0;
const maybe = describeIf(ready, 'Chromium, the built CLI and the shared corpus (apt-get install chromium; npm run build)');
jest.setTimeout(90_000);

function catp(args: string[], env: Record<string, string>): Promise<{ code: number | null; out: string; err: string; ms: number }> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'catp.js'), ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((ok) => child.once('exit', (code) => ok({ code, out, err, ms: Date.now() - t0 })));
}

maybe('catp browse --headless', () => {
  let dir: string;
  let server: DhttpServer;
  let renderer: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'catp-headless-cli-'));
    writeFileSync(join(dir, 'page.html'), readFileSync(CORPUS_PAGES[0]!));
    server = await startServer({ root: dir, port: 0, host: '127.0.0.1' });
    renderer = await buildRenderer();
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('--record and --dump-dom: the page completes as parse5 builds it, in a Chromium with no DevTools client', async () => {
    // the browser through a wrapper that notes its command line
    const argsFile = join(dir, 'chromium-args');
    const wrapper = join(dir, 'chromium-wrapper');
    writeFileSync(wrapper, `#!/bin/sh\nprintf '%s\\n' "$@" > '${argsFile}'\nexec '${CHROMIUM}' "$@"\n`);
    chmodSync(wrapper, 0o755);
    const rec = join(dir, 'rec.json');
    const dom = join(dir, 'dom.html');
    const r = await catp(['browse', '--headless', '--record', rec, '--dump-dom', dom, `dhttp://127.0.0.1:${server.port}/page.html`], { CATP_CHROMIUM: wrapper, CATP_RENDERER_DIR: renderer });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^catp browse: complete dhttp:\/\/127\.0\.0\.1:\d+\/page\.html \(catp\): silent time /);
    const record = JSON.parse(readFileSync(rec, 'utf8')) as { outcome: string; transport: string; updates: unknown[]; silentTimeMs: number };
    expect(record.outcome).toBe('complete');
    expect(record.transport).toBe('catp');
    expect(record.updates.length).toBeGreaterThan(0);
    expect(readFileSync(dom, 'utf8')).toBe(parse5Of(join(dir, 'page.html')));
    const args = readFileSync(argsFile, 'utf8').split('\n');
    expect(args).toContain('--headless');
    expect(args.filter((a) => /^--remote-debugging/.test(a))).toEqual([]);
    // its temporary profile is gone with it (its helper processes write there after the browser itself exits)
    const profile = args.find((a) => a.startsWith('--user-data-dir='))?.slice('--user-data-dir='.length);
    expect(profile).toMatch(/catp-chromium-/);
    expect(existsSync(profile!)).toBe(false);
  });

  test('a browser that exits during the load: the command ends at once with its words, exit 1', async () => {
    const fake = join(dir, 'chromium-that-dies');
    writeFileSync(fake, "#!/bin/sh\necho 'fake chromium: no GPU process today' >&2\nexit 7\n");
    chmodSync(fake, 0o755);
    const r = await catp(['browse', '--headless', '--record', join(dir, 'never.json'), `dhttp://127.0.0.1:${server.port}/page.html`], { CATP_CHROMIUM: fake, CATP_RENDERER_DIR: renderer });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/HOST_ERR_BROWSER_EXITED/);
    expect(r.err).toMatch(/exited with code 7 during the load:\n[^]*fake chromium: no GPU process today/);
    expect(r.ms).toBeLessThan(20_000); // not the 30 s wait for a renderer that will never say hello
    expect(existsSync(join(dir, 'never.json'))).toBe(false);
  });
});
