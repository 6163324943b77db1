// Suites that need something the machine may lack (Chromium, Xvfb, the shared corpora) are skipped where it
// is missing, so a developer without them can still run the rest. CI must never skip silently: it sets
// CATP_NO_SKIP=1 (.ci/run), and then a missing requirement is a failing test that names it.

const strict = (): boolean => process.env.CATP_NO_SKIP === '1';

function missing(what: string): () => void {
  return () => {
    throw new Error(`${what} is missing, and CATP_NO_SKIP=1 forbids skipping (install it; .ci/run does)`);
  };
}

/** `describe` when `present`, else skipped — or, under CATP_NO_SKIP=1, one failing test naming `what`. */
export function describeIf(present: boolean, what: string): (name: string, fn: () => void) => void {
  if (present) return describe;
  if (strict()) return (name) => describe(name, () => test(`requires ${what}`, missing(what)));
  return describe.skip;
}

/** `test` when `present`, else skipped — or, under CATP_NO_SKIP=1, a failing test naming `what`. */
export function testIf(present: boolean, what: string): (name: string, fn: () => void, timeout?: number) => void {
  if (present) return (name, fn, timeout) => test(name, fn, timeout);
  if (strict()) return (name) => test(name, missing(what));
  return (name, fn, timeout) => test.skip(name, fn, timeout);
}
