// DTD end to end on loopback: the reference server, the native endpoint, the sans-IO client with DTD, the
// host and its cacache payload store. Payload bytes on the wire are the server's `payloadBytesSent`.
import { join } from 'node:path';

import { startServer, type DhttpServer } from '../../server';
import type { DhttpHost } from '../../app';
import type { PayloadStore } from '../../app/payload-store';
import type { DtdMode } from '../../protocol/dtd';
import { hostWithStore, payload, tempDir, writeServed } from './helpers';

const BIG = payload(50_000);
const P1 = payload(30_000);
const P2 = payload(20_000);
const SMALL = payload(300);

let served: ReturnType<typeof tempDir>;
let server: DhttpServer;
let storeDir: ReturnType<typeof tempDir>;
let host: DhttpHost;
let store: PayloadStore;

beforeAll(async () => {
  served = tempDir('catp-dtd-root-');
  writeServed(served.dir, 'a.bin', BIG);
  writeServed(served.dir, 'alias-of-a.bin', BIG);
  writeServed(served.dir, 'small.txt', SMALL);
  writeServed(served.dir, 'small-alias.txt', SMALL);
  writeServed(served.dir, 'rot.bin', P1);
  server = await startServer({ root: served.dir, port: 0, host: '127.0.0.1' });
});

afterAll(async () => {
  await server.close();
  served.cleanup();
});

async function open(mode: DtdMode, extra: Record<string, unknown> = {}): Promise<void> {
  storeDir = tempDir('catp-dtd-store-');
  ({ host, store } = await hostWithStore(storeDir.dir, { forcedMode: mode, forcedAutoBytes: 4096, ...extra }));
}

afterEach(async () => {
  host?.close();
  await store?.flush();
  storeDir?.cleanup();
});

const sent = () => server.counters().payloadBytesSent;
const url = (p: string, scheme = 'dhttp') => `${scheme}://127.0.0.1:${server.port}/${p}`;

test.each(['proceed', 'auto-proceed'] as const)('aliasing (%s): the same payload under two URLs crosses the wire once', async (mode) => {
  await open(mode);
  const before = sent();
  const a = await host.fetch(url('a.bin'));
  expect(Buffer.from(a.response.body).equals(BIG)).toBe(true);
  expect(a.dtd?.decision).toBe('miss');
  expect(a.dtd?.held).toBe(true);
  const b = await host.fetch(url('alias-of-a.bin'));
  expect(Buffer.from(b.response.body).equals(BIG)).toBe(true);
  expect(b.dtd?.decision).toBe('hit');
  expect(b.dtd?.savedBytes).toBe(BIG.length);
  expect(b.response.status).toBe(200);
  expect(sent() - before).toBe(BIG.length);
  expect(store.byUrl(url('alias-of-a.bin'))).toHaveLength(1);
});

test('rotation: a URL alternating between two payloads transfers each once', async () => {
  await open('proceed');
  const before = sent();
  const seen: string[] = [];
  for (const p of [P1, P2, P1, P2, P1]) {
    writeServed(served.dir, 'rot.bin', p);
    const r = await host.fetch(url('rot.bin'));
    expect(Buffer.from(r.response.body).equals(p)).toBe(true);
    seen.push(r.dtd?.decision as string);
  }
  expect(seen).toEqual(['miss', 'miss', 'hit', 'hit', 'hit']);
  expect(sent() - before).toBe(P1.length + P2.length);
  expect(store.byUrl(url('rot.bin')).map((e) => e.size).sort()).toEqual([P2.length, P1.length].sort());
});

