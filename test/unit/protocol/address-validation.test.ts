// Address validation's parts (protocol/dhttp/address-validation.ts): HMAC against Node's, tokens bound to an
// address and a time, the 3× budget per address.
import { createHash, createHmac, randomBytes } from 'node:crypto';

import fc from 'fast-check';

import { AddressTokens, AmplificationBudget, canonicalAddress, hmacSha256 } from '../../../protocol/dhttp/address-validation';

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

describe('the 3× budget', () => {
  test('an unproven address gets at most 3× what it sent (an IPv4-mapped address is the same address)', () => {
    const b = new AmplificationBudget();
    expect(b.allows('198.51.100.7', 1)).toBe(false); // nothing received
    b.received('198.51.100.7', 1200);
    expect(b.allows('::ffff:198.51.100.7', 3600)).toBe(true);
    b.sent('198.51.100.7', 3000);
    expect(b.allows('198.51.100.7', 601)).toBe(false);
    expect(b.allows('198.51.100.7', 600)).toBe(true);
    b.received('198.51.100.7', 100); // a resend
    expect(b.allows('198.51.100.7', 900)).toBe(true);
    expect(b.counters()).toMatchObject({ addresses: 1, limited: 2, limitedBytes: 602 });
  });

  test('bounded: the least recently seen addresses are forgotten', () => {
    const b = new AmplificationBudget({ maxAddresses: 10 });
    for (let i = 0; i < 100; i++) b.received(`10.0.0.${i}`, 100);
    expect(b.counters().addresses).toBe(10);
    expect(b.allows('10.0.0.0', 1)).toBe(false);
    expect(b.allows('10.0.0.99', 300)).toBe(true);
    expect(canonicalAddress('::FFFF:10.0.0.1')).toBe('10.0.0.1');
    expect(canonicalAddress('2001:DB8::1')).toBe('2001:db8::1');
  });
});
