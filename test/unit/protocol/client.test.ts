import fc from 'fast-check';

import { DhttpError } from '../../../protocol/dhttp/errors';
import { getHeader, serializeResponse } from '../../../protocol/dhttp/http1';
import { decodeRequest, encodeResponse, idToHex, hexToId } from '../../../protocol/dhttp/wire';
import { DhttpClient } from '../../../protocol/dhttp/client';
import { Pipe, ok, type ServerRequest } from './helpers/pipe';
import { sha256 } from '../../helpers/catp-util';

const td = new TextDecoder();
const te = new TextEncoder();

function bodyText(p: Pipe, id: string): string {
  const r = p.eventsOf('response').find((e) => e.requestId === id);
  if (!r) throw new Error(`no response for ${id}: ${JSON.stringify(p.events.filter((e) => 'requestId' in e && e.requestId === id))}`);
  return td.decode(r.response.body);
}

test('a small GET goes over UDP: expect-id before the datagram, forget-id after the answer', () => {
  const p = new Pipe();
  const id = p.request('/a');
  p.run();
  const types = p.actions.map((a) => a.action.type);
  expect(types.slice(0, 2)).toEqual(['expect-id', 'send-datagram']);
  expect(types).toContain('forget-id');
  expect(p.expected.size).toBe(0);
  const [res] = p.eventsOf('response');
  expect(res).toMatchObject({ requestId: id, channel: 'udp', resends: 0, sentAtMs: 0, receivedAtMs: 20 });
  expect(bodyText(p, id)).toBe('body of /a');
  const req = p.serverLog[0];
  expect(req.request.target).toBe('/a');
  expect(getHeader(req.request.headers, 'host')).toBe('10.0.0.1:8080');
  expect(req.otherPort).toBe(40001); // our TCP port travels with a UDP request
  expect(p.client.outstanding).toBe(0);
});

function knownOrigin(p: Pipe): void {
  p.request('/warmup');
  p.run();
  p.events.length = 0;
  p.actions.length = 0;
}

test('resends carry the resend flag with exact exponential back-off, then DHTTP_ERR_TIMEOUT', () => {
  let silent = false;
  const p = new Pipe({ handler: () => (silent ? { kind: 'silent' } : { kind: 'respond', response: ok('x') }) });
  knownOrigin(p); // an origin that answered before does not fall back
  silent = true;
  const t0 = p.now;
  const id = p.request('/lost');
  p.run();
  const sends = p.datagramsSent().map((d) => ({ at: d.atMs - t0, resend: decodeRequest(d.data).resend, id: idToHex(decodeRequest(d.data).id) }));
  expect(sends.map((s) => s.at)).toEqual([0, 1000, 3000, 7000, 15000]); // 1 s, 2 s, 4 s, 8 s (capped)
  expect(sends.map((s) => s.resend)).toEqual([false, true, true, true, true]);
  expect(new Set(sends.map((s) => s.id))).toEqual(new Set([id]));
  expect(p.eventsOf('resend').map((e) => e.attempt)).toEqual([1, 2, 3, 4]);
  const [failed] = p.eventsOf('request-failed');
  expect(failed.requestId).toBe(id);
  expect(failed.error).toBeInstanceOf(DhttpError);
  expect(failed.error.code).toBe('DHTTP_ERR_TIMEOUT');
  expect(p.now - t0).toBe(23000); // last wait is capped at maxTimeoutMs = 8 s
  expect(p.expected.size).toBe(0);
  expect(p.client.nextTimerAt()).toBeNull();
});

test('the resend count is bounded by maxResends and the back-off by maxTimeoutMs', () => {
  let silent = false;
  const p = new Pipe({
    client: { maxResends: 2, initialTimeoutMs: 300, backoffFactor: 3, maxTimeoutMs: 1000 },
    handler: () => (silent ? { kind: 'silent' } : { kind: 'respond', response: ok('x') }),
  });
  knownOrigin(p);
  silent = true;
  const t0 = p.now;
  p.request('/lost');
  p.run();
  expect(p.datagramsSent().map((d) => d.atMs - t0)).toEqual([0, 300, 1200]);
  expect(p.now - t0).toBe(2200);
  expect(p.eventsOf('request-failed')).toHaveLength(1);
});

