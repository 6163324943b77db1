// Hostile input: garbage, truncated and oversized datagrams, TCP connections that send garbage,
// and a seeded randomized mix. Nothing may crash, and the counters must add up exactly.
import * as crypto from 'node:crypto';
import * as dgram from 'node:dgram';
import * as net from 'node:net';
import { Endpoint, Incoming } from '../../native';
import { seededRng as mulberry32 } from '../../protocol/random';


function randomBytes(rand: () => number, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(rand() * 256);
  return b;
}

async function waitFor(pred: () => boolean, what: string, timeoutMs = 10000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const SLOT = 2048;  // the addon's per-datagram buffer: longer datagrams are truncated -> malformed
let ep: Endpoint;
let events: Incoming[];
beforeEach(() => {
  events = [];
  ep = new Endpoint({ acceptDeadlineMs: 300 }, (batch) => { events.push(...batch); });
});
afterEach(() => ep.close());

async function sendAll(datagrams: Buffer[]): Promise<void> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', resolve));
  for (const d of datagrams) {
    await new Promise<void>((resolve, reject) => s.send(d, ep.udpPort, '127.0.0.1', (e) => (e ? reject(e) : resolve())));
  }
  await new Promise<void>((resolve) => s.close(() => resolve()));
}

test('garbage table over UDP', async () => {
  const id = Buffer.from('8000000000000001', 'hex');
  ep.expect(id);
  const table: Array<{ d: Buffer; want: 'matched' | 'unmatched' | 'malformed' }> = [
    { d: Buffer.alloc(0), want: 'malformed' },
    { d: Buffer.from([0x80]), want: 'malformed' },
    { d: id.subarray(0, 7), want: 'malformed' },
    { d: id, want: 'matched' },
    { d: Buffer.alloc(8), want: 'unmatched' },
    { d: Buffer.alloc(8, 0xff), want: 'unmatched' },
    { d: Buffer.concat([id, Buffer.alloc(1452, 0xaa)]), want: 'matched' },          // MAX_DATAGRAM_PAYLOAD
    { d: Buffer.concat([id, Buffer.alloc(SLOT - 8, 0xbb)]), want: 'matched' },      // exactly one slot
    { d: Buffer.concat([id, Buffer.alloc(SLOT - 7)]), want: 'malformed' },          // one byte too many
    { d: Buffer.concat([id, Buffer.alloc(65507 - 8)]), want: 'malformed' },         // largest UDP/IPv4
    { d: Buffer.concat([Buffer.from('GET / HTTP/1.1\r\n\r\n')]), want: 'unmatched' },
  ];
  await sendAll(table.map((t) => t.d));
  await waitFor(() => ep.counters().udpReceived === table.length, 'all datagrams');
  const count = (w: string): number => table.filter((t) => t.want === w).length;
  expect(ep.counters()).toMatchObject({
    udpReceived: table.length, udpMatched: count('matched'), udpUnmatched: count('unmatched'), udpMalformed: count('malformed'),
  });
  await waitFor(() => events.length === count('matched'), 'delivery');
  const delivered = events.map((e) => (e.kind === 'datagram' ? e.data : Buffer.alloc(0)));
  const expected = table.filter((t) => t.want === 'matched').map((t) => t.d);
  expect(delivered.map((b) => b.toString('hex'))).toEqual(expected.map((b) => b.toString('hex')));
});

test('randomized datagrams (seeded): no crash, counters add up, matched bytes exact', async () => {
  const rand = mulberry32(0xc47b);
  const ids = Array.from({ length: 16 }, () => { const b = randomBytes(rand, 8); b[0] |= 0x80; return b; });
  ids.forEach((id) => ep.expect(id));
  const datagrams: Buffer[] = [];
  const want = { matched: 0, unmatched: 0, malformed: 0 };
  const matched: Buffer[] = [];
  for (let i = 0; i < 400; i++) {
    const len = rand() < 0.1 ? Math.floor(rand() * 8) : Math.floor(rand() * 3000);
    const d = randomBytes(rand, len);
    if (len >= 8 && rand() < 0.5) ids[Math.floor(rand() * ids.length)].copy(d, 0);
    datagrams.push(d);
    const known = len >= 8 && ids.some((id) => id.equals(d.subarray(0, 8)));
    if (len < 8 || len > SLOT) want.malformed++;
    else if (known) { want.matched++; matched.push(d); } else want.unmatched++;
  }
  await sendAll(datagrams);
  await waitFor(() => ep.counters().udpReceived === datagrams.length, 'all datagrams');
  const c = ep.counters();
  expect({ matched: c.udpMatched, unmatched: c.udpUnmatched, malformed: c.udpMalformed }).toEqual(want);
  expect(c.udpMatched + c.udpUnmatched + c.udpMalformed).toBe(c.udpReceived);
  expect(c.kernelDrops).toBe(0);
  await waitFor(() => events.length === want.matched, 'delivery');
  expect(Buffer.concat(events.map((e) => (e.kind === 'datagram' ? e.data : Buffer.alloc(0))))
    .equals(Buffer.concat(matched))).toBe(true);
});

