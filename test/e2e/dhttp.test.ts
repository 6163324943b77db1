// DHTTP end to end on real loopback sockets: the reference server, the native endpoint, the sans-IO client
// and the host that joins them.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { DhttpHost } from '../../app';
import { startServer, type DhttpServer } from '../../server';
import { seededRng } from '../../protocol/random';
import { startNginx } from '../helpers/nginx';
import { startUdpRelay } from '../helpers/udp-relay';

const SMALL = randomBytes(500);
const LARGE = randomBytes(200 * 1024);
const MANY = 1000;

let root: string;
let server: DhttpServer;
let host: DhttpHost;

function bodyOf(i: number): Buffer {
  // every 10th file is too large for one datagram, so the burst exercises both channels
  const size = i % 10 === 0 ? 4000 + i : 40 + (i % 300);
  return Buffer.from(`file ${i};`.padEnd(size, String.fromCharCode(97 + (i % 26))));
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'catp-e2e-'));
  writeFileSync(join(root, 'small.bin'), SMALL);
  writeFileSync(join(root, 'large.bin'), LARGE);
  mkdirSync(join(root, 'many'));
  for (let i = 0; i < MANY; i++) writeFileSync(join(root, 'many', `${i}.txt`), bodyOf(i));
  server = await startServer({ root, port: 0, host: '127.0.0.1' });
});

beforeEach(() => {
  host = new DhttpHost({ client: { initialTimeoutMs: 400 } });
});

afterEach(() => host.close());

afterAll(async () => {
  await server.close();
  rmSync(root, { recursive: true, force: true });
});

test('a 500-byte file comes back over UDP, byte-exact', async () => {
  const r = await host.fetch(`dhttp://127.0.0.1:${server.port}/small.bin`);
  expect(r.response.status).toBe(200);
  expect(r.channel).toBe('udp');
  expect(Buffer.from(r.response.body).equals(SMALL)).toBe(true);
  expect(r.lastRxNs).not.toBeNull();
});

test('a 200 KB file comes back over a TCP connection the server opens to the client, byte-exact', async () => {
  const r = await host.fetch(`dhttp://127.0.0.1:${server.port}/large.bin`);
  expect(r.response.status).toBe(200);
  expect(r.channel).toBe('tcp');
  expect(Buffer.from(r.response.body).equals(LARGE)).toBe(true);
  const lane = host.counters().lanes[0]!;
  expect(lane.endpoint.tcpAccepted).toBe(1); // server-opened, admitted by its request ID
  expect(lane.endpoint.tcpConnected).toBe(0); // we opened nothing ourselves
  // a second large answer reuses the server's open connection
  const again = await host.fetch(`dhttp://127.0.0.1:${server.port}/large.bin`);
  expect(Buffer.from(again.response.body).equals(LARGE)).toBe(true);
  expect(host.counters().lanes[0]!.endpoint.tcpAccepted).toBe(1);
});

test('IPv6 loopback works for both channels', async () => {
  const v6 = await startServer({ root, port: 0, host: '::1' });
  try {
    const small = await host.fetch(`dhttp://[::1]:${v6.port}/small.bin`);
    expect(small.channel).toBe('udp');
    expect(Buffer.from(small.response.body).equals(SMALL)).toBe(true);
    const large = await host.fetch(`dhttp://[::1]:${v6.port}/large.bin`);
    expect(large.channel).toBe('tcp');
    expect(Buffer.from(large.response.body).equals(LARGE)).toBe(true);
  } finally {
    await v6.close();
  }
});

test('1,000 concurrent requests from one client each get their own body', async () => {
  // A server of its own: resends this burst may cause must not move the shared server into high-loss mode.
  const burstServer = await startServer({ root, port: 0, host: '127.0.0.1' });
  const results = await Promise.all(
    Array.from({ length: MANY }, (_, i) => host.fetch(`dhttp://127.0.0.1:${burstServer.port}/many/${i}.txt`)),
  ).finally(() => burstServer.close());
  const channels = { udp: 0, tcp: 0, http: 0, https: 0 };
  results.forEach((r, i) => {
    expect(r.response.status).toBe(200);
    expect(Buffer.from(r.response.body).equals(bodyOf(i))).toBe(true);
    channels[r.channel]++;
  });
  expect(channels.http).toBe(0);
  expect(channels.tcp).toBeGreaterThanOrEqual(MANY / 10);
  expect(new Set(results.map((r) => r.requestId)).size).toBe(MANY);
}, 60_000);

