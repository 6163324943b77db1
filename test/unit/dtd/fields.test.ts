// Digest fields and DTD messages: round trips, the RFC examples, and hostile input → named errors.
import fc from 'fast-check';
import { createHash } from 'node:crypto';

import {
  DtdError,
  base64Decode,
  base64Encode,
  encodeDecision,
  formatAnnounce,
  formatDigest,
  formatDtdMode,
  formatReprDigest,
  formatWantReprDigest,
  parseAnnounce,
  parseDecision,
  parseDictionary,
  parseDigest,
  parseDtdMode,
  parseReprDigest,
  parseWantDigest,
  parseWantReprDigest,
  responseDigest,
  wantedDigests,
} from '../../../protocol/dtd';
import { parseRequestDatagram } from '../../../protocol/dhttp';

const sha = (s: string) => new Uint8Array(createHash('sha256').update(s).digest());

test('RFC 9530 examples parse', () => {
  // RFC 9530 appendix: sha-256 of {"hello": "world"}\n
  const d = parseReprDigest('sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:');
  expect(Buffer.from(d.get('sha-256') as Uint8Array).toString('base64')).toBe('X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=');
  expect(parseWantReprDigest('sha-256=1, sha-512=3')).toEqual(new Map([['sha-256', 1], ['sha-512', 3]]));
  const two = parseReprDigest('sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:, sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:');
  expect(two.get('sha-512')?.length).toBe(64);
});

test('round trips: Repr-Digest, Digest, Want-Repr-Digest, DTD-Mode, DTD-Announce', () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (d) => {
      expect(parseReprDigest(formatReprDigest(d)).get('sha-256')).toEqual(d);
      expect(parseDigest(formatDigest(d)).get('sha-256')).toEqual(d);
      const r = responseDigest([['Repr-Digest', formatReprDigest(d)], ['Digest', formatDigest(d)]]);
      expect(r?.sha256).toEqual(d);
      expect(r?.source).toBe('repr-digest');
    }),
  );
  fc.assert(fc.property(fc.uint8Array({ maxLength: 100 }), (b) => expect(base64Decode(base64Encode(b))).toEqual(b)));
  expect(parseWantReprDigest(formatWantReprDigest([['sha-256', 10]]))).toEqual(new Map([['sha-256', 10]]));
  expect(parseDtdMode([['DTD-Mode', formatDtdMode({ mode: 'proceed', autoBelowBytes: 2326 })]])).toEqual({ mode: 'proceed', autoBelowBytes: 2326 });
  expect(parseDtdMode([['DTD-Mode', 'abort']])).toEqual({ mode: 'abort' });
  expect(parseAnnounce([['DTD-Announce', formatAnnounce({ held: true, length: 50000 })]])).toEqual({ held: true, length: 50000 });
  expect(responseDigest([['Digest', `sha-256=${Buffer.from(sha('x')).toString('base64')}`]])?.source).toBe('digest');
  expect(responseDigest([['Content-Type', 'text/plain']])).toBeNull();
});

test('what a request wants', () => {
  expect(wantedDigests([['Want-Repr-Digest', 'sha-256=10']])).toEqual({ repr: true, legacy: false, errors: [] });
  expect(wantedDigests([['Want-Repr-Digest', 'sha-256=0, sha-512=5']]).repr).toBe(false);
  expect(wantedDigests([['Want-Digest', 'SHA-256;q=0.3, MD5;q=0']]).legacy).toBe(true);
  expect(wantedDigests([['Want-Digest', 'MD5']]).legacy).toBe(false);
  expect(wantedDigests([['Want-Repr-Digest', 'sha-256=11']]).errors).toEqual(['DTD_ERR_BAD_WEIGHT']);
});

const code = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(DtdError);
    return (e as DtdError).code;
  }
  return 'no error';
};

test.each([
  ['sha-256=:AAAA:', 'DTD_ERR_DIGEST_LENGTH'],
  ['sha-256=:not base64!:', 'DTD_ERR_BAD_BASE64'],
  ['sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=', 'DTD_ERR_SYNTAX'],
  ['sha-256=12', 'DTD_ERR_SYNTAX'],
  ['SHA-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:', 'DTD_ERR_SYNTAX'],
  ['sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:,', 'DTD_ERR_SYNTAX'],
  ['sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=: x', 'DTD_ERR_SYNTAX'],
  ['a=1,'.repeat(70) + 'b=1', 'DTD_ERR_SYNTAX'],
  ['x'.repeat(5000), 'DTD_ERR_TOO_LONG'],
  ['sha-256=:\u00e9:', 'DTD_ERR_SYNTAX'],
])('hostile Repr-Digest %# → %s', (value, expected) => {
  expect(code(() => parseReprDigest(value))).toBe(expected);
});

