import { ChannelChooser, lossPrefix, RecentKeyRing, type ChannelOptions } from '../../../server/channel-choice';
import { seededRng } from '../../../protocol/random';

function make(opts: Partial<ChannelOptions> = {}, seed = 1) {
  const clock = { t: 0 };
  const chooser = new ChannelChooser(opts, { now: () => clock.t, rng: seededRng(seed) });
  return { chooser, clock };
}

/** Sends n fresh small responses over UDP, the way the server records them. */
function freshUdp(c: ChannelChooser, n: number) {
  for (let i = 0; i < n; i++) {
    expect(c.admit('10.0.0.1', `f${i}`, false)).toBe('process');
    const d = c.choose(500, false);
    if (d.channel === 'udp') c.sentUdp(false);
    else c.sentTcp('10.0.0.1', `f${i}`);
  }
}

describe('channel choice (DHTTP III-C)', () => {
  test.each([
    // [encoded size, resend, expected channel, reason]
    [100, false, 'udp', 'low-loss'],
    [1460, false, 'udp', 'low-loss'],
    [1461, false, 'tcp', 'size'],
    [200_000, false, 'tcp', 'size'],
    [100, true, 'tcp', 'resend'],
    [5000, true, 'tcp', 'size'],
  ] as const)('size %d resend %s -> %s (%s) in low-loss mode', (size, resend, channel, reason) => {
    const { chooser } = make();
    expect(chooser.choose(size, resend)).toEqual({ channel, reason });
  });

  test('fresh counts only UDP responses to non-resent requests; resent counts resends received', () => {
    const { chooser } = make();
    chooser.sentUdp(false);
    chooser.sentUdp(true);
    chooser.admit('a', 'x', true);
    chooser.admit('a', 'y', false);
    const c = chooser.counters();
    expect(c.fresh).toBe(1);
    expect(c.resent).toBe(1);
    expect(c.freshTotal).toBe(1);
    expect(c.resentTotal).toBe(1);
  });

  test('a ratio above 1% enters high-loss mode; exactly 1% does not', () => {
    const { chooser } = make();
    freshUdp(chooser, 1000);
    expect(chooser.highLossMode).toBe(false);
    for (let i = 0; i < 10; i++) chooser.admit('10.0.0.2', `r${i}`, true);
    expect(chooser.counters().resent).toBe(10);
    expect(chooser.highLossMode).toBe(false); // 10/1000 = 1%, not above
    chooser.admit('10.0.0.2', 'r10', true);
    expect(chooser.highLossMode).toBe(true);
    expect(chooser.counters().highLossMode).toBe(true);
  });

  test('high-loss mode sends ~99% of small responses over TCP with a seeded rng, large always TCP', () => {
    const { chooser } = make({}, 42);
    chooser.admit('a', 'r', true); // resent 1, fresh 0 -> high loss
    expect(chooser.highLossMode).toBe(true);
    let tcp = 0;
    let udp = 0;
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const d = chooser.choose(300, false);
      if (d.channel === 'tcp' && d.reason === 'high-loss-tcp') tcp++;
      else if (d.channel === 'udp' && d.reason === 'high-loss-monitor') udp++;
    }
    expect(tcp / n).toBeGreaterThan(0.985);
    expect(tcp / n).toBeLessThan(0.995);
    expect(tcp + udp).toBe(n);
    expect(udp).toBeGreaterThan(0);
    expect(chooser.choose(3000, false).channel).toBe('tcp');
    expect(chooser.choose(300, true)).toEqual({ channel: 'tcp', reason: 'resend' });
  });

  test('the same seed gives the same choices', () => {
    const run = () => {
      const { chooser } = make({}, 7);
      chooser.admit('a', 'r', true);
      return Array.from({ length: 500 }, () => chooser.choose(10, false).channel).join(',');
    };
    expect(run()).toBe(run());
  });

  test('monitoring UDP responses in high-loss mode bring the server back to low-loss', () => {
    const { chooser } = make({ decayIntervalMs: 0 });
    freshUdp(chooser, 100);
    chooser.admit('a', 'r1', true);
    chooser.admit('a', 'r2', true);
    expect(chooser.highLossMode).toBe(true);
    for (let i = 0; i < 100; i++) chooser.sentUdp(false); // 2 / 200 = 1%
    expect(chooser.highLossMode).toBe(false);
  });

  test('counters halve every decay interval, so an old loss burst fades', () => {
    const { chooser, clock } = make({ decayIntervalMs: 10_000 });
    freshUdp(chooser, 1000);
    for (let i = 0; i < 50; i++) chooser.admit('a', `r${i}`, true);
    expect(chooser.highLossMode).toBe(true);
    clock.t = 9_999;
    expect(chooser.counters().fresh).toBe(1000);
    clock.t = 10_000;
    expect(chooser.counters()).toMatchObject({ fresh: 500, resent: 25, freshTotal: 1000, resentTotal: 50 });
    clock.t = 30_000;
    expect(chooser.counters()).toMatchObject({ fresh: 125, resent: 6.25 });
    // The ratio is unchanged by halving; new clean traffic now outweighs the old burst quickly.
    expect(chooser.highLossMode).toBe(true);
    for (let i = 0; i < 500; i++) chooser.sentUdp(false);
    expect(chooser.highLossMode).toBe(false);
    clock.t = 10_000_000;
    expect(chooser.counters()).toMatchObject({ fresh: 0, resent: 0, highLossMode: false });
  });

  test('a clock that goes backwards does not break decay', () => {
    const { chooser, clock } = make({ decayIntervalMs: 1000 });
    clock.t = 5000;
    chooser.sentUdp(false);
    clock.t = 100;
    chooser.sentUdp(false);
    expect(chooser.counters().fresh).toBeGreaterThan(0);
    clock.t = 1100;
    expect(chooser.counters().fresh).toBe(1);
  });

  test('a resend already answered over TCP is ignored (and counted); others are processed', () => {
    const { chooser } = make();
    chooser.sentTcp('10.0.0.1', 'abc');
    expect(chooser.answeredOverTcp('10.0.0.1', 'abc')).toBe(true);
    expect(chooser.admit('10.0.0.1', 'abc', true)).toBe('ignore');
    expect(chooser.admit('10.0.0.9', 'abc', true)).toBe('process'); // other client, same ID
    expect(chooser.admit('10.0.0.1', 'abd', true)).toBe('process');
    expect(chooser.admit('10.0.0.1', 'abc', false)).toBe('process'); // not a resend: not our business
    const c = chooser.counters();
    expect(c.ignoredResends).toBe(1);
    expect(c.resent).toBe(3);
  });

  test('a resend of a request the server is still answering is processed and not counted as a loss', () => {
    const { chooser } = make();
    chooser.sentUdp(false, '10.0.0.1');
    expect(chooser.admit('10.0.0.1', 'abc', true, true)).toBe('process');
    expect(chooser.highLossModeFor('10.0.0.1')).toBe(false);
    let c = chooser.counters();
    expect(c.resent).toBe(0);
    expect(c.resentUnanswered).toBe(1);
    expect(chooser.admit('10.0.0.1', 'abc', true)).toBe('process'); // answered, and asked again: a loss
    c = chooser.counters();
    expect(c.resent).toBe(1);
    expect(chooser.highLossModeFor('10.0.0.1')).toBe(true);
  });

  test('a resend sooner after its UDP answer than the path round trip is early: not a loss, answered as fresh', () => {
    const { chooser, clock } = make();
    clock.t = 1000;
    chooser.sentUdp(false, '10.0.0.1');
    chooser.answeredUdp('10.0.0.1', 'abc');
    clock.t = 1300; // the client's 300 ms timer, on a path whose queue holds answers 450 ms
    expect(chooser.admit('10.0.0.1', 'abc', true, false, 450)).toBe('early');
    expect(chooser.highLossModeFor('10.0.0.1')).toBe(false);
    let c = chooser.counters();
    expect(c.resent).toBe(0);
    expect(c.resentEarly).toBe(1);
    expect(chooser.choose(300, false, '10.0.0.1')).toEqual({ channel: 'udp', reason: 'low-loss' });
    // answered again at 1300: the next resend is measured from there
    chooser.answeredUdp('10.0.0.1', 'abc');
    clock.t = 1700;
    expect(chooser.admit('10.0.0.1', 'abc', true, false, 450)).toBe('early');
    clock.t = 2400; // 1,100 ms after the latest answer: the path could have carried it and the resend both
    expect(chooser.admit('10.0.0.1', 'abc', true, false, 450)).toBe('process');
    c = chooser.counters();
    expect(c.resent).toBe(1);
    expect(c.resentEarly).toBe(2);
    expect(chooser.highLossModeFor('10.0.0.1')).toBe(true);
  });

  test('without a measured round trip, an unknown answer, or an answer over TCP, a resend counts as today', () => {
    const { chooser, clock } = make();
    chooser.answeredUdp('10.0.0.1', 'abc');
    clock.t = 10;
    expect(chooser.admit('10.0.0.1', 'abc', true, false, null)).toBe('process'); // no round trip measured
    expect(chooser.admit('10.0.0.1', 'other', true, false, 450)).toBe('process'); // no UDP answer recorded
    expect(chooser.admit('10.0.0.2', 'abc', true, false, 450)).toBe('process'); // another client, same ID
    chooser.sentTcp('10.0.0.1', 'abc');
    expect(chooser.admit('10.0.0.1', 'abc', true, false, 450)).toBe('ignore'); // TCP carries it
    const c = chooser.counters();
    expect(c.resentEarly).toBe(0);
    expect(c.resent).toBe(4);
  });

  test('the UDP answer times are bounded by ringSize, the oldest forgotten first', () => {
    const { chooser } = make({ ringSize: 3 });
    for (const id of ['a', 'b', 'c', 'd']) chooser.answeredUdp('10.0.0.1', id);
    expect(chooser.admit('10.0.0.1', 'a', true, false, 450)).toBe('process'); // forgotten
    expect(chooser.admit('10.0.0.1', 'b', true, false, 450)).toBe('early');
    expect(chooser.admit('10.0.0.1', 'd', true, false, 450)).toBe('early');
  });

  test('the ring holds the last 10,000 pairs and evicts the oldest', () => {
    const { chooser } = make();
    for (let i = 0; i < 10_000; i++) chooser.sentTcp('::1', `id${i}`);
    expect(chooser.counters().ringEntries).toBe(10_000);
    expect(chooser.admit('::1', 'id0', true)).toBe('ignore');
    chooser.sentTcp('::1', 'id10000');
    expect(chooser.admit('::1', 'id0', true)).toBe('process');
    expect(chooser.admit('::1', 'id1', true)).toBe('ignore');
    expect(chooser.admit('::1', 'id10000', true)).toBe('ignore');
    expect(chooser.counters().ringEntries).toBe(10_000);
  });

  test('ring tolerates duplicate keys', () => {
    const ring = new RecentKeyRing(3);
    ring.add('a');
    ring.add('a');
    ring.add('b');
    ring.add('c'); // evicts first 'a'
    expect(ring.has('a')).toBe(true);
    ring.add('d'); // evicts second 'a'
    expect(ring.has('a')).toBe(false);
    expect(ring.size).toBe(3);
    expect(() => new RecentKeyRing(0)).toThrow(RangeError);
  });

  test('options are validated and partial options keep defaults', () => {
    const { chooser } = make({ sizeThreshold: 100 });
    expect(chooser.options).toMatchObject({ sizeThreshold: 100, lossThreshold: 0.01, highLossTcpFraction: 0.99, ringSize: 10_000 });
    expect(chooser.choose(101, false).channel).toBe('tcp');
    expect(() => make({ highLossTcpFraction: 2 })).toThrow(RangeError);
    expect(() => make({ lossThreshold: -1 })).toThrow(RangeError);
  });
});

