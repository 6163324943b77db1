// One browser session for the Chromium-window and headless shells: the service, the shell server that carries
// the API to the renderer, and where the renderer bundle lives.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { packageRoot } from '../../native';
import { defaultStoreDir, PayloadStore } from '../payload-store';
import { BrowserService, type BrowserServiceOptions } from './service';
import { startShellServer, type ShellServer } from './shell-server';
import { warmUpInBackground } from './warm-up';
import { HostError } from '../errors';

export function defaultRendererDir(): string {
  return process.env.CATP_RENDERER_DIR ?? join(packageRoot(), 'dist', 'renderer');
}

export interface BrowserSession {
  service: BrowserService;
  shell: ShellServer;
  close(): Promise<void>;
}

export interface BrowserSessionOptions extends BrowserServiceOptions {
  rendererDir?: string;
  /**
   * The payload store's directory (DTD and CATP block reuse): default the per-user one (defaultStoreDir(),
   * shared with `catp get`); null: no store. Ignored when `store` or `host` is given.
   */
  storeDir?: string | null;
  /** The store's byte budget (default PayloadStore's, 256 MiB). */
  storeBudgetBytes?: number;
  /** The shell server listens on a Unix socket behind a proxy (ShellServerOptions.unixSocket). */
  unixSocket?: { path: string; publicPort: number; publicHost?: string; publicFramePort?: number };
}

export async function startBrowserSession(options: BrowserSessionOptions = {}): Promise<BrowserSession> {
  const rendererDir = options.rendererDir ?? defaultRendererDir();
  if (!existsSync(join(rendererDir, 'app.js'))) {
    throw new HostError('HOST_ERR_RENDERER_NOT_BUILT', `the renderer is not built (${join(rendererDir, 'app.js')} is missing): run npm run build`);
  }
  const opened = options.store === undefined && options.host === undefined && options.storeDir !== null
    ? await PayloadStore.open({
      dir: options.storeDir ?? defaultStoreDir(),
      ...(options.storeBudgetBytes !== undefined ? { budgetBytes: options.storeBudgetBytes } : {}),
    })
    : null;
  const service = new BrowserService(opened ? { ...options, store: opened } : options);
  const shell = await startShellServer(service, { rendererDir, ...(options.unixSocket ? { unixSocket: options.unixSocket } : {}) });
  service.setViewUrl(shell.viewUrl);
  // while the shell (Chromium, Electron) starts: the first page's frames then meet compiled code (warm-up.ts); it
  // stops when a load begins or the session closes (its steps keep the event loop awake until then)
  void warmUpInBackground(() => service.currentLoadId !== null || service.closed, undefined, (batches) => service.setWarmUpOps(batches));
  return {
    service,
    shell,
    close: async () => {
      service.close();
      await shell.close();
      // the last page's blocks are being written: let them land (the writes are atomic either way)
      await service.host.flushStore().catch(() => undefined);
    },
  };
}
