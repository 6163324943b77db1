// Address validation's parts (protocol/dhttp/address-validation.ts): HMAC against Node's, tokens bound to an
// address and a time, the budget per address (no more than it sent).
import { createHash, createHmac, randomBytes } from 'node:crypto';

import fc from 'fast-check';

import { AddressTokens, AmplificationBudget, canonicalAddress, datagramOverhead, hmacSha256 } from '../../../protocol/dhttp/address-validation';

const sha256 = (b: Uint8Array) => new Uint8Array(createHash('sha256').update(b).digest());

test('hmacSha256 is RFC 2104 HMAC-SHA256 (checked against Node for random keys and messages)', () => {
  fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), fc.uint8Array({ maxLength: 300 }), (key, msg) => {
    expect(Buffer.from(hmacSha256(sha256, key, msg)).toString('hex')).toBe(createHmac('sha256', key).update(msg).digest('hex'));
  }));
});

describe('tokens', () => {
  const key = randomBytes(32);
  const tokens = new AddressTokens({ key, sha256, bucketMs: 1000 });

  test('good for the address it was issued to, in its bucket and the next; not elsewhere, not later', () => {
    const t = tokens.issue('192.0.2.1', 5500);
    expect(t).toMatch(/^1\.[0-9a-z]+\.[A-Za-z0-9_-]{22}$/);
    expect(tokens.check(t, '192.0.2.1', 5500)).toBe(true);
    expect(tokens.check(t, '::ffff:192.0.2.1', 6999)).toBe(true); // the mapped form is the same address
    expect(tokens.check(t, '192.0.2.1', 7000)).toBe(false); // two buckets on
    expect(tokens.check(t, '192.0.2.1', 4999)).toBe(false); // from the future
    expect(tokens.check(t, '192.0.2.2', 5500)).toBe(false);
    expect(new AddressTokens({ key: randomBytes(32), sha256, bucketMs: 1000 }).check(t, '192.0.2.1', 5500)).toBe(false); // another server
  });

  test('malformed or tampered tokens are refused, never thrown on', () => {
    const t = tokens.issue('2001:db8::1', 0);
    const flip = t.slice(0, -1) + (t.endsWith('A') ? 'B' : 'A');
    for (const bad of [flip, '', '1', '1..', `2${t.slice(1)}`, `${t}x`, t.replace('.', '..'), 'x'.repeat(10_000), '1.zzzzzzzzzzzzz.AAAAAAAAAAAAAAAAAAAAAA']) {
      expect(tokens.check(bad, '2001:db8::1', 0)).toBe(false);
    }
    expect(tokens.check(t, '2001:DB8::1', 0)).toBe(true);
    expect(() => new AddressTokens({ key: new Uint8Array(8), sha256 })).toThrow(RangeError);
  });
});

describe('the budget: no more than the address sent, on the wire', () => {
  test('an unproven address gets at most what it sent, each datagram with its IP and UDP headers (an IPv4-mapped address is the same address)', () => {
    const b = new AmplificationBudget();
    expect(b.allows('198.51.100.7', 1)).toBe(false); // nothing received
    b.received('198.51.100.7', 1200); // 1,228 on the wire
    expect(b.remaining('198.51.100.7')).toBe(1228);
    expect(b.allows('::ffff:198.51.100.7', 1201)).toBe(false);
    expect(b.allows('::ffff:198.51.100.7', 1200)).toBe(true);
    b.sent('198.51.100.7', 600); // 628
    expect(b.allows('198.51.100.7', 573)).toBe(false); // 573 + 28 > 600
    expect(b.allows('198.51.100.7', 572)).toBe(true);
    b.sent('198.51.100.7', 572);
    expect(b.remaining('198.51.100.7')).toBe(0);
    b.received('198.51.100.7', 100); // a report
    expect(b.allows('198.51.100.7', 100)).toBe(true);
    expect(b.allows('198.51.100.7', 101)).toBe(false);
    expect(b.counters()).toMatchObject({ addresses: 1, limited: 4, limitedBytes: 1201 + 573 + 1 + 101 });
  });

  test('over IPv6 a datagram costs 48 bytes of headers; an answer in two datagrams to one request pays for the second header', () => {
    expect([datagramOverhead('2001:db8::1'), datagramOverhead('::ffff:10.0.0.1'), datagramOverhead('10.0.0.1')]).toEqual([48, 28, 28]);
    const b = new AmplificationBudget();
    b.received('2001:db8::1', 1000); // 1,048
    expect(b.allows('2001:db8::1', 1000)).toBe(true);
    b.sent('2001:db8::1', 500);
    expect(b.allows('2001:db8::1', 500)).toBe(false); // 548 + 548 > 1,048
    expect(b.allows('2001:db8::1', 452)).toBe(true);
  });

  test('bounded: the least recently seen addresses are forgotten', () => {
    const b = new AmplificationBudget({ maxAddresses: 10 });
    for (let i = 0; i < 100; i++) b.received(`10.0.0.${i}`, 100);
    expect(b.counters().addresses).toBe(10);
    expect(b.allows('10.0.0.0', 1)).toBe(false);
    expect(b.allows('10.0.0.99', 100)).toBe(true);
    expect(b.allows('10.0.0.99', 101)).toBe(false);
    expect(canonicalAddress('::FFFF:10.0.0.1')).toBe('10.0.0.1');
    expect(canonicalAddress('2001:DB8::1')).toBe('2001:db8::1');
  });
});