test('a resend answered after the original: first answer wins, the late one is dropped and counted', () => {
  let n = 0;
  const p = new Pipe({ latencyMs: 600, handler: () => ({ kind: 'respond', response: ok(`answer ${++n}`), channel: 'udp' }) });
  knownOrigin(p);
  const before = p.client.counters().dropped.duplicate;
  const first = n + 1;
  const id = p.request('/slow'); // RTT 1200 ms > 1000 ms timeout: the resend crosses the answer
  p.run();
  expect(p.eventsOf('resend')).toHaveLength(1);
  expect(p.eventsOf('response')).toHaveLength(1);
  expect(bodyText(p, id)).toBe(`answer ${first}`);
  expect(p.eventsOf('dropped')).toEqual([{ type: 'dropped', channel: 'udp', reason: 'duplicate', requestId: id }]);
  expect(p.client.counters().dropped.duplicate - before).toBe(1);
});

test('ICMP port unreachable falls back to plain HTTP at once, for every outstanding request; the origin stays plain', () => {
  const p = new Pipe({ udp: 'icmp', handler: (r) => ({ kind: 'respond', response: ok(`plain ${r.request.target}`) }) });
  const a = p.client.request({ url: p.url('/a') }, 0);
  const b = p.client.request({ url: p.url('/b') }, 0);
  p.pump();
  p.run();
  const fallbacks = p.eventsOf('fallback');
  expect(fallbacks.map((f) => [f.requestId, f.reason])).toEqual([[a, 'icmp-unreachable'], [b, 'icmp-unreachable']]);
  expect(p.eventsOf('resend')).toHaveLength(0);
  expect(bodyText(p, a)).toBe('plain /a');
  expect(bodyText(p, b)).toBe('plain /b');
  const first = p.eventsOf('response')[0];
  expect(first.channel).toBe('http');
  expect(first.receivedAtMs).toBeLessThan(100); // no timeout waited
  expect(p.serverLog.every((r) => r.via === 'http')).toBe(true);
  expect(p.actions.filter((x) => x.action.type === 'connect')).toHaveLength(1); // one keep-alive connection
  // later requests go plain directly
  const before = p.datagramsSent().length;
  const c = p.request('/c');
  p.run();
  expect(p.datagramsSent().length).toBe(before);
  expect(bodyText(p, c)).toBe('plain /c');
});

test('an origin never heard from falls back after fallbackAfterResends unanswered resends', () => {
  const p = new Pipe({ udp: 'silent' });
  const id = p.request('/x');
  p.run();
  const sends = p.datagramsSent();
  expect(sends.map((s) => s.atMs)).toEqual([0, 1000]);
  const [fb] = p.eventsOf('fallback');
  expect(fb).toEqual({ type: 'fallback', requestId: id, reason: 'timeout' });
  const res = p.eventsOf('response')[0];
  expect(res.channel).toBe('http');
  expect(res.resends).toBe(1);
  expect(res.receivedAtMs).toBe(3000 + 10 + 20); // fallback at 3 s, then connect (10 ms) + request/response (20 ms)
  expect(p.expected.size).toBe(0);
});

test('a server that does not speak DHTTP and refuses TCP fails with DHTTP_ERR_CONNECT', () => {
  const p = new Pipe({ udp: 'icmp', tcp: false });
  const id = p.request('/x');
  p.run();
  const [failed] = p.eventsOf('request-failed');
  expect(failed.requestId).toBe(id);
  expect(failed.error.code).toBe('DHTTP_ERR_CONNECT');
});

