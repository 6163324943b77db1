// The native endpoint against Node's own dgram/net peers on loopback (IPv4 and IPv6).
import * as child_process from 'node:child_process';
import * as crypto from 'node:crypto';
import * as dgram from 'node:dgram';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { addonPath, Endpoint, EndpointOptions, Incoming, monotonicNs, NativeError, packageRoot, realtimeNs } from '../../native';

type Ev<K extends Incoming['kind']> = Extract<Incoming, { kind: K }>;

/** Collects batches; `until` waits for a condition over everything received so far. */
class Inbox {
  readonly events: Incoming[] = [];
  readonly batchSizes: number[] = [];
  private wake: (() => void) | undefined;

  readonly push = (batch: Incoming[]): void => {
    this.batchSizes.push(batch.length);
    for (const e of batch) this.events.push(e);
    this.wake?.();
  };

  of<K extends Incoming['kind']>(kind: K): Ev<K>[] {
    return this.events.filter((e): e is Ev<K> => e.kind === kind);
  }

  async until(pred: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pred()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.events.map((e) => e.kind))}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 50));
        this.wake = () => { clearTimeout(t); resolve(); };
      });
      this.wake = undefined;
    }
  }
}

const open: Endpoint[] = [];
function endpoint(options: EndpointOptions = {}): { ep: Endpoint; inbox: Inbox } {
  const inbox = new Inbox();
  const ep = new Endpoint(options, inbox.push);
  open.push(ep);
  return { ep, inbox };
}
afterEach(() => {
  for (const ep of open.splice(0)) ep.close();
});

function newId(): Buffer {
  const id = crypto.randomBytes(8);
  id[0] |= 0x80;
  return id;
}

async function udpClient(type: 'udp4' | 'udp6', address: string): Promise<dgram.Socket> {
  const s = dgram.createSocket(type);
  await new Promise<void>((resolve) => s.bind(0, address, resolve));
  return s;
}

function send(s: dgram.Socket, data: Buffer, port: number, address: string): Promise<void> {
  return new Promise((resolve, reject) => s.send(data, port, address, (err) => (err ? reject(err) : resolve())));
}

