// One browser session for the Chromium-window and headless shells: the service, the shell server that carries
// the API to the renderer, and where the renderer bundle lives.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { packageRoot } from '../../native';
import { BrowserService, type BrowserServiceOptions } from './service';
import { startShellServer, type ShellServer } from './shell-server';

export function defaultRendererDir(): string {
  return process.env.CATP_RENDERER_DIR ?? join(packageRoot(), 'dist', 'renderer');
}

export interface BrowserSession {
  service: BrowserService;
  shell: ShellServer;
  close(): Promise<void>;
}

export async function startBrowserSession(options: BrowserServiceOptions & { rendererDir?: string } = {}): Promise<BrowserSession> {
  const rendererDir = options.rendererDir ?? defaultRendererDir();
  if (!existsSync(join(rendererDir, 'app.js'))) {
    throw new Error(`the renderer is not built (${join(rendererDir, 'app.js')} is missing): run npm run build`);
  }
  const service = new BrowserService(options);
  const shell = await startShellServer(service, { rendererDir });
  service.setViewUrl(shell.viewUrl);
  return {
    service,
    shell,
    close: async () => {
      service.close();
      await shell.close();
    },
  };
}
