// The renderer's end of the browser API. The Electron preload puts the API on `window.catp`; otherwise the
// page was opened by the Chromium-window shell with the per-launch secret in its URL fragment, and the API
// runs over a WebSocket to the host, held by a shared worker where there can be one (api-worker.ts). Either way
// the rest of the renderer sees one BrowserApi.
import type { BrowserApi, BrowserCommand, BrowserEvent } from '../protocol/browser/api';
import type { FromWorker, ToWorker } from './api-worker';

declare global {
  interface Window {
    catp?: BrowserApi;
  }
}

export function connectApi(): { api: BrowserApi; kind: 'electron' | 'websocket' } {
  if (window.catp && typeof window.catp.send === 'function') return { api: window.catp, kind: 'electron' };
  const params = new URLSearchParams(location.hash.slice(1));
  const secret = params.get('secret') ?? sessionStorage.getItem('catp-secret') ?? '';
  sessionStorage.setItem('catp-secret', secret);
  // keep the secret out of the visible URL and of any Referer
  history.replaceState(null, '', location.pathname + location.search);
  const listeners = new Set<(e: BrowserEvent) => void>();
  /** Commands wait here until the connection is up. */
  const queue: string[] = [];
  let send: ((m: string) => void) | null = null;
  const up = (s: (m: string) => void): void => {
    send = s;
    for (const m of queue.splice(0)) s(m);
  };
  const deliver = (data: string): void => {
    let ev: BrowserEvent;
    try {
      ev = JSON.parse(data) as BrowserEvent;
    } catch {
      return;
    }
    for (const l of listeners) l(ev);
  };
  const disconnected = (): void => {
    send = null;
    for (const l of listeners) l({ type: 'error', loadId: -1, code: 'SHELL_DISCONNECTED', message: 'the connection to the host closed', url: '' });
  };
  const url = `ws://${location.host}/__catp/ws`;
  const direct = (): void => {
    const ws = new WebSocket(url, ['catp.v1', `catp-secret.${secret}`]);
    ws.onopen = () => up((m) => ws.send(m));
    ws.onmessage = (m) => deliver(String(m.data));
    ws.onclose = disconnected;
  };
  // The socket is held by a shared worker when there can be one (api-worker.ts says why); the page's own socket if
  // the worker cannot start or cannot connect.
  const viaWorker = (): boolean => {
    if (typeof SharedWorker !== 'function') return false;
    let worker: SharedWorker;
    try {
      worker = new SharedWorker('/__catp/api-worker.js', { name: 'catp-api' });
    } catch {
      return false;
    }
    const port = worker.port;
    let state: 'starting' | 'up' | 'gone' = 'starting';
    const fallBack = (): void => {
      if (state !== 'starting') return;
      state = 'gone';
      port.close();
      direct();
    };
    worker.onerror = fallBack;
    port.onmessage = (m: MessageEvent) => {
      const d = m.data as FromWorker;
      if (typeof d === 'string') deliver(d);
      else if ('up' in d && state === 'starting') {
        state = 'up';
        up((s) => port.postMessage(s));
      } else if ('down' in d) {
        if (state === 'up') disconnected();
        else fallBack();
        state = 'gone';
      }
    };
    const open: ToWorker = { open: url, secret };
    port.postMessage(open);
    addEventListener('pagehide', () => port.postMessage({ close: true } satisfies ToWorker));
    return true;
  };
  if (!viaWorker()) direct();
  const api: BrowserApi = {
    send(command: BrowserCommand) {
      const m = JSON.stringify(command);
      if (send !== null) send(m);
      else queue.push(m);
    },
    onEvent(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
  return { api, kind: 'websocket' };
}
