/** Failures of the host itself (not of the protocol, not of the peer). Codes are stable: HOST_ERR_*. */
export class HostError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'HostError';
  }
}
