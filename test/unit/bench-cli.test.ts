// Every benchmark's command line, built: --help prints its usage and runs nothing; an unknown argument is one line
// naming it (no stack trace) and exit status 2, as `catp`'s own.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');
const BENCHES = ['address-validation', 'catp', 'congestion', 'dtd', 'memory', 'render', 'sim', 'transport', 'viewport'];

const run = (bench: string, arg: string) =>
  spawnSync(process.execPath, [join(ROOT, 'dist', 'bench', bench, 'run.js'), arg], { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });

describe.each(BENCHES)('bench:%s', (bench) => {
  test('--help prints the usage and exits 0', () => {
    const r = run(bench, '--help');
    expect(r.status).toBe(0);
    expect(r.stdout.startsWith(`usage: node dist/bench/${bench}/run.js`)).toBe(true);
    expect(r.stdout).toMatch(/-h, --help/);
  });

  test('an unknown argument is named in one line, exit 2', () => {
    const r = run(bench, '--no-such-option');
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/--no-such-option/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
