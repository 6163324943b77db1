import { CodedError } from '../protocol/errors';

/** Failures of a benchmark run (bad arguments, a part that did not start). Codes are stable: BENCH_ERR_*. */
export class BenchError extends CodedError {}
