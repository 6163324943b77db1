// Shared argument handling: node:util's parseArgs plus the usage errors every command reports the same way.
import { parseArgs, type ParseArgsConfig } from 'node:util';

export class UsageError extends Error {
  readonly code = 'CLI_ERR_USAGE';
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export type Options = NonNullable<ParseArgsConfig['options']>;

export function parse<T extends Options>(argv: string[], options: T) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function intOption(value: string | undefined, name: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new UsageError(`--${name} must be an integer from ${min} to ${max}, got '${value}'`);
  }
  return n;
}

/** Where commands write; tests pass their own to capture output. */
export interface Io {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

export const processIo: Io = { stdout: process.stdout, stderr: process.stderr };