test('reload: the same URL three times transfers once, over UDP and over dhttpt:// (TCP)', async () => {
  await open('proceed');
  const before = sent();
  for (let i = 0; i < 3; i++) expect(Buffer.from((await host.fetch(url('a.bin'))).response.body).equals(BIG)).toBe(true);
  const t = await host.fetch(url('a.bin', 'dhttpt'));
  expect(t.dtd?.decision).toBe('miss'); // dhttpt:// is another site (scheme): its first sighting transfers
  const t2 = await host.fetch(url('alias-of-a.bin', 'dhttpt'));
  expect(t2.channel).toBe('tcp');
  expect(t2.dtd?.decision).toBe('hit');
  expect(Buffer.from(t2.response.body).equals(BIG)).toBe(true);
  expect(sent() - before).toBe(2 * BIG.length);
});

test('auto-proceed: a body below the threshold comes at once, with its digest, and is verified and stored', async () => {
  await open('auto-proceed');
  const before = server.counters();
  const r = await host.fetch(url('small.txt'));
  expect(r.dtd?.announced).toBe(false);
  expect(r.dtd?.decision).toBe('miss');
  expect(r.dtd?.digestSource).toBe('repr-digest');
  expect(server.counters().dtdHeld - before.dtdHeld).toBe(0);
  await store.flush();
  expect(store.list().map((e) => e.size)).toContain(SMALL.length);
});

test('abort: announce + body at once; a hit ends the fetch from the store and sends DON\'T-BOTHER', async () => {
  await open('abort');
  await host.fetch(url('a.bin'));
  const c0 = server.counters();
  const r = await host.fetch(url('alias-of-a.bin'));
  expect(r.dtd?.decision).toBe('hit');
  expect(r.dtd?.held).toBe(false);
  expect(Buffer.from(r.response.body).equals(BIG)).toBe(true);
  await new Promise((res) => setTimeout(res, 100));
  const c1 = server.counters();
  expect(c1.dtdSentAtOnce - c0.dtdSentAtOnce).toBe(1);
  // On loopback the body often arrives in the same read as its announcement: then there is nothing to cut.
  if (r.dtd?.savedBytes === 0) expect(r.dtd?.decisionReason).toMatch(/already arrived/);
  else expect(c1.dtdDontBothers - c0.dtdDontBothers).toBe(1);
  // and the next fetch still works (the cut connection is replaced)
  expect(Buffer.from((await host.fetch(url('small.txt'))).response.body).equals(SMALL)).toBe(true);
});

test('plain HTTP/1.1 and RFC 3230: digests are answered, verified and stored', async () => {
  await open('proceed');
  const r = await host.fetch(url('a.bin', 'http'));
  expect(r.channel).toBe('http');
  expect(r.dtd?.digestSource).toBe('repr-digest');
  expect(r.dtd?.decision).toBe('miss');
  const legacy = await host.fetch(url('small.txt', 'http'), { dtd: false, headers: [['Want-Digest', 'SHA-256;q=1, MD5;q=0.1']] });
  const digest = legacy.response.headers.find(([n]) => n === 'Digest')?.[1];
  expect(digest).toMatch(/^SHA-256=[A-Za-z0-9+/]+=*$/);
});

test('the store serves a payload across host restarts', async () => {
  await open('proceed');
  await host.fetch(url('a.bin'));
  await store.flush();
  host.close();
  const dir = storeDir.dir;
  ({ host, store } = await hostWithStore(dir, { forcedMode: 'proceed' }));
  const before = sent();
  const r = await host.fetch(url('alias-of-a.bin'));
  expect(r.dtd?.decision).toBe('hit');
  expect(sent() - before).toBe(0);
  expect(join(dir)).toBe(store.dir);
});

test('the model picks the mode when nothing is forced (loopback: fast link, abort), and counts it', async () => {
  await open(undefined as unknown as DtdMode);
  await host.fetch(url('a.bin'));
  const r = await host.fetch(url('alias-of-a.bin'));
  expect(r.dtd?.modeReason).toMatch(/break-even/);
  expect(['abort', 'auto-proceed', 'proceed']).toContain(r.dtd?.mode);
  expect(Buffer.from(r.response.body).equals(BIG)).toBe(true);
  expect(host.counters().dtd?.requests).toBe(2);
});