test('421 with DHTTP-Retry: tcp makes the client resend over its own TCP connection', () => {
  const p = new Pipe({
    handler: (r) =>
      r.via === 'udp'
        ? { kind: 'respond', response: { status: 421, reason: 'Misdirected Request', headers: [['DHTTP-Retry', 'tcp']], body: new Uint8Array() } }
        : { kind: 'respond', response: ok('over tcp') },
  });
  const id = p.request('/x');
  p.run();
  expect(p.eventsOf('retry-over-tcp')).toEqual([{ type: 'retry-over-tcp', requestId: id }]);
  const res = p.eventsOf('response');
  expect(res).toHaveLength(1);
  expect(res[0].channel).toBe('tcp');
  expect(bodyText(p, id)).toBe('over tcp');
  const tcpReq = p.serverLog.find((r) => r.via === 'tcp') as ServerRequest;
  expect(tcpReq.idHex).toBe(id);
  expect(tcpReq.resend).toBe(false); // a redirect is not a loss
  expect(tcpReq.otherPort).toBe(40000); // our UDP port travels with a TCP request
});

test('a 421 without DHTTP-Retry is an ordinary answer', () => {
  const p = new Pipe({ handler: () => ({ kind: 'respond', response: { status: 421, reason: 'Misdirected', headers: [], body: new Uint8Array() } }) });
  const id = p.request('/x');
  p.run();
  expect(p.eventsOf('response')[0]).toMatchObject({ requestId: id, channel: 'udp' });
});

test('POST and requests over one datagram go over one reused TCP connection, pipelined, matched by ID', () => {
  const p = new Pipe({ handler: (r) => ({ kind: 'respond', response: ok(`${r.request.method} ${r.request.body.length}`) }) });
  const post = p.request('/form', { method: 'POST', body: te.encode('a=1') });
  const big = p.request('/big', { headers: [['X-Big', 'y'.repeat(1500)]] });
  const put = p.request('/put', { method: 'PUT', body: new Uint8Array(3000) });
  const small = p.request('/small');
  p.run();
  expect(bodyText(p, post)).toBe('POST 3');
  expect(bodyText(p, big)).toBe('GET 0');
  expect(bodyText(p, put)).toBe('PUT 3000');
  expect(bodyText(p, small)).toBe('GET 0');
  expect(p.eventsOf('response').find((e) => e.requestId === small)?.channel).toBe('udp');
  for (const id of [post, big, put]) expect(p.eventsOf('response').find((e) => e.requestId === id)?.channel).toBe('tcp');
  expect(p.actions.filter((a) => a.action.type === 'connect')).toHaveLength(1);
  const postReq = p.serverLog.find((r) => r.request.method === 'POST') as ServerRequest;
  expect(getHeader(postReq.request.headers, 'content-length')).toBe('3');
});

test('dhttpt:// always uses TCP, even for a small GET', () => {
  const p = new Pipe();
  const id = p.request('/t', { scheme: 'dhttpt' });
  p.run();
  expect(p.datagramsSent()).toHaveLength(0);
  expect(p.eventsOf('response')[0]).toMatchObject({ requestId: id, channel: 'tcp' });
});

test('a large answer comes over a server-opened connection, and the connection is reused', () => {
  const big = new Uint8Array(100_000).map((_, i) => i & 0xff);
  const p = new Pipe({ handler: () => ({ kind: 'respond', response: ok(big) }) });
  const a = p.request('/big1');
  const b = p.request('/big2');
  p.run();
  const res = p.eventsOf('response');
  expect(res.map((r) => r.channel)).toEqual(['tcp', 'tcp']);
  expect(res.find((r) => r.requestId === a)?.response.body).toEqual(big);
  expect(res.find((r) => r.requestId === b)?.response.body).toEqual(big);
  expect(p.client.counters().connections.inbound).toBe(1);
  // kept open between the answers; closed only once it has brought nothing for inboundIdleMs (default 30 s)
  const closes = p.actions.filter((a) => a.action.type === 'close-tcp');
  expect(closes).toHaveLength(1);
  expect(closes[0]!.atMs).toBeGreaterThanOrEqual(30_000);
  expect(p.client.counters().connections.inboundIdle).toBe(1);
});

