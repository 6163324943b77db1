// Runs in Electron's sandboxed preload (contextIsolation on, sandbox on, no nodeIntegration). Exposes ONE
// object, `window.catp`, with exactly the browser API (send a command, listen for events) — nothing of
// ipcRenderer itself — and refuses any channel outside the `catp:` prefix (VS Code's narrow preload).
//
// A sandboxed preload cannot require our other files, so this file is self-contained: the channel names
// are repeated here and checked against protocol/browser/api.ts by test/browser/preload.test.ts.
import type { BrowserApi, BrowserCommand, BrowserEvent } from '../protocol/browser/api';

export const PRELOAD_PREFIX = 'catp:';
export const COMMAND_CHANNEL = 'catp:command';
export const EVENT_CHANNEL = 'catp:event';

/** What the preload needs from Electron (so a test can pass fakes). */
export interface PreloadDeps {
  contextBridge: { exposeInMainWorld(key: string, api: unknown): void };
  ipcRenderer: {
    send(channel: string, ...args: unknown[]): void;
    on(channel: string, listener: (event: unknown, ...args: unknown[]) => void): unknown;
    removeListener(channel: string, listener: (event: unknown, ...args: unknown[]) => void): unknown;
  };
}

/** A channel outside the API's own (the preload can require nothing of ours, so it has its own class). */
export class PreloadError extends Error {
  readonly code = 'PRELOAD_ERR_CHANNEL';
  constructor(message: string) {
    super(message);
    this.name = 'PreloadError';
  }
}

function checked(channel: string): string {
  if (!channel.startsWith(PRELOAD_PREFIX)) throw new PreloadError(`catp preload: channel ${channel} is not allowed`);
  return channel;
}

/** Builds the API object and exposes it as window.catp. Returns what was exposed (for tests). */
export function exposeBrowserApi(deps: PreloadDeps): BrowserApi {
  const api: BrowserApi = Object.freeze({
    send(command: BrowserCommand): void {
      // only plain data crosses: a structured clone of a JSON round trip
      deps.ipcRenderer.send(checked(COMMAND_CHANNEL), JSON.parse(JSON.stringify(command)) as unknown);
    },
    onEvent(listener: (event: BrowserEvent) => void): () => void {
      if (typeof listener !== 'function') throw new TypeError('listener must be a function');
      // the Electron event object (with its sender) is never handed to the page
      const wrapped = (_event: unknown, payload: unknown) => listener(payload as BrowserEvent);
      deps.ipcRenderer.on(checked(EVENT_CHANNEL), wrapped);
      return () => {
        deps.ipcRenderer.removeListener(EVENT_CHANNEL, wrapped);
      };
    },
  });
  deps.contextBridge.exposeInMainWorld('catp', api);
  return api;
}

// In Electron (sandboxed preload: `require` gives 'electron' only); under jest / Node it is skipped.
declare const require: (id: string) => unknown;
if (typeof process !== 'undefined' && (process as { type?: string }).type === 'renderer') {
  exposeBrowserApi(require('electron') as PreloadDeps);
}
