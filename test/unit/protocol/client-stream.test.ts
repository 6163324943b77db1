// Streamed requests (RequestInit.streamed): the answer may be a run of non-HTTP datagrams (CATP frames).
import { serializeResponse } from '../../../protocol/dhttp/http1';
import { DhttpClient } from '../../../protocol/dhttp/client';
import type { ClientAction, ClientEvent } from '../../../protocol/dhttp/client-api';
import { decodeRequest, encodeResponse, hexToId } from '../../../protocol/dhttp/wire';

const SERVER = { address: '127.0.0.1', port: 8080 };

function drain(c: DhttpClient): { actions: ClientAction[]; events: ClientEvent[] } {
  const actions: ClientAction[] = [];
  const events: ClientEvent[] = [];
  for (let a = c.nextAction(); a; a = c.nextAction()) actions.push(a);
  for (let e = c.nextEvent(); e; e = c.nextEvent()) events.push(e);
  return { actions, events };
}

function frame(idHex: string, seq: number): Uint8Array {
  const f = new Uint8Array(40);
  f.set(hexToId(idHex), 0);
  f[8] = 0xca; // not 'H': a stream datagram, whatever follows
  f[20] = seq;
  return f;
}

function client(): DhttpClient {
  return new DhttpClient({ udpPort: 40000, tcpPort: 40001, initialTimeoutMs: 100 });
}

test('the first stream datagram stops the resend timer; every one is handed over in order', () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], streamed: true }, 0);
  const sent = drain(c).actions.find((a) => a.type === 'send-datagram');
  expect(sent).toBeDefined();
  expect(c.nextTimerAt()).toBe(100);
  c.receiveDatagram(frame(id, 0), SERVER, 10);
  c.receiveDatagram(frame(id, 1), SERVER, 11);
  const { events } = drain(c);
  expect(events.map((e) => e.type)).toEqual(['stream-datagram', 'stream-datagram']);
  expect(events.map((e) => (e as { first: boolean }).first)).toEqual([true, false]);
  expect(c.nextTimerAt()).toBeNull(); // the stream's own repair drives it now
  c.handleTimer(10_000);
  expect(drain(c).events.filter((e) => e.type === 'resend')).toHaveLength(0);
  expect(c.outstanding).toBe(1);
});

test('sendOnStream goes to the request\'s server; endStream forgets the ID and later frames are dropped', () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', streamed: true }, 0);
  drain(c);
  c.receiveDatagram(frame(id, 0), SERVER, 1);
  drain(c);
  expect(c.sendOnStream(id, new Uint8Array([1, 2, 3]))).toBe(true);
  expect(drain(c).actions).toEqual([{ type: 'send-datagram', to: { host: '127.0.0.1', port: 8080 }, data: new Uint8Array([1, 2, 3]) }]);
  expect(c.endStream(id)).toBe(true);
  expect(drain(c).actions.map((a) => a.type)).toEqual(['forget-id']);
  expect(c.outstanding).toBe(0);
  c.receiveDatagram(frame(id, 1), SERVER, 2);
  expect(drain(c).events.map((e) => e.type)).toEqual(['dropped']);
  expect(c.sendOnStream(id, new Uint8Array(1))).toBe(false);
});

test('a streamed request answered with an ordinary HTTP response completes as usual', () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/img.png', streamed: true }, 0);
  const sent = drain(c).actions.find((a) => a.type === 'send-datagram') as Extract<ClientAction, { type: 'send-datagram' }>;
  const req = decodeRequest(sent.data);
  const http = serializeResponse({ status: 200, reason: 'OK', headers: [['Content-Type', 'image/png']], body: new Uint8Array([9]) });
  c.receiveDatagram(encodeResponse(req.id, http), SERVER, 5);
  const { events } = drain(c);
  expect(events).toHaveLength(1);
  expect(events[0]).toMatchObject({ type: 'response', requestId: id, channel: 'udp' });
});

test('a request that did not ask for a stream drops non-HTTP datagrams as malformed', () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html' }, 0);
  drain(c);
  c.receiveDatagram(frame(id, 0), SERVER, 1);
  const { events } = drain(c);
  expect(events.map((e) => e.type)).toEqual(['dropped']);
  expect(c.nextTimerAt()).toBe(100); // still waiting for a real answer
  expect(c.endStream(id)).toBe(false);
});