describe('per client prefix (one client cannot move the whole server into high-loss mode)', () => {
  test('prefixes: IPv4 /24, IPv6 /48, IPv4-mapped as IPv4', () => {
    expect(lossPrefix('192.0.2.77')).toBe('192.0.2.0/24');
    expect(lossPrefix('::ffff:192.0.2.77')).toBe('192.0.2.0/24');
    expect(lossPrefix('2001:db8:1:2::1')).toBe('2001:db8:1::/48');
    expect(lossPrefix('2001:db8::1')).toBe('2001:db8:0::/48');
    expect(lossPrefix('2001:0db8:0001:ffff:0:0:0:1')).toBe('2001:db8:1::/48');
    expect(lossPrefix('::1')).toBe('0:0:0::/48');
  });

  test("a prefix's resends change its own mode only; the server-wide statistic still sees them", () => {
    const { chooser } = make({ decayIntervalMs: 0 });
    for (let i = 0; i < 50; i++) {
      chooser.choose(500, false, '10.0.0.1');
      chooser.sentUdp(false, '10.0.0.1');
      chooser.choose(500, false, '10.0.1.1');
      chooser.sentUdp(false, '10.0.1.1');
    }
    for (let i = 0; i < 10; i++) expect(chooser.admit('10.0.1.1', `r${i}`, true)).toBe('process');
    expect(chooser.highLossModeFor('10.0.1.200')).toBe(true); // same /24
    expect(chooser.highLossModeFor('10.0.0.1')).toBe(false);
    expect(chooser.highLossModeFor('203.0.113.9')).toBe(false); // never seen: low-loss
    expect(chooser.choose(500, false, '10.0.0.1')).toEqual({ channel: 'udp', reason: 'low-loss' });
    expect(chooser.choose(500, false, '10.0.1.1').reason).toMatch(/^high-loss/);
    expect(chooser.highLossMode).toBe(true);
    expect(chooser.counters()).toMatchObject({ highLossPeers: 1, peers: 2 });
  });

  test('the prefixes remembered are bounded (least recently seen forgotten)', () => {
    const { chooser } = make({ maxPeers: 100, decayIntervalMs: 0 });
    for (let i = 0; i < 1000; i++) chooser.admit(`10.${i >> 8}.${i & 255}.1`, `x${i}`, true);
    expect(chooser.counters().peers).toBe(100);
    expect(() => make({ maxPeers: 0 })).toThrow(RangeError);
  });
});
