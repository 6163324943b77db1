// The renderer's end of the browser API. The Electron preload puts the API on `window.catp`; otherwise the
// page was opened by the Chromium-window shell with the per-launch secret in its URL fragment, and the API
// runs over a WebSocket to the host. Either way the rest of the renderer sees one BrowserApi.
import type { BrowserApi, BrowserCommand, BrowserEvent } from '../protocol/browser/api';

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
  const queue: string[] = [];
  const ws = new WebSocket(`ws://${location.host}/__catp/ws`, ['catp.v1', `catp-secret.${secret}`]);
  ws.onopen = () => {
    for (const m of queue.splice(0)) ws.send(m);
  };
  ws.onmessage = (m) => {
    let ev: BrowserEvent;
    try {
      ev = JSON.parse(String(m.data)) as BrowserEvent;
    } catch {
      return;
    }
    for (const l of listeners) l(ev);
  };
  ws.onclose = () => {
    for (const l of listeners) l({ type: 'error', loadId: -1, code: 'SHELL_DISCONNECTED', message: 'the connection to the host closed', url: '' });
  };
  const api: BrowserApi = {
    send(command: BrowserCommand) {
      const m = JSON.stringify(command);
      if (ws.readyState === WebSocket.OPEN) ws.send(m);
      else queue.push(m);
    },
    onEvent(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
  return { api, kind: 'websocket' };
}
