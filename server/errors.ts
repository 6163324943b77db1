import { CodedError } from '../protocol/errors';

/** Failures of the reference server itself (set-up, not a peer's request). Codes are stable: SERVER_ERR_*. */
export class ServerError extends CodedError {}

/** The stable code of a thrown error (DHTTP_ERR_..., HTTP_ERR_..., DTD_ERR_...), or UNKNOWN: what drops are counted by. */
export function errorCode(e: unknown): string {
  if (e && typeof e === 'object' && 'code' in e && typeof (e as { code: unknown }).code === 'string') {
    return (e as { code: string }).code;
  }
  return 'UNKNOWN';
}

/** One more drop under `code`. */
export function bumpCode(rec: Record<string, number>, code: string): void {
  rec[code] = (rec[code] ?? 0) + 1;
}
