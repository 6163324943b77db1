import fc from 'fast-check';

import { isProtocolError } from '../../../protocol/errors';
import { serializeRequest, serializeResponse, type HttpResponse } from '../../../protocol/dhttp/http1';
import { DhttpRequestStream, DhttpResponseStream } from '../../../protocol/dhttp/stream';
import { encodeRequest, encodeResponse, idToHex } from '../../../protocol/dhttp/wire';

const te = new TextEncoder();
const td = new TextDecoder();
const id = (n: number): Uint8Array => Uint8Array.from([0x80 | n, n, 0, 0, 0, 0, 0, n]);
const ok = (s: string): HttpResponse => ({ status: 200, reason: 'OK', headers: [], body: te.encode(s) });

function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (isProtocolError(e)) return e.code;
    throw e;
  }
  return 'no error';
}

test('response stream splits ID | response messages, whatever the chunking', () => {
  const msgs = [encodeResponse(id(1), serializeResponse(ok('one'))), encodeResponse(id(2), serializeResponse(ok('two!')))];
  const all = Uint8Array.from([...msgs[0], ...msgs[1]]);
  for (let step = 1; step <= all.length; step++) {
    const s = new DhttpResponseStream();
    const got: string[] = [];
    for (let off = 0; off < all.length; off += step) {
      s.push(all.subarray(off, off + step));
      for (let m = s.next(); m; m = s.next()) got.push(`${idToHex(m.id)}:${td.decode(m.response.body)}`);
    }
    expect(got).toEqual([`${idToHex(id(1))}:one`, `${idToHex(id(2))}:two!`]);
    expect(s.bytesConsumed).toBe(all.length);
  }
});

test('chunked responses are accepted, HEAD answers are bodiless via methodOf', () => {
  const chunked = te.encode('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n');
  const head = serializeResponse(ok('12345'), { head: true });
  const s = new DhttpResponseStream({ methodOf: (i) => (i[0] === (0x80 | 2) ? 'HEAD' : 'GET') });
  s.push(Uint8Array.from([...encodeResponse(id(1), chunked), ...encodeResponse(id(2), head), ...encodeResponse(id(3), serializeResponse(ok('z')))]));
  expect([s.next(), s.next(), s.next()].map((m) => td.decode(m?.response.body))).toEqual(['hi', '', 'z']);
});

test.each([
  ['top bit clear', 'DHTTP_ERR_BAD_ID', Uint8Array.from([1, 0, 0, 0, 0, 0, 0, 0, ...te.encode('HTTP/1.1 200 OK\r\n\r\n')])],
  ['plain HTTP instead of an ID', 'DHTTP_ERR_BAD_ID', te.encode('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n')],
  ['close-delimited', 'HTTP_ERR_UNFRAMED', encodeResponse(id(1), te.encode('HTTP/1.1 200 OK\r\n\r\nrest'))],
  ['interim 1xx', 'HTTP_ERR_INTERIM', encodeResponse(id(1), te.encode('HTTP/1.1 100 Continue\r\n\r\n'))],
])('response stream: %s -> %s', (_name, code, bytes) => {
  const s = new DhttpResponseStream();
  s.push(bytes);
  expect(codeOf(() => s.next())).toBe(code);
  expect(s.failure?.code).toBe(code);
});

test('response stream: methodOf returning null poisons as soon as the ID arrives', () => {
  const s = new DhttpResponseStream({ methodOf: () => null });
  s.push(id(9));
  expect(codeOf(() => s.next())).toBe('DHTTP_ERR_UNKNOWN_ID');
});

test('response stream: truncation at end()', () => {
  const s = new DhttpResponseStream();
  s.push(encodeResponse(id(1), serializeResponse(ok('hello'))).subarray(0, 30));
  s.end();
  expect(codeOf(() => s.next())).toBe('HTTP_ERR_TRUNCATED');
});