test('unmatched IDs are dropped and counted; a duplicate is never delivered twice', () => {
  const p = new Pipe();
  const id = p.request('/a');
  p.run();
  const stranger = Uint8Array.from([0xff, 1, 2, 3, 4, 5, 6, 7]);
  const http = serializeResponse(ok('spoof'));
  p.inject(encodeResponse(stranger, http));
  p.inject(encodeResponse(hexToId(id), http)); // a late duplicate of a completed request
  p.inject(new Uint8Array([1, 2, 3])); // garbage
  p.inject(encodeResponse(stranger, new TextEncoder().encode('HTTP/1.1 200 OK\r\n\r\nunframed')));
  expect(p.eventsOf('response')).toHaveLength(1);
  const c = p.client.counters();
  expect(c.dropped).toEqual({ unknownId: 2, duplicate: 1, malformed: 1, total: 4 });
  expect(p.eventsOf('dropped').map((d) => d.reason)).toEqual(['unknown-id', 'duplicate', 'DHTTP_ERR_SHORT', 'unknown-id']);
});

test('a malformed answer to an outstanding request is dropped and the request keeps waiting', () => {
  const p = new Pipe({ handler: () => ({ kind: 'silent' }) });
  const id = p.request('/a');
  p.inject(encodeResponse(hexToId(id), te.encode('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort')));
  expect(p.eventsOf('dropped')[0]).toMatchObject({ channel: 'udp', reason: 'HTTP_ERR_INCOMPLETE', requestId: id });
  p.inject(encodeResponse(hexToId(id), serializeResponse(ok('good'))));
  expect(bodyText(p, id)).toBe('good');
});

test('an inbound connection naming an unknown ID is closed at once', () => {
  const p = new Pipe();
  const key = p.injectInbound(Uint8Array.from([0xff, 1, 2, 3, 4, 5, 6, 7, 0x48]));
  expect(p.closedByClient.has(key)).toBe(true);
  expect(p.client.counters().dropped.unknownId).toBe(1);
  expect(p.actions.map((a) => a.action)).toContainEqual({ type: 'close-tcp', conn: key });
});

test('an inbound connection whose second message names an unknown ID is closed', () => {
  const p = new Pipe({ handler: () => ({ kind: 'silent' }) });
  const id = p.request('/a');
  const good = encodeResponse(hexToId(id), serializeResponse(ok('fine')));
  const bad = encodeResponse(Uint8Array.from([0xfe, 0, 0, 0, 0, 0, 0, 0]), serializeResponse(ok('evil')));
  const key = p.injectInbound(Uint8Array.from([...good, ...bad]));
  expect(bodyText(p, id)).toBe('fine');
  expect(p.eventsOf('response')[0].channel).toBe('tcp');
  expect(p.closedByClient.has(key)).toBe(true);
});

test('an inbound connection that closes mid-answer makes the client resend at once', () => {
  const p = new Pipe({ handler: () => ({ kind: 'silent' }) });
  const id = p.request('/a');
  const msg = encodeResponse(hexToId(id), serializeResponse(ok('x'.repeat(5000))));
  p.now = 300;
  const key = p.injectInbound(msg.subarray(0, 100));
  expect(p.client.nextTimerAt()).toBe(300 + 30000); // arriving: no UDP resend while bytes flow
  p.client.tcpClosed(key, null, 400);
  p.pump();
  expect(p.client.nextTimerAt()).toBe(400);
  p.run(400);
  expect(p.eventsOf('resend')).toEqual([{ type: 'resend', requestId: id, attempt: 1, overTcp: false }]);
});

