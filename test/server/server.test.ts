// The reference server over real loopback sockets. The peer is Node's own dgram/net, crafting DHTTP messages
// with protocol/dhttp, so these tests pin the wire behaviour independently of the native client.
import { spawn } from 'child_process';
import * as crypto from 'crypto';
import * as dgram from 'dgram';
import { promises as fsp } from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { seededRng } from '../../protocol/random';
import { startServer, type DhttpServer, type ServerCounters } from '../../server';
import {
  ID_BYTES,
  decodeResponseDatagram,
  encodeRequest,
  idToHex,
  newRequestId,
  parseResponseDatagram,
  serializeRequest,
  type HttpResponse,
} from '../../protocol/dhttp';
import { ResponseParser, getHeader } from '../../protocol/dhttp/http1';
import { DhttpResponseStream, type DhttpStreamResponse } from '../../protocol/dhttp/stream';

jest.setTimeout(30_000);

const newId = () => newRequestId((n) => crypto.randomBytes(n));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function waitFor(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

function httpGet(target: string, method = 'GET', body = new Uint8Array(0), extra: [string, string][] = []): Uint8Array {
  return serializeRequest({ method, target, headers: [['Host', 'test'], ...extra], body });
}

// ------------------------------------------------------------------ fixtures

let tmp: string;
let root: string;
const small = crypto.randomBytes(500);
const big = crypto.randomBytes(200 * 1024);
const big2 = crypto.randomBytes(50 * 1024);

beforeAll(async () => {
  tmp = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'catp-server-')));
  root = path.join(tmp, 'www');
  await fsp.mkdir(path.join(root, 'sub'), { recursive: true });
  await fsp.writeFile(path.join(root, 'small.bin'), small);
  await fsp.writeFile(path.join(root, 'big.bin'), big);
  await fsp.writeFile(path.join(root, 'big2.bin'), big2);
  await fsp.writeFile(path.join(root, 'index.html'), '<!doctype html><title>hi</title>');
  await fsp.writeFile(path.join(root, 'sub', 'page.html'), '<p>page</p>');
  await fsp.writeFile(path.join(tmp, 'secret.txt'), 'top secret');
  await fsp.symlink(path.join(tmp, 'secret.txt'), path.join(root, 'out.txt'));
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

// ------------------------------------------------------------------ a DHTTP "client" made of Node sockets

interface Datagram {
  msg: Buffer;
  rinfo: dgram.RemoteInfo;
}

/** The client's TCP port: a net.Server that parses incoming response streams. */
class TcpPort {
  readonly server = net.createServer();
  readonly connections: net.Socket[] = [];
  readonly responses: (DhttpStreamResponse & { conn: number })[] = [];
  readonly rawFirstBytes: Buffer[] = [];

  async listen(host: string): Promise<number> {
    this.server.on('connection', (sock) => {
      const conn = this.connections.length;
      this.connections.push(sock);
      const stream = new DhttpResponseStream();
      let first = true;
      sock.on('data', (d) => {
        if (first) {
          this.rawFirstBytes.push(Buffer.from(d.subarray(0, ID_BYTES)));
          first = false;
        }
        stream.push(d);
        for (let m = stream.next(); m; m = stream.next()) this.responses.push({ ...m, conn });
      });
      sock.on('error', () => undefined);
    });
    await new Promise<void>((r) => this.server.listen(0, host, () => r()));
    return (this.server.address() as net.AddressInfo).port;
  }

  async waitFor(id: Uint8Array): Promise<DhttpStreamResponse & { conn: number }> {
    const hex = idToHex(id);
    let found: (DhttpStreamResponse & { conn: number }) | undefined;
    await waitFor(() => (found = this.responses.find((r) => idToHex(r.id) === hex)) !== undefined, `TCP response ${hex}`);
    return found as DhttpStreamResponse & { conn: number };
  }

  close(): Promise<void> {
    for (const s of this.connections) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

class Client {
  udp: dgram.Socket;
  readonly inbox: Datagram[] = [];
  readonly tcp = new TcpPort();
  tcpPort = 0;

  constructor(
    readonly server: DhttpServer,
    readonly host = '127.0.0.1',
    /** the client's own address (another loopback address: another client of the same server) */
    readonly bindHost = host,
  ) {
    this.udp = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
    this.udp.on('message', (msg, rinfo) => this.inbox.push({ msg, rinfo }));
  }

  /** The server's address token for us (a client proves its address with it; see address-validation.ts). */
  token: string | null = null;

  async start(opts: { proven?: boolean } = {}): Promise<this> {
    await new Promise<void>((r) => this.udp.bind(0, this.bindHost, () => r()));
    this.tcpPort = await this.tcp.listen(this.bindHost);
    if (opts.proven !== false) {
      // as a DHTTP client does on first contact: a request padded to 1200 bytes, whose answer carries the token
      const id = newId();
      await this.send(encodeRequest({ id, otherPort: this.tcpPort, resend: false, http: httpGet('/', 'HEAD', new Uint8Array(0), [['Catp-Pad', 'x'.repeat(1100)]]) }));
      const { res } = await this.udpReply(id, 'HEAD');
      this.token = getHeader(res.headers, 'catp-token');
      this.inbox.length = 0;
      this.server.counters(); // (nothing else to settle)
    }
    return this;
  }

  send(bytes: Uint8Array): Promise<void> {
    return new Promise((resolve, reject) => this.udp.send(bytes, this.server.port, this.host, (e) => (e ? reject(e) : resolve())));
  }

  request(target: string, opts: { id?: Uint8Array; resend?: boolean; method?: string; otherPort?: number } = {}): Promise<Uint8Array> {
    const id = opts.id ?? newId();
    const http = httpGet(target, opts.method ?? 'GET', new Uint8Array(0), this.token ? [['Catp-Token', this.token]] : []);
    return this.send(encodeRequest({ id, otherPort: opts.otherPort ?? this.tcpPort, resend: opts.resend ?? false, http })).then(() => id);
  }

  async udpReply(id: Uint8Array, method = 'GET'): Promise<{ res: HttpResponse; rinfo: dgram.RemoteInfo }> {
    const hex = idToHex(id);
    let found: Datagram | undefined;
    await waitFor(() => (found = this.inbox.find((d) => d.msg.length >= 8 && idToHex(d.msg.subarray(0, 8)) === hex)) !== undefined, `UDP reply ${hex}`);
    const d = found as Datagram;
    const dec = decodeResponseDatagram(d.msg);
    return { res: parseResponseDatagram(dec.http, { method }), rinfo: d.rinfo };
  }

  /** The answer to `id` over whichever channel the server chose. */
  async anyReply(id: Uint8Array): Promise<{ res: HttpResponse; channel: 'udp' | 'tcp' }> {
    const hex = idToHex(id);
    await waitFor(
      () => this.tcp.responses.some((r) => idToHex(r.id) === hex) || this.inbox.some((d) => d.msg.length >= 8 && idToHex(d.msg.subarray(0, 8)) === hex),
      `reply ${hex}`,
    );
    const t = this.tcp.responses.find((r) => idToHex(r.id) === hex);
    if (t) return { res: t.response, channel: 'tcp' };
    return { res: (await this.udpReply(id)).res, channel: 'udp' };
  }

  async close(): Promise<void> {
    this.udp.close();
    await this.tcp.close();
  }
}

/** Sends bytes on a fresh TCP connection to the server and collects everything until the server closes. */
function tcpExchange(port: number, chunks: (Uint8Array | string)[], host = '127.0.0.1', opts: { endAfterWrite?: boolean; localAddress?: string } = {}): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host, ...(opts.localAddress === undefined ? {} : { localAddress: opts.localAddress }) });
    const parts: Buffer[] = [];
    sock.on('data', (d) => parts.push(d));
    sock.on('error', reject);
    sock.on('close', () => resolve(Buffer.concat(parts)));
    sock.on('connect', () => {
      for (const c of chunks) sock.write(c);
      if (opts.endAfterWrite) sock.end();
    });
  });
}