test('end() right after a message\'s prefix is a truncation, not a clean end (fuzz s58)', () => {
  // The prefix leaves the buffer when it is read, so `idle` held while the rest of the message was still to come.
  const res = new DhttpResponseStream();
  res.push(id(1));
  expect(res.idle).toBe(false);
  res.end();
  expect(codeOf(() => res.next())).toBe('HTTP_ERR_TRUNCATED');
  const req = new DhttpRequestStream();
  req.push(encodeRequest({ id: id(2), otherPort: 40001, resend: false, http: new Uint8Array(0) }));
  expect(req.idle).toBe(false);
  req.end();
  expect(codeOf(() => req.next())).toBe('HTTP_ERR_TRUNCATED');
  // between whole messages the stream is idle and ends cleanly
  const whole = new DhttpResponseStream();
  whole.push(encodeResponse(id(3), serializeResponse(ok('x'))));
  expect(whole.idle).toBe(true);
  whole.end();
  expect(td.decode(whole.next()?.response.body)).toBe('x');
  expect(whole.next()).toBeNull();
});

test('request stream: ID | port | flags | request messages', () => {
  const http = serializeRequest({ method: 'POST', target: '/p', headers: [['Host', 'h']], body: te.encode('data') });
  const s = new DhttpRequestStream();
  s.push(encodeRequest({ id: id(1), otherPort: 40000, resend: false, http }));
  s.push(encodeRequest({ id: id(2), otherPort: 40000, resend: true, http }));
  const a = s.next();
  const b = s.next();
  expect(a).toMatchObject({ otherPort: 40000, resend: false, request: { method: 'POST', target: '/p' } });
  expect(td.decode(a!.request.body)).toBe('data');
  expect(b?.resend).toBe(true);
  expect(idToHex(b!.id)).toBe(idToHex(id(2)));
});

test.each([
  ['low port', 'DHTTP_ERR_BAD_PORT', Uint8Array.from([0x81, 0, 0, 0, 0, 0, 0, 0, 0, 80, 0])],
  ['bad flags', 'DHTTP_ERR_BAD_FLAGS', Uint8Array.from([0x81, 0, 0, 0, 0, 0, 0, 0, 0x9c, 0x40, 4])],
  ['bad id', 'DHTTP_ERR_BAD_ID', te.encode('GET / HTTP/1.1\r\n')],
])('request stream: %s -> %s', (_name, code, bytes) => {
  const s = new DhttpRequestStream();
  s.push(bytes);
  expect(codeOf(() => s.next())).toBe(code);
});

test('buffering is bounded: an endless header section fails instead of growing', () => {
  const s = new DhttpResponseStream();
  s.push(id(1));
  const junk = te.encode('X'.repeat(1024));
  for (let i = 0; i < 100; i++) s.push(junk);
  expect(codeOf(() => s.next())).toBe('HTTP_ERR_HEADER_TOO_LARGE');
  expect(s.bufferedBytes).toBeLessThan(20 * 1024);
});

test('property: hostile bytes never throw anything but our errors', () => {
  const valid = Uint8Array.from([...encodeResponse(id(1), serializeResponse(ok('abc'))), ...encodeRequest({ id: id(2), otherPort: 5000, resend: false, http: serializeRequest({ method: 'GET', target: '/', headers: [['Host', 'h']], body: new Uint8Array() }) })]);
  const arb = fc.oneof(
    fc.uint8Array({ maxLength: 300 }),
    fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 5 }).map((edits) => {
      const b = valid.slice();
      for (const [pos, v] of edits) b[pos % b.length] = v;
      return b;
    }),
  );
  fc.assert(
    fc.property(arb, fc.integer({ min: 1, max: 40 }), (bytes, step) => {
      for (const s of [new DhttpResponseStream(), new DhttpRequestStream()]) {
        try {
          for (let off = 0; off < bytes.length; off += step) {
            s.push(bytes.subarray(off, off + step));
            while (s.next() !== null);
          }
          s.end();
          while (s.next() !== null);
        } catch (e) {
          expect(isProtocolError(e)).toBe(true);
        }
      }
    }),
    { numRuns: 2000 },
  );
});
