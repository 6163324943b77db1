// DTD against hostile peers: the cross-site probe of the DTD paper §10, a server that lies about digests,
// and hostile PROCEED / DON'T-BOTHER messages and DTD-Mode fields sent to the reference server.
import { createHash, randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import fs from 'node:fs';
import fsPromises from 'node:fs/promises';

import { startServer, type DhttpServer } from '../../server';
import { DhttpHost } from '../../app';
import { PayloadStore } from '../../app/payload-store';
import {
  decodeRequest,
  encodeRequest,
  encodeResponse,
  idToHex,
  newRequestId,
  parseRequestDatagram,
  serializeRequest,
  serializeResponse,
} from '../../protocol/dhttp';
import { encodeDecision, formatAnnounce, formatReprDigest, isDecisionRequest } from '../../protocol/dtd';
import { hostWithStore, payload, tempDir, writeServed } from './helpers';

const NAUGHTY = payload(40_000);
const HUMDRUM = payload(40_000);

let rootA: ReturnType<typeof tempDir>;
let rootB: ReturnType<typeof tempDir>;
let siteA: DhttpServer;
let nosy: DhttpServer;

beforeAll(async () => {
  rootA = tempDir('catp-dtd-a-');
  rootB = tempDir('catp-dtd-b-');
  writeServed(rootA.dir, 'naughty.gif', NAUGHTY);
  // nosy.com answers its humdrum URL with the naughty payload's digest (it serves those bytes there).
  writeServed(rootB.dir, 'humdrum.html', NAUGHTY);
  writeServed(rootB.dir, 'control.html', HUMDRUM);
  siteA = await startServer({ root: rootA.dir, port: 0 });
  nosy = await startServer({ root: rootB.dir, port: 0 });
});

afterAll(async () => {
  await siteA.close();
  await nosy.close();
  rootA.cleanup();
  rootB.cleanup();
});

const wire = (s: DhttpServer) => {
  const c = s.counters();
  return { proceeds: c.dtdProceeds, dontBothers: c.dtdDontBothers, held: c.dtdHeld, bytes: c.payloadBytesSent, bad: c.dtdBadDecisions, unknown: c.dtdUnknownDecisions };
};

async function probe(scope: 'site' | 'any'): Promise<{ probe: ReturnType<typeof wire>; control: ReturnType<typeof wire>; decision: string | undefined; ms: number[] }> {
  const store = tempDir('catp-dtd-probe-');
  const { host } = await hostWithStore(store.dir, { forcedMode: 'proceed' }, { scope });
  try {
    await host.fetch(`dhttp://127.0.0.1:${siteA.port}/naughty.gif`); // Bob visits site A
    const ms: number[] = [];
    const w0 = wire(nosy);
    const r = await host.fetch(`dhttp://127.0.0.1:${nosy.port}/humdrum.html`); // the probe
    const w1 = wire(nosy);
    await host.fetch(`dhttp://127.0.0.1:${nosy.port}/control.html`); // a payload Bob never had
    const w2 = wire(nosy);
    const diff = (a: ReturnType<typeof wire>, b: ReturnType<typeof wire>) => ({
      proceeds: b.proceeds - a.proceeds, dontBothers: b.dontBothers - a.dontBothers, held: b.held - a.held, bytes: b.bytes - a.bytes, bad: {}, unknown: 0,
    });
    return { probe: diff(w0, w1), control: diff(w1, w2), decision: r.dtd?.decision, ms };
  } finally {
    host.close();
    store.cleanup();
  }
}

test('§10 cross-site probe: under the default scope the nosy server sees exactly what it sees for a true miss', async () => {
  const { probe: p, control, decision } = await probe('site');
  expect(decision).toBe('miss');
  expect(p).toEqual({ proceeds: 1, dontBothers: 0, held: 1, bytes: NAUGHTY.length, bad: {}, unknown: 0 });
  expect(p).toEqual({ ...control, bytes: HUMDRUM.length });
});

test('§10 cross-site probe: the decision is taken from memory in the same steps for "absent" and "other site"', async () => {
  // The timing side, checked by what the decision does rather than by a clock (timed assertions are noise on a
  // shared machine): for an out-of-scope digest and an absent one alike, lookup answers synchronously and makes
  // no filesystem call, so neither can cost a disk read the other does not.
  const store = tempDir('catp-dtd-timing-');
  const s = await PayloadStore.open({ dir: store.dir });
  const held = (await s.put(`dhttp://127.0.0.1:${siteA.port}/naughty.gif`, NAUGHTY)).digest;
  const absent = createHash('sha256').update('never seen').digest();
  const url = `dhttp://127.0.0.1:${nosy.port}/humdrum.html`;
  const fsCalls = countFsCalls();
  try {
    const answers = [s.lookup(held, url), s.lookup(absent, url)];
    for (const a of answers) expect(a).not.toBeInstanceOf(Promise);
    expect(answers.map((a) => a.hit)).toEqual([false, false]);
    expect(answers.map((a) => (a.hit ? '' : a.reason))).toEqual(['other-site', 'absent']);
    // The same URL from the held payload's own site is a hit: the refusal above is the scope, not a miss.
    expect(s.lookup(held, `dhttp://127.0.0.1:${siteA.port}/x`).hit).toBe(true);
  } finally {
    fsCalls.restore();
  }
  expect(fsCalls.calls).toEqual([]);
  store.cleanup();
});

/** Wraps every function of node:fs and node:fs/promises to record calls until `restore`. */
function countFsCalls(): { calls: string[]; restore: () => void } {
  const calls: string[] = [];
  const undo: (() => void)[] = [];
  for (const [name, mod] of [['fs', fs], ['fs/promises', fsPromises]] as const) {
    // A module object indexed by name: its members are functions of many signatures, wrapped alike.
    const table = mod as unknown as Record<string, unknown>;
    for (const key of Object.keys(table)) {
      const fn = table[key];
      if (typeof fn !== 'function' || /^[A-Z]/.test(key)) continue; // classes (Stats, Dirent, ...) are not calls
      const desc = Object.getOwnPropertyDescriptor(table, key);
      if (!desc?.writable && !desc?.set) continue;
      table[key] = function (this: unknown, ...args: unknown[]) {
        calls.push(`${name}.${key}`);
        return (fn as (...a: unknown[]) => unknown).apply(this, args);
      };
      undo.push(() => { table[key] = fn; });
    }
  }
  return { calls, restore: () => undo.forEach((u) => u()) };
}

test('§10 cross-site probe: a widened scope does honour the cross-site hit (the setting works; the leak is opt-in)', async () => {
  const { probe: p, decision } = await probe('any');
  expect(decision).toBe('hit');
  expect(p.dontBothers).toBe(1);
  expect(p.bytes).toBe(0);
});

/**
 * A tiny DHTTP server over UDP that lies: it announces (or attaches) the digest of other bytes. 'flaky' lies only
 * to DTD requests (a broken cache in front of an honest server): asked without DTD, it answers the truth.
 */
async function liar(kind: 'attached' | 'announced' | 'flaky'): Promise<{ port: number; close: () => void; truth: Buffer }> {
  const sock = dgram.createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  const truth = Buffer.from('the real body, 37 bytes of it here...');
  const claimed = createHash('sha256').update('something else').digest();
  const net = await import('node:net');
  sock.on('message', (msg, rinfo) => {
    const req = decodeRequest(msg);
    const http = parseRequestDatagram(req.http);
    if (kind === 'flaky' && !isDecisionRequest(http) && !http.headers.some(([n]) => n.toLowerCase() === 'dtd-mode')) {
      const honest = serializeResponse({ status: 200, reason: 'OK', headers: [['Repr-Digest', formatReprDigest(createHash('sha256').update(truth).digest())]], body: truth });
      sock.send(encodeResponse(req.id, honest), rinfo.port, rinfo.address);
      return;
    }
    const full = serializeResponse({ status: 200, reason: 'OK', headers: [['Repr-Digest', formatReprDigest(claimed)]], body: truth });
    if (kind === 'attached' || isDecisionRequest(http)) {
      if (isDecisionRequest(http)) {
        // the body goes over TCP to the client's port, as a DHTTP server would for a proceed
        const c = net.connect(req.otherPort, rinfo.address, () => c.end(encodeResponse(req.id, full)));
        c.on('error', () => undefined);
        return;
      }
      sock.send(encodeResponse(req.id, full), rinfo.port, rinfo.address);
      return;
    }
    const ann = serializeResponse({
      status: 200, reason: 'OK', headers: [['Repr-Digest', formatReprDigest(claimed)], ['DTD-Announce', formatAnnounce({ held: true, length: truth.length })]], body: new Uint8Array(0),
    });
    sock.send(encodeResponse(req.id, ann), rinfo.port, rinfo.address);
  });
  return { port: (sock.address() as { port: number }).port, close: () => sock.close(), truth };
}

test.each(['attached', 'announced'] as const)('a server whose digest (%s) does not match its body is caught, fetched again once without DTD, still caught; the store stays clean', async (kind) => {
  const srv = await liar(kind);
  const store = tempDir('catp-dtd-liar-');
  const { host, store: s } = await hostWithStore(store.dir, { forcedMode: 'proceed' });
  try {
    await expect(host.fetch(`dhttp://127.0.0.1:${srv.port}/x`)).rejects.toMatchObject({ code: 'DTD_ERR_DIGEST_MISMATCH' });
    await s.flush();
    expect(s.list()).toHaveLength(0);
    expect(host.counters().dtd?.digestMismatches).toBe(2);
    expect(host.counters().dtd?.refetches).toBe(1);
  } finally {
    host.close();
    srv.close();
    store.cleanup();
  }
});

test('an answer that does not match its digest, from an origin honest without DTD: fetched again once, the load completes with the true body, not stored', async () => {
  const srv = await liar('flaky');
  const store = tempDir('catp-dtd-flaky-');
  const { host, store: s } = await hostWithStore(store.dir, { forcedMode: 'proceed' });
  try {
    const r = await host.fetch(`dhttp://127.0.0.1:${srv.port}/x`);
    expect(Buffer.from(r.response.body).equals(srv.truth)).toBe(true);
    expect(r.dtd?.decision).toBe('mismatch');
    await s.flush();
    expect(s.list()).toHaveLength(0);
    expect(host.counters().dtd?.digestMismatches).toBe(1);
    expect(host.counters().dtd?.refetches).toBe(1);
  } finally {
    host.close();
    srv.close();
    store.cleanup();
  }
});

test('hostile decisions and DTD-Mode fields are dropped and counted by name; the server keeps serving', async () => {
  const sock = dgram.createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  const send = (http: Uint8Array, id = newRequestId((n) => randomBytes(n))) =>
    new Promise<void>((r) => sock.send(encodeRequest({ id, otherPort: 40000, resend: false, http }), nosy.port, '127.0.0.1', () => r()));
  const text = (s: string) => new Uint8Array(Buffer.from(s, 'latin1'));
  const before = nosy.counters();
  await send(text('DTD * HTTP/1.1\r\nHost: h\r\n\r\n'));
  await send(text('DTD * HTTP/1.1\r\nHost: h\r\nDTD-Decision: maybe\r\n\r\n'));
  await send(text('DTD /humdrum.html HTTP/1.1\r\nHost: h\r\nDTD-Decision: proceed\r\n\r\n'));
  await send(text('DTD * HTTP/1.1\r\nHost: h\r\nDTD-Decision: proceed\r\nDTD-Decision: dont-bother\r\n\r\n'));
  await send(encodeDecision('h', 'proceed')); // well-formed, but names no held request: replay / spoof
  await send(encodeDecision('h', 'dont-bother'));
  await send(serializeRequest({ method: 'GET', target: '/humdrum.html', headers: [['Host', 'h'], ['DTD-Mode', 'hold-everything']], body: new Uint8Array(0) }));
  await send(serializeRequest({ method: 'GET', target: '/humdrum.html', headers: [['Host', 'h'], ['DTD-Mode', 'proceed;auto=?1']], body: new Uint8Array(0) }));
  await new Promise((r) => setTimeout(r, 200));
  const after = nosy.counters();
  expect((after.dtdBadDecisions.DTD_ERR_BAD_DECISION ?? 0) - (before.dtdBadDecisions.DTD_ERR_BAD_DECISION ?? 0)).toBe(4);
  expect(after.dtdUnknownDecisions - before.dtdUnknownDecisions).toBe(2);
  expect((after.dtdBadModes.DTD_ERR_BAD_MODE ?? 0) - (before.dtdBadModes.DTD_ERR_BAD_MODE ?? 0)).toBe(2);
  expect(after.dtdProceeds).toBe(before.dtdProceeds);
  sock.close();
  const host = new DhttpHost();
  try {
    const r = await host.fetch(`dhttp://127.0.0.1:${nosy.port}/control.html`);
    expect(Buffer.from(r.response.body).equals(HUMDRUM)).toBe(true);
  } finally {
    host.close();
  }
});

test('a decision from another address cannot release or drop someone else\'s held body', async () => {
  // Holds are keyed by (client address, ID): the same ID from elsewhere names nothing.
  const store = tempDir('catp-dtd-spoof-');
  const { host } = await hostWithStore(store.dir, { forcedMode: 'proceed' });
  const before = nosy.counters().dtdUnknownDecisions;
  const sock = dgram.createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, '127.0.0.2', () => r()));
  host.laneFor('127.0.0.1');
  const id = newRequestId((n) => randomBytes(n));
  sock.send(encodeRequest({ id, otherPort: 40000, resend: false, http: encodeDecision('h', 'dont-bother') }), nosy.port, '127.0.0.1');
  await new Promise((r) => setTimeout(r, 100));
  expect(nosy.counters().dtdUnknownDecisions - before).toBe(1);
  expect(idToHex(id)).toHaveLength(16);
  sock.close();
  host.close();
  store.cleanup();
});