test('our TCP connection closing under a pipelined request resends it over a new one with the resend flag', () => {
  let closes = 1;
  const p = new Pipe({ handler: (r) => (r.via === 'tcp' && closes-- > 0 ? { kind: 'close' } : { kind: 'respond', response: ok('done') }) });
  const id = p.request('/t', { scheme: 'dhttpt' });
  p.run();
  expect(p.eventsOf('resend')).toEqual([{ type: 'resend', requestId: id, attempt: 1, overTcp: true }]);
  expect(bodyText(p, id)).toBe('done');
  const tcp = p.serverLog.filter((r) => r.via === 'tcp');
  expect(tcp.map((r) => r.resend)).toEqual([false, true]);
  expect(p.actions.filter((a) => a.action.type === 'connect')).toHaveLength(2);
});

test('a POST is not repeated when its connection closes: DHTTP_ERR_CONNECTION_CLOSED', () => {
  const p = new Pipe({ handler: () => ({ kind: 'close' }) });
  const id = p.request('/form', { method: 'POST', body: te.encode('x') });
  p.run();
  expect(p.eventsOf('request-failed')[0]).toMatchObject({ requestId: id });
  expect(p.eventsOf('request-failed')[0].error.code).toBe('DHTTP_ERR_CONNECTION_CLOSED');
  expect(p.serverLog).toHaveLength(1);
});

describe('plain http://', () => {
  test('one keep-alive connection, requests in order, Host header, HEAD bodiless', () => {
    const p = new Pipe({ handler: (r) => ({ kind: 'respond', response: ok(`plain ${r.request.target}`) }) });
    const ids = ['/1', '/2', '/3'].map((path) => p.request(path, { scheme: 'http' }));
    const head = p.request('/h', { scheme: 'http', method: 'HEAD' });
    p.run();
    expect(ids.map((id) => bodyText(p, id))).toEqual(['plain /1', 'plain /2', 'plain /3']);
    expect(p.eventsOf('response').find((e) => e.requestId === head)?.response.body.length).toBe(0);
    expect(p.eventsOf('response').every((e) => e.channel === 'http')).toBe(true);
    expect(p.serverLog.map((r) => r.request.target)).toEqual(['/1', '/2', '/3', '/h']);
    expect(getHeader(p.serverLog[0].request.headers, 'host')).toBe('10.0.0.1:8080');
    expect(p.actions.filter((a) => a.action.type === 'connect')).toHaveLength(1);
    expect(p.actions.filter((a) => a.action.type === 'expect-id')).toHaveLength(0);
    // serialized: the server never saw a request before the previous answer left
    const times = p.serverLog.map((r) => r.atMs);
    expect(times).toEqual([20, 40, 60, 80]);
  });

  test('Connection: close -> the next request reconnects', () => {
    const p = new Pipe({ handler: () => ({ kind: 'respond', response: ok('x', [['Connection', 'close']]) }) });
    const a = p.request('/1', { scheme: 'http' });
    const b = p.request('/2', { scheme: 'http' });
    p.run();
    expect([bodyText(p, a), bodyText(p, b)]).toEqual(['x', 'x']);
    expect(p.actions.filter((x) => x.action.type === 'connect')).toHaveLength(2);
  });

  test('an idempotent request is retried once when the connection closes before any response byte', () => {
    let closes = 1;
    const p = new Pipe({ handler: () => (closes-- > 0 ? { kind: 'close' } : { kind: 'respond', response: ok('second try') }) });
    const id = p.request('/r', { scheme: 'http' });
    p.run();
    expect(bodyText(p, id)).toBe('second try');
    expect(p.serverLog).toHaveLength(2);
  });

  test('... but only once', () => {
    const p = new Pipe({ handler: () => ({ kind: 'close' }) });
    const id = p.request('/r', { scheme: 'http' });
    p.run();
    expect(p.eventsOf('request-failed')[0]).toMatchObject({ requestId: id });
    expect(p.serverLog).toHaveLength(2);
  });

  test('a request that never gets an answer fails with DHTTP_ERR_TIMEOUT after tcpTimeoutMs and frees the queue', () => {
    let first = true;
    const p = new Pipe({
      client: { tcpTimeoutMs: 5000 },
      handler: () => {
        if (first) {
          first = false;
          return { kind: 'silent' };
        }
        return { kind: 'respond', response: ok('next') };
      },
    });
    const a = p.request('/stuck', { scheme: 'http' });
    const b = p.request('/next', { scheme: 'http' });
    p.run();
    expect(p.eventsOf('request-failed')[0]).toMatchObject({ requestId: a });
    expect(p.eventsOf('request-failed')[0].error.code).toBe('DHTTP_ERR_TIMEOUT');
    expect(bodyText(p, b)).toBe('next');
  });
});

