// Streamed requests (RequestInit.stream): the answer may be a run of non-HTTP datagrams (CATP frames), which the
// client loads itself (protocol/catp/stream-load.ts; test/unit/catp/stream-load.test.ts loads whole pages).
import { serializeResponse } from '../../../protocol/dhttp/http1';
import { DhttpClient } from '../../../protocol/dhttp/client';
import type { ClientAction, ClientEvent } from '../../../protocol/dhttp/client-api';
import { decodePadding, decodeRequest, encodePadding, encodeResponse, hexToId, idToHex, isPaddingDatagram, isRequestCopy } from '../../../protocol/dhttp/wire';
import { datagramOverhead, FIRST_CONTACT_STEP_BYTES, MIN_UNPROVEN_REQUEST_BYTES, STREAM_FIRST_CONTACT_WIRE_BYTES, STREAM_REQUEST_BYTES, TOKEN_ANSWER_BYTES } from '../../../protocol/dhttp/address-validation';
import { decodeReport } from '../../../protocol/catp';
import { sha256 } from '../../helpers/catp-util';
import { drainClient as drain } from './helpers/pipe';

const SERVER = { address: '127.0.0.1', port: 8080 };

function frame(idHex: string, seq: number, bytes = 40): Uint8Array {
  const f = new Uint8Array(bytes);
  f.set(hexToId(idHex), 0);
  f[8] = 0xca; // not 'H': a stream datagram, whatever follows
  f[20] = seq;
  return f;
}

function client(): DhttpClient {
  return new DhttpClient({ udpPort: 40000, tcpPort: 40001, initialTimeoutMs: 100, catp: { sha256 } });
}

const STREAM = { mode: 'catp' } as const;

/** Runs the client's timers from `fromMs` for `forMs`; returns every event and every request datagram (not reports) they sent. */
function runTimers(c: DhttpClient, fromMs: number, forMs: number): { events: ClientEvent[]; requests: string[] } {
  const events: ClientEvent[] = [];
  const requests: string[] = [];
  for (let at = c.nextTimerAt(); at !== null && at <= fromMs + forMs; at = c.nextTimerAt()) {
    c.handleTimer(Math.max(at, fromMs));
    const d = drain(c);
    events.push(...d.events);
    for (const a of d.actions) {
      if (a.type !== 'send-datagram' || isPaddingDatagram(a.data) || isRequestCopy(a.data)) continue;
      const http = new TextDecoder().decode(decodeRequest(a.data).http);
      if (/^[A-Z]+ /.test(http)) requests.push(http);
    }
  }
  return { events, requests };
}

test('the first stream datagram stops the resend timer; every one is handed over in order', () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
  const sent = drain(c).actions.find((a) => a.type === 'send-datagram');
  expect(sent).toBeDefined();
  expect(c.nextTimerAt()).toBe(100);
  c.receiveDatagram(frame(id, 0), SERVER, 10);
  c.receiveDatagram(frame(id, 1), SERVER, 11);
  const { events } = drain(c);
  expect(events.map((e) => e.type)).toEqual(['stream-frame', 'stream-frame']);
  expect(events.map((e) => (e as Extract<ClientEvent, { type: 'stream-frame' }>).record.atMs)).toEqual([10, 11]);
  // the stream's own repair drives it now: its report timer, never a resend
  expect(c.nextTimerAt()).not.toBe(100);
  const later = runTimers(c, 11, 10_000);
  expect(later.events.filter((e) => e.type === 'resend')).toHaveLength(0);
  expect(later.requests).toEqual([]);
  expect(c.outstanding).toBe(1);
});

test("the stream's reports go to the request's server; endStream forgets the ID and later frames are dropped", () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', stream: STREAM }, 0);
  drain(c);
  c.receiveDatagram(frame(id, 0), SERVER, 1);
  drain(c);
  c.handleTimer(c.nextTimerAt() as number);
  const reports = drain(c).actions;
  expect(reports.length).toBeGreaterThan(0);
  for (const a of reports) {
    expect(a).toMatchObject({ type: 'send-datagram', to: { host: '127.0.0.1', port: 8080 } });
    expect(decodeReport((a as Extract<ClientAction, { type: 'send-datagram' }>).data).id).toEqual(hexToId(id));
  }
  expect(c.endStream(id)).toBe(true);
  expect(drain(c).actions.map((a) => a.type)).toEqual(['forget-id']);
  expect(c.outstanding).toBe(0);
  expect(c.nextTimerAt()).toBeNull();
  c.receiveDatagram(frame(id, 1), SERVER, 2);
  expect(drain(c).events.map((e) => e.type)).toEqual(['dropped']);
  expect(c.endStream(id)).toBe(false);
});

