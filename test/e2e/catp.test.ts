// CATP end to end: the reference server streams a page as frames over real UDP sockets, a relay drops 20% of
// the datagrams in both directions, and the client rebuilds exactly the tree an HTML parser builds.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { parse, serialize } from 'parse5';

import { DhttpHost, type FrameRecord, type StreamEvent } from '../../app';
import { parse5TreeBuilder, type CatpEvent } from '../../protocol/catp';
import { startServer, type DhttpServer } from '../../server';
import { seededRng } from '../../protocol/random';
import { startUdpRelay, type UdpRelay } from '../helpers/udp-relay';

const DEMO = join(__dirname, '..', '..', 'demo', 'site');
const CORPUS = process.env.CATP_CORPUS ?? join(__dirname, '..', '..', '..', 'shared', 'corpus');
const CORPUS_PAGES = ['wikipedia.html', 'nytimes-1.html', 'bbc-1.html'].map((p) => join(CORPUS, 'real-pages', p)).filter(existsSync);

let root: string;
let server: DhttpServer;
let relay: UdpRelay;
let host: DhttpHost;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'catp-e2e-catp-'));
  for (const f of ['index.html', 'article.html', 'table.html', 'style.css']) writeFileSync(join(root, f), readFileSync(join(DEMO, f)));
  CORPUS_PAGES.forEach((p, i) => writeFileSync(join(root, `corpus-${i}.html`), readFileSync(p)));
  server = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 2_000_000 } });
  const rand = seededRng(20);
  relay = await startUdpRelay(server.port, {
    toServer: () => (rand() < 0.2 ? 'drop' : 'pass'),
    toClient: () => (rand() < 0.2 ? 'drop' : 'pass'),
  });
});

beforeEach(() => {
  // Under 20% loss each way a first request and its resend both go unanswered ~13% of the time, which would
  // (rightly) send a new client to plain HTTP; these tests are about CATP, so the fall-back waits longer.
  host = new DhttpHost({ client: { initialTimeoutMs: 300, fallbackAfterResends: 8, maxResends: 8 } });
});
afterEach(() => host.close());

afterAll(async () => {
  await relay.close();
  await server.close();
  rmSync(root, { recursive: true, force: true });
});

async function loadCatp(path: string, port = relay.port) {
  const tree = parse5TreeBuilder();
  const records: FrameRecord[] = [];
  const result = await host.load(`dhttp://127.0.0.1:${port}/${path}`, {
    mode: 'catp',
    onFrame: (record: FrameRecord, events: StreamEvent[]) => {
      records.push(record);
      for (const ev of events) tree.apply(ev as CatpEvent);
    },
  });
  return { tree, records, result };
}

const pages = () => ['index.html', 'article.html', 'table.html', ...CORPUS_PAGES.map((_, i) => `corpus-${i}.html`)];