test('cancel: no event follows, the ID is forgotten, a late answer is dropped', () => {
  const p = new Pipe({ latencyMs: 100 });
  const id = p.request('/a');
  expect(p.client.cancel(id, 10)).toBe(true);
  expect(p.client.cancel(id, 10)).toBe(false);
  p.run();
  expect(p.eventsOf('response')).toHaveLength(0);
  expect(p.expected.size).toBe(0);
  expect(p.eventsOf('dropped')[0]).toMatchObject({ reason: 'duplicate', requestId: id });
});

test('request() refuses other schemes with a named error', () => {
  const client = new DhttpClient({ udpPort: 40000, tcpPort: 40001 });
  expect(() => client.request({ url: 'ftp://x/' }, 0)).toThrow(expect.objectContaining({ code: 'DHTTP_ERR_BAD_SCHEME' }));
});

test('the default CSPRNG is globalThis.crypto', () => {
  const client = new DhttpClient({ udpPort: 40000, tcpPort: 40001 });
  const id = client.request({ url: 'dhttp://127.0.0.1:9/' }, 0);
  expect(id).toMatch(/^[89a-f][0-9a-f]{15}$/);
});

test.each([1, 2, 3])('1000 concurrent requests under loss, duplication and reordering each get their own body (seed %i)', (seed) => {
  const bodyFor = (path: string): Uint8Array => {
    const n = Number(path.slice(1));
    const size = n % 10 === 0 ? 3000 + n : 20 + (n % 300);
    return te.encode(`${path};`.padEnd(size, String.fromCharCode(97 + (n % 26))));
  };
  const p = new Pipe({
    seed,
    loss: 0.05,
    duplicate: 0.05,
    jitterMs: 30,
    client: { initialTimeoutMs: 200, maxResends: 8 },
    handler: (r) => ({ kind: 'respond', response: ok(bodyFor(r.request.target)) }),
  });
  knownOrigin(p);
  const ids = new Map<string, string>();
  for (let i = 0; i < 1000; i++) ids.set(p.client.request({ url: p.url(`/${i}`) }, p.now), `/${i}`);
  p.pump();
  p.run();
  const res = p.eventsOf('response');
  expect(res).toHaveLength(1000);
  expect(new Set(res.map((r) => r.requestId)).size).toBe(1000);
  for (const r of res) expect(r.response.body).toEqual(bodyFor(ids.get(r.requestId) as string));
  expect(p.eventsOf('request-failed')).toHaveLength(0);
  expect(new Set(res.map((r) => r.channel))).toEqual(new Set(['udp', 'tcp']));
  expect(p.expected.size).toBe(0);
  expect(p.client.outstanding).toBe(0);
});