function closeUdp(s: dgram.Socket): Promise<void> {
  return new Promise((resolve) => s.close(() => resolve()));
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe.each([
  { host: '127.0.0.1', type: 'udp4' as const, family: 4 },
  { host: '::1', type: 'udp6' as const, family: 6 },
])('on $host', ({ host, type, family }) => {
  test('binds random ports >= 1024 that differ run to run', () => {
    const ports = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const { ep } = endpoint({ host });
      expect(ep.host).toBe(host);
      expect(ep.udpPort).toBeGreaterThanOrEqual(1024);
      expect(ep.tcpPort).toBeGreaterThanOrEqual(1024);
      ports.add(`${ep.udpPort}/${ep.tcpPort}`);
    }
    expect(ports.size).toBeGreaterThan(1);
  });

  test('delivers a matched datagram with peer and kernel timestamp; drops and counts the rest', async () => {
    const { ep, inbox } = endpoint({ host });
    const client = await udpClient(type, host);
    const id = newId();
    ep.expect(id);
    expect(ep.outstanding()).toBe(1);
    const payload = Buffer.concat([id, Buffer.from('HTTP/1.1 200 OK\r\n\r\n')]);
    await send(client, Buffer.from('short'), ep.udpPort, host);               // < 8 bytes
    await send(client, Buffer.concat([newId(), Buffer.from('x')]), ep.udpPort, host); // unmatched
    await send(client, Buffer.concat([id, Buffer.alloc(3000)]), ep.udpPort, host);  // truncated
    await send(client, payload, ep.udpPort, host);
    await inbox.until(() => inbox.of('datagram').length === 1 && ep.counters().udpReceived === 4, 'datagram');
    const [d] = inbox.of('datagram');
    expect(Buffer.compare(d.data, payload)).toBe(0);
    expect(d.peer).toEqual({ address: host, port: client.address().port, family });
    const skewNs = realtimeNs() - d.rxNs;
    expect(skewNs).toBeGreaterThanOrEqual(0n);
    expect(skewNs).toBeLessThan(5_000_000_000n);
    const c = ep.counters();
    expect(c).toMatchObject({ udpReceived: 4, udpMatched: 1, udpUnmatched: 1, udpMalformed: 2 });

    ep.forget(id);
    expect(ep.outstanding()).toBe(0);
    await send(client, payload, ep.udpPort, host);
    await inbox.until(() => ep.counters().udpUnmatched === 2, 'forgotten ID dropped');
    expect(inbox.of('datagram')).toHaveLength(1);
    await closeUdp(client);
  });

  test('a burst arrives in far fewer batches than datagrams', async () => {
    const { ep, inbox } = endpoint({ host });
    const client = await udpClient(type, host);
    const ids = Array.from({ length: 10 }, newId);
    ids.forEach((id) => ep.expect(id));
    const N = 500;
    const sends: Promise<void>[] = [];
    for (let i = 0; i < N; i++) {
      const body = Buffer.alloc(200, i & 0xff);
      sends.push(send(client, Buffer.concat([ids[i % ids.length], body]), ep.udpPort, host));
    }
    await Promise.all(sends);
    await inbox.until(() => inbox.of('datagram').length === N, `${N} datagrams`);
    const c = ep.counters();
    expect(c.udpMatched).toBe(N);
    expect(c.batches).toBeLessThan(N);
    expect(inbox.batchSizes.length).toBe(c.batches);
    await closeUdp(client);
  });

  test('admits an inbound TCP connection that names an outstanding ID and streams it byte-exact', async () => {
    const { ep, inbox } = endpoint({ host });
    const id = newId();
    ep.expect(id);
    const body = crypto.randomBytes(200 * 1024);
    const sock = net.connect(ep.tcpPort, host);
    await new Promise<void>((resolve) => sock.once('connect', resolve));
    sock.write(Buffer.concat([id, body]));
    await inbox.until(() => inbox.of('tcp-data').reduce((n, e) => n + e.data.length, 0) === body.length + 8, 'all bytes');
    const [o] = inbox.of('tcp-open');
    expect(o).toMatchObject({ kind: 'tcp-open', inbound: true, peer: { address: host, port: sock.localPort, family } });
    const data = inbox.of('tcp-data');
    expect(data.every((e) => e.conn === o.conn)).toBe(true);
    expect(Buffer.compare(Buffer.concat(data.map((e) => e.data)), Buffer.concat([id, body]))).toBe(0);
    for (const e of data) expect(realtimeNs() - e.rxNs).toBeLessThan(5_000_000_000n);

    // And back the other way on the same connection.
    const back: Buffer[] = [];
    sock.on('data', (b: Buffer) => back.push(b));
    ep.sendTcp(o.conn, Buffer.from('pong'));
    await inbox.until(() => Buffer.concat(back).toString() === 'pong', 'reply');

    sock.end();
    await inbox.until(() => inbox.of('tcp-closed').length === 1, 'tcp-closed');
    expect(inbox.of('tcp-closed')[0]).toEqual({ kind: 'tcp-closed', conn: o.conn });
    expect(ep.counters()).toMatchObject({ tcpAccepted: 1, tcpRejected: 0, tcpBytesReceived: body.length + 8, tcpBytesSent: 4 });
    sock.destroy();
  });

  test('outbound connect, sendTcp, echo, closeConnection', async () => {
    const { ep, inbox } = endpoint({ host });
    const serverGotEnd = new Promise<void>((resolve) => {
      const server = net.createServer((s) => {
        s.on('data', (b) => s.write(b));
        s.on('end', () => { s.end(); server.close(); resolve(); });
      });
      server.listen(0, host, () => {
        const conn = ep.connect(host, (server.address() as net.AddressInfo).port);
        ep.sendTcp(conn, Buffer.from('queued before connect;'));
      });
    });
    await inbox.until(() => inbox.of('tcp-open').length === 1, 'tcp-open');
    const [o] = inbox.of('tcp-open');
    expect(o.inbound).toBe(false);
    expect(o.peer.family).toBe(family);
    const big = crypto.randomBytes(300 * 1024);
    ep.sendTcp(o.conn, big);
    const want = Buffer.concat([Buffer.from('queued before connect;'), big]);
    await inbox.until(() => inbox.of('tcp-data').reduce((n, e) => n + e.data.length, 0) === want.length, 'echo');
    expect(Buffer.compare(Buffer.concat(inbox.of('tcp-data').map((e) => e.data)), want)).toBe(0);
    ep.closeConnection(o.conn);
    ep.closeConnection(o.conn);  // idempotent
    await serverGotEnd;
    await inbox.until(() => inbox.of('tcp-closed').length === 1, 'tcp-closed');
    expect(() => ep.sendTcp(o.conn, Buffer.from('x'))).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_NO_CONNECTION' }));
    expect(ep.counters()).toMatchObject({ tcpConnected: 1, tcpBytesSent: want.length, tcpBytesReceived: want.length });
  });

  test('connect to a closed port reports ECONNREFUSED', async () => {
    const { ep, inbox } = endpoint({ host });
    const port = await closedTcpPort(host);
    const conn = ep.connect(host, port);
    await inbox.until(() => inbox.of('tcp-closed').length === 1, 'tcp-closed');
    const [c] = inbox.of('tcp-closed');
    expect(c.conn).toBe(conn);
    expect(c.error).toMatchObject({ code: 'ECONNREFUSED', errno: expect.any(Number) });
    expect(c.error?.message).toMatch(/ECONNREFUSED/);
  });

  test('sendDatagram to a closed UDP port reports icmp-unreachable for that peer', async () => {
    const { ep, inbox } = endpoint({ host });
    const gone = await udpClient(type, host);
    const port = gone.address().port;
    await closeUdp(gone);
    ep.sendDatagram(Buffer.concat([newId(), Buffer.from('GET / HTTP/1.1\r\n\r\n')]), host, port);
    await inbox.until(() => inbox.of('icmp-unreachable').length === 1, 'icmp-unreachable');
    expect(inbox.of('icmp-unreachable')[0]).toMatchObject({ peer: { address: host, port, family }, code: 'ECONNREFUSED' });
    expect(ep.counters()).toMatchObject({ icmpErrors: 1, udpSent: 1 });
    // The socket still works afterwards (sending and receiving).
    const client = await udpClient(type, host);
    const got = new Promise<Buffer>((resolve) => client.once('message', resolve));
    ep.sendDatagram(Buffer.from('hello'), host, client.address().port);
    expect((await got).toString()).toBe('hello');
    await closeUdp(client);
  });
});

