// The silent-time load log: appended per load, resumable, torn last line tolerated, other settings refused;
// and the runner takes logged loads instead of measuring them again.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as zlib from 'node:zlib';

import { loadKey, LoadLogError, openLoadLog, readLoadLog } from '../../lab/silent-time/load-log';
import { runSilentTime, type LoadResult } from '../../lab/silent-time/run';
import { type JsonReport } from '../../lab/silent-time/report';
import { silentTime } from '../../cli/commands/silent-time';
import { PassThrough } from 'node:stream';
import { type Transport } from '../../lab/silent-time/transports';

function result(over: Partial<LoadResult>): LoadResult {
  return {
    page: 'p', pageBytes: 10, transport: 'catp', loss: 0, rep: 0, seed: 1, ok: true,
    silentMs: 100, silentGap: { fromMs: 0, toMs: 100 }, firstPaintMs: 100, completionMs: 200, loadEventMs: 200, updates: 2, updateTimesMs: [100, 200],
    frames: 10, samplingMaxMs: 17, samplingMedianMs: 16.7, floorMs: 90, floorGap: null, meanGapMs: 50, expectedMs: 50,
    usefulPackets: 2, duplicatePackets: 0, unmatchedPackets: 0, droppedToClient: { loss: 0, queue: 0, other: 0 },
    requestSource: 'link-log', navToRequestMs: 1, warnings: [], ...over,
  };
}

