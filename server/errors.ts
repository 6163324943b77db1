/** Failures of the reference server itself (set-up, not a peer's request). Codes are stable: SERVER_ERR_*. */
export class ServerError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ServerError';
  }
}
