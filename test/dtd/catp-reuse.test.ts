// CATP block reuse end to end on loopback: the reference server, the native endpoint, the host with a real
// cacache payload store on disk. What crossed the wire is the server's own count of the frames it sent
// (catpIndexFramesSent / catpDataFramesSent / catpDataBytesSent).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { parse, serialize } from 'parse5';

import type { DhttpHost, StreamEvent } from '../../app';
import { BlockReuse } from '../../app/block-reuse';
import { PayloadStore } from '../../app/payload-store';
import { parse5TreeBuilder, isCatpReport, REQUEST_PREFIX_BYTES, REPORT_FLAG_EXHAUSTIVE, type CatpEvent } from '../../protocol/catp';
import { seededRng } from '../../protocol/random';
import { startServer, type DhttpServer, type ServerCounters } from '../../server';
import { startUdpRelay } from '../helpers/udp-relay';
import { hostWithStore, tempDir, writeServed } from './helpers';

jest.setTimeout(60_000);

const WORDS = 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo consequat'.split(' ');

/** A long article: `n` paragraphs of ~400 bytes of seeded words (some with inline markup). */
function paragraphs(n: number, seed: number): string[] {
  const rnd = seededRng(seed);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    let p = '';
    while (p.length < 380) p += `${WORDS[Math.floor(rnd() * WORDS.length)]} `;
    out.push(i % 5 === 2 ? `${p.slice(0, 120)}<a href="/x${i}">link ${i}</a> ${p.slice(120)}` : p);
  }
  return out;
}

function page(ps: string[], title = 'Reuse'): string {
  return `<!DOCTYPE html><html><head><title>${title}</title><style>p{margin:1em}</style></head><body><h1>${title}</h1>\n` +
    ps.map((p, i) => `<p id="p${i}">${p}</p>\n`).join('') + '</body></html>\n';
}

const PARAS = paragraphs(60, 11);
const ORIGINAL = page(PARAS);
const CHANGED_INDEX = 30;
const CHANGED_TEXT = 'This paragraph was rewritten between the two loads: it is shorter now, and it says so plainly.';
const CHANGED = page(PARAS.map((p, i) => (i === CHANGED_INDEX ? CHANGED_TEXT : p)));
const OTHER = page(paragraphs(20, 99), 'Other');

let served: ReturnType<typeof tempDir>;
let server: DhttpServer;
let storeDir: ReturnType<typeof tempDir>;
let host: DhttpHost;
let store: PayloadStore;

beforeAll(async () => {
  // 'best' at once: every load of a page meets the same frames (with 'fast' first, a reload may meet the
  // background upgrade's frames or not, depending on how busy the machine is)
  served = tempDir('catp-reuse-root-');
  writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
  writeServed(served.dir, 'other.html', Buffer.from(OTHER));
  server = await startServer({ root: served.dir, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 4_000_000, coldEncode: 'best' } });
});

afterAll(async () => {
  await server.close();
  served.cleanup();
});

/** The mechanism under test, on loopback, where the latency model would rightly never ask for the hold. */
const HOLD_ALWAYS = { reuse: { hold: 'always' as const } };

beforeEach(async () => {
  storeDir = tempDir('catp-reuse-store-');
  ({ host, store } = await hostWithStore(storeDir.dir, {}, {}, HOLD_ALWAYS));
});

afterEach(async () => {
  host?.close();
  await host?.flushStore().catch(() => undefined);
  storeDir?.cleanup();
});

interface Loaded {
  serialized: string;
  result: Awaited<ReturnType<DhttpHost['load']>>;
  localEvents: number;
  ms: number;
}

async function load(h: DhttpHost, url: string): Promise<Loaded> {
  const tree = parse5TreeBuilder();
  let localEvents = 0;
  const apply = (events: StreamEvent[]) => {
    for (const ev of events) tree.apply(ev as CatpEvent);
  };
  const t0 = performance.now();
  const result = await h.load(url, {
    mode: 'catp',
    timeoutMs: 20_000,
    onFrame: (_r, events) => apply(events),
    onLocalFill: (events) => {
      localEvents += events.filter((e) => e.type === 'block-filled').length;
      apply(events);
    },
  });
  const ms = performance.now() - t0;
  if (tree.root === null) throw new Error('no tree');
  // the blocks go into the store after the load: wait for them, as a next load would find them
  await h.flushStore();
  return { serialized: serialize(tree.root), result, localEvents, ms };
}