test('a DHTTP TCP connection answered in plain HTTP falls back (reason http-answer)', () => {
  const client = new DhttpClient({ udpPort: 40000, tcpPort: 40001, randomBytes: (n) => new Uint8Array(n).fill(7) });
  const id = client.request({ url: 'dhttpt://10.0.0.1:8080/x' }, 0);
  const drain = (): unknown[] => {
    const out: unknown[] = [];
    for (let a = client.nextAction(); a; a = client.nextAction()) out.push(a);
    return out;
  };
  expect(drain()).toContainEqual({ type: 'connect', conn: 1, to: { host: '10.0.0.1', port: 8080 } });
  client.tcpOpened(1, 10);
  drain();
  client.receiveTcp(1, te.encode('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n'), 20);
  const actions = drain();
  expect(actions).toContainEqual({ type: 'close-tcp', conn: 1 });
  expect(actions).toContainEqual({ type: 'connect', conn: 2, to: { host: '10.0.0.1', port: 8080 } });
  const events = [];
  for (let e = client.nextEvent(); e; e = client.nextEvent()) events.push(e);
  expect(events).toContainEqual({ type: 'fallback', requestId: id, reason: 'http-answer' });
  client.tcpOpened(2, 30);
  const sent = drain().find((a) => (a as { type: string }).type === 'send-tcp') as { data: Uint8Array };
  expect(td.decode(sent.data)).toMatch(/^GET \/x HTTP\/1\.1\r\nHost: 10\.0\.0\.1:8080\r\n/);
  client.receiveTcp(2, serializeResponse(ok('plain')), 40);
  const res = client.nextEvent();
  expect(res).toMatchObject({ type: 'response', requestId: id, channel: 'http' });
});

test('property: hostile datagrams and inbound TCP bytes never throw and never complete a request', () => {
  fc.assert(
    fc.property(fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 10 }), (chunks) => {
      const p = new Pipe({ handler: () => ({ kind: 'silent' }) });
      p.request('/a');
      for (const c of chunks) p.inject(c);
      const key = p.client.inboundConnection({ address: '10.0.0.1', port: 50000 }, 0);
      for (const c of chunks) p.client.receiveTcp(key, c, 0);
      p.client.tcpClosed(key, null, 0);
      p.pump();
      expect(p.eventsOf('response')).toHaveLength(0);
      expect(p.client.outstanding).toBe(1);
    }),
    { numRuns: 500 },
  );
});

