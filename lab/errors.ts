import { CodedError } from '../protocol/errors';

/** Failures of the lab (the emulated link, the origin servers, the transports under test). Codes are stable: LAB_ERR_*. */
export class LabError extends CodedError {}