test('every page completes under 20% datagram loss and equals parse5\'s tree of the original', async () => {
  const dropsBefore = relay.counts.dropped;
  for (const page of pages()) {
    const { tree, records, result } = await loadCatp(page);
    expect(result.kind).toBe('stream');
    const expected = serialize(parse(readFileSync(join(root, page), 'utf8'), { scriptingEnabled: false }));
    expect(tree.root).not.toBeNull();
    expect(serialize(tree.root!)).toBe(expected);
    // the timeline: every frame has a record, and what became displayable ends with the complete page
    expect(records.length).toBe(result.kind === 'stream' ? result.frames : -1);
    // index frames stand alone: each one taken shows its own piece at once, every piece shows once
    const ordinals: number[] = [];
    for (const r of records) {
      const shown = r.displayable.filter((d) => d.type === 'index-piece');
      if (r.kind === 'index' && r.accepted) expect(shown).toHaveLength(1);
      else expect(shown).toHaveLength(0);
      for (const d of shown) if (d.type === 'index-piece') ordinals.push(d.ordinal);
    }
    expect(ordinals.length).toBeGreaterThan(0);
    expect(new Set(ordinals).size).toBe(ordinals.length);
    expect(Math.max(...ordinals)).toBe(ordinals.length - 1);
    expect(records.filter((r) => r.displayable.some((d) => d.type === 'index-complete'))).toHaveLength(1);
    expect(records.at(-1)?.displayable.map((d) => d.type)).toContain('page-complete');
    expect(records.every((r) => r.kernelAtMs === null || r.kernelAtMs >= 0)).toBe(true);
  }
  expect(relay.counts.dropped - dropsBefore).toBeGreaterThan(10); // the loss was real
  // every session ends on the server once the client's "complete" report arrives; the load resolves before
  // that report is even sent, and 20% of reports are lost (the client repeats them), so wait for it
  const until = Date.now() + 10_000;
  while (server.counters().catpCompleted < pages().length && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  expect(server.counters().catpCompleted).toBe(pages().length);
}, 120_000);

test("a first contact whose request is lost on the way: its copy is the request, and the page comes without a resend", async () => {
  let up = 0;
  const lost = await startUdpRelay(server.port, { toServer: () => (up++ === 0 ? 'drop' : 'pass') });
  try {
    const before = server.counters();
    const { tree, result } = await loadCatp('article.html', lost.port);
    expect(result.kind).toBe('stream');
    expect(serialize(tree.root!)).toBe(serialize(parse(readFileSync(join(root, 'article.html'), 'utf8'), { scriptingEnabled: false })));
    expect(lost.counts.dropped).toBe(1);
    expect(host.counters().lanes.map((l) => l.client.resends)).toEqual([0]);
    const after = server.counters();
    expect(after.udpCopiesAsRequests - before.udpCopiesAsRequests).toBe(1);
    // started unproven, from the copy, the token answer first (no proof asserted: 127.0.0.1's budget may hold earlier tests' bytes, and the page come before it)
    expect([after.catpUnprovenStarts - before.catpUnprovenStarts, after.tokenRetries - before.tokenRetries]).toEqual([1, 1]);
  } finally {
    await lost.close();
  }
}, 30_000);

test("a lost proof goes again with the client's reports, unasked: the page comes though the server's later token answers are lost too", async () => {
  // its own server: 127.0.0.1's budget starts empty there, so the stream starts unproven and waits for the proof
  const own = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 2_000_000 } });
  const rand = seededRng(21);
  let words = '';
  while (words.length < 60_000) words += `${Math.floor(rand() * 1e9).toString(36)} `;
  writeFileSync(join(root, 'proof.html'), `<!doctype html><title>proof</title><p>${words}</p>`); // far more than a first flight
  let proofs = 0;
  let tokenAnswers = 0;
  const relayed = await startUdpRelay(own.port, {
    toServer: (d) => (d.includes('Catp-Token: ') && proofs++ === 0 ? 'drop' : 'pass'),
    toClient: (d) => (d.includes('DHTTP-Retry: token') && tokenAnswers++ > 0 ? 'drop' : 'pass'),
  });
  try {
    const { tree, result } = await loadCatp('proof.html', relayed.port);
    expect(result.kind).toBe('stream');
    expect(serialize(tree.root!)).toBe(serialize(parse(readFileSync(join(root, 'proof.html'), 'utf8'), { scriptingEnabled: false })));
    const client = host.counters().lanes[0].client;
    // the proof the token answer asked for was lost, and so was every later token answer: only the repeat proved it
    expect([proofs >= 2, client.retriesWithToken, client.proofRepeats >= 1]).toEqual([true, 1, true]);
    // No resend the proof needed: on a loaded machine the page's first encode can outlast the client's 300 ms timer,
    // and that resend comes while the server is still answering (failed 2 runs in 3 with two cores busy).
    expect(client.resends).toBe(own.counters().channel.resentUnanswered);
    expect(own.counters().catpProven).toBe(1);
  } finally {
    await relayed.close();
    await own.close();
  }
}, 30_000);

test('in-order mode rebuilds the exact bytes under the same loss', async () => {
  const chunks: Uint8Array[] = [];
  let prefix = 0;
  const result = await host.load(`dhttp://127.0.0.1:${relay.port}/article.html`, {
    mode: 'inorder',
    onFrame: (_record, events) => {
      for (const ev of events) {
        if (ev.type === 'prefix-extended') {
          expect(ev.offset).toBe(prefix); // only ever the next contiguous bytes
          prefix = ev.length;
          chunks.push(ev.bytes);
        }
      }
    },
  });
  expect(result.kind).toBe('stream');
  expect(Buffer.concat(chunks).equals(readFileSync(join(root, 'article.html')))).toBe(true);
}, 60_000);

test('a URL the server does not stream (not HTML) comes back as an ordinary answer', async () => {
  const result = await host.load(`dhttp://127.0.0.1:${server.port}/style.css`, { mode: 'catp' });
  expect(result.kind).toBe('response');
  if (result.kind === 'response') {
    expect(Buffer.from(result.result.response.body).equals(readFileSync(join(root, 'style.css')))).toBe(true);
  }
  const missing = await host.load(`dhttp://127.0.0.1:${server.port}/nope.html`, { mode: 'catp' });
  expect(missing.kind === 'response' && missing.result.response.status).toBe(404);
});