test("an overloaded server answers \"resend over TCP\" (DHTTP paper VI-B3): 200 concurrent requests against maxUdpInFlight 4 all complete, the overflow over the client's own connection", async () => {
  const busy = await startServer({ root, port: 0, host: '127.0.0.1', limits: { maxUdpInFlight: 4 } });
  try {
    const n = 200;
    const before = host.counters().lanes[0]?.client ?? { retriesOverTcp: 0, resends: 0 }; // (no lane before the host's first request)
    const results = await Promise.all(Array.from({ length: n }, (_, i) => host.fetch(`dhttp://127.0.0.1:${busy.port}/many/${i + 1}.txt`)));
    results.forEach((r, i) => {
      expect(r.response.status).toBe(200);
      expect(Buffer.from(r.response.body).equals(bodyOf(i + 1))).toBe(true);
    });
    const c = busy.counters();
    expect(c.udpOverload).toBeGreaterThan(0);
    // every overloaded request was told to use TCP, not dropped, and the client took it: one retry over TCP per
    // refused request. A resend (a loaded machine's timer firing first) can be refused again under the same ID,
    // so the server's count may exceed the client's by at most the client's resends.
    const after = host.counters().lanes[0]!.client;
    const retries = after.retriesOverTcp - before.retriesOverTcp;
    const resends = after.resends - before.resends;
    expect(retries).toBeGreaterThan(0);
    expect(retries).toBeLessThanOrEqual(c.udpOverload);
    expect(retries).toBeGreaterThanOrEqual(c.udpOverload - resends);
    expect(c.dhttpTcpRequests).toBeGreaterThanOrEqual(retries);
  } finally {
    await busy.close();
  }
}, 60_000);

test('dhttpt:// goes over a TCP connection the client opens', async () => {
  const r = await host.fetch(`dhttpt://127.0.0.1:${server.port}/small.bin`);
  expect(r.channel).toBe('tcp');
  expect(Buffer.from(r.response.body).equals(SMALL)).toBe(true);
  expect(host.counters().lanes[0]!.endpoint.tcpConnected).toBe(1);
});