function parseHttpResponses(bytes: Uint8Array, methods: string[]): HttpResponse[] {
  const p = new ResponseParser();
  for (const m of methods) p.expect(m);
  p.push(bytes);
  p.end();
  const out: HttpResponse[] = [];
  for (let r = p.next(); r; r = p.next()) out.push(r);
  return out;
}

const hdr = (r: HttpResponse, n: string) => getHeader(r.headers, n);

// ------------------------------------------------------------------ tests

describe('DHTTP server over UDP (IPv4)', () => {
  let server: DhttpServer;
  let client: Client;

  beforeAll(async () => {
    server = await startServer({ root, rng: seededRng(1) });
    client = await new Client(server).start();
  });

  afterAll(async () => {
    await client.close();
    await server.close();
  });

  test('listens on one port number for UDP and TCP', () => {
    expect(server.port).toBeGreaterThan(0);
    expect(server.address).toMatchObject({ port: server.port, address: '127.0.0.1' });
  });

  test('a 500-byte file is answered over UDP to the datagram source', async () => {
    const id = await client.request('/small.bin');
    const { res, rinfo } = await client.udpReply(id);
    expect(rinfo.port).toBe(server.port);
    expect(res.status).toBe(200);
    expect(Buffer.from(res.body).equals(small)).toBe(true);
    expect(hdr(res, 'content-type')).toBe('application/octet-stream');
    expect(server.counters().udpResponses).toBeGreaterThanOrEqual(1);
  });

  test('HEAD over UDP: headers only', async () => {
    const id = await client.request('/small.bin', { method: 'HEAD' });
    const { res } = await client.udpReply(id, 'HEAD');
    expect(res.status).toBe(200);
    expect(hdr(res, 'content-length')).toBe('500');
    expect(res.body.length).toBe(0);
  });

  test('404 over UDP', async () => {
    const id = await client.request('/missing.html');
    const { res } = await client.udpReply(id);
    expect(res.status).toBe(404);
  });

  test('a 200 KB file goes over a TCP connection the server opens; a second large one reuses it', async () => {
    const before = server.counters();
    const id = await client.request('/big.bin');
    const r = await client.tcp.waitFor(id);
    expect(client.tcp.connections.length).toBe(1);
    expect(client.tcp.rawFirstBytes[0].equals(Buffer.from(id))).toBe(true); // first 8 bytes = ID
    expect(r.response.status).toBe(200);
    expect(Buffer.from(r.response.body).equals(big)).toBe(true);

    const id2 = await client.request('/big2.bin');
    const r2 = await client.tcp.waitFor(id2);
    expect(Buffer.from(r2.response.body).equals(big2)).toBe(true);
    expect(r2.conn).toBe(r.conn);
    expect(client.tcp.connections.length).toBe(1);
    await waitFor(() => server.counters().tcpResponses >= before.tcpResponses + 2, 'tcpResponses');
    const c = server.counters();
    expect(c.tcpConnectsOpened).toBe(before.tcpConnectsOpened + 1);
    expect(c.tcpConnectsReused).toBe(before.tcpConnectsReused + 1);
  });

  test('a resent request is answered over TCP', async () => {
    const before = server.counters();
    const id = await client.request('/small.bin', { resend: true });
    const r = await client.tcp.waitFor(id);
    expect(Buffer.from(r.response.body).equals(small)).toBe(true);
    expect(client.inbox.some((d) => idToHex(d.msg.subarray(0, 8)) === idToHex(id))).toBe(false);
    expect(server.counters().resentRequests).toBe(before.resentRequests + 1);
  });

  test('a resend of an ID already answered over TCP is ignored', async () => {
    const id = await client.request('/big.bin');
    await client.tcp.waitFor(id);
    await waitFor(() => server.counters().channel.ringEntries > 0, 'ring entry');
    const before = server.counters();
    const countFor = () => client.tcp.responses.filter((r) => idToHex(r.id) === idToHex(id)).length;
    expect(countFor()).toBe(1);
    await client.request('/big.bin', { id, resend: true });
    await waitFor(() => server.counters().ignoredResends === before.ignoredResends + 1, 'ignoredResends');
    // A later request is answered; the ignored one never is.
    const later = await client.request('/big2.bin');
    await client.tcp.waitFor(later);
    expect(countFor()).toBe(1);
    expect(server.counters().resentRequests).toBe(before.resentRequests + 1);
  });

  test('POST over UDP is answered 421 with DHTTP-Retry: tcp', async () => {
    const before = server.counters();
    const id = newId();
    await client.send(encodeRequest({ id, otherPort: client.tcpPort, resend: false, http: httpGet('/small.bin', 'POST', new Uint8Array([1, 2, 3])) }));
    const { res } = await client.udpReply(id);
    expect(res.status).toBe(421);
    expect(hdr(res, 'dhttp-retry')).toBe('tcp');
    expect(res.body.length).toBe(0);
    expect(server.counters().retryOverTcp).toBe(before.retryOverTcp + 1);
    for (const method of ['PUT', 'DELETE', 'PATCH']) {
      const id2 = await client.request('/x', { method });
      expect((await client.udpReply(id2)).res.status).toBe(421);
    }
  });

  test('a TCP connect failure is counted and the response dropped', async () => {
    const dead = net.createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', () => r()));
    const deadPort = (dead.address() as net.AddressInfo).port;
    await new Promise<void>((r) => dead.close(() => r()));
    const before = server.counters();
    await client.request('/big.bin', { otherPort: deadPort });
    await waitFor(() => server.counters().tcpConnectFailures === before.tcpConnectFailures + 1, 'connect failure');
    expect(server.counters().tcpResponses).toBe(before.tcpResponses);
  });

  test('a server-opened connection whose SYN is dropped is raced by a second attempt, which carries the answer', async () => {
    // The client's TCP port is a listener whose accept queue is full (backlog 1, two connections it has not accepted:
    // its process spins without returning to its event loop until told to), so the kernel drops the SYN of the
    // server's first attempt, as a link drops a SYN or a SYN-ACK; the kernel would send it again a second later.
    const release = path.join(tmp, `release-${process.pid}`);
    const child = spawn(process.execPath, ['-e', `
      const net = require('net'), fs = require('fs');
      const srv = net.createServer((c) => { c.on('data', (d) => fs.writeSync(1, 'data ' + d.toString('hex') + '\\n')); c.on('error', () => {}); });
      srv.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
        fs.writeSync(1, 'port ' + srv.address().port + '\\n');
        const nap = new Int32Array(new SharedArrayBuffer(4));
        for (let i = 0; i < 2000 && !fs.existsSync(${JSON.stringify(release)}); i++) Atomics.wait(nap, 0, 0, 5);
      });`], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const fillers: net.Socket[] = [];
    try {
      await waitFor(() => /port \d+/.test(out), 'the listener');
      const port = Number(/port (\d+)/.exec(out)![1]);
      for (let i = 0; i < 2; i++) {
        const f = net.connect(port, '127.0.0.1');
        f.on('error', () => undefined);
        fillers.push(f);
        await new Promise((ok) => f.once('connect', ok));
      }
      const before = server.counters();
      const id = await client.request('/big.bin', { otherPort: port });
      await waitFor(() => server.counters().tcpConnectsOpened === before.tcpConnectsOpened + 1, 'the first attempt');
      await sleep(20);
      await fsp.writeFile(release, '');
      const hex = Buffer.from(id).toString('hex');
      await waitFor(() => out.split('\n').some((l) => l.startsWith(`data ${hex}`)), 'the answer');
      await waitFor(() => server.counters().tcpResponses === before.tcpResponses + 1, 'tcpResponses');
      const c = server.counters();
      expect(c.tcpConnectRaces - before.tcpConnectRaces).toBeGreaterThanOrEqual(1);
      expect(c.tcpConnectRaceWins - before.tcpConnectRaceWins).toBe(1);
      expect(c.tcpConnectFailures).toBe(before.tcpConnectFailures);
      // the whole answer comes on the one connection that won (the listener writes it out as it reads it)
      const received = () => out.split('\n').filter((l) => l.startsWith('data ')).reduce((n, l) => n + (l.length - 5) / 2, 0);
      await waitFor(() => received() > big.length, 'the whole answer');
    } finally {
      for (const f of fillers) f.destroy();
      child.kill();
      await fsp.rm(release, { force: true });
    }
  });

  test('an otherPort below 1024 is refused and counted', async () => {
    const before = server.counters();
    const id = newId();
    const bytes = encodeRequest({ id, otherPort: 2000, resend: false, http: httpGet('/big.bin') });
    bytes[8] = 0;
    bytes[9] = 23; // telnet
    await client.send(bytes);
    await waitFor(() => server.counters().refusedPorts === before.refusedPorts + 1, 'refusedPorts');
    expect(server.counters().tcpConnectsOpened).toBe(before.tcpConnectsOpened);
  });
});

describe('garbage never crashes the server', () => {
  let server: DhttpServer;
  let client: Client;

  beforeAll(async () => {
    server = await startServer({ root });
    client = await new Client(server).start();
  });

  afterAll(async () => {
    await client.close();
    await server.close();
  });

  const sumMalformed = (c: ServerCounters) => Object.values(c.udpMalformed).reduce((a, b) => a + b, 0);

  test('a table of malformed datagrams is dropped and counted by code', async () => {
    const answeredBefore = server.counters().udpResponses; // the client's token request
    const id = newId();
    const good = encodeRequest({ id, otherPort: 4000, resend: false, http: httpGet('/small.bin') });
    const withPrefix = (http: string | Uint8Array) =>
      Buffer.concat([Buffer.from(good.subarray(0, 11)), typeof http === 'string' ? Buffer.from(http, 'latin1') : Buffer.from(http)]);
    const table: [string, Uint8Array, string][] = [
      ['empty', new Uint8Array(0), 'DHTTP_ERR_SHORT'],
      ['one byte', new Uint8Array([0x80]), 'DHTTP_ERR_SHORT'],
      ['prefix only', good.subarray(0, 11), 'DHTTP_ERR_SHORT'],
      ['id without top bit', Buffer.concat([Buffer.from([0x00]), Buffer.from(good.subarray(1))]), 'DHTTP_ERR_BAD_ID'],
      ['unknown flag', (() => { const b = Buffer.from(good); b[10] = 0x08; return b; })(), 'DHTTP_ERR_BAD_FLAGS'],
      ['copy and resend flags', (() => { const b = Buffer.from(good); b[10] = 0x05; return b; })(), 'DHTTP_ERR_BAD_FLAGS'],
      ['resend and padding flags', (() => { const b = Buffer.from(good); b[10] = 0x03; return b; })(), 'DHTTP_ERR_BAD_FLAGS'],
      ['padding flag, a request behind it', (() => { const b = Buffer.from(good); b[10] = 0x02; return b; })(), 'DHTTP_ERR_BAD_PADDING'],
      ['port 0', (() => { const b = Buffer.from(good); b[8] = 0; b[9] = 0; return b; })(), 'DHTTP_ERR_BAD_PORT'],
      ['too large', withPrefix(Buffer.concat([Buffer.from(httpGet('/small.bin')), Buffer.alloc(1500, 0x41)])), 'DHTTP_ERR_TOO_LARGE'],
      ['not http', withPrefix('hello world'), ''],
      ['truncated head', withPrefix('GET /small.bin HTTP/1.1\r\nHost: x\r\n'), ''],
      ['bad version', withPrefix('GET / HTTP/9.9\r\n\r\n'), ''],
      ['bad header', withPrefix('GET / HTTP/1.1\r\nBad Header: x\r\n\r\n'), ''],
      ['trailing data', withPrefix('GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n'), ''],
      ['body cut short', withPrefix('GET / HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc'), ''],
      ['nul in target', withPrefix('GET /\0 HTTP/1.1\r\n\r\n'), ''],
      // (first byte fixed: 0xCA at byte 11 would make it a CATP report, see catp.test.ts)
      ['binary', withPrefix(Buffer.concat([Buffer.from([0x01]), crypto.randomBytes(199)])), ''],
    ];
    for (const [name, bytes, code] of table) {
      const before = server.counters();
      await client.send(bytes);
      await waitFor(() => server.counters().udpDatagrams === before.udpDatagrams + 1, name);
      const after = server.counters();
      expect([name, sumMalformed(after)]).toEqual([name, sumMalformed(before) + 1]);
      if (code) expect([name, after.udpMalformed[code]]).toEqual([name, (before.udpMalformed[code] ?? 0) + 1]);
      else expect(Object.keys(after.udpMalformed).filter((k) => k.startsWith('HTTP_ERR_')).length).toBeGreaterThan(0);
    }
    await sleep(50);
    expect(client.inbox.length).toBe(0); // never answered
    expect(server.counters().udpResponses).toBe(answeredBefore);
    const ok = await client.request('/small.bin');
    expect((await client.udpReply(ok)).res.status).toBe(200);
  });

  test('thousands of seeded random datagrams are all dropped, then a valid request is answered', async () => {
    const rng = seededRng(20240611);
    const before = server.counters();
    const N = 3000;
    const base = encodeRequest({ id: newId(), otherPort: client.tcpPort, resend: false, http: httpGet('/small.bin') });
    for (let i = 0; i < N; i++) {
      let bytes: Uint8Array;
      const kind = rng();
      if (kind < 0.4) {
        bytes = new Uint8Array(Math.floor(rng() * 1600));
        for (let j = 0; j < bytes.length; j++) bytes[j] = Math.floor(rng() * 256);
      } else {
        // A valid request with a few bytes flipped or cut short: mostly broken HTTP or a broken prefix.
        bytes = Uint8Array.from(base);
        const flips = 1 + Math.floor(rng() * 4);
        for (let f = 0; f < flips; f++) bytes[Math.floor(rng() * bytes.length)] = Math.floor(rng() * 256);
        if (rng() < 0.5) bytes = bytes.subarray(0, Math.floor(rng() * bytes.length));
      }
      await client.send(bytes);
      if (i % 50 === 49) await sleep(1);
    }
    // Wait until the count settles (the kernel may drop some of the burst; that is not the server's doing).
    let last = -1;
    while (server.counters().udpDatagrams !== last) {
      last = server.counters().udpDatagrams;
      await sleep(200);
    }
    const c = server.counters();
    const received = c.udpDatagrams - before.udpDatagrams;
    // A datagram whose byte 11 happens to be 0xCA is a CATP report naming no session: also a counted drop.
    const dropped = sumMalformed(c) - sumMalformed(before) + (c.catpUnknownReports - before.catpUnknownReports);
    const answered = c.udpRequests - before.udpRequests;
    expect(received).toBeGreaterThan(N / 2);
    expect(dropped + answered).toBe(received); // every datagram is either a counted drop or a request
    expect(dropped).toBeGreaterThan(received * 0.8);
    // Mutated requests may carry the resend flag, which can put the server in high-loss mode: accept
    // the answer on either channel.
    const ok = await client.request('/small.bin');
    const reply = await client.anyReply(ok);
    expect(reply.res.status).toBe(200);
    expect(Buffer.from(reply.res.body).equals(small)).toBe(true);
  });

  test('garbage TCP streams are closed and counted; the server keeps answering', async () => {
    const before = server.counters();
    const rng = seededRng(7);
    const streams: Buffer[] = [
      Buffer.from('\x80\x01\x02'), // DHTTP start, cut short
      Buffer.concat([Buffer.from([0xff, 1, 2, 3, 4, 5, 6, 7, 0x00, 0x10, 0x00]), Buffer.from('GET / HTTP/1.1\r\n\r\n')]), // port 16
      Buffer.concat([Buffer.from([0xff, 1, 2, 3, 4, 5, 6, 7, 0x10, 0x00, 0x04]), Buffer.from('GET / HTTP/1.1\r\n\r\n')]), // bad flags
      Buffer.from('NOT HTTP AT ALL\r\n\r\n'),
      Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n' + 'X-Long: ' + 'a'.repeat(20_000) + '\r\n\r\n'),
      Buffer.from('\x00\x01\x02\x03\r\n\r\n'),
    ];
    for (let i = 0; i < 20; i++) {
      const b = Buffer.alloc(1 + Math.floor(rng() * 3000));
      for (let j = 0; j < b.length; j++) b[j] = Math.floor(rng() * 256);
      streams.push(b);
    }
    const results = await Promise.all(streams.map((s) => tcpExchange(server.port, [s], '127.0.0.1', { endAfterWrite: true })));
    // Plain-HTTP garbage gets a 400; DHTTP garbage just a close.
    expect(results[3].toString('latin1')).toMatch(/^HTTP\/1\.1 400 /);
    expect(results[4].toString('latin1')).toMatch(/^HTTP\/1\.1 400 /);
    expect(results[0].length).toBe(0);
    expect(results[1].length).toBe(0);
    const c = server.counters();
    const malformed = Object.values(c.tcpMalformed).reduce((a, b) => a + b, 0) - Object.values(before.tcpMalformed).reduce((a, b) => a + b, 0);
    expect(malformed).toBeGreaterThanOrEqual(5);
    expect(c.tcpMalformed['DHTTP_ERR_BAD_PORT']).toBeGreaterThanOrEqual(1);
    const out = await tcpExchange(server.port, ['GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
    expect(parseHttpResponses(out, ['GET'])[0].status).toBe(200);
  });
});

describe('plain HTTP/1.1 and DHTTP over client-opened TCP', () => {
  let server: DhttpServer;

  beforeAll(async () => {
    server = await startServer({ root });
  });

  afterAll(async () => {
    await server.close();
  });

  test('keep-alive: several requests on one connection, answered in order', async () => {
    const out = await tcpExchange(server.port, [
      'GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n',
      'HEAD /small.bin HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /nope HTTP/1.1\r\nHost: x\r\n\r\n',
      'DELETE /index.html HTTP/1.1\r\nHost: x\r\n\r\n',
      'BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /%2e%2e/secret.txt HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /out.txt HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /sub/page.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    ]);
    const rs = parseHttpResponses(out, ['GET', 'HEAD', 'GET', 'DELETE', 'BREW', 'GET', 'GET', 'GET', 'GET']);
    expect(rs.map((r) => r.status)).toEqual([200, 200, 404, 405, 501, 403, 403, 403, 200]);
    expect(Buffer.from(rs[0].body).toString()).toContain('<title>hi</title>');
    expect(hdr(rs[0], 'content-type')).toBe('text/html; charset=utf-8');
    expect(hdr(rs[0], 'connection')).toBe('keep-alive');
    expect(hdr(rs[1], 'content-length')).toBe('500');
    expect(rs[1].body.length).toBe(0);
    expect(hdr(rs[3], 'allow')).toBe('GET, HEAD');
    expect(Buffer.from(rs[7].body).toString()).not.toContain('top secret');
    expect(hdr(rs[8], 'connection')).toBe('close');
    expect(Buffer.from(rs[8].body).toString()).toBe('<p>page</p>');
  });

  test('two requests on one connection, the second sent after the first answer', async () => {
    const sock = net.connect(server.port, '127.0.0.1');
    const parser = new ResponseParser();
    const got: HttpResponse[] = [];
    sock.on('data', (d) => {
      parser.push(d);
      for (let r = parser.next(); r; r = parser.next()) got.push(r);
    });
    await new Promise<void>((r) => sock.on('connect', () => r()));
    parser.expect('GET');
    sock.write('GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(() => got.length === 1, 'first response');
    expect(Buffer.from(got[0].body).equals(big)).toBe(true);
    parser.expect('GET');
    sock.write('GET /small.bin HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(() => got.length === 2, 'second response');
    expect(Buffer.from(got[1].body).equals(small)).toBe(true);
    expect(sock.destroyed).toBe(false);
    sock.destroy();
  });

  test('HTTP/1.0 closes by default; a directory redirects; a parse error gives 400 and closes', async () => {
    const out = await tcpExchange(server.port, ['GET /small.bin HTTP/1.0\r\n\r\n', 'GET /small.bin HTTP/1.0\r\n\r\n']);
    const rs = parseHttpResponses(out, ['GET', 'GET']);
    expect(rs.length).toBe(1);
    expect(hdr(rs[0], 'connection')).toBe('close');
    const red = parseHttpResponses(await tcpExchange(server.port, ['GET /sub HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']), ['GET']);
    expect(red[0].status).toBe(301);
    expect(hdr(red[0], 'location')).toBe('/sub/');
    const bad = await tcpExchange(server.port, ['GET / HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\nGET / HTTP/1.1\r\n\r\n']);
    const brs = parseHttpResponses(bad, ['GET', 'GET', 'GET']);
    expect(brs.map((r) => r.status)).toEqual([200, 400]);
    expect(server.counters().httpRequests).toBeGreaterThanOrEqual(3);
  });

  test('DHTTP request stream over TCP: answers on the same connection, in order, ID-prefixed', async () => {
    const ids = [newId(), newId(), newId()];
    const reqs = [
      encodeRequest({ id: ids[0], otherPort: 5000, resend: false, http: httpGet('/big.bin') }),
      encodeRequest({ id: ids[1], otherPort: 5000, resend: false, http: httpGet('/small.bin', 'HEAD') }),
      encodeRequest({ id: ids[2], otherPort: 5000, resend: true, http: httpGet('/small.bin', 'POST', new Uint8Array([9])) }),
    ];
    // Split the stream at awkward places.
    const all = Buffer.concat(reqs.map((r) => Buffer.from(r)));
    const out = await tcpExchange(server.port, [all.subarray(0, 5), all.subarray(5, 30), all.subarray(30)], '127.0.0.1', { endAfterWrite: true });
    expect(out.subarray(0, 8).equals(Buffer.from(ids[0]))).toBe(true);
    const methods = new Map([[idToHex(ids[0]), 'GET'], [idToHex(ids[1]), 'HEAD'], [idToHex(ids[2]), 'POST']]);
    const stream = new DhttpResponseStream({ methodOf: (id) => methods.get(idToHex(id)) ?? null });
    stream.push(out);
    const got: DhttpStreamResponse[] = [];
    for (let m = stream.next(); m; m = stream.next()) got.push(m);
    expect(got.map((g) => idToHex(g.id))).toEqual(ids.map(idToHex));
    expect(Buffer.from(got[0].response.body).equals(big)).toBe(true);
    expect(got[1].response.status).toBe(200);
    expect(getHeader(got[1].response.headers, 'content-length')).toBe('500');
    expect(got[2].response.status).toBe(405); // over TCP, not 421: executed (and refused) by the file server
    expect(server.counters().dhttpTcpRequests).toBeGreaterThanOrEqual(3);
  });

  test('many pipelined requests with a slow reader stay bounded and all get answered', async () => {
    const n = 100;
    const req = 'GET /big2.bin HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(n - 1) + 'GET /big2.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const sock = net.connect(server.port, '127.0.0.1');
    const parts: Buffer[] = [];
    sock.on('data', (d) => parts.push(d));
    await new Promise<void>((r) => sock.on('connect', () => r()));
    sock.write(req);
    sock.pause();
    await sleep(200);
    sock.resume();
    await new Promise<void>((r) => sock.on('close', () => r()));
    const rs = parseHttpResponses(Buffer.concat(parts), new Array(n).fill('GET'));
    expect(rs.length).toBe(n);
    expect(rs.every((r) => r.status === 200 && Buffer.from(r.body).equals(big2))).toBe(true);
  });
});

describe('high-loss mode', () => {
  test('after many resends, small responses go over TCP (~99%)', async () => {
    const server = await startServer({ root, rng: seededRng(3), channel: { decayIntervalMs: 0 } });
    const client = await new Client(server).start();
    try {
      for (let i = 0; i < 3; i++) {
        const id = await client.request('/small.bin', { resend: true });
        await client.tcp.waitFor(id);
      }
      expect(server.counters().highLossMode).toBe(true);
      const ids: Uint8Array[] = [];
      for (let i = 0; i < 20; i++) ids.push(await client.request('/small.bin'));
      let overTcp = 0;
      for (const id of ids) if ((await client.anyReply(id)).channel === 'tcp') overTcp++;
      expect(overTcp).toBeGreaterThanOrEqual(18);
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe('high-loss mode is per client prefix', () => {
  test("one address's resends (300, as an attacker would send them) move only its own /24 to TCP; another client's small answers stay on UDP", async () => {
    const server = await startServer({ root, rng: seededRng(4), channel: { decayIntervalMs: 0 } });
    const noisy = await new Client(server, '127.0.0.1', '127.0.9.9').start();
    const quiet = await new Client(server, '127.0.0.1').start();
    try {
      for (let i = 0; i < 300; i++) await noisy.request('/small.bin', { resend: true });
      await waitFor(() => server.counters().channel.resentTotal >= 300, 'the resends counted');
      expect(server.counters().highLossMode).toBe(true); // the server-wide statistic sees them
      expect(server.counters().channel.highLossPeers).toBe(1);
      const ids: Uint8Array[] = [];
      for (let i = 0; i < 20; i++) ids.push(await quiet.request('/small.bin'));
      let overUdp = 0;
      for (const id of ids) if ((await quiet.anyReply(id)).channel === 'udp') overUdp++;
      expect(overUdp).toBe(20);
      // the noisy prefix itself is in high-loss mode: its fresh requests go (~99%) over TCP
      const noisyIds: Uint8Array[] = [];
      for (let i = 0; i < 10; i++) noisyIds.push(await noisy.request('/small.bin'));
      let noisyTcp = 0;
      for (const id of noisyIds) if ((await noisy.anyReply(id)).channel === 'tcp') noisyTcp++;
      expect(noisyTcp).toBeGreaterThanOrEqual(9);
    } finally {
      await noisy.close();
      await quiet.close();
      await server.close();
    }
  });
});

describe('IPv6', () => {
  test('::1: small over UDP, large over a server-opened TCP connection, plain HTTP', async () => {
    const server = await startServer({ root, host: '::1' });
    const client = await new Client(server, '::1').start();
    try {
      expect(server.address.family).toBe('IPv6');
      const id = await client.request('/small.bin');
      const { res, rinfo } = await client.udpReply(id);
      expect(Buffer.from(res.body).equals(small)).toBe(true);
      expect(rinfo.address).toBe('::1');
      const id2 = await client.request('/big.bin');
      const r = await client.tcp.waitFor(id2);
      expect(Buffer.from(r.response.body).equals(big)).toBe(true);
      const out = await tcpExchange(server.port, ['GET /small.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'], '::1');
      expect(parseHttpResponses(out, ['GET'])[0].status).toBe(200);
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe('limits', () => {
  test('maxConnections: connections over the limit are closed at once and counted', async () => {
    const server = await startServer({ root, limits: { maxConnections: 2 } });
    const socks: net.Socket[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        const s = net.connect(server.port, '127.0.0.1');
        s.on('error', () => undefined);
        socks.push(s);
        await new Promise<void>((r) => s.on('connect', () => r()));
      }
      await waitFor(() => server.counters().tcpConnectionsAccepted === 2, 'two accepted');
      const third = await tcpExchange(server.port, ['GET / HTTP/1.1\r\nHost: x\r\n\r\n']).catch(() => Buffer.alloc(0));
      expect(third.length).toBe(0);
      expect(server.counters().tcpConnectionsRejected).toBe(1);
    } finally {
      for (const s of socks) s.destroy();
      await server.close();
    }
  });

  test('maxConnectionsPerAddress: one address cannot take every slot; another address is still served', async () => {
    const server = await startServer({ root, limits: { maxConnections: 40, maxConnectionsPerAddress: 8 } });
    const socks: net.Socket[] = [];
    try {
      for (let i = 0; i < 12; i++) {
        const s = net.connect({ port: server.port, host: '127.0.0.1', localAddress: '127.0.9.9' });
        s.on('error', () => undefined);
        socks.push(s);
        await new Promise<void>((r) => s.on('connect', () => r()));
      }
      await waitFor(() => server.counters().tcpConnectionsRejectedPerAddress === 4, 'four refused');
      expect(server.counters().tcpConnectionsAccepted).toBe(8);
      const out = await tcpExchange(server.port, ['GET /small.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
      expect(parseHttpResponses(out, ['GET'])[0].status).toBe(200);
    } finally {
      for (const s of socks) s.destroy();
      await server.close();
    }
  });

  test('slowloris: a request still incomplete headTimeoutMs after its first byte closes the connection, though lines keep coming', async () => {
    const server = await startServer({ root, limits: { headTimeoutMs: 400, idleTimeoutMs: 5000 } });
    const sock = net.connect(server.port, '127.0.0.1');
    sock.on('error', () => undefined);
    const closed = new Promise<number>((ok) => sock.once('close', () => ok(Date.now())));
    try {
      await new Promise<void>((r) => sock.on('connect', () => r()));
      const start = Date.now();
      sock.write('GET /small.bin HTTP/1.1\r\nHost: x\r\n');
      const trickle = setInterval(() => sock.writable && sock.write(`X-Slow-${Date.now()}: 1\r\n`), 100);
      const at = await closed;
      clearInterval(trickle);
      expect(at - start).toBeGreaterThanOrEqual(350);
      expect(at - start).toBeLessThan(3000);
      expect(server.counters().tcpHeadTimeouts).toBe(1);
      // a complete request within the deadline is answered, and the deadline starts again for the next one
      const out = await tcpExchange(server.port, ['GET /small.bin HTTP/1.1\r\nHost: x\r\n\r\n', 'GET /small.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
      expect(parseHttpResponses(out, ['GET', 'GET']).map((r) => r.status)).toEqual([200, 200]);
    } finally {
      sock.destroy();
      await server.close();
    }
  });

  test('idle client connections time out', async () => {
    const server = await startServer({ root, limits: { idleTimeoutMs: 100 } });
    try {
      const start = Date.now();
      const out = await tcpExchange(server.port, ['GET /small.bin HTTP/1.1\r\nHost: x\r\n\r\n']);
      expect(parseHttpResponses(out, ['GET'])[0].status).toBe(200);
      expect(Date.now() - start).toBeGreaterThanOrEqual(90);
      expect(server.counters().tcpIdleTimeouts).toBe(1);
    } finally {
      await server.close();
    }
  });

  test('the outbound pool closes idle connections and evicts the least recently used', async () => {
    const server = await startServer({ root, limits: { poolIdleMs: 150, poolMax: 1 } });
    const a = await new Client(server).start();
    const b = await new Client(server).start();
    try {
      const closed: number[] = [];
      await a.tcp.waitFor(await a.request('/big2.bin'));
      a.tcp.connections[0].on('close', () => closed.push(Date.now()));
      await b.tcp.waitFor(await b.request('/big2.bin')); // pool of 1: a's connection is evicted
      await waitFor(() => closed.length === 1, 'eviction');
      const bClosed = new Promise<void>((r) => b.tcp.connections[0].on('close', () => r()));
      await bClosed; // idle timeout
      const c = server.counters();
      expect(c.tcpConnectsOpened).toBe(2);
      // A new request after the idle close opens a new connection.
      await b.tcp.waitFor(await b.request('/big2.bin'));
      expect(server.counters().tcpConnectsOpened).toBe(3);
    } finally {
      await a.close();
      await b.close();
      await server.close();
    }
  });
});

describe('lifecycle', () => {
  test('close() releases every socket', async () => {
    const kinds = () => process.getActiveResourcesInfo().filter((k) => /TCP|UDP|Pipe/.test(k)).length;
    const before = kinds();
    const server = await startServer({ root });
    const client = await new Client(server).start();
    await client.tcp.waitFor(await client.request('/big.bin'));
    const held = net.connect(server.port, '127.0.0.1');
    held.on('error', () => undefined);
    await new Promise<void>((r) => held.on('connect', () => r()));
    await client.close();
    await server.close();
    held.destroy();
    await sleep(20);
    expect(kinds()).toBeLessThanOrEqual(before);
  });

  test('a fixed port is honoured and freed by close(); close() is idempotent', async () => {
    const a = await startServer({ root });
    const port = a.port;
    await a.close();
    await a.close();
    const b = await startServer({ root, port });
    expect(b.port).toBe(port);
    await b.close();
  });

  test('startServer rejects when the port is taken', async () => {
    const a = await startServer({ root });
    await expect(startServer({ root, port: a.port })).rejects.toThrow();
    await a.close();
  });
});

/** IPv4 and UDP headers: the server's address budget counts each datagram with them (loopback is IPv4 here). */
const UDP_IPV4_HEADERS = 28;

describe('address validation: nothing answers an unproven address with more than it sent', () => {
  test('a spoofed-source request (a socket that never proves anything) gets no more than its bytes, on the wire: for a small file, a large one, CATP and in-order; the same requests with the token are served in full', async () => {
    const server = await startServer({ root });
    const victim = await new Client(server, '127.0.0.1', '127.0.7.7').start({ proven: false });
    try {
      let sentBytes = 0;
      const ask = async (target: string, extra: [string, string][] = []) => {
        const d = encodeRequest({ id: newId(), otherPort: victim.tcpPort, resend: false, http: httpGet(target, 'GET', new Uint8Array(0), extra) });
        sentBytes += d.length + UDP_IPV4_HEADERS;
        await victim.send(d);
      };
      await ask('/small.bin');
      await ask('/big.bin');
      await ask('/big.bin', [['Catp-Mode', 'catp']]);
      await ask('/big.bin', [['Catp-Mode', 'inorder']]);
      await ask("/big.bin", [["Catp-Mode", "catp"]]); // again
      await sleep(300);
      const got = victim.inbox.reduce((n, d) => n + d.msg.length + UDP_IPV4_HEADERS, 0);
      expect(got).toBeLessThanOrEqual(sentBytes);
      expect(victim.tcp.connections.length).toBe(0); // and no connection was opened to it
      expect(server.counters().tokenRetries + server.counters().amplificationDropped).toBeGreaterThanOrEqual(4);
      // every answer it did get says how to prove itself
      for (const d of victim.inbox) expect(getHeader(parseResponseDatagram(decodeResponseDatagram(d.msg).http, { method: 'GET' }).headers, 'catp-token')).not.toBeNull();
      // the same address with the token: the small file over UDP, the large one over a connection the server opens
      const proven = await new Client(server, '127.0.0.1', '127.0.7.8').start();
      const small1 = await proven.request('/small.bin');
      expect(Buffer.from((await proven.udpReply(small1)).res.body).equals(small)).toBe(true);
      const big1 = await proven.request('/big.bin');
      expect(Buffer.from((await proven.tcp.waitFor(big1)).response.body).equals(big)).toBe(true);
      await proven.close();
    } finally {
      await victim.close();
      await server.close();
    }
  });
});

describe('address validation: a DTD hold only for a proven address', () => {
  test('a DTD proceed request without a token gets the token first and holds nothing (a forged source cannot fill its address\'s share); with the token, the body is held and announced', async () => {
    const server = await startServer({ root, limits: { bodyBudgetPerAddressBytes: 2 * big.length } });
    const owner = await new Client(server, '127.0.0.1', '127.0.7.9').start({ proven: false });
    try {
      // a spoofer's requests in the owner's name (padded as a client's first contact is, so the token answer fits the
      // address's budget): each would have held big.bin against the owner's share for 30 s
      const ids: Uint8Array[] = [];
      for (let i = 0; i < 4; i++) {
        const id = newId();
        ids.push(id);
        const http = httpGet('/big.bin', 'GET', new Uint8Array(0), [['DTD-Mode', 'proceed'], ['Catp-Pad', 'x'.repeat(1100)]]);
        await owner.send(encodeRequest({ id, otherPort: owner.tcpPort, resend: false, http }));
      }
      for (const id of ids) {
        const { res } = await owner.udpReply(id);
        expect(res.status).toBe(421);
        expect(getHeader(res.headers, 'dhttp-retry')).toBe('token');
      }
      const c = server.counters();
      expect(c.dtdHoldsUnproven).toBe(4);
      expect(c.dtdHeld).toBe(0);
      expect(c.bodies.heldBytes).toBe(0);
      // the owner, with the token it was given: held (its bytes in its share) and announced
      const token = getHeader((await owner.udpReply(ids[0]!)).res.headers, 'catp-token') as string;
      const id = newId();
      await owner.send(encodeRequest({ id, otherPort: owner.tcpPort, resend: false, http: httpGet('/big.bin', 'GET', new Uint8Array(0), [['DTD-Mode', 'proceed'], ['Catp-Token', token]]) }));
      const ann = (await owner.udpReply(id)).res;
      expect(ann.status).toBe(200);
      expect(getHeader(ann.headers, 'repr-digest')).not.toBeNull();
      expect(ann.body.length).toBe(0);
      expect(server.counters().dtdHeld).toBe(1);
      expect(server.counters().bodies.heldBytes).toBe(big.length);
    } finally {
      await owner.close();
      await server.close();
    }
  });
});

describe('one address cannot spend what another needs', () => {
  test('10,000 token-less requests from one address: it gets no more than its bytes, on the wire, and a proven client at another address still gets small and large answers', async () => {
    const server = await startServer({ root });
    const flood = await new Client(server, '127.0.0.1', '127.0.6.6').start({ proven: false });
    const other = await new Client(server, '127.0.0.1').start();
    try {
      let sent = 0;
      const batch: Promise<void>[] = [];
      for (let i = 0; i < 10_000; i++) {
        const d = encodeRequest({ id: newId(), otherPort: flood.tcpPort, resend: i % 2 === 1, http: httpGet(i % 3 === 0 ? '/big.bin' : '/small.bin') });
        sent += d.length + UDP_IPV4_HEADERS;
        batch.push(flood.send(d));
        if (batch.length >= 500) await Promise.all(batch.splice(0));
      }
      await Promise.all(batch);
      // meanwhile and after: the other address is served in full
      const small1 = await other.request('/small.bin');
      expect(Buffer.from((await other.udpReply(small1)).res.body).equals(small)).toBe(true);
      const big1 = await other.request('/big.bin');
      expect(Buffer.from((await other.tcp.waitFor(big1)).response.body).equals(big)).toBe(true);
      await sleep(200);
      const got = flood.inbox.reduce((n, d) => n + d.msg.length + UDP_IPV4_HEADERS, 0);
      expect(got).toBeLessThanOrEqual(sent);
      expect(flood.tcp.connections.length).toBe(0);
      expect(server.counters().amplification.addresses).toBeLessThanOrEqual(3);
    } finally {
      await flood.close();
      await other.close();
      await server.close();
    }
  });
});

describe('large files stream from disk under a byte budget (issue 14: memory in bytes, per address)', () => {
  const huge = crypto.randomBytes(5 * 1024 * 1024);
  const giantBytes = 48 * 1024 * 1024;
  beforeAll(async () => {
    await fsp.writeFile(path.join(root, 'huge.bin'), huge);
    await fsp.writeFile(path.join(root, 'giant.bin'), Buffer.alloc(giantBytes, 0x5a));
    const row = '<p>a paragraph of the big page, long enough to be a real one, with <a href="/x">a link</a></p>\n';
    await fsp.writeFile(path.join(root, 'big-page.html'), '<!doctype html><title>big</title>\n' + row.repeat(Math.ceil((3 * 1024 * 1024) / row.length)));
  });

  test('a file above the streaming threshold arrives exactly: plain HTTP (GET, HEAD, digest) and DHTTP over TCP', async () => {
    const server = await startServer({ root });
    try {
      const out = await tcpExchange(server.port, [
        'GET /huge.bin HTTP/1.1\r\nHost: x\r\nWant-Repr-Digest: sha-256=1\r\n\r\n',
        'HEAD /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n',
        'GET /small.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      ]);
      const rs = parseHttpResponses(out, ['GET', 'HEAD', 'GET']);
      expect(rs.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(Buffer.from(rs[0].body).equals(huge)).toBe(true);
      expect(hdr(rs[0], 'repr-digest')).toBe(`sha-256=:${crypto.createHash('sha256').update(huge).digest('base64')}:`);
      expect(hdr(rs[1], 'content-length')).toBe(String(huge.length));
      expect(rs[1].body.length).toBe(0);
      expect(Buffer.from(rs[2].body).equals(small)).toBe(true); // the stream kept the framing for what follows
      const ids = [newId(), newId()];
      const dhttp = Buffer.concat(ids.map((id, i) => Buffer.from(encodeRequest({ id, otherPort: 5000, resend: false, http: httpGet(i === 0 ? '/huge.bin' : '/small.bin') }))));
      const stream = new DhttpResponseStream({ methodOf: () => 'GET' });
      stream.push(await tcpExchange(server.port, [dhttp], '127.0.0.1', { endAfterWrite: true }));
      const got: DhttpStreamResponse[] = [];
      for (let m = stream.next(); m; m = stream.next()) got.push(m);
      expect(got.map((g) => idToHex(g.id))).toEqual(ids.map(idToHex));
      expect(Buffer.from(got[0].response.body).equals(huge)).toBe(true);
      expect(Buffer.from(got[1].response.body).equals(small)).toBe(true);
      expect(server.counters().bodies.heldBytes).toBe(0);
    } finally {
      await server.close();
    }
  });

  test('over UDP: a plain request for such a file is sent to TCP (421 DHTTP-Retry: tcp); a CATP page that large is still read and streamed as frames', async () => {
    const server = await startServer({ root });
    const client = await new Client(server).start();
    try {
      const id = await client.request('/huge.bin');
      const { res } = await client.udpReply(id);
      expect(res.status).toBe(421);
      expect(hdr(res, 'dhttp-retry')).toBe('tcp');
      expect(server.counters().fileAnswersToTcp).toBe(1);
      expect(client.tcp.connections.length).toBe(0);
      const catpId = newId();
      const http = httpGet('/big-page.html', 'GET', new Uint8Array(0), [['Catp-Mode', 'catp'], ['Catp-Token', client.token as string]]);
      await client.send(encodeRequest({ id: catpId, otherPort: client.tcpPort, resend: false, http }));
      await waitFor(() => server.counters().catpSessions === 1 && client.inbox.some((d) => idToHex(d.msg.subarray(0, 8)) === idToHex(catpId)), 'CATP frames', 20_000);
      expect(server.counters().fileAnswersToTcp).toBe(1);
      expect(server.counters().bodies.heldBytes).toBeGreaterThan(0); // the running session's frames
    } finally {
      await client.close();
      await server.close();
    }
    expect(server.counters().bodies.heldBytes).toBe(0);
  });

  test("a CATP session's frames count against its address's share: over it, the next request is answered normally", async () => {
    const server = await startServer({ root, limits: { bodyBudgetPerAddressBytes: 1 } });
    const client = await new Client(server).start();
    try {
      const ask = async () => {
        const id = newId();
        const http = httpGet('/index.html', 'GET', new Uint8Array(0), [['Catp-Mode', 'catp'], ['Catp-Token', client.token as string]]);
        await client.send(encodeRequest({ id, otherPort: client.tcpPort, resend: false, http }));
        return id;
      };
      await ask(); // the address holds nothing: its first session starts whatever its size
      await waitFor(() => server.counters().catpSessions === 1, 'the first session');
      const second = await ask();
      const { res } = await client.udpReply(second);
      expect(res.status).toBe(200);
      expect(Buffer.from(res.body).toString()).toContain('<title>hi</title>');
      expect(server.counters()).toMatchObject({ catpSessions: 1, catpOverMemory: 1 });
    } finally {
      await client.close();
      await server.close();
    }
    expect(server.counters().bodies.heldBytes).toBe(0);
  });

  test('clients that ask for a 48 MiB file and never read hold at most their share, together fill the total, and another address still gets it whole', async () => {
    const share = 4 * 1024 * 1024;
    const server = await startServer({ root, limits: { bodyBudgetBytes: share, bodyBudgetPerAddressBytes: share } });
    const stalled: net.Socket[] = [];
    try {
      for (let i = 0; i < 20; i++) {
        const sock = net.connect({ port: server.port, host: '127.0.0.1', localAddress: i % 2 === 0 ? '127.0.0.1' : '127.0.0.3' });
        sock.on('error', () => undefined);
        await new Promise<void>((r) => sock.on('connect', () => r()));
        sock.pause(); // never reads
        sock.write('GET /giant.bin HTTP/1.1\r\nHost: x\r\n\r\n');
        stalled.push(sock);
      }
      await sleep(500);
      const held = server.counters().bodies;
      expect(held.heldBytes).toBeGreaterThan(0);
      expect(held.peakBytes).toBeLessThanOrEqual(share + 2 * 64 * 1024); // the total, and at most a floor piece per address beyond it
      // another address: the whole file, while the stalled ones still hold theirs
      const sock = net.connect({ port: server.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
      const parser = new ResponseParser();
      parser.expect('GET');
      const got: HttpResponse[] = [];
      sock.on('data', (d) => {
        parser.push(d);
        for (let r = parser.next(); r; r = parser.next()) got.push(r);
      });
      await new Promise<void>((r) => sock.on('connect', () => r()));
      sock.write('GET /giant.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      await waitFor(() => got.length === 1, 'the file at another address', 20_000);
      expect(got[0].body.length).toBe(giantBytes);
      expect(got[0].body.every((b) => b === 0x5a)).toBe(true);
      expect(server.counters().bodies.peakBytes).toBeLessThanOrEqual(share + 3 * 64 * 1024);
      sock.destroy();
      for (const s of stalled) s.destroy();
      await waitFor(() => server.counters().bodies.heldBytes === 0, 'every byte given back once the stalled connections close');
    } finally {
      for (const s of stalled) s.destroy();
      await server.close();
    }
  });

  test('a client that hangs up in the middle of a file streamed from disk is not counted as an internal error (fuzz s58)', async () => {
    const server = await startServer({ root });
    try {
      for (let i = 0; i < 3; i++) {
        const sock = net.connect(server.port, '127.0.0.1');
        sock.on('error', () => undefined);
        const closed = new Promise<void>((r) => sock.on('close', () => r()));
        await new Promise<void>((r) => sock.on('connect', () => r()));
        sock.write('GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n');
        await new Promise<void>((r) => sock.once('data', () => r()));
        sock.destroy(); // the rest of the 5 MiB is never read
        await closed;
      }
      await waitFor(() => server.counters().bodies.heldBytes === 0, 'the writes given up');
      await sleep(200);
      // before: one internal error ("a bug, not the peer's fault") per client that hung up
      expect(server.counters()).toMatchObject({ httpRequests: 3, internalErrors: 0 });
    } finally {
      await server.close();
    }
  });

  test('a file that shrinks while it streams: the connection is cut (the Content-Length cannot be kept), counted, and the server goes on', async () => {
    const server = await startServer({ root });
    const f = path.join(root, 'shrinks.bin');
    await fsp.writeFile(f, Buffer.alloc(32 * 1024 * 1024, 1));
    try {
      const sock = net.connect(server.port, '127.0.0.1');
      let received = 0;
      let first: () => void = () => undefined;
      const firstData = new Promise<void>((r) => (first = r));
      sock.on('data', (d) => {
        received += d.length;
        first();
      });
      const closed = new Promise<void>((r) => sock.on('close', () => r()));
      sock.on('error', () => undefined);
      await new Promise<void>((r) => sock.on('connect', () => r()));
      sock.pause();
      sock.write('GET /shrinks.bin HTTP/1.1\r\nHost: x\r\n\r\n');
      sock.resume();
      await firstData;
      sock.pause();
      await fsp.truncate(f, 1024 * 1024);
      sock.resume();
      await closed;
      expect(received).toBeLessThan(32 * 1024 * 1024);
      await waitFor(() => server.counters().internalErrors === 1, 'the cut counted');
      const after = parseHttpResponses(await tcpExchange(server.port, ['GET /small.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']), ['GET']);
      expect(Buffer.from(after[0].body).equals(small)).toBe(true);
    } finally {
      await fsp.rm(f, { force: true });
      await server.close();
    }
  });
});

describe('connections whose answers wait for the body budget (fuzz s58)', () => {
  /** Fills `client`'s address's share with DTD holds made over UDP (each held body counts against the address that asked). */
  async function holdBigs(server: DhttpServer, client: Client, n: number): Promise<Uint8Array[]> {
    const ids: Uint8Array[] = [];
    for (let i = 0; i < n; i++) {
      const id = newId();
      const http = httpGet('/big.bin', 'GET', new Uint8Array(0), [['DTD-Mode', 'proceed'], ['Catp-Token', client.token as string]]);
      await client.send(encodeRequest({ id, otherPort: client.tcpPort, resend: false, http }));
      await client.udpReply(id); // the announcement: the body is held
      ids.push(id);
    }
    expect(server.counters().dtdHeld).toBe(n);
    return ids;
  }

  /** DON'T-BOTHER for each hold: their bytes go back to the budget. */
  async function release(client: Client, ids: Uint8Array[]): Promise<void> {
    for (const id of ids) {
      const http = serializeRequest({ method: 'DTD', target: '*', headers: [['Host', 'test'], ['DTD-Decision', 'dont-bother']], body: new Uint8Array(0) });
      await client.send(encodeRequest({ id, otherPort: client.tcpPort, resend: false, http }));
    }
  }

  test('pipelined GETs that carry bodies: the connection takes a body’s worth of requests (1 MiB), not maxPipelined bodies, and answers them all once there is room', async () => {
    const server = await startServer({ root, limits: { bodyBudgetPerAddressBytes: 2 * big.length } });
    const holder = await new Client(server, '127.0.0.1', '127.0.0.61').start();
    let sock: net.Socket | null = null;
    try {
      const holds = await holdBigs(server, holder, 2);
      expect(server.counters().bodies.heldBytes).toBe(2 * big.length); // the address's share, to the byte
      const conn = net.connect({ port: server.port, host: '127.0.0.1', localAddress: '127.0.0.61' });
      sock = conn;
      const parts: Buffer[] = [];
      conn.on('data', (d) => parts.push(d));
      conn.on('error', () => undefined);
      const closed = new Promise<void>((r) => conn.on('close', () => r()));
      await new Promise<void>((r) => conn.on('connect', () => r()));
      // 40 GETs with 512 KiB bodies (nothing reads them): the first answer waits for the share, reading goes on
      const body = Buffer.alloc(512 * 1024, 0x62);
      const head = (last: boolean) => `GET /small.bin HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n${last ? 'Connection: close\r\n' : ''}\r\n`;
      for (let i = 0; i < 40; i++) conn.write(Buffer.concat([Buffer.from(head(i === 39)), body]));
      await waitFor(() => server.counters().httpRequests >= 2, 'the first requests');
      await sleep(300);
      // before: maxPipelined + 1 = 33 requests taken, each holding its body (33 MiB a connection)
      expect(server.counters().httpRequests).toBeLessThanOrEqual(3);
      await release(holder, holds);
      await closed;
      const rs = parseHttpResponses(Buffer.concat(parts), new Array(40).fill('GET'));
      expect(rs.length).toBe(40);
      expect(rs.every((r) => r.status === 200 && Buffer.from(r.body).equals(small))).toBe(true);
      expect(server.counters().httpRequests).toBe(40);
    } finally {
      sock?.destroy();
      await holder.close();
      await server.close();
    }
  });
  test('a connection reset while its answer waits for the budget is let go at once: it no longer waits, nor keeps what it queued, until the address has room', async () => {
    const server = await startServer({ root, limits: { bodyBudgetPerAddressBytes: 2 * big.length } });
    const holder = await new Client(server, '127.0.0.1', '127.0.0.62').start();
    try {
      const holds = await holdBigs(server, holder, 2);
      for (let i = 1; i <= 3; i++) {
        const sock = net.connect({ port: server.port, host: '127.0.0.1', localAddress: '127.0.0.62' });
        sock.on('error', () => undefined);
        await new Promise<void>((r) => sock.on('connect', () => r()));
        sock.write('GET /small.bin HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(8));
        await waitFor(() => server.counters().bodies.waiting === 1, 'its answer waiting for the share');
        sock.resetAndDestroy();
        // before: the wait stayed (one more per connection), and with it the connection and its queued requests
        await waitFor(() => server.counters().bodies.waiting === 0, 'the wait given up');
        expect(server.counters().tcpConnectionsAccepted).toBe(i);
      }
      await release(holder, holds);
      await waitFor(() => server.counters().bodies.heldBytes === 0, 'every byte back');
      const out = await tcpExchange(server.port, ['GET /small.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'], '127.0.0.1', { localAddress: '127.0.0.62' });
      expect(Buffer.from(parseHttpResponses(out, ['GET'])[0].body).equals(small)).toBe(true);
    } finally {
      await holder.close();
      await server.close();
    }
  });
  test('a large answer to a UDP request while other addresses hold the whole budget: "resend over TCP", and the client’s own connection carries it; not dropped at every resend', async () => {
    const server = await startServer({ root, limits: { bodyBudgetBytes: 2 * big.length, bodyBudgetPerAddressBytes: 2 * big.length } });
    const holder = await new Client(server, '127.0.0.1', '127.0.0.63').start();
    const client = await new Client(server).start();
    try {
      const holds = await holdBigs(server, holder, 2);
      expect(server.counters().bodies.heldBytes).toBe(2 * big.length); // the total, held by another address
      for (const resend of [false, true]) {
        const id = await client.request('/big.bin', { resend }); // with the token: proven, the answer would go over a connection we open
        const { res } = await client.udpReply(id); // before: no answer at all, counted in tcpOutboundDropped, at every resend
        expect(res.status).toBe(421);
        expect(hdr(res, 'dhttp-retry')).toBe('tcp');
        // ... and the client's own connection carries it, a piece at a time, while the total is still held
        const dhttp = Buffer.from(encodeRequest({ id, otherPort: client.tcpPort, resend: false, http: httpGet('/big.bin') }));
        const stream = new DhttpResponseStream({ methodOf: () => 'GET' });
        stream.push(await tcpExchange(server.port, [dhttp], '127.0.0.1', { endAfterWrite: true }));
        const got = stream.next();
        expect(got !== null && idToHex(got.id) === idToHex(id) && Buffer.from(got.response.body).equals(big)).toBe(true);
      }
      expect(server.counters()).toMatchObject({ tcpOutboundOverBudget: 2, tcpOutboundDropped: 0 });
      expect(client.tcp.responses.length).toBe(0);
      await release(holder, holds);
    } finally {
      await client.close();
      await holder.close();
      await server.close();
    }
  });
});
