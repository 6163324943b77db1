// The renderer's API surface: the WebSocket refuses a connection without the per-launch secret, with a wrong
// secret, or from a foreign Origin; the host refuses malformed commands; the Electron preload exposes nothing
// but the API (tested with a fake contextBridge / ipcRenderer: Electron's binary is not installed here).
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';

import WebSocket from 'ws';

import { BrowserService, IPC_COMMAND, IPC_EVENT, IPC_PREFIX, isCommand, startShellServer, type BrowserEvent, type ShellServer } from '../../app/browser';
import { COMMAND_CHANNEL, EVENT_CHANNEL, PRELOAD_PREFIX, exposeBrowserApi } from '../../electron/preload';
import { ROOT, buildRenderer } from './helpers';

function attempt(url: string, protocols: string[], origin: string | undefined): Promise<{ status: number } | { open: WebSocket }> {
  return new Promise((ok) => {
    const ws = new WebSocket(url, protocols, origin === undefined ? {} : { origin });
    ws.once('open', () => ok({ open: ws }));
    ws.once('unexpected-response', (_req, res) => ok({ status: res.statusCode ?? 0 }));
    ws.once('error', () => ok({ status: -1 }));
  });
}

describe('the WebSocket transport', () => {
  let service: BrowserService;
  let shell: ShellServer;
  let url: string;
  beforeAll(async () => {
    service = new BrowserService({ shell: 'test' });
    shell = await startShellServer(service, { rendererDir: await buildRenderer() });
    url = `ws://127.0.0.1:${shell.port}/__catp/ws`;
  });
  afterAll(async () => {
    await shell.close();
    service.close();
  });

  test('refuses no secret, a wrong secret and a foreign Origin; accepts the right ones', async () => {
    expect(await attempt(url, ['catp.v1'], shell.origin)).toEqual({ status: 401 });
    expect(await attempt(url, ['catp.v1', `catp-secret.${'0'.repeat(shell.secret.length)}`], shell.origin)).toEqual({ status: 401 });
    expect(await attempt(url, ['catp.v1', `catp-secret.${shell.secret}`], 'http://evil.example')).toEqual({ status: 403 });
    expect(await attempt(url, ['catp.v1', `catp-secret.${shell.secret}`], undefined)).toEqual({ status: 403 });
    expect(shell.refused).toEqual({ 'bad-secret': 2, 'bad-origin': 2 });
    const good = await attempt(url, ['catp.v1', `catp-secret.${shell.secret}`], shell.origin);
    expect('open' in good).toBe(true);
    const ws = (good as { open: WebSocket }).open;
    const hello = new Promise<BrowserEvent>((ok) => ws.once('message', (m) => ok(JSON.parse(String(m)) as BrowserEvent)));
    ws.send('not json');
    ws.send(JSON.stringify({ type: 'navigate', url: 42 }));
    ws.send(JSON.stringify({ type: 'exec', code: 'rm -rf /' }));
    ws.send(JSON.stringify({ type: 'ready' }));
    expect((await hello).type).toBe('hello');
    expect(service.refusedCommands).toBe(3);
    ws.close();
  });

  test('the page-frame endpoints answer only our Host', async () => {
    const status = await new Promise<number>((ok, fail) => {
      const req = request({ host: '127.0.0.1', port: shell.port, path: '/__catp/app.html', headers: { host: 'evil.example' } }, (res) => {
        res.resume();
        ok(res.statusCode ?? 0);
      });
      req.on('error', fail);
      req.end();
    });
    expect(status).toBe(421);
    const ok = await fetch(`${shell.origin}/__catp/app.html`);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-security-policy')).toContain("script-src 'self'");
    const view = await fetch(`${shell.origin}/view/x/y.html`, { headers: { 'sec-fetch-dest': 'iframe' } });
    expect(view.status).toBe(404); // the page frame lives on the frame origin only
    const framed = await fetch(`${shell.frameOrigin}/view/x/y.html`, { headers: { 'sec-fetch-dest': 'iframe' } });
    expect(framed.headers.get('content-security-policy')).toContain("script-src 'none'");
    // the agent frame admits one script, ours, by a nonce made for that document alone
    const agent = await fetch(`${shell.frameOrigin}/__catp/agent.html`);
    const csp = agent.headers.get('content-security-policy') ?? '';
    const nonce = /script-src 'nonce-([A-Za-z0-9+/=]+)'/.exec(csp)?.[1];
    expect(nonce).toBeDefined();
    expect(await agent.text()).toContain(`<script src="/__catp/frame.js" nonce="${nonce}"></script>`);
    const again = await fetch(`${shell.frameOrigin}/__catp/agent.html`);
    expect(again.headers.get('content-security-policy')).not.toContain(`'nonce-${nonce}'`);
    // and the app's own files are not served there, nor the agent on the app's origin
    expect((await fetch(`${shell.frameOrigin}/__catp/app.html`)).status).toBe(404);
    expect((await fetch(`${shell.origin}/__catp/agent.html`)).status).toBe(404);
  });

  test('isCommand gates commands by shape', () => {
    expect(isCommand({ type: 'navigate', url: 'dhttp://a/' })).toBe(true);
    expect(isCommand({ type: 'navigate', url: 'dhttp://a/', transport: 'bogus' })).toBe(false);
    expect(isCommand({ type: 'navigate', url: 'x'.repeat(9000) })).toBe(false);
    expect(isCommand(null)).toBe(false);
    expect(isCommand('stop')).toBe(false);
  });
});