test('a spoofed datagram and an unsolicited TCP connection are dropped, counted, and leave a request in flight alone', async () => {
  // A server of its own: the shared one's channel choice carries the earlier tests' resends (on a loaded machine
  // enough of them to put it in high-loss mode, where a small answer goes over TCP and this test sees none by UDP).
  const own = await startServer({ root, port: 0, host: '127.0.0.1', rng: seededRng(21) });
  // The relay holds the genuine answer back long enough for the attack to land first.
  const relay = await startUdpRelay(own.port, { toClient: () => 300 });
  host.close();
  host = new DhttpHost({ client: { initialTimeoutMs: 5000 } }); // no resend may race the held-back answer
  try {
    const inFlight = host.fetch(`dhttp://127.0.0.1:${relay.port}/small.bin`);
    const { udpPort, tcpPort } = host.laneFor('127.0.0.1');
    const attacker = dgram.createSocket('udp4');
    for (let i = 0; i < 20; i++) {
      // a well-formed DHTTP response carrying an ID nobody asked for
      const fake = Buffer.concat([randomBytes(8), Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL')]);
      attacker.send(fake, udpPort, '127.0.0.1');
    }
    const sock = net.connect(tcpPort, '127.0.0.1');
    const closed = new Promise<void>((ok) => sock.on('close', () => ok()));
    sock.on('error', () => undefined);
    sock.write(Buffer.concat([randomBytes(8), Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL')]));
    await closed; // the endpoint hangs up on a connection that names no outstanding ID
    const r = await inFlight;
    attacker.close();
    expect(Buffer.from(r.response.body).equals(SMALL)).toBe(true);
    expect(r.resends).toBe(0);
    const c = host.counters().lanes[0]!.endpoint;
    expect(c.udpUnmatched).toBeGreaterThanOrEqual(20);
    expect(c.tcpRejected).toBe(1);
    expect(c.udpMatched).toBe(1);
  } finally {
    await relay.close();
    await own.close();
  }
});

test('a lost first response is recovered by a resend with the resend flag, answered over TCP', async () => {
  const seenFlags: number[] = [];
  const own = await startServer({ root, port: 0, host: '127.0.0.1', rng: seededRng(22) }); // fresh channel choice, as above
  const relay = await startUdpRelay(own.port, {
    toServer: (d) => {
      seenFlags.push(d[10]!);
      return 'pass';
    },
    toClient: (_d, i) => (i === 0 ? 'drop' : 'pass'),
  });
  try {
    const before = own.counters();
    const r = await host.fetch(`dhttp://127.0.0.1:${relay.port}/small.bin`);
    expect(Buffer.from(r.response.body).equals(SMALL)).toBe(true);
    expect(r.resends).toBe(1);
    // flags byte: first fresh, then the resend; the answer to a resend goes over a connection the server opens,
    // which it does only for a proven address: "ask again with this token", and the resend comes once more with it
    expect(seenFlags).toEqual([0, 1, 1]);
    expect(r.channel).toBe('tcp'); // DHTTP III-B: an answer to a resent request goes over TCP
    expect(relay.counts.dropped).toBe(1);
    const after = own.counters();
    expect(after.resentRequests - before.resentRequests).toBe(2);
    expect(after.tokenRetries - before.tokenRetries).toBe(1);
  } finally {
    await relay.close();
    await own.close();
  }
});

describe('against nginx, a real server that knows no DHTTP', () => {
  let nginx: Awaited<ReturnType<typeof startNginx>>;
  beforeAll(async () => {
    nginx = await startNginx(root);
  });
  afterAll(async () => nginx?.close());

  test('dhttp:// falls back to HTTP/1.1 on ICMP port unreachable, well under the resend timeout', async () => {
    const slow = new DhttpHost({ client: { initialTimeoutMs: 3000 } });
    try {
      const r = await slow.fetch(`dhttp://127.0.0.1:${nginx.port}/large.bin`);
      expect(r.response.status).toBe(200);
      expect(r.channel).toBe('http');
      expect(r.fellBack).toBe(true);
      expect(Buffer.from(r.response.body).equals(LARGE)).toBe(true);
      const elapsed = r.completedAtMs - r.startedAtMs;
      expect(elapsed).toBeLessThan(1500); // half the 3 s resend timeout, even on a loaded machine
      expect(slow.counters().lanes[0]!.endpoint.icmpErrors).toBeGreaterThanOrEqual(1);
      // the origin is now known to be plain HTTP: the next request goes straight there
      const next = await slow.fetch(`dhttp://127.0.0.1:${nginx.port}/small.bin`);
      expect(next.channel).toBe('http');
      expect(Buffer.from(next.response.body).equals(SMALL)).toBe(true);
    } finally {
      slow.close();
    }
  });

  test('dhttp:// falls back after a timeout when the UDP port swallows requests silently', async () => {
    // A UDP socket on the same port number as nginx that never answers: no ICMP, only silence.
    const sink = dgram.createSocket('udp4');
    await new Promise<void>((ok) => sink.bind(nginx.port, '127.0.0.1', ok));
    let swallowed = 0;
    sink.on('message', () => swallowed++);
    try {
      const r = await host.fetch(`dhttp://127.0.0.1:${nginx.port}/small.bin`);
      expect(r.channel).toBe('http');
      expect(r.fellBack).toBe(true);
      expect(swallowed).toBeGreaterThanOrEqual(1);
      expect(Buffer.from(r.response.body).equals(SMALL)).toBe(true);
    } finally {
      sink.close();
    }
  });

  test('http:// fetches from nginx directly, several requests on one connection', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await host.fetch(`http://127.0.0.1:${nginx.port}/many/${i}.txt`);
      expect(Buffer.from(r.response.body).equals(bodyOf(i))).toBe(true);
      expect(r.channel).toBe('http');
      expect(r.fellBack).toBe(false); // asked for plain HTTP: nothing to fall back from
    }
    expect(host.counters().lanes[0]!.endpoint.tcpConnected).toBe(1);
    const missing = await host.fetch(`http://127.0.0.1:${nginx.port}/nope`);
    expect(missing.response.status).toBe(404);
  });
});

test('garbage thrown at the client and the server during a load changes nothing but counters', async () => {
  const { udpPort, tcpPort } = host.laneFor('127.0.0.1');
  const noise = dgram.createSocket('udp4');
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const sendNoise = () => {
    for (let i = 0; i < 50; i++) {
      const len = Math.floor(rand() * 1600);
      const junk = randomBytes(len);
      noise.send(junk, rand() < 0.5 ? udpPort : server.port, '127.0.0.1');
    }
    const s = net.connect(rand() < 0.5 ? tcpPort : server.port, '127.0.0.1', () => s.end(randomBytes(64)));
    s.on('error', () => undefined);
  };
  const timer = setInterval(sendNoise, 5);
  try {
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => host.fetch(`dhttp://127.0.0.1:${server.port}/many/${i}.txt`)),
    );
    results.forEach((r, i) => expect(Buffer.from(r.response.body).equals(bodyOf(i))).toBe(true));
    const big = await host.fetch(`dhttp://127.0.0.1:${server.port}/large.bin`);
    expect(Buffer.from(big.response.body).equals(LARGE)).toBe(true);
  } finally {
    clearInterval(timer);
    noise.close();
  }
  const c = host.counters().lanes[0]!.endpoint;
  expect(c.udpUnmatched + c.udpMalformed).toBeGreaterThan(0);
});

test('a host closed while a request\'s name resolves refuses it and opens nothing: a process that does only that exits', async () => {
  // in this process: the request is refused with the host's own error
  const h = new DhttpHost();
  const answer = h.fetch(`dhttp://127.0.0.1:${server.port}/small.bin`);
  h.close();
  await expect(answer).rejects.toMatchObject({ code: 'HOST_ERR_CLOSED' });
  // in a process of its own, the built code: before the fix a lane opened after close() kept its socket, and the
  // process, alive (a browser closed right after it began a navigation never exited)
  const dist = join(__dirname, '..', '..', 'dist', 'app');
  const script = `const { DhttpHost } = require(${JSON.stringify(dist)});
const h = new DhttpHost(); h.fetch('dhttp://127.0.0.1:9/x.html').catch((e) => console.log(e.code)); h.close();`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 15_000 });
  expect({ status: r.status, signal: r.signal, out: r.stdout.trim() }).toEqual({ status: 0, signal: null, out: 'HOST_ERR_CLOSED' });
});