async function closedTcpPort(host: string): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('dual stack and wildcard binds', () => {
  test("'::' reports IPv4 peers as IPv4 and sends to IPv4 addresses", async () => {
    const { ep, inbox } = endpoint({ host: '::' });
    const id = newId();
    ep.expect(id);
    const c4 = await udpClient('udp4', '127.0.0.1');
    await send(c4, Buffer.concat([id, Buffer.from('v4')]), ep.udpPort, '127.0.0.1');
    const c6 = await udpClient('udp6', '::1');
    await send(c6, Buffer.concat([id, Buffer.from('v6')]), ep.udpPort, '::1');
    await inbox.until(() => inbox.of('datagram').length === 2, 'two datagrams');
    const peers = inbox.of('datagram').map((d) => d.peer).sort((a, b) => a.family - b.family);
    expect(peers).toEqual([
      { address: '127.0.0.1', port: c4.address().port, family: 4 },
      { address: '::1', port: c6.address().port, family: 6 },
    ]);
    const got = new Promise<dgram.RemoteInfo>((resolve) => c4.once('message', (_m, r) => resolve(r)));
    ep.sendDatagram(Buffer.from('to v4'), '127.0.0.1', c4.address().port);
    expect((await got).port).toBe(ep.udpPort);

    // Inbound TCP over IPv4 to the dual-stack listener.
    const sock = net.connect(ep.tcpPort, '127.0.0.1');
    sock.write(id);
    await inbox.until(() => inbox.of('tcp-open').length === 1, 'tcp-open');
    expect(inbox.of('tcp-open')[0].peer).toMatchObject({ address: '127.0.0.1', family: 4 });
    sock.destroy();
    await Promise.all([closeUdp(c4), closeUdp(c6)]);
  });

  test("'0.0.0.0' binds and receives on loopback", async () => {
    const { ep, inbox } = endpoint({ host: '0.0.0.0' });
    const id = newId();
    ep.expect(id);
    const c = await udpClient('udp4', '127.0.0.1');
    await send(c, id, ep.udpPort, '127.0.0.1');
    await inbox.until(() => inbox.of('datagram').length === 1, 'datagram');
    await closeUdp(c);
  });
});

