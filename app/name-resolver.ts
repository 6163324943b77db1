// Where a host name connects to: an IP literal as it is, a name resolved once (DNS) and remembered for the host's
// life, so that every fetch from a host, and the address-space check made for it, use the same address.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';

import { hostLiteral } from '../protocol/dhttp';
import { HostError } from './errors';

export class NameResolver {
  private readonly addresses = new Map<string, string>();

  /** The address `host` (a URL's host: a name, an IPv4 address or a bracketed IPv6 one) connects to; HOST_ERR_DNS if none. */
  async resolve(host: string): Promise<string> {
    const literal = hostLiteral(host);
    if (isIP(literal)) {
      this.addresses.set(host, literal);
      return literal;
    }
    const cached = this.addresses.get(host);
    if (cached) return cached;
    try {
      const { address } = await lookup(literal);
      this.addresses.set(host, address);
      return address;
    } catch (err) {
      throw new HostError('HOST_ERR_DNS', `cannot resolve ${literal}: ${(err as Error).message}`);
    }
  }
}