const parse5Of = (html: string) => serialize(parse(html, { scriptingEnabled: false }));
const url = (p: string, port = server.port) => `dhttp://127.0.0.1:${port}/${p}`;
const delta = (a: ServerCounters, b: ServerCounters, k: 'catpDataFramesSent' | 'catpDataBytesSent' | 'catpIndexFramesSent' | 'catpReuseSessions' | 'catpReuseHoldExpired') => a[k] - b[k];

async function settled(s: DhttpServer): Promise<void> {
  const until = Date.now() + 5000;
  while (s.counters().catpActive > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
}

test('(a) a reload of an unchanged page transfers the index frames only, and the tree is parse5\'s', async () => {
  writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
  const c0 = server.counters();
  const first = await load(host, url('article.html'));
  expect(first.serialized).toBe(parse5Of(ORIGINAL));
  expect(first.result.kind).toBe('stream');
  if (first.result.kind !== 'stream') return;
  const blocks = first.result.reuse?.blocks ?? 0;
  // 24 KB of text in blocks of ~8 KB (the server compresses each frame: a block takes one datagram)
  expect(blocks).toBeGreaterThanOrEqual(3);
  expect(first.result.reuse).toMatchObject({ asked: false, reused: 0, bytesSaved: 0 });
  await settled(server);
  const c1 = server.counters();
  expect(delta(c1, c0, 'catpDataFramesSent')).toBeGreaterThanOrEqual(blocks);
  const indexFrames = delta(c1, c0, 'catpIndexFramesSent');
  const firstDataBytes = delta(c1, c0, 'catpDataBytesSent');
  expect(store.counters().blockPuts).toBe(blocks);

  const again = await load(host, url('article.html'));
  expect(again.serialized).toBe(parse5Of(ORIGINAL));
  expect(again.localEvents).toBe(blocks);
  if (again.result.kind !== 'stream') throw new Error('not streamed');
  expect(again.result.reuse).toMatchObject({ asked: true, acked: true, blocks, reused: blocks, corrupt: 0, arrivedAnyway: 0 });
  expect(again.result.reuse?.bytesSaved).toBeGreaterThan(firstDataBytes * 0.9);
  expect(again.result.reuse?.savedMs).toBeGreaterThan(0);
  await settled(server);
  const c2 = server.counters();
  expect(delta(c2, c1, 'catpDataFramesSent')).toBe(0);
  expect(delta(c2, c1, 'catpDataBytesSent')).toBe(0);
  expect(delta(c2, c1, 'catpIndexFramesSent')).toBe(indexFrames);
  expect(delta(c2, c1, 'catpReuseSessions')).toBe(1);
  expect(delta(c2, c1, 'catpReuseHoldExpired')).toBe(0);
  expect(c2.catpReuseFramesSaved - c1.catpReuseFramesSaved).toBe(blocks);
});

test('(b) a page changed in one paragraph transfers about that paragraph\'s blocks only', async () => {
  writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
  const first = await load(host, url('article.html'));
  if (first.result.kind !== 'stream') throw new Error('not streamed');
  const blocks = first.result.reuse?.blocks ?? 0;
  await settled(server);
  writeServed(served.dir, 'article.html', Buffer.from(CHANGED));
  const c1 = server.counters();
  const second = await load(host, url('article.html'));
  expect(second.serialized).toBe(parse5Of(CHANGED));
  if (second.result.kind !== 'stream') throw new Error('not streamed');
  await settled(server);
  const c2 = server.counters();
  const frames = delta(c2, c1, 'catpDataFramesSent');
  const bytes = delta(c2, c1, 'catpDataBytesSent');
  console.log(`one paragraph changed: ${frames} data frame(s), ${bytes} bytes sent of ${second.result.reuse?.blocks} blocks ` +
    `(${second.result.reuse?.reused} reused, ${second.result.reuse?.bytesSaved} bytes saved); index ${delta(c2, c1, 'catpIndexFramesSent')} frame(s); ${second.ms.toFixed(0)} ms`);
  // the old paragraph was ~400 bytes, its replacement ~100: one or two blocks around it, a few KB at most
  expect(frames).toBeGreaterThanOrEqual(1);
  expect(frames).toBeLessThanOrEqual(3);
  expect(bytes).toBeLessThan(3 * 1460);
  expect(second.result.reuse?.reused).toBe((second.result.reuse?.blocks ?? 0) - frames);
  expect(second.result.reuse?.reused).toBeGreaterThan(blocks * 0.8);
  // the hold ended with the client's report, not by the deadline
  expect(delta(c2, c1, 'catpReuseHoldExpired')).toBe(0);
  expect(second.ms).toBeLessThan(900);
});

test('(c) a block first received from another site is not reused under the default scope', async () => {
  writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
  const siteB = await startServer({ root: served.dir, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 4_000_000, coldEncode: 'best' } });
  try {
    await load(host, url('article.html')); // site A: its blocks are A's
    await load(host, url('other.html', siteB.port)); // B has blocks of its own, so the next load asks B to hold
    await settled(siteB);
    const b0 = siteB.counters();
    const refusalsBefore = store.counters().blockScopeRefusals;
    const fromB = await load(host, url('article.html', siteB.port));
    expect(fromB.serialized).toBe(parse5Of(ORIGINAL));
    if (fromB.result.kind !== 'stream') throw new Error('not streamed');
    const blocks = fromB.result.reuse?.blocks ?? 0;
    expect(fromB.result.reuse).toMatchObject({ asked: true, reused: 0, bytesSaved: 0 });
    expect(fromB.result.reuse?.crossSiteMisses).toBe(blocks);
    expect(store.counters().blockScopeRefusals - refusalsBefore).toBe(blocks);
    expect(fromB.localEvents).toBe(0);
    await settled(siteB);
    // B sent every block: nothing it could read told it the client held them for A
    expect(delta(siteB.counters(), b0, 'catpDataFramesSent')).toBeGreaterThanOrEqual(blocks);
  } finally {
    await siteB.close();
  }
});

