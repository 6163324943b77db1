// Pure parts of server/catp.ts: header parsing, rate clamping, options, the encoded-page cache.
import { DEFAULT_CATP_OPTIONS, EncodedPageCache, MIN_CATP_RATE, encodeForMode, parseCatpMode, pickRate } from '../../../server/catp';
import { resolveCatpOptions } from '../../../server/catp';

describe('Catp-Mode', () => {
  test.each([
    ['catp', 'catp'],
    [' CATP ', 'catp'],
    ['inorder', 'inorder'],
    ['InOrder', 'inorder'],
    ['', null],
    ['catp, inorder', null],
    ['raw', null],
  ])('%j -> %j', (v, want) => {
    expect(parseCatpMode(v)).toBe(want);
  });
  test('absent', () => expect(parseCatpMode(null)).toBeNull());
});

describe('Catp-Rate', () => {
  test('absent or malformed: the default', () => {
    for (const h of [null, '', 'fast', '-5', '1e6', '12.5', '0x100', '9999999999999999999']) expect(pickRate(h, 5000, 100_000)).toBe(5000);
  });
  test('clamped to [1000, max]', () => {
    expect(pickRate('20000', 5000, 100_000)).toBe(20_000);
    expect(pickRate(' 20000 ', 5000, 100_000)).toBe(20_000);
    expect(pickRate('1', 5000, 100_000)).toBe(MIN_CATP_RATE);
    expect(pickRate('0', 5000, 100_000)).toBe(MIN_CATP_RATE);
    expect(pickRate('999999999', 5000, 100_000)).toBe(100_000);
  });
});

describe('options', () => {
  test('defaults', () => {
    const o = resolveCatpOptions(undefined);
    expect(o).toMatchObject({ rateBytesPerSec: 1_250_000, maxSessions: 256, enabled: true });
    expect(o.maxRateBytesPerSec).toBe(DEFAULT_CATP_OPTIONS.maxRateBytesPerSec);
  });
  test('max rate is never below the default rate', () => {
    expect(resolveCatpOptions({ rateBytesPerSec: 50_000_000 }).maxRateBytesPerSec).toBe(50_000_000);
  });
  test('bad values throw', () => {
    expect(() => resolveCatpOptions({ rateBytesPerSec: 0 })).toThrow(RangeError);
    expect(() => resolveCatpOptions({ maxRateBytesPerSec: NaN })).toThrow(RangeError);
    expect(() => resolveCatpOptions({ maxSessions: -1 })).toThrow(RangeError);
    expect(() => resolveCatpOptions({ cacheBytes: Infinity })).toThrow(RangeError);
  });
});

describe('EncodedPageCache', () => {
  const entry = (bytes: number) => ({ frames: [], indexFrames: 0, bytes, quality: 'best' as const });
  test('LRU bounded by bytes', () => {
    const c = new EncodedPageCache(100);
    c.set('a', entry(40));
    c.set('b', entry(40));
    expect(c.get('a')).toBeDefined(); // a is now the most recent
    c.set('c', entry(40)); // evicts b
    expect(c.get('b')).toBeUndefined();
    expect(c.get('a')).toBeDefined();
    expect(c.get('c')).toBeDefined();
    expect(c.bytes).toBe(80);
    c.set('huge', entry(101)); // never cached
    expect(c.get('huge')).toBeUndefined();
    expect(c.bytes).toBe(80);
    c.set('a', entry(10)); // replaced, size follows
    expect(c.bytes).toBe(50);
  });
  test('0 bytes disables it', () => {
    const c = new EncodedPageCache(0);
    c.set('a', entry(1));
    expect(c.entries).toBe(0);
  });
});

describe('encodeForMode', () => {
  test('catp: index frames first; inorder: raw frames', () => {
    const html = new TextEncoder().encode('<!doctype html><title>t</title><p>' + 'word '.repeat(1000) + '</p>');
    const c = encodeForMode('catp', html);
    expect(c.indexFrames).toBeGreaterThanOrEqual(1);
    expect(c.frames.length).toBeGreaterThan(c.indexFrames);
    const r = encodeForMode('inorder', html);
    expect(r.indexFrames).toBe(0);
    expect(r.frames.length).toBe(Math.ceil((html.length + 36) / 1428));
    expect(r.bytes).toBeGreaterThan(html.length);
  });
  test('a page too deep to encode throws (the server answers it normally)', () => {
    const deep = new TextEncoder().encode('<div>'.repeat(3000));
    expect(() => encodeForMode('catp', deep)).toThrow(/UNENCODABLE|deeper/);
  });
});
