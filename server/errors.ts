import { CodedError } from '../protocol/errors';

/** Failures of the reference server itself (set-up, not a peer's request). Codes are stable: SERVER_ERR_*. */
export class ServerError extends CodedError {}