describe('the request phase machine (TRANSITIONS in protocol/dhttp/client.ts)', () => {
  const answer = (status: number, headers: [string, string][], body = ''): Uint8Array =>
    serializeResponse({ status, reason: status === 421 ? 'Misdirected Request' : 'OK', headers, body: te.encode(body) });
  /** Well-formed answers a server (honest, confused or hostile) may send for a request, in any order, on any channel. */
  const kinds = [
    () => answer(421, [['DHTTP-Retry', 'token'], ['Catp-Token', '1.abc.AAAAAAAAAAAAAAAAAAAAAA']]),
    () => answer(421, [['DHTTP-Retry', 'tcp']]),
    () => answer(200, [['DTD-Announce', 'held;length=5'], ['Repr-Digest', 'sha-256=:n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=:']]),
    () => answer(200, [['DTD-Announce', 'sending;length=5'], ['Repr-Digest', 'sha-256=:n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=:']]),
    () => answer(200, [], 'hello'),
  ];
  const step = fc.oneof(
    fc.record({ op: fc.constant('udp' as const), kind: fc.nat(kinds.length - 1) }),
    fc.record({ op: fc.constant('inbound' as const), kind: fc.nat(kinds.length - 1), cut: fc.boolean() }),
    fc.record({ op: fc.constant('frame' as const) }),
    fc.record({ op: fc.constant('timer' as const) }),
    fc.record({ op: fc.constant('icmp' as const) }),
    fc.record({ op: fc.constant('close-ours' as const) }),
    fc.record({ op: fc.constant('decide' as const), proceed: fc.boolean() }),
    fc.record({ op: fc.constant('cancel' as const) }),
  );

  test('property: no sequence of answers, closes, timers and decisions makes a move the table does not list, and a request ends at most once', () => {
    fc.assert(
      fc.property(fc.constantFrom('dtd', 'streamed', 'plain'), fc.array(step, { maxLength: 25 }), (flavour, steps) => {
        const c = new DhttpClient({ udpPort: 40000, tcpPort: 40001, randomBytes: (n) => new Uint8Array(n).fill(7), catp: { sha256 } });
        let now = 0;
        const id = c.request({ url: 'dhttp://10.0.0.1:8080/a', ...(flavour === 'dtd' ? { dtd: true } : flavour === 'streamed' ? { stream: { mode: 'catp' as const } } : {}) }, now);
        const ours = new Set<number>();
        const ends: string[] = [];
        const drain = () => {
          for (let a = c.nextAction(); a; a = c.nextAction()) {
            if (a.type === 'connect') {
              ours.add(a.conn);
              c.tcpOpened(a.conn, now);
            }
          }
          for (let e = c.nextEvent(); e; e = c.nextEvent()) if (e.type === 'response' || e.type === 'request-failed') ends.push(e.type);
        };
        drain();
        for (const s of steps) {
          now += 50;
          switch (s.op) {
            case 'udp':
              c.receiveDatagram(encodeResponse(hexToId(id), kinds[s.kind]()), { address: '10.0.0.1', port: 8080 }, now);
              break;
            case 'inbound': {
              const bytes = encodeResponse(hexToId(id), kinds[s.kind]());
              const key = c.inboundConnection({ address: '10.0.0.1', port: 50000 }, now);
              c.receiveTcp(key, s.cut ? bytes.subarray(0, bytes.length >> 1) : bytes, now);
              if (s.cut) c.tcpClosed(key, null, now);
              break;
            }
            case 'frame': {
              const f = new Uint8Array(40);
              f.set(hexToId(id), 0);
              f[8] = 0x01;
              c.receiveDatagram(f, { address: '10.0.0.1', port: 8080 }, now);
              break;
            }
            case 'timer':
              now = Math.max(now, c.nextTimerAt() ?? now);
              c.handleTimer(now);
              break;
            case 'icmp':
              c.receiveIcmpUnreachable({ address: '10.0.0.1', port: 8080 }, now);
              break;
            case 'close-ours':
              for (const k of ours) c.tcpClosed(k, null, now);
              ours.clear();
              break;
            case 'decide':
              c.dtdDecide(id, s.proceed ? 'proceed' : 'dont-bother', now);
              break;
            case 'cancel':
              c.cancel(id, now);
              break;
          }
          drain();
        }
        expect(ends.length).toBeLessThanOrEqual(1);
        if (ends.length === 1) expect(c.outstanding).toBe(0);
      }),
      { numRuns: 1500 },
    );
  });

  test('a request asks for a stream or for DTD, not both', () => {
    const c = new DhttpClient({ udpPort: 1, tcpPort: 2 });
    expect(() => c.request({ url: 'dhttp://10.0.0.1:8080/a', stream: { mode: 'catp' }, dtd: true }, 0)).toThrow(expect.objectContaining({ code: 'DHTTP_ERR_BAD_OPTIONS' }));
  });

  test('421 Dhttp-Retry: tcp moves a UDP request to TCP; later, over UDP it is a duplicate, over TCP the answer', () => {
    const c = new DhttpClient({ udpPort: 40000, tcpPort: 40001 });
    const id = c.request({ url: 'dhttp://10.0.0.1:8080/a' }, 0);
    const retry = encodeResponse(hexToId(id), answer(421, [['DHTTP-Retry', 'tcp']]));
    c.receiveDatagram(retry, { address: '10.0.0.1', port: 8080 }, 10);
    const actions: string[] = [];
    let conn = -1;
    for (let a = c.nextAction(); a; a = c.nextAction()) {
      actions.push(a.type);
      if (a.type === 'connect') conn = a.conn;
    }
    expect(actions).toContain('connect');
    c.receiveDatagram(retry, { address: '10.0.0.1', port: 8080 }, 20);
    const late = [];
    for (let e = c.nextEvent(); e; e = c.nextEvent()) late.push(e);
    expect(late.at(-1)).toEqual({ type: 'dropped', channel: 'udp', reason: 'duplicate-retry', requestId: id });
    c.tcpOpened(conn, 30);
    c.receiveTcp(conn, retry, 40);
    const events = [];
    for (let e = c.nextEvent(); e; e = c.nextEvent()) events.push(e);
    expect(events).toEqual([expect.objectContaining({ type: 'response', requestId: id, channel: 'tcp', response: expect.objectContaining({ status: 421 }) })]);
  });
});
