import fc from 'fast-check';

import { LocalProtocolError, RemoteProtocolError, isProtocolError } from '../../../protocol/errors';
import {
  FLAG_COPY,
  FLAG_PADDING,
  FLAG_RESEND,
  ID_BYTES,
  MAX_DATAGRAM_PAYLOAD,
  REQUEST_PREFIX_BYTES,
  decodePadding,
  decodeRequest,
  decodeRequestPrefix,
  decodeResponseDatagram,
  encodePadding,
  encodeRequest,
  encodeResponse,
  hexToId,
  idToHex,
  isDhttpStreamStart,
  isPaddingDatagram,
  isRequestCopy,
  newRequestId,
} from '../../../protocol/dhttp/wire';

const te = new TextEncoder();
const ID = Uint8Array.from([0x81, 2, 3, 4, 5, 6, 7, 8]);
const HTTP = te.encode('GET / HTTP/1.1\r\nHost: a\r\n\r\n');

function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (e instanceof RemoteProtocolError || e instanceof LocalProtocolError) return e.code;
    throw e;
  }
  return 'no error';
}

test('constants', () => {
  expect([ID_BYTES, REQUEST_PREFIX_BYTES, MAX_DATAGRAM_PAYLOAD, FLAG_RESEND]).toEqual([8, 11, 1460, 1]);
});

test('request layout: ID | port (big-endian) | flags | HTTP', () => {
  const bytes = encodeRequest({ id: ID, otherPort: 0x1234, resend: true, http: HTTP });
  expect(Array.from(bytes.subarray(0, 11))).toEqual([0x81, 2, 3, 4, 5, 6, 7, 8, 0x12, 0x34, 1]);
  expect(bytes.subarray(11)).toEqual(HTTP);
  const back = decodeRequest(bytes);
  expect(back).toEqual({ id: ID, otherPort: 0x1234, resend: true, copy: false, http: HTTP });
  expect(decodeRequest(encodeRequest({ id: ID, otherPort: 50000, resend: false, http: HTTP })).resend).toBe(false);
});

test('response layout: ID | HTTP', () => {
  const bytes = encodeResponse(ID, HTTP);
  expect(bytes.subarray(0, 8)).toEqual(ID);
  expect(decodeResponseDatagram(bytes)).toEqual({ id: ID, http: HTTP });
});

test('ids: hex round trip, top bit forced, stream sniffing', () => {
  expect(idToHex(ID)).toBe('8102030405060708');
  expect(hexToId('8102030405060708')).toEqual(ID);
  const id = newRequestId((n) => new Uint8Array(n)); // all zero from the "CSPRNG"
  expect(id[0]).toBe(0x80);
  expect(Array.from(id.subarray(1))).toEqual([0, 0, 0, 0, 0, 0, 0]);
  expect(isDhttpStreamStart(0x80)).toBe(true);
  expect(isDhttpStreamStart('G'.charCodeAt(0))).toBe(false);
  expect(codeOf(() => hexToId('xyz'))).toBe('DHTTP_ERR_BAD_ID');
  expect(codeOf(() => newRequestId(() => new Uint8Array(3)))).toBe('DHTTP_ERR_RANDOM');
});

const req = (id: number[], port: number, flags: number, http: Uint8Array = HTTP): Uint8Array =>
  Uint8Array.from([...id, port >> 8, port & 255, flags, ...http]);

test.each([
  ['empty', 'DHTTP_ERR_SHORT', new Uint8Array(0)],
  ['prefix only', 'DHTTP_ERR_SHORT', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 0, new Uint8Array(0))],
  ['10 bytes', 'DHTTP_ERR_SHORT', new Uint8Array(10).fill(0x90)],
  ['top bit clear', 'DHTTP_ERR_BAD_ID', req([1, 2, 3, 4, 5, 6, 7, 8], 5000, 0)],
  ['port 0', 'DHTTP_ERR_BAD_PORT', req([0x81, 2, 3, 4, 5, 6, 7, 8], 0, 0)],
  ['port 23', 'DHTTP_ERR_BAD_PORT', req([0x81, 2, 3, 4, 5, 6, 7, 8], 23, 0)],
  ['port 1023', 'DHTTP_ERR_BAD_PORT', req([0x81, 2, 3, 4, 5, 6, 7, 8], 1023, 0)],
  ['flag bit 1', 'DHTTP_ERR_BAD_FLAGS', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 2)],
  ['flags 0xff', 'DHTTP_ERR_BAD_FLAGS', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 0xff)],
  ['oversized', 'DHTTP_ERR_TOO_LARGE', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 0, new Uint8Array(1450))],
])('decodeRequest refuses %s with %s', (_name, code, bytes) => {
  expect(codeOf(() => decodeRequest(bytes))).toBe(code);
});

test.each([
  ['empty', 'DHTTP_ERR_SHORT', new Uint8Array(0)],
  ['id only', 'DHTTP_ERR_SHORT', Uint8Array.from(ID)],
  ['top bit clear', 'DHTTP_ERR_BAD_ID', Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8, 72])],
  ['oversized', 'DHTTP_ERR_TOO_LARGE', new Uint8Array(1461).fill(0x90)],
])('decodeResponseDatagram refuses %s with %s', (_name, code, bytes) => {
  expect(codeOf(() => decodeResponseDatagram(bytes))).toBe(code);
});

