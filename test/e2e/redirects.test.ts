// Redirects (issue "Browse the real web", item 2), in the browser service over real sockets: 301, 302, 303, 307
// and 308, relative Locations, on every transport; the address bar (load-started) and the history end on the
// final URL; a loop and more than 20 hops fail with a code.
import { createServer, type Server } from 'node:net';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { DhttpHost } from '../../app';
import { BrowserService, MAX_REDIRECTS } from '../../app/browser/service';
import type { BrowserEvent, Transport } from '../../protocol/browser/api';
import { startServer, type DhttpServer } from '../../server';

jest.setTimeout(60_000);

/** An HTTP/1.1 server whose answers come from `route` (status, Location, body), one per connection. */
function routes(route: (path: string) => { status: number; location?: string; body?: string }): Promise<{ server: Server; port: number; hits: string[] }> {
  const hits: string[] = [];
  const server = createServer((sock) => {
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      if (!buf.includes('\r\n\r\n')) return;
      const path = buf.split(' ')[1] ?? '/';
      hits.push(path);
      const r = route(path);
      const body = r.body ?? '';
      sock.end(`HTTP/1.1 ${r.status} X\r\nContent-Type: text/html; charset=utf-8\r\n${r.location !== undefined ? `Location: ${r.location}\r\n` : ''}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    });
    sock.on('error', () => undefined);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok({ server, port: (server.address() as { port: number }).port, hits })));
}

let root: string;
let ref: DhttpServer;
let host: DhttpHost;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'catp-e2e-redirect-'));
  mkdirSync(join(root, 'sub'));
  writeFileSync(join(root, 'sub', 'index.html'), '<!doctype html><title>sub</title><p>the directory page</p>');
  writeFileSync(join(root, 'other.html'), '<!doctype html><title>other</title>');
  ref = await startServer({ root, port: 0, host: '127.0.0.1' });
  host = new DhttpHost();
});

afterAll(async () => {
  host.close();
  await ref.close();
  rmSync(root, { recursive: true, force: true });
});

/** Navigate and collect events until the navigation ends (complete or error). */
async function navigate(service: BrowserService, events: BrowserEvent[], url: string, transport?: Transport): Promise<BrowserEvent> {
  const from = events.length;
  service.navigate(url, transport);
  const until = Date.now() + 30_000;
  for (;;) {
    const end = events.slice(from).find((e) => e.type === 'complete' || e.type === 'error');
    if (end) return end;
    if (Date.now() > until) throw new Error(`no end for ${url}: ${JSON.stringify(events.slice(from).map((e) => e.type))}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function service(): { service: BrowserService; events: BrowserEvent[] } {
  const s = new BrowserService({ host, store: null });
  const events: BrowserEvent[] = [];
  s.attach((e) => events.push(e));
  return { service: s, events };
}

const starts = (events: BrowserEvent[]) => events.filter((e): e is Extract<BrowserEvent, { type: 'load-started' }> => e.type === 'load-started');

test.each([
  ['catp', 'dhttp'],
  ['inorder', 'dhttp'],
  ['whole', 'dhttpt'],
  ['tcp', 'http'],
] as const)('the server\'s 301 for a directory is followed over %s; the address bar and the history end on the final URL', async (transport, scheme) => {
  const { service: s, events } = service();
  try {
    const from = `${scheme}://127.0.0.1:${ref.port}/sub`;
    const end = await navigate(s, events, from, transport);
    expect(end.type).toBe('complete');
    const st = starts(events);
    expect(st.map((e) => e.url)).toEqual([from, `${from}/`]);
    expect(st[1]!.redirectedFrom).toEqual([from]);
    expect(events.some((e) => e.type === 'stopped' || e.type === 'error')).toBe(false);
    // Back from the next page returns to where the redirect led, not to its start
    await navigate(s, events, `${scheme}://127.0.0.1:${ref.port}/other.html`, transport);
    const before = events.length;
    s.handle({ type: 'back' });
    expect((events.slice(before).find((e) => e.type === 'load-started') as { url: string }).url).toBe(`${from}/`);
  } finally {
    s.close();
  }
});

test('a chain 301 → 302 → 303 → 307 → 308 → 200 with absolute, root-relative and relative Locations ends on the right page', async () => {
  const r = await routes((p) => {
    if (p === '/a') return { status: 301, location: `http://127.0.0.1:${port}/b` };
    if (p === '/b') return { status: 302, location: '/dir/c' };
    if (p === '/dir/c') return { status: 303, location: 'd' };
    if (p === '/dir/d') return { status: 307, location: '../e?q=1' };
    if (p === '/e?q=1') return { status: 308, location: '/final' };
    if (p === '/final') return { status: 200, body: '<!doctype html><title>final</title><p>here</p>' };
    return { status: 404 };
  });
  const port = r.port;
  const { service: s, events } = service();
  try {
    for (const transport of ['tcp', 'whole'] as const) {
      events.length = 0;
      const end = await navigate(s, events, `http://127.0.0.1:${port}/a`, transport);
      expect(end.type).toBe('complete');
      expect(starts(events).at(-1)!.url).toBe(`http://127.0.0.1:${port}/final`);
      expect(starts(events).at(-1)!.redirectedFrom).toHaveLength(5);
      const text = events.filter((e) => e.type === 'text' || e.type === 'whole').map((e) => (e as { text: string }).text).join('');
      expect(text).toContain('<p>here</p>');
    }
  } finally {
    s.close();
    r.server.close();
  }
});

test('a loop and a chain longer than 20 fail with a code; the browser makes no more requests than that', async () => {
  const r = await routes((p) => {
    if (p === '/loop1') return { status: 302, location: '/loop2' };
    if (p === '/loop2') return { status: 302, location: '/loop1' };
    const hop = /^\/hop(\d+)$/.exec(p);
    if (hop) return { status: 302, location: `/hop${Number(hop[1]) + 1}` };
    return { status: 404 };
  });
  const { service: s, events } = service();
  try {
    const loop = await navigate(s, events, `http://127.0.0.1:${r.port}/loop1`, 'tcp');
    expect(loop).toMatchObject({ type: 'error', code: 'HOST_ERR_REDIRECT_LOOP' });
    expect(r.hits).toEqual(['/loop1', '/loop2']);
    r.hits.length = 0;
    const long = await navigate(s, events, `http://127.0.0.1:${r.port}/hop0`, 'whole');
    expect(long).toMatchObject({ type: 'error', code: 'HOST_ERR_TOO_MANY_REDIRECTS' });
    expect(r.hits).toHaveLength(MAX_REDIRECTS + 1);
  } finally {
    s.close();
    r.server.close();
  }
});

test('a 3xx without a Location is shown as the answer it is; a Location this browser cannot open is an error', async () => {
  const r = await routes((p) => (p === '/none' ? { status: 302, body: 'no location' } : { status: 301, location: 'ftp://example.com/x' }));
  const { service: s, events } = service();
  try {
    const none = await navigate(s, events, `http://127.0.0.1:${r.port}/none`, 'whole');
    expect(none.type).toBe('complete');
    const bad = await navigate(s, events, `http://127.0.0.1:${r.port}/ftp`, 'whole');
    expect(bad).toMatchObject({ type: 'error', code: 'HOST_ERR_BAD_REDIRECT' });
  } finally {
    s.close();
    r.server.close();
  }
});