test('randomized TCP openers (seeded): valid IDs admitted byte-exact, garbage rejected', async () => {
  const rand = mulberry32(0x7cb);
  const ids = Array.from({ length: 4 }, () => { const b = randomBytes(rand, 8); b[0] |= 0x80; return b; });
  ids.forEach((id) => ep.expect(id));
  const plans: Array<{ bytes: Buffer; admit: boolean }> = [];
  for (let i = 0; i < 40; i++) {
    const r = rand();
    let bytes: Buffer;
    if (r < 0.4) bytes = Buffer.concat([ids[i % ids.length], randomBytes(rand, Math.floor(rand() * 5000))]);
    else if (r < 0.6) bytes = randomBytes(rand, Math.floor(rand() * 8));  // too short, then FIN
    else if (r < 0.8) bytes = Buffer.concat([Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'), randomBytes(rand, 100)]);
    else bytes = randomBytes(rand, 8 + Math.floor(rand() * 3000));
    plans.push({ bytes, admit: bytes.length >= 8 && ids.some((id) => id.equals(bytes.subarray(0, 8))) });
  }
  const sockets = plans.map((p) => {
    const s = net.connect(ep.tcpPort, '127.0.0.1');
    s.on('error', () => undefined);
    s.end(p.bytes);
    return s;
  });
  const admitted = plans.filter((p) => p.admit);
  await waitFor(() => ep.counters().tcpAccepted + ep.counters().tcpRejected === plans.length, 'all decided');
  expect(ep.counters().tcpAccepted).toBe(admitted.length);
  await waitFor(() => events.filter((e) => e.kind === 'tcp-closed').length === admitted.length, 'admitted closed');
  // Reassemble each admitted connection and compare with what some admitted plan sent.
  const byConn = new Map<number, Buffer[]>();
  for (const e of events) if (e.kind === 'tcp-data') byConn.set(e.conn, [...(byConn.get(e.conn) ?? []), e.data]);
  const got = [...byConn.values()].map((parts) => Buffer.concat(parts).toString('hex')).sort();
  expect(got).toEqual(admitted.map((p) => p.bytes.toString('hex')).sort());
  expect(ep.counters().tcpBytesReceived).toBe(admitted.reduce((n, p) => n + p.bytes.length, 0));
  sockets.forEach((s) => s.destroy());
});

test('an admitted connection that turns into garbage is closed by the caller, endpoint unharmed', async () => {
  const id = crypto.randomBytes(8);
  id[0] |= 0x80;
  ep.expect(id);
  const s = net.connect(ep.tcpPort, '127.0.0.1');
  s.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => s.on('close', () => resolve()));
  s.resume();
  s.write(Buffer.concat([id, crypto.randomBytes(100000)]));
  await waitFor(() => events.some((e) => e.kind === 'tcp-open'), 'tcp-open');
  const open = events.find((e) => e.kind === 'tcp-open') as Extract<Incoming, { kind: 'tcp-open' }>;
  ep.closeConnection(open.conn);   // what the protocol layer does on bad input
  await waitFor(() => events.some((e) => e.kind === 'tcp-closed'), 'tcp-closed');
  await closed;
  ep.sendDatagram(Buffer.concat([id, Buffer.from('still alive')]), '127.0.0.1', ep.udpPort);
  await waitFor(() => events.some((e) => e.kind === 'datagram'), 'datagram to self');
});