test.each([
  ['empty', 'DHTTP_ERR_SHORT', new Uint8Array(0)],
  ['prefix only', 'DHTTP_ERR_SHORT', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 2, new Uint8Array(0))],
  ['resend flag', 'DHTTP_ERR_BAD_FLAGS', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 1, new Uint8Array(100))],
  ['padding and resend flags', 'DHTTP_ERR_BAD_FLAGS', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 3, new Uint8Array(100))],
  ['top bit clear', 'DHTTP_ERR_BAD_ID', req([1, 2, 3, 4, 5, 6, 7, 8], 5000, 2, new Uint8Array(100))],
  ['port 1023', 'DHTTP_ERR_BAD_PORT', req([0x81, 2, 3, 4, 5, 6, 7, 8], 1023, 2, new Uint8Array(100))],
  ['a byte not zero', 'DHTTP_ERR_BAD_PADDING', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 2, Uint8Array.from([0, 0, 0, 1]))],
  ['an HTTP request behind the flag', 'DHTTP_ERR_BAD_PADDING', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 2)],
  ['oversized', 'DHTTP_ERR_TOO_LARGE', req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, 2, new Uint8Array(1450))],
])('decodePadding refuses %s with %s', (_name, code, bytes) => {
  expect(codeOf(() => decodePadding(bytes))).toBe(code);
});

test('a padding datagram: zeros behind the prefix, flags 2; told from a request, refused as one', () => {
  const p = encodePadding(ID, 5000, 660);
  expect(p.length).toBe(660);
  expect(isPaddingDatagram(p)).toBe(true);
  expect(decodePadding(p)).toEqual({ id: ID });
  expect(codeOf(() => decodeRequest(p))).toBe('DHTTP_ERR_BAD_FLAGS'); // a server that predates it refuses it (and counts its bytes)
  expect(isPaddingDatagram(encodeRequest({ id: ID, otherPort: 5000, resend: true, http: HTTP }))).toBe(false);
  expect(() => encodePadding(ID, 5000, 11)).toThrow(LocalProtocolError);
  expect(() => encodePadding(ID, 5000, 1461)).toThrow(LocalProtocolError);
  expect(() => encodePadding(new Uint8Array(8), 5000, 100)).toThrow(LocalProtocolError);
  expect(() => encodePadding(ID, 80, 100)).toThrow(LocalProtocolError);
});

test("a first contact's copy of its request: flags 4, decoded as the request it copies; never a resend, never over TCP", () => {
  const c = encodeRequest({ id: ID, otherPort: 5000, resend: false, copy: true, http: HTTP });
  expect(c[REQUEST_PREFIX_BYTES - 1]).toBe(FLAG_COPY);
  expect(isRequestCopy(c)).toBe(true);
  expect(isPaddingDatagram(c)).toBe(false);
  expect(decodeRequest(c)).toEqual({ id: ID, otherPort: 5000, resend: false, copy: true, http: HTTP });
  expect(isRequestCopy(encodeRequest({ id: ID, otherPort: 5000, resend: false, http: HTTP }))).toBe(false);
  expect(isRequestCopy(encodePadding(ID, 5000, 660))).toBe(false);
  expect(() => encodeRequest({ id: ID, otherPort: 5000, resend: true, copy: true, http: HTTP })).toThrow(LocalProtocolError);
  expect(codeOf(() => decodeRequest(req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, FLAG_COPY | FLAG_RESEND)))).toBe('DHTTP_ERR_BAD_FLAGS');
  expect(codeOf(() => decodeRequest(req([0x81, 2, 3, 4, 5, 6, 7, 8], 5000, FLAG_COPY | FLAG_PADDING)))).toBe('DHTTP_ERR_BAD_FLAGS');
  expect(codeOf(() => decodeRequestPrefix(c))).toBe('DHTTP_ERR_BAD_FLAGS'); // the TCP request stream's prefix
  expect(decodeRequestPrefix(c, true).copy).toBe(true);
});

test('encoders refuse our own mistakes with LocalProtocolError', () => {
  expect(() => encodeRequest({ id: new Uint8Array(8), otherPort: 5000, resend: false, http: HTTP })).toThrow(LocalProtocolError);
  expect(() => encodeRequest({ id: ID, otherPort: 80, resend: false, http: HTTP })).toThrow(LocalProtocolError);
  expect(() => encodeRequest({ id: ID, otherPort: 70000, resend: false, http: HTTP })).toThrow(LocalProtocolError);
  expect(() => encodeResponse(new Uint8Array(7), HTTP)).toThrow(LocalProtocolError);
});

const arbId = fc.uint8Array({ minLength: 8, maxLength: 8 }).map((b) => {
  b[0] |= 0x80;
  return b;
});

test('property: request encode/decode round trip', () => {
  fc.assert(
    fc.property(arbId, fc.integer({ min: 1024, max: 65535 }), fc.constantFrom('fresh', 'resend', 'copy'), fc.uint8Array({ minLength: 1, maxLength: 1449 }), (id, otherPort, kind, http) => {
      const msg = { id, otherPort, resend: kind === 'resend', copy: kind === 'copy', http };
      expect(decodeRequest(encodeRequest(msg))).toEqual(msg);
    }),
  );
});

test('property: response encode/decode round trip', () => {
  fc.assert(
    fc.property(arbId, fc.uint8Array({ minLength: 1, maxLength: 1452 }), (id, http) => {
      expect(decodeResponseDatagram(encodeResponse(id, http))).toEqual({ id, http });
    }),
  );
});

test('property: hostile datagrams throw only our errors', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 1600 }), (bytes) => {
      for (const f of [decodeRequest, decodeResponseDatagram]) {
        try {
          f(bytes);
        } catch (e) {
          expect(isProtocolError(e)).toBe(true);
        }
      }
    }),
    { numRuns: 2000 },
  );
});