describe('the Electron preload', () => {
  test('exposes exactly one object with send / onEvent, over catp: channels only', () => {
    const exposed: Record<string, unknown> = {};
    const sent: [string, unknown[]][] = [];
    const handlers = new Map<string, (event: unknown, ...args: unknown[]) => void>();
    const api = exposeBrowserApi({
      contextBridge: { exposeInMainWorld: (key, value) => (exposed[key] = value) },
      ipcRenderer: {
        send: (channel, ...args) => sent.push([channel, args]),
        on: (channel, listener) => handlers.set(channel, listener),
        removeListener: (channel) => handlers.delete(channel),
      },
    });
    expect(Object.keys(exposed)).toEqual(['catp']);
    expect(exposed.catp).toBe(api);
    expect(Object.keys(api).sort()).toEqual(['onEvent', 'send']);
    expect(Object.isFrozen(api)).toBe(true);
    api.send({ type: 'navigate', url: 'dhttp://a/' });
    expect(sent).toEqual([[IPC_COMMAND, [{ type: 'navigate', url: 'dhttp://a/' }]]]);
    const got: unknown[] = [];
    const off = api.onEvent((e) => got.push(e));
    expect([...handlers.keys()]).toEqual([IPC_EVENT]);
    const senderSecret = { sender: { send: () => 'ipc internals' } };
    handlers.get(IPC_EVENT)!(senderSecret, { type: 'stopped', loadId: 1 });
    expect(got).toEqual([{ type: 'stopped', loadId: 1 }]); // the Electron event object never reaches the page
    off();
    expect(handlers.size).toBe(0);
    expect(() => api.onEvent('x' as unknown as () => void)).toThrow();
    // the preload's own copies of the channel names match the API's
    expect([PRELOAD_PREFIX, COMMAND_CHANNEL, EVENT_CHANNEL]).toEqual([IPC_PREFIX, IPC_COMMAND, IPC_EVENT]);
  });

  test('the preload source exposes nothing else and the window keeps isolation on', () => {
    const preload = readFileSync(join(ROOT, 'electron', 'preload.ts'), 'utf8');
    expect(preload.match(/exposeInMainWorld\(/g)?.length).toBe(2); // the interface and the one call
    expect(preload).not.toMatch(/ipcRenderer\.(invoke|sendSync|postMessage)/);
    const main = readFileSync(join(ROOT, 'electron', 'main.ts'), 'utf8');
    expect(main).toMatch(/contextIsolation: true/);
    expect(main).toMatch(/sandbox: true/);
    expect(main).toMatch(/nodeIntegration: false/);
  });
});

describe('the Compare command (the browser opens its page in catp demo)', () => {
  const events = (service: BrowserService): BrowserEvent[] => {
    const got: BrowserEvent[] = [];
    service.attach((e) => got.push(e));
    return got;
  };

  test('offered only by a host that can open the demo; it opens the page the host shows, not one the renderer names', async () => {
    const plain = new BrowserService({ shell: 'test' });
    const plainEvents = events(plain);
    plain.handle({ type: 'ready' });
    expect(plainEvents[0]).toMatchObject({ type: 'hello' });
    expect((plainEvents[0] as { canCompare?: boolean }).canCompare).toBeUndefined();
    plain.handle({ type: 'compare' }); // no launcher: nothing happens
    plain.close();

    const asked: string[] = [];
    const service = new BrowserService({ shell: 'test', openCompare: async (url) => (asked.push(url), `opened ${url}`) });
    const got = events(service);
    service.handle({ type: 'ready' });
    expect(got[0]).toMatchObject({ type: 'hello', canCompare: true });
    service.handle({ type: 'compare' }); // nothing loaded yet
    expect(asked).toEqual([]);
    // (a port nothing answers on: the load fails, the page stays the current one)
    service.navigate('dhttp://127.0.0.1:9/page.html');
    service.handle({ type: 'compare', url: 'file:///etc/passwd' });
    await new Promise((r) => setImmediate(r));
    expect(asked).toEqual(['dhttp://127.0.0.1:9/page.html']);
    expect(got.find((e) => e.type === 'compare-opened')).toEqual({ type: 'compare-opened', url: 'dhttp://127.0.0.1:9/page.html', message: 'opened dhttp://127.0.0.1:9/page.html' });
    service.close();
  });

  test('a launcher that fails says why', async () => {
    const service = new BrowserService({ shell: 'test', openCompare: async () => Promise.reject(new Error('no user namespaces')) });
    const got = events(service);
    service.navigate('dhttp://127.0.0.1:9/x.html');
    service.handle({ type: 'compare' });
    await new Promise((r) => setImmediate(r));
    expect(got.find((e) => e.type === 'compare-opened')).toMatchObject({ message: 'the demo could not start: no user namespaces' });
    service.close();
  });
});