test('(d) a corrupted store entry is not used: that block is fetched again and the page is right', async () => {
  writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
  await load(host, url('article.html'));
  await settled(server);
  const victim = store.list().find((e) => e.block);
  expect(victim).toBeDefined();
  const h = victim!.digestHex;
  const file = join(storeDir.dir, 'content-v2', 'sha256', h.slice(0, 2), h.slice(2, 4), h.slice(4));
  const bytes = readFileSync(file);
  bytes[Math.floor(bytes.length / 2)] ^= 0x20; // still valid UTF-8, wrong digest
  writeFileSync(file, bytes);
  // a new session (process) on the same store: nothing of the block in memory, it has to come from disk
  host.close();
  ({ host, store } = await hostWithStore(storeDir.dir, {}, {}, HOLD_ALWAYS));
  const c1 = server.counters();
  const again = await load(host, url('article.html'));
  expect(again.serialized).toBe(parse5Of(ORIGINAL));
  if (again.result.kind !== 'stream') throw new Error('not streamed');
  expect(again.result.reuse?.corrupt).toBe(1);
  expect(again.result.reuse?.reused).toBe((again.result.reuse?.blocks ?? 0) - 1);
  expect(store.counters().corruptRemoved).toBe(1);
  await settled(server);
  expect(delta(server.counters(), c1, 'catpDataFramesSent')).toBe(1);
  // the refetched block went back into the store, verified
  await host.flushStore();
  expect(store.list().some((e) => e.digestHex === h)).toBe(true);
});

