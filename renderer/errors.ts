/** Failures of the page's own code (a missing part of app.html). Codes are stable: RENDERER_ERR_*. */
export class RendererError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'RendererError';
  }
}