test('hostile fields of every kind are refused with named codes', () => {
  expect(code(() => parseDictionary(Array.from({ length: 70 }, (_, i) => `k${i}=1`).join(',')))).toBe('DTD_ERR_TOO_LONG');
  expect(code(() => parseWantReprDigest('sha-256=-1'))).toBe('DTD_ERR_BAD_WEIGHT');
  expect(code(() => parseWantReprDigest('sha-256=1234567890123456'))).toBe('DTD_ERR_SYNTAX');
  expect(code(() => parseWantReprDigest('sha-256="10"'))).toBe('DTD_ERR_SYNTAX');
  expect(code(() => parseWantDigest('SHA-256;q=2'))).toBe('DTD_ERR_BAD_WEIGHT');
  expect(code(() => parseWantDigest('SHA-256;x=1'))).toBe('DTD_ERR_SYNTAX');
  expect(code(() => parseDigest('SHA-256'))).toBe('DTD_ERR_SYNTAX');
  expect(code(() => parseDigest('SHA-256=AAAA'))).toBe('DTD_ERR_DIGEST_LENGTH');
  expect(code(() => parseDigest('SHA-256=*&^%'))).toBe('DTD_ERR_BAD_BASE64');
  expect(code(() => responseDigest([['Repr-Digest', formatReprDigest(sha('a'))], ['Digest', formatDigest(sha('b'))]]))).toBe('DTD_ERR_CONFLICT');
  expect(code(() => parseDtdMode([['DTD-Mode', 'hold']]))).toBe('DTD_ERR_BAD_MODE');
  expect(code(() => parseDtdMode([['DTD-Mode', 'proceed;auto=-5']]))).toBe('DTD_ERR_BAD_MODE');
  expect(code(() => parseDtdMode([['DTD-Mode', 'proceed;auto="x"']]))).toBe('DTD_ERR_BAD_MODE');
  expect(code(() => parseDtdMode([['DTD-Mode', 'abort;auto=5']]))).toBe('DTD_ERR_BAD_MODE');
  expect(code(() => parseDtdMode([['DTD-Mode', 'abort'], ['DTD-Mode', 'abort']]))).toBe('DTD_ERR_BAD_MODE');
  expect(code(() => parseAnnounce([['DTD-Announce', 'held']]))).toBe('DTD_ERR_BAD_ANNOUNCE');
  expect(code(() => parseAnnounce([['DTD-Announce', 'held;length=-1']]))).toBe('DTD_ERR_BAD_ANNOUNCE');
  expect(code(() => parseAnnounce([['DTD-Announce', 'maybe;length=1']]))).toBe('DTD_ERR_BAD_ANNOUNCE');
  expect(code(() => parseAnnounce([['DTD-Announce', '(held);length=1']]))).toBe('DTD_ERR_BAD_ANNOUNCE');
});

test('never anything but a DtdError, whatever the bytes', () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 300 }), (s) => {
      for (const f of [parseReprDigest, parseWantReprDigest, parseDigest, parseWantDigest]) {
        try {
          f(s);
        } catch (e) {
          expect(e).toBeInstanceOf(DtdError);
        }
      }
      for (const f of [parseDtdMode, parseAnnounce]) {
        try {
          f([['DTD-Mode', s], ['DTD-Announce', s]]);
        } catch (e) {
          expect(e).toBeInstanceOf(DtdError);
        }
      }
    }),
    { numRuns: 2000 },
  );
});

test('decision messages: the wire form and hostile variants', () => {
  const bytes = encodeDecision('example.org', 'dont-bother');
  expect(Buffer.from(bytes).toString('latin1')).toBe('DTD * HTTP/1.1\r\nHost: example.org\r\nDTD-Decision: dont-bother\r\n\r\n');
  expect(parseDecision(parseRequestDatagram(bytes))).toBe('dont-bother');
  const req = (text: string) => parseRequestDatagram(new Uint8Array(Buffer.from(text, 'latin1')));
  expect(code(() => parseDecision(req('DTD * HTTP/1.1\r\nHost: h\r\n\r\n')))).toBe('DTD_ERR_BAD_DECISION');
  expect(code(() => parseDecision(req('DTD * HTTP/1.1\r\nHost: h\r\nDTD-Decision: maybe\r\n\r\n')))).toBe('DTD_ERR_BAD_DECISION');
  expect(code(() => parseDecision(req('DTD /x HTTP/1.1\r\nHost: h\r\nDTD-Decision: proceed\r\n\r\n')))).toBe('DTD_ERR_BAD_DECISION');
  expect(code(() => parseDecision(req('DTD * HTTP/1.1\r\nHost: h\r\nDTD-Decision: proceed\r\nDTD-Decision: proceed\r\n\r\n')))).toBe('DTD_ERR_BAD_DECISION');
  expect(code(() => parseDecision(req('DTD * HTTP/1.1\r\nHost: h\r\nDTD-Decision: proceed\r\nContent-Length: 2\r\n\r\nhi')))).toBe('DTD_ERR_BAD_DECISION');
});
