// The layer rules (eslint.config.js, README "Folders") fail on a deliberate violation in each layer, and let the
// allowed imports through: lint is run here on probe sources placed (virtually) in each folder.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';

jest.setTimeout(120_000);

const root = path.resolve(__dirname, '..', '..');

/**
 * ESLint loads its config with a dynamic import, which jest's module sandbox refuses: lint all probes in one
 * child process (ESLint's API, the project's own config) and return, per probe, the layer errors it reported.
 */
function lintProbes(probes: ReadonlyArray<[string, string]>): string[][] {
  const script = `
    const { ESLint } = require('eslint');
    const path = require('path');
    (async () => {
      const probes = JSON.parse(require('fs').readFileSync(0, 'utf8'));
      const eslint = new ESLint({ cwd: process.cwd() });
      const out = [];
      for (const [file, code] of probes) {
        const [r] = await eslint.lintText(code, { filePath: path.join(process.cwd(), file) });
        out.push(r.messages.filter((m) => m.severity === 2 && /restricted/.test(m.ruleId || '')).map((m) => m.message));
      }
      process.stdout.write(JSON.stringify(out));
    })().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });`;
  const r = spawnSync(process.execPath, ['-e', script], { cwd: root, input: JSON.stringify(probes), encoding: 'utf8', timeout: 110_000 });
  if (r.status !== 0) throw new Error(`eslint probe run failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as string[][];
}

const cases: Array<[string, string, boolean]> = [
  // [file, source, violates]
  ['protocol/probe.ts', "import * as fs from 'node:fs'; export const x = fs;", true],
  ['protocol/probe.ts', "import { startServer } from '../server'; export const x = startServer;", true],
  ['protocol/probe.ts', 'export const x = Buffer.alloc(1);', true],
  ['protocol/probe.ts', 'export const x = setTimeout;', true],
  ['protocol/probe.ts', "import { longestGap } from './silent-time'; export const x = longestGap;", false],
  ['protocol/probe.ts', "import { sha256 } from '../platform/sha256'; export const x = sha256;", true],
  ['native/probe.ts', "import { encodePage } from '../protocol/catp'; export const x = encodePage;", true],
  ['platform/probe.ts', "import { encodePage } from '../protocol/catp'; export const x = encodePage;", true],
  ['platform/probe.ts', "import { DhttpHost } from '../app/dhttp-host'; export const x = DhttpHost;", true],
  ['platform/probe.ts', "import { startServer } from '../server'; export const x = startServer;", true],
  ['platform/probe.ts', "import { createHash } from 'node:crypto'; export const x = createHash;", false],
  ['app/probe.ts', "import { startServer } from '../server'; export const x = startServer;", true],
  ['app/probe.ts', "import { sha256 } from '../platform/sha256'; export const x = sha256;", false],
  ['app/probe.ts', "import { encodePage } from '../protocol/catp'; export const x = encodePage;", false],
  ['server/probe.ts', "import { DhttpHost } from '../app/dhttp-host'; export const x = DhttpHost;", true],
  ['server/probe.ts', "import { sha256 } from '../platform/sha256'; export const x = sha256;", false],
  ['renderer/probe.ts', "import { encodePage } from '../protocol/catp'; export const x = encodePage;", true],
  ['renderer/probe.ts', "import type { DomOps } from '../protocol/browser/api'; export type X = DomOps;", false],
  ['renderer/probe.ts', "import { longestGap } from '../protocol/silent-time'; export const x = longestGap;", false],
  ['renderer/probe.ts', "import { sha256 } from '../platform/sha256'; export const x = sha256;", true],
  ['lab/probe.ts', "import { link } from '../cli/commands/link'; export const x = link;", true],
  ['lab/probe.ts', "import { startServer } from '../server'; export const x = startServer;", false],
  ['cli/probe.ts', "import { DomOpApplier } from '../renderer/dom-ops'; export const x = DomOpApplier;", true],
  ['bench/probe.ts', "import { main } from '../cli/main'; export const x = main;", true],
  ['electron/probe.ts', "import { startServer } from '../server'; export const x = startServer;", true],
  // errors carry a stable code: a bare Error is refused in every layer
  ['app/probe.ts', "export const e = new Error('x');", true],
  ['lab/probe.ts', "export const e = Error('x');", true],
  ['protocol/probe.ts', "export const e = new Error('x');", true],
  ['app/probe.ts', "import { HostError } from './errors'; export const e = new HostError('HOST_ERR_X', 'x');", false],
];

let results: string[][];
beforeAll(() => {
  results = lintProbes(cases.map(([file, code]) => [file, code]));
});

test.each(cases.map((c, i) => [...c, i] as const))('%s: %s', (_file, _code, violates, i) => {
  const errors = results[i]!;
  if (violates) expect(errors.length).toBeGreaterThan(0);
  else expect(errors).toEqual([]);
});
