// The shell's connection to the host, held by a SharedWorker for the Chromium shell (api-client.ts).
//
// Why a worker: a headless shell (the lab, `catp browse --headless`, the benchmarks) is driven by playwright-core,
// which turns DevTools' Network domain on for every page and dedicated worker it attaches to, so every WebSocket
// message such a page receives is copied into a protocol event that Chromium's browser process writes and the
// driving process (the host) parses. That is a cost no user pays (a window is not driven through DevTools, and
// Electron's renderer talks over IPC), and it grows with the page: at 1,000,000 B/s the 1 MB page's frames waited
// twice as long in the host (bench:render, host p50 ~255 against ~120 ms with the domain off). Playwright does not
// attach to shared workers, and a shared worker's sockets are its own, so their messages are not reported.
//
// Protocol with a page (one port each, one WebSocket each): the page posts `{ open: url, secret }` once, then
// command strings; `{ close: true }` when it goes away. The worker posts `{ up: true }` when the socket opens,
// each event string as it comes, and `{ down: true }` when the socket closes (or never opened).

/** What the page posts to the worker (api-client.ts). */
export type ToWorker = { open: string; secret: string } | { close: true } | string;
/** What the worker posts back. */
export type FromWorker = { up: true } | { down: true } | string;

/** WebSocket.OPEN (the literal: the module also runs where there is no WebSocket global, in unit tests). */
const OPEN = 1;

/** What the worker uses of a page's port (a DOM MessagePort; Node's in the unit tests). */
export interface Port {
  onmessage: ((m: { data: unknown }) => void) | null;
  postMessage(m: FromWorker): void;
  close(): void;
}

/** What the worker uses of its socket (a DOM WebSocket; a fake in the unit tests). */
export interface Socket {
  readonly readyState: number;
  send(m: string): void;
  close(): void;
  onopen: (() => void) | null;
  onmessage: ((e: { data: unknown }) => void) | null;
  onclose: (() => void) | null;
}

interface ConnectEvent {
  ports: readonly Port[];
}

/** Serves one page's port: opens its socket when asked, relays both ways, closes it when either end goes. */
export function servePort(port: Port, makeSocket: (url: string, protocols: string[]) => Socket = (u, p) => new WebSocket(u, p) as unknown as Socket): void {
  let ws: Socket | null = null;
  let ended = false;
  const post = (m: FromWorker): void => port.postMessage(m);
  const end = (): void => {
    if (ended) return;
    ended = true;
    post({ down: true });
    port.close();
  };
  port.onmessage = (m) => {
    const d = m.data as ToWorker;
    if (typeof d === 'string') {
      if (ws !== null && ws.readyState === OPEN) ws.send(d);
      return;
    }
    if (typeof d !== 'object' || d === null) return;
    if ('close' in d) {
      ended = true;
      ws?.close();
      port.close();
      return;
    }
    if (!('open' in d) || ws !== null || typeof d.open !== 'string' || typeof d.secret !== 'string') return;
    try {
      ws = makeSocket(d.open, ['catp.v1', `catp-secret.${d.secret}`]);
    } catch {
      end();
      return;
    }
    ws.onopen = () => post({ up: true });
    // Event strings go on as they are: the page parses them, as it would from its own socket.
    ws.onmessage = (e) => {
      if (!ended) post(String(e.data));
    };
    ws.onclose = end;
  };
}

// Run as a shared worker (not when a test imports the module).
const scope = globalThis as unknown as { onconnect?: ((e: ConnectEvent) => void) | null; SharedWorkerGlobalScope?: unknown };
if (typeof scope.SharedWorkerGlobalScope === 'function' && globalThis instanceof (scope.SharedWorkerGlobalScope as { new (): object })) {
  scope.onconnect = (e: ConnectEvent) => {
    const port = e.ports[0];
    if (port !== undefined) servePort(port);
  };
}