test('catp get --catp --timeline writes parse5\'s serialization and one JSON line per frame', async () => {
  const out = join(root, 'out.html');
  const timeline = join(root, 'timeline.jsonl');
  const cli = join(__dirname, '..', '..', 'bin', 'catp.js');
  // A relay of its own that lets first contact through (the CLI is a new client: see beforeEach; its padded
  // request, the server's "ask again with this token", the request with the token) and then drops 20% of
  // everything. The CLI runs as a child process while this process relays (no spawnSync).
  const rand = seededRng(7);
  const own = await startUdpRelay(server.port, {
    toServer: (_d, i) => (i > 1 && rand() < 0.2 ? 'drop' : 'pass'),
    toClient: (_d, i) => (i > 0 && rand() < 0.2 ? 'drop' : 'pass'),
  });
  const child = spawn(process.execPath, [cli, 'get', '--catp', '--no-store', '-v', '--timeline', timeline, '-o', out,
    `dhttp://127.0.0.1:${own.port}/article.html`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const status = await new Promise<number | null>((ok) => child.on('close', ok));
  await own.close();
  expect(stderr).toMatch(/CATP page complete and verified/);
  expect(status).toBe(0);
  expect(own.counts.dropped).toBeGreaterThan(0);
  expect(readFileSync(out, 'utf8')).toBe(serialize(parse(readFileSync(join(root, 'article.html'), 'utf8'), { scriptingEnabled: false })));
  const lines = readFileSync(timeline, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as FrameRecord);
  expect(lines.length).toBeGreaterThan(5);
  for (const l of lines) {
    expect(typeof l.atMs).toBe('number');
    expect(Array.isArray(l.displayable)).toBe(true);
  }
  expect(lines.filter((l) => l.displayable.some((d) => d.type === 'block-filled')).length).toBeGreaterThan(0);
}, 60_000);

test('a load stopped while its request is being set up arms no load timer (one would keep the process alive for timeoutMs)', async () => {
  const stop = new AbortController();
  const timeoutMs = 987_654;
  const armed = jest.spyOn(global, 'setTimeout');
  try {
    const loading = host.load(`dhttp://127.0.0.1:${server.port}/article.html`, { mode: 'catp', signal: stop.signal, timeoutMs });
    stop.abort(); // before the request is under way (as a navigation that replaces this one does)
    await expect(loading).rejects.toMatchObject({ code: 'HOST_ERR_STOPPED' });
    expect(armed.mock.calls.filter((c) => c[1] === timeoutMs)).toHaveLength(0);
  } finally {
    armed.mockRestore();
  }
});

test('timeoutMs is a deadline on silence: a slow page outlasts it while frames come; a page whose frames stop ends with HOST_ERR_TIMEOUT', async () => {
  // ~40 kB of words that compress to some 15 kB of frames: at 20,000 B/s a frame every ~60 ms, the page in ~1 s
  const rand = seededRng(33);
  const words = Array.from({ length: 6000 }, () => Array.from({ length: 2 + Math.floor(rand() * 6) }, () => 'abcdefghijklmnopqrstuvwxyz'[Math.floor(rand() * 26)]).join(''));
  writeFileSync(join(root, 'words.html'), `<!DOCTYPE html><html><head><title>words</title></head><body><p>${words.join(' ')}</p></body></html>`);
  const slow = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 20_000, maxRateBytesPerSec: 20_000 } });
  let passed = 0;
  // frames stop after the fifth datagram to the client (the server keeps resending; nothing gets through)
  const cut = await startUdpRelay(slow.port, { toClient: () => (++passed > 5 ? 'drop' : 'pass') });
  try {
    const timeoutMs = 400;
    let frames = 0;
    const t0 = Date.now();
    const result = await host.load(`dhttp://127.0.0.1:${slow.port}/words.html`, { mode: 'catp', timeoutMs, onFrame: () => frames++ });
    expect(result.kind).toBe('stream');
    expect(frames).toBeGreaterThan(8);
    expect(Date.now() - t0).toBeGreaterThan(timeoutMs); // longer than the deadline: frames kept it alive
    await expect(host.load(`dhttp://127.0.0.1:${cut.port}/words.html`, { mode: 'catp', timeoutMs })).rejects.toMatchObject({
      code: 'HOST_ERR_TIMEOUT',
      message: expect.stringContaining(`no frame for ${timeoutMs} ms`),
    });
  } finally {
    await cut.close();
    await slow.close();
  }
}, 30_000);

test('a load stopped mid-way rejects with HOST_ERR_STOPPED and releases its request ID', async () => {
  const stop = new AbortController();
  let frames = 0;
  // slow: senders find their rate, so the bound is what keeps frames coming after the stop (one per ~60 ms)
  const slow = await startServer({ root, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 20_000, maxRateBytesPerSec: 20_000 } });
  try {
    const loading = host.load(`dhttp://127.0.0.1:${slow.port}/article.html`, {
      mode: 'catp',
      signal: stop.signal,
      onFrame: () => {
        if (++frames === 3) stop.abort();
      },
    });
    await expect(loading).rejects.toMatchObject({ code: 'HOST_ERR_STOPPED' });
    expect(frames).toBe(3);
    const { endpoint } = host.laneFor('127.0.0.1');
    expect(endpoint.outstanding()).toBe(0); // later frames are dropped by the endpoint, not delivered
    await new Promise((r) => setTimeout(r, 300));
    expect(frames).toBe(3);
    expect(endpoint.counters().udpUnmatched).toBeGreaterThan(0);
  } finally {
    await slow.close();
  }
}, 30_000);
