import { CodedError } from '../protocol/errors';

/** Failures of a benchmark run (bad arguments, a part that did not start). Codes are stable: BENCH_ERR_*. */
export class BenchError extends CodedError {}

/**
 * What a benchmark's command line prints when its run fails: the message alone for a failure it names (bad
 * arguments, a missing part), the stack for anything else (a fault in the measuring code needs its place).
 */
export function failureText(err: unknown): string {
  if (err instanceof CodedError) return `${err.code}: ${err.message}`;
  return err instanceof Error ? (err.stack ?? err.message) : String(err);
}

/** The exit status for a failed run: 2 for a command line it could not read (as `catp`'s own), 1 otherwise. */
export function failureStatus(err: unknown): number {
  return err instanceof CodedError && err.code === 'BENCH_ERR_USAGE' ? 2 : 1;
}