describe("first contact: a stream's first flight comes unproven (address validation)", () => {
  const tokenAnswer = (idHex: string, token: string): Uint8Array =>
    encodeResponse(hexToId(idHex), serializeResponse({ status: 421, reason: 'Misdirected Request', headers: [['DHTTP-Retry', 'token'], ['Catp-Token', token], ['Content-Length', '0']], body: new Uint8Array(0) }));
  const sentRequests = (actions: ClientAction[]) =>
    actions.filter((a): a is Extract<ClientAction, { type: 'send-datagram' }> => a.type === 'send-datagram').map((a) => new TextDecoder().decode(decodeRequest(a.data).http));

  test('the token answer first (the usual order): the request again with the token; frames then stop the resend timer', () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], streamed: true }, 0);
    const [first] = sentRequests(drain(c).actions);
    expect(first).toMatch(/Catp-Pad: /); // padded: room for a first flight
    c.receiveDatagram(tokenAnswer(id, '1.abc.AAAAAAAAAAAAAAAAAAAAAA'), SERVER, 5);
    const again = sentRequests(drain(c).actions);
    expect(again).toHaveLength(1);
    expect(again[0]).toMatch(/Catp-Token: 1\.abc\.A{22}/);
    c.receiveDatagram(frame(id, 0), SERVER, 6);
    expect(drain(c).events.map((e) => e.type)).toEqual(['stream-datagram']);
    expect(c.nextTimerAt()).toBeNull();
  });

  test('a token answer after the frames (the first was lost, or our proof was): the request again with the token, several times if need be; never TCP, and no resend timer', () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], streamed: true }, 0);
    drain(c);
    c.receiveDatagram(frame(id, 0), SERVER, 5);
    c.receiveDatagram(frame(id, 1), SERVER, 6);
    drain(c);
    for (let i = 0; i < 3; i++) {
      c.receiveDatagram(tokenAnswer(id, '1.abc.BBBBBBBBBBBBBBBBBBBBBB'), SERVER, 50 + 100 * i);
      const { actions, events } = drain(c);
      expect(sentRequests(actions)).toHaveLength(1);
      expect(actions.some((a) => a.type === 'connect')).toBe(false);
      expect(events.filter((e) => e.type === 'retry-over-tcp')).toHaveLength(0);
      expect(c.nextTimerAt()).toBeNull();
    }
    expect(c.counters().retriesWithToken).toBe(3);
  });
});

describe('connections servers open to us: bounded in number and in idleness', () => {
  const closes = (actions: ClientAction[]) => actions.filter((a): a is Extract<ClientAction, { type: 'close-tcp' }> => a.type === 'close-tcp').map((a) => a.conn);

  test('beyond maxInboundConnections the one idle longest is closed; none closes while an answer arrives on it', () => {
    const c = new DhttpClient({ udpPort: 40000, tcpPort: 40001, maxInboundConnections: 2, inboundIdleMs: 1000 });
    const a = c.inboundConnection(SERVER, 0);
    const b = c.inboundConnection(SERVER, 10);
    c.receiveTcp(a, new Uint8Array([1, 2, 3]), 20); // a partial ID: a is now the more recently active
    expect(closes(drain(c).actions)).toEqual([]);
    const n = c.inboundConnection(SERVER, 30);
    expect(closes(drain(c).actions)).toEqual([b]);
    expect(c.counters().connections.inboundOverLimit).toBe(1);
    // the newcomer is kept, and the others still count
    c.inboundConnection(SERVER, 40);
    const closed = closes(drain(c).actions);
    expect(closed).toHaveLength(1);
    expect([a, n]).toContain(closed[0]);
  });

  test('an inbound connection that brings nothing for inboundIdleMs is closed (the timer asks for it); bytes keep it open', () => {
    const c = new DhttpClient({ udpPort: 40000, tcpPort: 40001, inboundIdleMs: 1000 });
    const a = c.inboundConnection(SERVER, 0);
    const b = c.inboundConnection(SERVER, 0);
    expect(c.nextTimerAt()).toBe(1000);
    c.receiveTcp(b, new Uint8Array([7]), 900);
    c.handleTimer(1000);
    expect(closes(drain(c).actions)).toEqual([a]);
    expect(c.nextTimerAt()).toBe(1900);
    c.handleTimer(1900);
    expect(closes(drain(c).actions)).toEqual([b]);
    expect(c.counters().connections.inboundIdle).toBe(2);
    expect(c.nextTimerAt()).toBeNull();
  });
});