describe('inbound admission', () => {
  test('wrong ID, silence, a partial ID and early close are rejected and counted', async () => {
    const { ep, inbox } = endpoint({ acceptDeadlineMs: 200 });
    ep.expect(newId());
    const closed = (s: net.Socket): Promise<void> => new Promise((resolve) => s.once('close', () => resolve()));
    const wrong = net.connect(ep.tcpPort, '127.0.0.1');
    wrong.on('error', () => undefined);
    wrong.write(newId());
    const silent = net.connect(ep.tcpPort, '127.0.0.1');
    silent.on('error', () => undefined);
    const partial = net.connect(ep.tcpPort, '127.0.0.1');
    partial.on('error', () => undefined);
    partial.write(Buffer.from([0x80, 1, 2, 3]));
    const early = net.connect(ep.tcpPort, '127.0.0.1');
    early.on('error', () => undefined);
    early.end(Buffer.from([0x81, 1]));
    const t0 = Date.now();
    await closed(wrong);
    await Promise.all([closed(silent), closed(partial), closed(early)]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
    await inbox.until(() => ep.counters().tcpRejected === 4, 'four rejections');
    expect(ep.counters().tcpAccepted).toBe(0);
    expect(inbox.events).toHaveLength(0);
  });

  test('a flood of pending connections is bounded by maxPendingConnections', async () => {
    const { ep } = endpoint({ acceptDeadlineMs: 300, maxPendingConnections: 8 });
    const socks: net.Socket[] = [];
    for (let i = 0; i < 60; i++) {
      const s = net.connect(ep.tcpPort, '127.0.0.1');
      s.on('error', () => undefined);
      socks.push(s);
    }
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (ep.counters().tcpRejected >= 52) { clearInterval(poll); resolve(); }
      }, 10);
    });
    expect(ep.counters().tcpRejected).toBeLessThan(60);  // the 8 pending wait for their deadline
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (ep.counters().tcpRejected === 60) { clearInterval(poll); resolve(); }
      }, 10);
    });
    socks.forEach((s) => s.destroy());
  });
});

