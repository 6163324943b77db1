// Private Network Access in the host (app/address-space.ts): a fetch made for a page is refused before anything is
// sent when its origin resolves to an address less public than the page's — over DHTTP, plain HTTP/1.1 and TLS.
// A canary on loopback counts TCP connections and UDP datagrams, not just requests.

import { DhttpHost } from '../../app';
import { addressSpaceOf, mayReach } from '../../app/address-space';
import { startCanary, type Canary } from '../helpers/canary';

jest.setTimeout(30_000);

describe('address spaces', () => {
  test('loopback, private and public addresses, IPv4 and IPv6', () => {
    for (const a of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1', '0.0.0.0']) expect([a, addressSpaceOf(a)]).toEqual([a, 'loopback']);
    for (const a of ['10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '100.64.0.1', 'fd00::1', 'fe80::1', '::ffff:192.168.0.1']) {
      expect([a, addressSpaceOf(a)]).toEqual([a, 'private']);
    }
    for (const a of ['8.8.8.8', '172.32.0.1', '198.51.100.7', '2001:db8::1', '::ffff:1.1.1.1']) expect([a, addressSpaceOf(a)]).toEqual([a, 'public']);
  });

  test('a page reaches only addresses at least as public as its own', () => {
    expect(mayReach('public', 'public')).toBe(true);
    expect(mayReach('public', 'private')).toBe(false);
    expect(mayReach('public', 'loopback')).toBe(false);
    expect(mayReach('private', 'loopback')).toBe(false);
    expect(mayReach('private', 'public')).toBe(true);
    expect(mayReach('loopback', 'loopback')).toBe(true);
  });
});

describe('the host refuses a less public address before sending anything', () => {
  let canary: Canary;
  let host: DhttpHost;
  let port = 0;

  beforeAll(async () => {
    canary = await startCanary();
    port = canary.port;
    host = new DhttpHost({ client: { initialTimeoutMs: 100, maxResends: 1, fallbackAfterResends: 1 } });
  });
  afterAll(() => {
    host?.close();
    canary?.close();
  });

  test.each(['dhttp', 'http', 'https'])('%s:// from a public page to loopback: HOST_ERR_PRIVATE_NETWORK, no packet', async (scheme) => {
    const url = `${scheme}://127.0.0.1:${port}/x.png`;
    await expect(host.fetch(url, { reachFrom: 'public', timeoutMs: 2000 })).rejects.toMatchObject({ code: 'HOST_ERR_PRIVATE_NETWORK' });
    await expect(host.fetch(url, { reachFrom: 'private', timeoutMs: 2000 })).rejects.toMatchObject({ code: 'HOST_ERR_PRIVATE_NETWORK' });
    await new Promise((r) => setTimeout(r, 100));
    expect({ connections: canary.connections, datagrams: canary.datagrams }).toEqual({ connections: 0, datagrams: 0 });
  });

  test('control: from a loopback page the same fetch goes out (and the canary counts it)', async () => {
    await host.fetch(`http://127.0.0.1:${port}/x.png`, { reachFrom: 'loopback', timeoutMs: 2000 }).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 100));
    expect(canary.connections).toBeGreaterThan(0);
  });
});