describe('load log', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-loadlog-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('appends loads, reopens them with the same settings, skips a torn last line', () => {
    const file = path.join(dir, 'run.jsonl');
    const settings = { rate: 10000, losses: [0, 0.1] };
    const a = openLoadLog(file, settings);
    expect(a.previous.size).toBe(0);
    a.append(result({ rep: 0 }));
    a.append(result({ rep: 1, silentMs: Infinity }));
    a.close();
    fs.appendFileSync(file, '{"type":"load","load":{"page":"p","trans'); // a crash mid-write
    const b = openLoadLog(file, { losses: [0, 0.1], rate: 10000 }); // key order does not matter
    expect(b.previous.size).toBe(2);
    expect(b.tornLines).toBe(1);
    expect(b.previous.get(loadKey(result({ rep: 0 })))?.silentMs).toBe(100);
    expect(b.previous.get(loadKey(result({ rep: 1 })))?.silentMs).toBeNull();
    b.append(result({ rep: 2 }));
    b.close();
    const read = readLoadLog(file);
    expect(read.loads.map((l) => l.rep)).toEqual([0, 1, 2]);
    expect(read.tornLines).toBe(1);
  });

  test('refuses a log written with other settings, and files that are not load logs', () => {
    const file = path.join(dir, 'run.jsonl');
    openLoadLog(file, { rate: 10000 }).close();
    expect(() => openLoadLog(file, { rate: 20000 })).toThrow(expect.objectContaining({ code: 'LOAD_LOG_SETTINGS' }));
    const junk = path.join(dir, 'junk.jsonl');
    fs.writeFileSync(junk, 'not json\n');
    expect(() => readLoadLog(junk)).toThrow(LoadLogError);
    expect(() => readLoadLog(path.join(dir, 'missing.jsonl'))).toThrow(expect.objectContaining({ code: 'LOAD_LOG_BAD' }));
  });

  test('reads a gzipped log as it is (docs/results keeps them so), and names one that does not unpack', () => {
    const file = path.join(dir, 'run.jsonl');
    const l = openLoadLog(file, { rate: 10000 });
    l.append(result({ rep: 0 }));
    l.append(result({ rep: 1 }));
    l.close();
    const gz = path.join(dir, 'run.jsonl.gz');
    fs.writeFileSync(gz, zlib.gzipSync(fs.readFileSync(file)));
    expect(readLoadLog(gz)).toEqual(readLoadLog(file));
    const cut = path.join(dir, 'cut.jsonl.gz');
    fs.writeFileSync(cut, fs.readFileSync(gz).subarray(0, 20));
    expect(() => readLoadLog(cut)).toThrow(expect.objectContaining({ code: 'LOAD_LOG_BAD', message: expect.stringContaining('does not unpack') }));
  });

  test('--from reports several logs together (one panel per page), warning when their links differ', async () => {
    const a = path.join(dir, 'a.jsonl');
    const b = path.join(dir, 'b.jsonl');
    const la = openLoadLog(a, { rate: 10000, delayMs: 10 });
    la.append(result({ page: 'gen-10k', silentMs: 100 }));
    la.append(result({ page: 'gen-10k', rep: 1, silentMs: 300 }));
    la.close();
    const lb = openLoadLog(b, { rate: 20000, delayMs: 10 });
    lb.append(result({ page: 'gen-50k', silentMs: 500 }));
    lb.close();
    const out = path.join(dir, 'r.json');
    const chart = path.join(dir, 'r.svg');
    let stdout = '';
    let stderr = '';
    const o = new PassThrough().on('data', (d: Buffer) => (stdout += d.toString()));
    const e = new PassThrough().on('data', (d: Buffer) => (stderr += d.toString()));
    expect(await silentTime(['--from', `${a},${b}`, '--json', out, '--chart', chart], { stdout: o, stderr: e })).toBe(0);
    const r = JSON.parse(fs.readFileSync(out, 'utf8')) as JsonReport;
    expect(r.summary.map((x) => [x.page, x.loads, x.silentMean])).toEqual([['gen-10k', 2, 200], ['gen-50k', 1, 500]]);
    expect(stdout).toContain('3 loads from');
    expect(stderr).toContain('measured on another link');
    expect(fs.readFileSync(chart, 'utf8')).toContain('gen-50k');
    await expect(silentTime(['--from', path.join(dir, 'nope.jsonl')], { stdout: new PassThrough(), stderr: new PassThrough() })).rejects.toThrow(/cannot read/);
  });

  test('--from says how the UDP senders got their rate: told (the oracle ablation, or a log from before rate discovery) or found', async () => {
    const found = path.join(dir, 'found.jsonl');
    const told = path.join(dir, 'told.jsonl');
    const old = path.join(dir, 'old.jsonl');
    for (const [file, settings] of [[found, { rate: 50000, oracleRate: false }], [told, { rate: 50000, oracleRate: true }], [old, { rate: 50000 }]] as const) {
      const l = openLoadLog(file, settings);
      l.append(result({ page: 'p', silentMs: 100 }));
      l.close();
    }
    const run = async (file: string, chart?: string): Promise<string> => {
      let stdout = '';
      const o = new PassThrough().on('data', (d: Buffer) => (stdout += d.toString()));
      expect(await silentTime(['--from', file, ...(chart ? ['--chart', chart] : [])], { stdout: o, stderr: new PassThrough() })).toBe(0);
      return stdout;
    };
    expect(await run(found)).toContain('rate found by the sender (no oracle)');
    expect(await run(told)).toContain('ORACLE RATE (ablation');
    const chart = path.join(dir, 'old.svg');
    expect(await run(old, chart)).toContain('ORACLE RATE (ablation');
    expect(fs.readFileSync(chart, 'utf8')).toContain('oracle rate, ablation');
  });

  test('--from says how frames were captured (a log without the setting: every vsync), warning when logs differ', async () => {
    const vsync = path.join(dir, 'vsync.jsonl');
    const damage = path.join(dir, 'damage.jsonl');
    for (const [file, settings] of [[vsync, { rate: 50000, oracleRate: false }], [damage, { rate: 50000, oracleRate: false, capture: 'damage' }]] as const) {
      const l = openLoadLog(file, settings);
      l.append(result({ page: 'p', silentMs: 100 }));
      l.close();
    }
    const run = async (files: string): Promise<{ stdout: string; stderr: string }> => {
      let stdout = '';
      let stderr = '';
      const o = new PassThrough().on('data', (d: Buffer) => (stdout += d.toString()));
      const e = new PassThrough().on('data', (d: Buffer) => (stderr += d.toString()));
      expect(await silentTime(['--from', files], { stdout: o, stderr: e })).toBe(0);
      return { stdout, stderr };
    };
    expect((await run(vsync)).stdout).toContain('frames captured every vsync');
    expect((await run(damage)).stdout).toContain('frames captured on change (--capture damage)');
    const both = await run(`${vsync},${damage}`);
    expect(both.stderr).toContain('was captured otherwise (--capture damage)');
    expect(both.stderr).not.toContain('another link');
  });

  test('--from with --baseline: CATP against the others, and the run against the baseline load for load', async () => {
    const now = path.join(dir, 'now.jsonl');
    const before = path.join(dir, 'before.jsonl');
    const elsewhere = path.join(dir, 'elsewhere.jsonl');
    const settings = { rate: 50000, delayMs: 40, oracleRate: false, capture: 'damage' };
    const ln = openLoadLog(now, settings);
    ln.append(result({ transport: 'catp', silentMs: 120 }));
    ln.append(result({ transport: 'tcp', silentMs: 300 }));
    ln.append(result({ transport: 'catp', rep: 1, seed: 2, silentMs: 90 }));
    ln.append(result({ transport: 'tcp', rep: 1, seed: 2, silentMs: 200 }));
    ln.close();
    const lb = openLoadLog(before, settings);
    lb.append(result({ transport: 'catp', silentMs: 150 }));
    lb.append(result({ transport: 'catp', rep: 1, seed: 2, silentMs: 100 }));
    lb.close();
    const le = openLoadLog(elsewhere, { ...settings, rate: 10000 });
    le.append(result({ transport: 'catp', silentMs: 150 }));
    le.close();
    const run = async (args: string[]): Promise<{ stdout: string; stderr: string }> => {
      let stdout = '';
      let stderr = '';
      const o = new PassThrough().on('data', (d: Buffer) => (stdout += d.toString()));
      const e = new PassThrough().on('data', (d: Buffer) => (stderr += d.toString()));
      expect(await silentTime(args, { stdout: o, stderr: e })).toBe(0);
      return { stdout, stderr };
    };
    const out = path.join(dir, 'r.json');
    const a = await run(['--from', now, '--baseline', before, '--json', out]);
    // one page: catp's mean 105 against tcp's 250, at or below it and below half of it
    expect(a.stdout).toMatch(/^0%\s+tcp\s+1\s+105\s+250\s+0\.42\s+1 of 1\s+1 of 1$/m);
    expect(a.stdout).toContain(`against ${before}, load for load`);
    expect(a.stdout).toMatch(/^catp\s+0%\s+2\s+0\.849\s+2 of 2\s+−20 ± 10/m);
    expect(a.stderr).toBe('');
    const r = JSON.parse(fs.readFileSync(out, 'utf8')) as JsonReport;
    expect(r.versus).toEqual([{ loss: 0, other: 'tcp', pages: 1, referenceMean: 105, otherMean: 250, atOrBelow: 1, atOrBelowHalf: 1 }]);
    expect(r.paired?.baseline).toEqual([before]);
    expect(r.paired?.rows.map((x) => [x.transport, x.pairs, x.lower])).toEqual([['catp', 2, 2]]);
    // a baseline measured on another link is said to be
    expect((await run(['--from', now, '--baseline', elsewhere])).stderr).toContain(`${elsewhere} was measured on another link than this run`);
    // a baseline that cannot be read stops the command before anything is measured
    await expect(silentTime(['--baseline', path.join(dir, 'nope.jsonl'), 'page.html'], { stdout: new PassThrough(), stderr: new PassThrough() })).rejects.toThrow(/cannot read/);
  });

  test('the runner takes logged loads as they are and measures only the rest', async () => {
    // A transport that is unavailable fails fast without a link: enough to see which loads were attempted.
    const attempted: string[] = [];
    const t: Transport = {
      name: 'catp',
      unavailable: async () => {
        attempted.push('x');
        return 'not here';
      },
      load: async () => {
        throw new Error('not reached');
      },
    };
    const page = { name: 'p', bytes: 10, root: dir, urlPath: '/p.html' };
    const previous = new Map([[loadKey(result({ rep: 0, seed: 1 })), result({ rep: 0, seed: 1 })]]);
    const logged: LoadResult[] = [];
    const out = await runSilentTime({
      pages: [page], losses: [0], transports: [t], reps: 2, seed: 1, delayMs: 0, rate: 0, server: 'catp', previous, onResult: (r) => logged.push(r),
    });
    expect(out).toHaveLength(2);
    expect(out[0]).toBe(previous.values().next().value);
    expect(attempted).toHaveLength(1);
    expect(logged.map((r) => [r.rep, r.seed, r.ok, r.error])).toEqual([[1, 2, false, 'not here']]);
  });
});
