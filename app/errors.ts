import { CodedError } from '../protocol/errors';

/** Failures of the host itself (not of the protocol, not of the peer). Codes are stable: HOST_ERR_*. */
export class HostError extends CodedError {}
