// One pane of `catp demo`: a browser host (app/browser) started inside the client namespace of one emulated
// link. Its shell server listens on a Unix socket, because the demo window runs outside the namespace and
// reaches it through a proxy on 127.0.0.1 (lab/demo/controller.ts). The controller drives it over stdio, one
// JSON object per line:
//
//   stdout  {"type":"listening","appUrl":…}   the shell server is up (open appUrl in the pane's frame)
//           {"type":"ready"}                   the pane's renderer connected
//           {"type":"record","record":…}       the load ended (complete, error or timeout): its load record
//           {"type":"error","message":…}       the load could not start
//   stdin   {"type":"go","url":…}              load url now (all three panes get it in the same millisecond)
//
// It exits when stdin closes (the controller went away) or on SIGTERM.
import * as readline from 'node:readline';

import { startBrowserSession, type Transport } from '../../app/browser';

export interface PaneHostOptions {
  socketPath: string;
  publicHost: string;
  publicPort: number;
  /** the proxy's second port, forwarded to the same socket: the pane's frame origin */
  publicFramePort?: number;
  transport: Transport;
  /** a load gives up after this long */
  timeoutMs: number;
  rendererDir?: string;
}

export type PaneMessage =
  | { type: 'listening'; appUrl: string }
  | { type: 'ready' }
  | { type: 'record'; record: import('../../app/browser').LoadRecord }
  | { type: 'error'; message: string };

export async function runPaneHost(o: PaneHostOptions, out: NodeJS.WritableStream = process.stdout, input: NodeJS.ReadableStream = process.stdin): Promise<number> {
  const say = (m: PaneMessage) => out.write(`${JSON.stringify(m)}\n`);
  const session = await startBrowserSession({
    // a demo load starts cold, like a measurement: no payload store
    storeDir: null,
    defaultTransport: o.transport === 'inorder' ? 'inorder' : 'catp',
    loadTimeoutMs: o.timeoutMs,
    unixSocket: { path: o.socketPath, publicHost: o.publicHost, publicPort: o.publicPort, ...(o.publicFramePort ? { publicFramePort: o.publicFramePort } : {}) },
    ...(o.rendererDir ? { rendererDir: o.rendererDir } : {}),
  });
  say({ type: 'listening', appUrl: `${session.shell.appUrl}&pane=${o.transport}` });
  session.service.whenReady(60_000).then(() => say({ type: 'ready' }), (err: Error) => say({ type: 'error', message: err.message }));
  const lines = readline.createInterface({ input });
  const finished = new Promise<void>((ok) => {
    lines.on('close', ok);
    process.once('SIGTERM', ok);
  });
  lines.on('line', (line) => {
    let m: { type?: unknown; url?: unknown };
    try {
      m = JSON.parse(line) as typeof m;
    } catch {
      return;
    }
    if (m.type !== 'go' || typeof m.url !== 'string') return;
    let loadId: number;
    try {
      loadId = session.service.navigate(m.url, o.transport);
    } catch (err) {
      say({ type: 'error', message: (err as Error).message });
      return;
    }
    session.service.recordOf(loadId, o.timeoutMs + 5000).then(
      (record) => say({ type: 'record', record }),
      (err: Error) => say({ type: 'error', message: err.message }),
    );
  });
  await finished;
  lines.close();
  await session.close();
  return 0;
}
