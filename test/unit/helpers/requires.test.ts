// The skip switch (test/helpers/requires.ts): without CATP_NO_SKIP a suite that lacks something is skipped; with
// CATP_NO_SKIP=1 (CI) it becomes a failing test that names what is missing.
import { describeIf, testIf } from '../../helpers/requires';

type Registered = { name: string; fn: () => unknown };

function capture(run: () => void): { tests: Registered[]; describes: string[] } {
  const g = globalThis as unknown as { test: unknown; describe: unknown };
  const saved = { test: g.test, describe: g.describe };
  const tests: Registered[] = [];
  const describes: string[] = [];
  g.test = Object.assign((name: string, fn: () => unknown) => tests.push({ name, fn }), { skip: (name: string) => tests.push({ name: `skipped: ${name}`, fn: () => undefined }) });
  g.describe = Object.assign((name: string, fn: () => void) => {
    describes.push(name);
    fn();
  }, { skip: (name: string) => describes.push(`skipped: ${name}`) });
  try {
    run();
  } finally {
    g.test = saved.test;
    g.describe = saved.describe;
  }
  return { tests, describes };
}

afterEach(() => {
  delete process.env.CATP_NO_SKIP;
});

test('missing and not strict: skipped', () => {
  delete process.env.CATP_NO_SKIP;
  const c = capture(() => {
    describeIf(false, 'the corpus')('suite', () => undefined);
    testIf(false, 'Chromium')('one', () => undefined);
  });
  expect(c.describes).toEqual(['skipped: suite']);
  expect(c.tests.map((t) => t.name)).toEqual(['skipped: one']);
});

test('missing under CATP_NO_SKIP=1: a failing test that names what is missing', () => {
  process.env.CATP_NO_SKIP = '1';
  const c = capture(() => {
    describeIf(false, 'the corpus')('suite', () => undefined);
    testIf(false, 'Chromium')('one', () => undefined);
  });
  expect(c.describes).toEqual(['suite']);
  expect(c.tests.map((t) => t.name)).toEqual(['requires the corpus', 'one']);
  expect(() => c.tests[0]!.fn()).toThrow(/the corpus is missing, and CATP_NO_SKIP=1/);
  expect(() => c.tests[1]!.fn()).toThrow(/Chromium is missing/);
});

test('present: the real describe and test run the body', () => {
  process.env.CATP_NO_SKIP = '1';
  let ran = false;
  const c = capture(() => {
    describeIf(true, 'x')('suite', () => {
      ran = true;
    });
  });
  expect(ran).toBe(true);
  expect(c.describes).toEqual(['suite']);
});