test('a streamed request answered with an ordinary HTTP response completes as usual', () => {
  const c = client();
  const id = c.request({ url: 'dhttp://127.0.0.1:8080/img.png', stream: STREAM }, 0);
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
  const datagrams = (actions: ClientAction[]) => actions.filter((a): a is Extract<ClientAction, { type: 'send-datagram' }> => a.type === 'send-datagram');
  /** Datagrams that carry a request or a report: not a first contact's padding or request copy. */
  const requestDatagrams = (actions: ClientAction[]) => datagrams(actions).filter((a) => !isPaddingDatagram(a.data) && !isRequestCopy(a.data));
  const sentRequests = (actions: ClientAction[]) =>
    requestDatagrams(actions).map((a) => new TextDecoder().decode(decodeRequest(a.data).http))
      .filter((http) => /^[A-Z]+ /.test(http)); // requests, not the stream's reports

  test('a stream without a token: the request (padded to 160 bytes if shorter), then a padded copy of it and padding up to 4,652 bytes on the wire in quarter datagrams (a resend: padding); not a stream: padded to a full datagram; with a token the request alone', () => {
    const kind = (d: Uint8Array) => (isPaddingDatagram(d) ? 'padding' : isRequestCopy(d) ? 'copy' : 'request');
    const sent = (c: DhttpClient) => datagrams(drain(c).actions).map((a) => a.data);
    const sizes = (c: DhttpClient) => sent(c).map((d) => [d.length, kind(d)]);
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
    const first = sent(c);
    const [request, copy] = first;
    // behind the request, quarter datagrams (the last what is left): the server's budget for the unproven address
    // grows as the uplink carries it; in all 4,652 bytes on the wire (each datagram with its 28 bytes of IPv4 and UDP)
    const wire = (ds: Uint8Array[]) => ds.reduce((n, d) => n + d.length + datagramOverhead('127.0.0.1'), 0);
    expect(first.map(kind)).toEqual(['request', 'copy', ...Array<string>(11).fill('padding')]);
    expect(first.slice(1, -1).every((d) => d.length === FIRST_CONTACT_STEP_BYTES)).toBe(true);
    expect([FIRST_CONTACT_STEP_BYTES, STREAM_FIRST_CONTACT_WIRE_BYTES, wire(first)]).toEqual([365, 4652, 4652]);
    // padded only up to what pays for the token answer, so that it is in soon
    const padded = /Catp-Pad:/.test(new TextDecoder().decode(decodeRequest(request!).http));
    expect(padded ? request!.length === STREAM_REQUEST_BYTES : request!.length > STREAM_REQUEST_BYTES).toBe(true);
    // the copy is the same request (same ID, not a resend), padded further: a server that lost the request answers it
    const a = decodeRequest(request!);
    const b = decodeRequest(copy!);
    expect([b.copy, b.resend, idToHex(b.id)]).toEqual([true, false, id]);
    const strip = (http: Uint8Array) => new TextDecoder().decode(http).replace(/Catp-Pad: x*\r\n/, '');
    expect(strip(b.http)).toBe(strip(a.http));
    // they pay for a 160-byte token answer and three full 1,460-byte frames, each with its IP and UDP headers
    expect(STREAM_REQUEST_BYTES).toBe(160);
    expect(decodePadding(encodePadding(hexToId(id), 40000, 660)).id).toEqual(hexToId(id));
    // no answer: the resend, followed by padding alone (a copy never has the resend bit)
    c.handleTimer(c.nextTimerAt()!);
    const resent = sent(c);
    expect(resent.map(kind)).toEqual(['request', ...Array<string>(12).fill('padding')]);
    expect(wire(resent)).toBe(STREAM_FIRST_CONTACT_WIRE_BYTES);
    expect(decodeRequest(resent[0]!).resend).toBe(true);
    // another request while the stream waits for its token: it pays only for a token answer of its own
    c.request({ url: 'dhttp://127.0.0.1:8080/small.txt' }, 0);
    expect(sizes(c)).toEqual([[TOKEN_ANSWER_BYTES, 'request']]);
    // alone, a request that is not a stream: a full datagram, so any one-datagram answer fits it
    const alone = client();
    alone.request({ url: 'dhttp://127.0.0.1:8080/small.txt' }, 0);
    expect(sizes(alone)).toEqual([[MIN_UNPROVEN_REQUEST_BYTES, 'request']]);
    expect(MIN_UNPROVEN_REQUEST_BYTES).toBe(1460);
    c.receiveDatagram(tokenAnswer(id, '1.abc.AAAAAAAAAAAAAAAAAAAAAA'), SERVER, 5);
    const proof = sent(c);
    expect(proof.map(kind)).toEqual(['request']); // the proof: with the token, no copy, no padding
    // not flagged as a resend, though the request was resent: the server asked for it (a resend counts as a loss
    // there, and a client prefix with losses gets its small answers over TCP)
    expect(decodeRequest(proof[0]!).resend).toBe(false);
    c.request({ url: 'dhttp://127.0.0.1:8080/other.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 6);
    expect(sizes(c).map(([, k]) => k)).toEqual(['request']);
  });

  test('the token answer first (the usual order): the request again with the token; frames then stop the resend timer', () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
    const [first] = sentRequests(drain(c).actions);
    expect(first).toMatch(/Catp-Pad: /); // padded: room for a first flight
    c.receiveDatagram(tokenAnswer(id, '1.abc.AAAAAAAAAAAAAAAAAAAAAA'), SERVER, 5);
    const again = sentRequests(drain(c).actions);
    expect(again).toHaveLength(1);
    expect(again[0]).toMatch(/Catp-Token: 1\.abc\.A{22}/);
    // the first flight and what follows the proof: more than the 4,540 bytes we sent
    for (let k = 0; k < 4; k++) c.receiveDatagram(frame(id, k, 1400), SERVER, 6 + k);
    expect(drain(c).events.map((e) => e.type)).toEqual(['stream-frame', 'stream-frame', 'stream-frame', 'stream-frame']);
    expect(runTimers(c, 10, 5000).requests).toEqual([]); // no resend timer, and no proof again
    expect(c.counters().proofRepeats).toBe(0);
  });

  test('a token answer after the frames (the first was lost, or our proof was): the request again with the token, several times if need be; never TCP, and no resend timer (the proof again with the reports, a bounded number of times)', () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
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
    }
    // no resend timer: the stream's repair drives it, and its reports carry the proof again (the server has sent
    // far less than we did: it may be waiting for it), at most eight times
    const later = runTimers(c, 250, 5000);
    expect(later.events.filter((e) => e.type === 'resend' || e.type === 'retry-over-tcp')).toHaveLength(0);
    expect(later.requests).toHaveLength(8);
    for (const r of later.requests) expect(r).toMatch(/Catp-Token: 1\.abc\.B{22}/);
    expect(c.counters().retriesWithToken).toBe(3);
    expect(c.counters().proofRepeats).toBe(8);
  });

  /** A stream's first contact whose token answer was lost: its first flight (three frames) has come without it. */
  const tokenAnswerLost = () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
    drain(c);
    for (let k = 0; k < 3; k++) c.receiveDatagram(frame(id, k, 1400), SERVER, 90 + 10 * k);
    drain(c);
    return { c, id };
  };

  /** A sub-resource's 200 carrying the origin's token (the server hands one to an unproven address). */
  const okWithToken = (token: string, body = new Uint8Array(0)) =>
    serializeResponse({ status: 200, reason: 'OK', headers: [['Content-Length', String(body.length)], ['Catp-Token', token]], body });

  test("the stream's token answer lost and the token learned from another answer (a sub-resource's): the stream's proof goes at once, once", () => {
    const { c, id } = tokenAnswerLost();
    // the page's image, asked without a token, is answered with one (the server hands a token to an unproven address)
    const img = c.request({ url: 'dhttp://127.0.0.1:8080/logo.png' }, 120);
    expect(sentRequests(drain(c).actions)).toHaveLength(1);
    const withToken = okWithToken('1.abc.CCCCCCCCCCCCCCCCCCCCCC', new Uint8Array([1, 2]));
    c.receiveDatagram(encodeResponse(hexToId(img), withToken), SERVER, 200);
    const { actions, events } = drain(c);
    const sent = requestDatagrams(actions);
    const proofs = sent.filter((a) => idToHex(decodeRequest(a.data).id) === id && /^GET /.test(new TextDecoder().decode(decodeRequest(a.data).http)));
    expect(proofs).toHaveLength(1);
    expect(new TextDecoder().decode(decodeRequest(proofs[0]!.data).http)).toMatch(/Catp-Token: 1\.abc\.C{22}/);
    expect(events.some((e) => e.type === 'response' && e.requestId === img)).toBe(true);
    expect(c.counters().proofsOnToken).toBe(1);
    // a later answer with a token (the same, or a fresh one) proves nothing again: the stream's proof has gone
    const other = c.request({ url: 'dhttp://127.0.0.1:8080/other.png' }, 210);
    drain(c);
    c.receiveDatagram(encodeResponse(hexToId(other), withToken), SERVER, 260);
    expect(sentRequests(drain(c).actions)).toEqual([]);
    expect(c.counters().proofsOnToken).toBe(1);
  });

  test("the stream's token answer lost: the page's sub-resources, asked meanwhile, pay only for a token answer each (not a full datagram apiece on the uplink the stream's reports share), and go again with the token the first 421 brings", () => {
    const { c, id } = tokenAnswerLost();
    const imgs = ['a', 'b', 'c', 'd'].map((n, i) => c.request({ url: `dhttp://127.0.0.1:8080/${n}.png` }, 120 + i));
    const first = datagrams(drain(c).actions);
    expect(first.map((a) => [idToHex(decodeRequest(a.data).id), a.data.length])).toEqual(imgs.map((i) => [i, TOKEN_ANSWER_BYTES]));
    // the server had no budget for the first image's answer: its 421 brings the token; that image goes again with it
    c.receiveDatagram(tokenAnswer(imgs[0]!, '1.abc.DDDDDDDDDDDDDDDDDDDDDD'), SERVER, 200);
    const again = requestDatagrams(drain(c).actions).map((a) => decodeRequest(a.data));
    const byId = new Map(again.map((r) => [idToHex(r.id), new TextDecoder().decode(r.http)]));
    expect(byId.get(imgs[0]!)).toMatch(/Catp-Token: 1\.abc\.D{22}/);
    expect(byId.get(id)).toMatch(/Catp-Token: 1\.abc\.D{22}/); // and the stream's proof, at once
    expect(again.every((r) => !r.resend)).toBe(true);
    // the others' 421s (or their answers) follow; a resend after the token is small too, with the token
    c.receiveDatagram(encodeResponse(hexToId(imgs[1]!), okWithToken('1.abc.DDDDDDDDDDDDDDDDDDDDDD', new Uint8Array([1]))), SERVER, 210);
    c.receiveDatagram(tokenAnswer(imgs[2]!, '1.abc.DDDDDDDDDDDDDDDDDDDDDD'), SERVER, 211);
    const { events } = drain(c);
    expect(events.some((e) => e.type === 'response' && e.requestId === imgs[1])).toBe(true);
    const resent = runTimers(c, 212, 2000).requests.filter((r) => /\.png/.test(r));
    expect(resent.length).toBeGreaterThan(0);
    for (const r of resent) expect(r).toMatch(/Catp-Token: 1\.abc\.D{22}/);
  });

  test('two requests to an origin with no token and no stream: the first pays for any one-datagram answer, the second for a token answer', () => {
    const c = client();
    const a = c.request({ url: 'dhttp://127.0.0.1:8080/a.txt' }, 0);
    const b = c.request({ url: 'dhttp://127.0.0.1:8080/b.txt' }, 0);
    const sent = datagrams(drain(c).actions);
    expect(sent.map((x) => [idToHex(decodeRequest(x.data).id), x.data.length])).toEqual([[a, MIN_UNPROVEN_REQUEST_BYTES], [b, TOKEN_ANSWER_BYTES]]);
    // once the first is answered (with a token), nothing is in flight without one: a later request carries the token
    c.receiveDatagram(encodeResponse(hexToId(a), okWithToken('1.abc.EEEEEEEEEEEEEEEEEEEEEE', new Uint8Array([1]))), SERVER, 50);
    drain(c);
    c.request({ url: 'dhttp://127.0.0.1:8080/c.txt' }, 60);
    expect(sentRequests(drain(c).actions)[0]).toMatch(/Catp-Token: 1\.abc\.E{22}/);
  });

  test('a stream sent with the token never gets a proof from another answer', () => {
    const c = client();
    const img = c.request({ url: 'dhttp://127.0.0.1:8080/logo.png' }, 0);
    drain(c);
    const withToken = okWithToken('1.abc.DDDDDDDDDDDDDDDDDDDDDD');
    c.receiveDatagram(encodeResponse(hexToId(img), withToken), SERVER, 50);
    drain(c);
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 60);
    expect(sentRequests(drain(c).actions)[0]).toMatch(/Catp-Token: 1\.abc\.D{22}/);
    for (let k = 0; k < 3; k++) c.receiveDatagram(frame(id, k, 1400), SERVER, 90 + 10 * k);
    drain(c);
    const again = c.request({ url: 'dhttp://127.0.0.1:8080/x.png' }, 130);
    drain(c);
    c.receiveDatagram(encodeResponse(hexToId(again), withToken), SERVER, 150);
    expect(sentRequests(drain(c).actions)).toEqual([]);
    expect(c.counters().proofsOnToken).toBe(0);
  });

  test('a lost proof goes again with the reports, a first reply apart, until the server has sent more than we did', () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
    drain(c); // 4,540 bytes of first contact, 4,652 on the wire
    c.receiveDatagram(tokenAnswer(id, '1.abc.AAAAAAAAAAAAAAAAAAAAAA'), SERVER, 80); // the first reply: 80 ms
    expect(sentRequests(drain(c).actions)).toHaveLength(1); // the proof (lost, say)
    // the first flight: three frames, what the first contact paid for
    for (let k = 0; k < 3; k++) c.receiveDatagram(frame(id, k, 1400), SERVER, 90 + 30 * k);
    const early = drain(c);
    expect(sentRequests(early.actions)).toEqual([]); // not before the proof has had the first reply's delay to show
    // then nothing comes: the reports run on their timer, and the proof goes with them, 80 ms apart at least
    const times: number[] = [];
    for (let at = c.nextTimerAt(); at !== null && at <= 400; at = c.nextTimerAt()) {
      c.handleTimer(at);
      if (sentRequests(drain(c).actions).length > 0) times.push(at);
    }
    expect(times.length).toBeGreaterThanOrEqual(2);
    expect(times[0]).toBeGreaterThanOrEqual(160);
    for (let i = 1; i < times.length; i++) expect(times[i] - times[i - 1]).toBeGreaterThanOrEqual(80);
    expect(c.counters().proofRepeats).toBe(times.length);
    // the proof got through: the server sends more than we did, and the proof stops
    for (let k = 3; k < 9; k++) c.receiveDatagram(frame(id, k, 1400), SERVER, 401 + k);
    drain(c);
    expect(runTimers(c, 410, 2000).requests).toEqual([]);
    expect(c.counters().proofRepeats).toBe(times.length);
  });

  test("a stream resent before its token answer came (a slow first encode): neither its proof nor the proof's repeats carry the resend flag", () => {
    const c = client();
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
    drain(c);
    c.handleTimer(c.nextTimerAt()!); // the server is still encoding the page: our resend, flagged
    const resend = requestDatagrams(drain(c).actions).map((a) => decodeRequest(a.data));
    expect(resend.map((r) => r.resend)).toEqual([true]);
    c.receiveDatagram(tokenAnswer(id, '1.abc.AAAAAAAAAAAAAAAAAAAAAA'), SERVER, 320);
    for (let k = 0; k < 3; k++) c.receiveDatagram(frame(id, k, 1400), SERVER, 330 + 10 * k);
    const flags: boolean[] = [];
    const collect = (actions: ClientAction[]) => {
      for (const a of requestDatagrams(actions)) {
        const r = decodeRequest(a.data);
        if (/^[A-Z]+ /.test(new TextDecoder().decode(r.http))) flags.push(r.resend);
      }
    };
    collect(drain(c).actions);
    for (let at = c.nextTimerAt(); at !== null && at <= 1500; at = c.nextTimerAt()) {
      c.handleTimer(at);
      collect(drain(c).actions);
    }
    expect(c.counters().proofRepeats).toBeGreaterThanOrEqual(2);
    expect(flags.length).toBe(1 + c.counters().proofRepeats); // the proof, then its repeats
    expect(flags.every((f) => !f)).toBe(true);
  });

  test('a stream proven from its first request (a token held before) never repeats its proof', () => {
    const c = client();
    const first = c.request({ url: 'dhttp://127.0.0.1:8080/page.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 0);
    drain(c);
    c.receiveDatagram(tokenAnswer(first, '1.abc.AAAAAAAAAAAAAAAAAAAAAA'), SERVER, 5);
    drain(c);
    const id = c.request({ url: 'dhttp://127.0.0.1:8080/other.html', headers: [['Catp-Mode', 'catp']], stream: STREAM }, 10);
    drain(c);
    c.receiveDatagram(frame(id, 0, 100), SERVER, 20);
    drain(c);
    const later = runTimers(c, 20, 3000);
    expect(later.requests.filter((r) => r.startsWith('GET /other.html'))).toEqual([]);
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
