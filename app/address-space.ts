// Address spaces as Chromium's Private Network Access names them: a page may make the host fetch only from an
// address at least as public as its own. A public page never reaches a private or loopback address (a router's
// admin page, a developer's local server); a private page never reaches loopback; a loopback page (our tests, a
// local development server) may reach anything.
import { BlockList, isIP } from 'node:net';

import { HostError } from './errors';

export type AddressSpace = 'loopback' | 'private' | 'public';

const RANK: Record<AddressSpace, number> = { loopback: 0, private: 1, public: 2 };

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
// 0.0.0.0 and :: connect to the local host on Linux
LOOPBACK.addAddress('0.0.0.0', 'ipv4');
LOOPBACK.addAddress('::', 'ipv6');

const PRIVATE = new BlockList();
for (const [net, bits] of [
  ['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], // RFC 1918
  ['169.254.0.0', 16], // link-local (cloud metadata services live here)
  ['100.64.0.0', 10], // carrier-grade NAT (RFC 6598)
  ['0.0.0.0', 8], // "this network"
] as const) PRIVATE.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [['fc00::', 7], ['fe80::', 10]] as const) PRIVATE.addSubnet(net, bits, 'ipv6');

/** The address space of an IP address (an IPv4-mapped IPv6 address counts as its IPv4 address). */
export function addressSpaceOf(ip: string): AddressSpace {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  const address = mapped ? mapped[1]! : ip;
  const family = isIP(address) === 6 ? 'ipv6' : 'ipv4';
  if (LOOPBACK.check(address, family)) return 'loopback';
  if (PRIVATE.check(address, family)) return 'private';
  return 'public';
}

/** Whether a page served from `from` may have the host fetch from an address in `to`. */
export function mayReach(from: AddressSpace, to: AddressSpace): boolean {
  return RANK[to] >= RANK[from];
}

/** Private Network Access: a page's fetch never reaches an address less public than the page's own (HOST_ERR_PRIVATE_NETWORK). */
export function refuseLessPublic(url: string, from: AddressSpace, address: string): void {
  const to = addressSpaceOf(address);
  if (!mayReach(from, to)) {
    throw new HostError('HOST_ERR_PRIVATE_NETWORK', `${url} is on a ${to} address (${address}); a ${from} page may not reach it`);
  }
}
