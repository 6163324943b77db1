// The h3 transport (issue "measure against what users have today"): stock Chromium over HTTP/3 to Caddy, through
// the emulated link, measured from compositor frames like the chromium transport; the load says which protocol
// Chromium used, and one that came over TCP would be an error, not an h3 load.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';

import { silentTime } from '../../cli/commands/silent-time';
import { CADDY_MODULE, CADDY_VERSION, findCaddy } from '../../lab/caddy';
import { repoRoot } from '../../lab/silent-time/origin';
import { type JsonReport } from '../../lab/silent-time/report';
import { type LoadResult } from '../../lab/silent-time/run';
import { testIf } from '../helpers/requires';
import { requireLab } from './helpers';

const withCaddy = testIf(findCaddy(repoRoot()) !== null, 'Caddy (npm run lab:caddy)');

describe('h3 transport', () => {
  jest.setTimeout(180_000);

  test('npm run lab:caddy installs the version the lab names', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts['lab:caddy']).toContain(`${CADDY_MODULE}@${CADDY_VERSION}`);
  });

  withCaddy('one page over h3 through the emulated link at 10% loss: Chromium used HTTP/3, silent time measured from its frames', async () => {
    requireLab();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-h3-'));
    try {
      const json = path.join(dir, 'r.json');
      let stdout = '';
      const out = new PassThrough();
      out.on('data', (d: Buffer) => (stdout += d.toString()));
      const code = await silentTime(
        ['--sizes', '10k', '--loss', '0.1', '--reps', '1', '--transports', 'h3', '--delay', '10', '--rate', '50000', '--seed', '3', '--settle', '600', '--json', json, '-q'],
        { stdout: out, stderr: new PassThrough() },
      );
      expect(code).toBe(0);
      const report = JSON.parse(fs.readFileSync(json, 'utf8')) as JsonReport;
      const r = report.loads[0] as LoadResult;
      expect({ ok: r.ok, error: r.error, protocol: r.protocol }).toEqual({ ok: true, error: undefined, protocol: 'h3' });
      expect(r.method).toBe('compositor-screencast');
      // the request is the QUIC Initial the emulator saw; the answer came in several UDP datagrams
      expect(r.requestSource).toBe('link-log');
      expect(r.usefulPackets).toBeGreaterThanOrEqual(2);
      expect(r.silentMs!).toBeGreaterThan(0);
      expect(r.firstPaintMs!).toBeGreaterThan(0);
      expect(r.completionMs!).toBeGreaterThanOrEqual(r.silentMs!);
      expect(stdout).toMatch(/gen-10k\s+h3\s+10%\s+1/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