test('path estimates persist beside the store: a fresh host starts from the link it measured, not the default; a malformed file changes nothing', async () => {
  const store = tempDir('catp-dtd-paths-');
  const origin = `dhttp://127.0.0.1:${siteA.port}`;
  try {
    const first = await hostWithStore(store.dir, {});
    let measured: number;
    try {
      await first.host.fetch(`${origin}/naughty.gif`);
      measured = first.host.dtd!.policy.linkOf(origin).rttMs;
      // a measurement, not the 50 ms assumed before any (on loopback it is far below; one cold exchange on a busy
      // CI machine took 73 ms once, so the bound is not asserted)
      expect(measured).toBeGreaterThan(0);
      expect(measured).not.toBe(50);
      await first.host.flushStore();
    } finally {
      first.host.close();
    }
    const second = await hostWithStore(store.dir, {});
    try {
      expect(second.host.counters().dtd?.pathsRestored).toBe(1);
      expect(second.host.dtd!.policy.linkOf(origin).rttMs).toBeCloseTo(measured, 6);
    } finally {
      second.host.close();
    }
    // hostile or broken contents: skipped one by one, never thrown
    fs.writeFileSync(`${store.dir}/dtd-paths.json`, JSON.stringify({ v: 1, hits: 5, lookups: 2, origins: [[origin, { srttMs: -5 }], ['y', { srttMs: 1e99, bw: 'fast' }], 7, ['z']] }));
    const third = await hostWithStore(store.dir, {});
    try {
      expect(third.host.counters().dtd?.pathsRestored).toBe(0);
      expect(third.host.dtd!.policy.linkOf(origin).rttMs).toBe(50);
      expect(third.host.dtd!.policy.counters()).toMatchObject({ hits: 0, lookups: 0 });
    } finally {
      third.host.close();
    }
    fs.writeFileSync(`${store.dir}/dtd-paths.json`, '{"v":1,"origins":[[');
    const fourth = await hostWithStore(store.dir, {});
    expect(fourth.host.counters().dtd?.pathsRestored).toBe(0);
    fourth.host.close();
  } finally {
    store.cleanup();
  }
});