// When the hold ends by its deadline, the blocks the client already filled from its store arrive anyway: each
// is a duplicate (counted as arrivedAnyway), not a second fill (test/unit/catp/reuse.test.ts shows it alone).
test('(e) when the client\'s exhaustive reports are lost, the server\'s hold ends by its deadline', async () => {
  const HOLD_MS = 700;
  const holding = await startServer({ root: served.dir, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 4_000_000, reuseHoldMs: HOLD_MS } });
  let droppedExhaustive = 0;
  const relay = await startUdpRelay(holding.port, {
    toServer: (d) => {
      if (isCatpReport(d) && (d[REQUEST_PREFIX_BYTES + 3] & REPORT_FLAG_EXHAUSTIVE) !== 0) {
        droppedExhaustive++;
        return 'drop';
      }
      return 'pass';
    },
  });
  try {
    writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
    await load(host, url('article.html', relay.port));
    await settled(holding);
    writeServed(served.dir, 'article.html', Buffer.from(CHANGED)); // so the reload needs the network
    const c1 = holding.counters();
    const second = await load(host, url('article.html', relay.port));
    expect(second.serialized).toBe(parse5Of(CHANGED));
    expect(droppedExhaustive).toBeGreaterThan(0);
    if (second.result.kind !== 'stream') throw new Error('not streamed');
    // bounded: the data came once the hold ran out (not at the sender's 60 s give-up)
    expect(second.ms).toBeGreaterThan(HOLD_MS * 0.9);
    expect(second.ms).toBeLessThan(HOLD_MS + 2500);
    expect(second.result.reuse?.arrivedAnyway).toBeGreaterThan(0);
    await settled(holding);
    expect(delta(holding.counters(), c1, 'catpReuseHoldExpired')).toBe(1);
  } finally {
    await relay.close();
    await holding.close();
  }
});

test('catp get --catp --store DIR -v: the second load reuses every block and says so', async () => {
  writeServed(served.dir, 'article.html', Buffer.from(ORIGINAL));
  // its own server, with a hold long enough for a CLI process starting on a loaded CI machine (the hold running
  // out has its own test above), and no session of an earlier test still running beside it
  const own = await startServer({ root: served.dir, port: 0, host: '127.0.0.1', catp: { rateBytesPerSec: 4_000_000, reuseHoldMs: 5000 } });
  const at = (path: string): string => `dhttp://127.0.0.1:${own.port}/${path}`;
  try {
  const cli = join(__dirname, '..', '..', 'bin', 'catp.js');
  const out = join(storeDir.dir, 'out.html');
  const dir = join(storeDir.dir, 'cli-store');
  const run = async (): Promise<{ status: number | null; stderr: string }> => {
    const child = spawn(process.execPath, [cli, 'get', '--catp', '--store', dir, '-v', '-o', out, at('article.html')], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const status = await new Promise<number | null>((ok) => child.on('close', ok));
    return { status, stderr };
  };
  const first = await run();
  expect(first.status).toBe(0);
  expect(first.stderr).toMatch(/catp reuse: no blocks of this site in the store: nothing to reuse; the page's \d+ blocks are stored/);
  await settled(own);
  const c1 = own.counters();
  const second = await run();
  expect(second.status).toBe(0);
  const m = /catp reuse: (\d+) of (\d+) blocks filled from the store .*it acknowledged/.exec(second.stderr);
  expect(m).not.toBeNull();
  expect(m![1]).toBe(m![2]);
  expect(second.stderr).toMatch(/catp reuse: \d+ bytes not transferred \(\d+ data frames never sent\), ~[\d.]+ ms at /);
  expect(readFileSync(out, 'utf8')).toBe(parse5Of(ORIGINAL));
  await settled(own);
  expect(delta(own.counters(), c1, 'catpReuseHoldExpired')).toBe(0);
  expect(delta(own.counters(), c1, 'catpDataFramesSent')).toBe(0);
  } finally {
    await own.close();
  }
});

test('the hold is asked for only when the latency model says it pays: blocks of the site and no history yet, yes; reused blocks that save less than a round trip, no; on a slow link, yes again', async () => {
  const dir = tempDir('catp-reuse-model-');
  try {
    const store = await PayloadStore.open({ dir: dir.dir });
    const page = 'dhttp://a.example:8080/p.html';
    await store.put(page, randomBytes(2000), undefined, { block: true });
    await store.flush();
    const reuse = new BlockReuse(store);
    expect(reuse.wantsHold('dhttp://b.example:8080/p.html')).toBe(false); // no blocks of that site
    expect(reuse.wantsHold(page)).toBe(true);
    reuse.noteLoad(page, 80, 5); // a fast link: the reused blocks saved 5 ms, the hold costs a round trip of 80
    expect(reuse.wantsHold(page)).toBe(false);
    expect(reuse.counters().holdsSkipped).toBe(1);
    for (let i = 0; i < 8; i++) reuse.noteLoad(page, 80, 600); // a slow link: 600 ms of transfer saved a load
    expect(reuse.wantsHold(page)).toBe(true);
  } finally {
    dir.cleanup();
  }
});