describe('lifecycle and errors', () => {
  test('close() is idempotent and every method afterwards throws NATIVE_ERR_CLOSED', () => {
    const { ep } = endpoint();
    ep.close();
    ep.close();
    const id = newId();
    const calls: Array<() => unknown> = [
      () => ep.expect(id), () => ep.forget(id), () => ep.outstanding(), () => ep.counters(),
      () => ep.sendDatagram(id, '127.0.0.1', 9), () => ep.connect('127.0.0.1', 9),
      () => ep.sendTcp(1, id), () => ep.closeConnection(1),
    ];
    for (const call of calls) {
      let err: unknown;
      try { call(); } catch (e) { err = e; }
      expect(err).toBeInstanceOf(NativeError);
      expect((err as NativeError).code).toBe('NATIVE_ERR_CLOSED');
    }
  });

  test('system errors carry code, errno and syscall', () => {
    let err: unknown;
    try { endpoint({ host: '192.0.2.1' }); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(NativeError);
    expect(err).toMatchObject({ code: 'EADDRNOTAVAIL', syscall: 'bind', errno: expect.any(Number) });
    expect((err as Error).message).toMatch(/EADDRNOTAVAIL/);
    expect(() => endpoint({ host: 'localhost' })).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_INVALID_ARG' }));
    expect(() => endpoint({ recvBatch: 0 })).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_INVALID_ARG' }));
    const { ep } = endpoint();
    expect(() => ep.expect(Buffer.alloc(7))).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_INVALID_ARG' }));
    expect(() => ep.sendDatagram(Buffer.alloc(8), 'example.com', 80)).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_INVALID_ARG' }));
    expect(() => ep.sendDatagram(Buffer.alloc(70000), '127.0.0.1', 9)).toThrow(expect.objectContaining({ code: 'EMSGSIZE', syscall: 'sendto' }));
  });

  test('an exception in onIncoming becomes a process warning and the endpoint keeps going', async () => {
    const warn = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      let calls = 0;
      const ep = new Endpoint({}, () => { calls++; throw new Error('boom'); });
      open.push(ep);
      const id = newId();
      ep.expect(id);
      const c = await udpClient('udp4', '127.0.0.1');
      for (let i = 1; i <= 2; i++) {
        await send(c, id, ep.udpPort, '127.0.0.1');
        const t0 = Date.now();
        while (calls < i && Date.now() - t0 < 5000) await delay(10);
      }
      expect(calls).toBe(2);
      expect(warn).toHaveBeenCalledTimes(2);
      expect(warn.mock.calls[0][0]).toMatch(/onIncoming threw: boom/);
      expect(warn.mock.calls[0][1]).toMatchObject({ type: 'CatpNativeCallbackWarning' });
      await closeUdp(c);
    } finally {
      warn.mockRestore();
    }
  });

  test('close() from inside onIncoming is safe', async () => {
    let calls = 0;
    let ep: Endpoint | undefined;
    ep = new Endpoint({}, () => { calls++; ep?.close(); ep?.close(); });
    open.push(ep);
    const id = newId();
    ep.expect(id);
    const c = await udpClient('udp4', '127.0.0.1');
    const sends: Promise<void>[] = [];
    for (let i = 0; i < 50; i++) sends.push(send(c, id, ep.udpPort, '127.0.0.1'));
    await Promise.all(sends);
    await delay(100);
    expect(calls).toBe(1);
    expect(() => ep?.outstanding()).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_CLOSED' }));
    ep = undefined;
    await closeUdp(c);
  });

  test('clocks', () => {
    const skew = realtimeNs() - BigInt(Date.now()) * 1_000_000n;
    expect(skew < 0n ? -skew : skew).toBeLessThan(1_000_000_000n);
    const a = monotonicNs();
    expect(monotonicNs()).toBeGreaterThanOrEqual(a);
  });

  test('the addon is found from the package root, and a missing one says to run npm install', () => {
    expect(packageRoot()).toBe(path.resolve(__dirname, '..', '..'));
    expect(addonPath()).toBe(path.join(packageRoot(), 'build', 'Release', 'catp_native.node'));
    jest.isolateModules(() => {
      jest.doMock('node:fs', () => ({ ...fs, existsSync: (p: fs.PathLike) => !String(p).endsWith('.node') && fs.existsSync(p) }));
      try {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const fresh = require('../../native') as typeof import('../../native');
        expect(() => fresh.realtimeNs()).toThrow(expect.objectContaining({ code: 'NATIVE_ERR_ADDON_MISSING', message: expect.stringMatching(/npm install/) }));
        expect(() => new fresh.Endpoint({}, () => undefined)).toThrow(fresh.NativeError);
      } finally {
        jest.dontMock('node:fs');
      }
    });
  });

  const runChild = (script: string, waitMs: number): Promise<number | 'still-running'> => new Promise((resolve) => {
    const child = child_process.spawn(process.execPath, ['-e', script, addonPath()], { stdio: 'ignore' });
    const timer = setTimeout(() => { child.kill('SIGKILL'); resolve('still-running'); }, waitMs);
    child.on('exit', (code) => { clearTimeout(timer); resolve(code ?? -1); });
  });
  const childScript = (closeIt: boolean): string => `
    const m = { exports: {} }; process.dlopen(m, process.argv[1]);
    const ep = new m.exports.Endpoint({}, () => {});
    ep.expect(Buffer.alloc(8, 0x80)); ep.connect('127.0.0.1', ep.address().tcpPort);
    setTimeout(() => { ${closeIt ? 'ep.close();' : ''} }, 50);`;

  test('a closed endpoint lets the process exit; an open one keeps it alive like a server', async () => {
    expect(await runChild(childScript(true), 10000)).toBe(0);
    expect(await runChild(childScript(false), 1500)).toBe('still-running');
  });
});
