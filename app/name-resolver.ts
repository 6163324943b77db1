// Where a host name connects to: an IP literal as it is, a name resolved once (DNS) and remembered for the host's
// life, so that every fetch from a host, and the address-space check made for it, use the same address. Fetches
// that need a name at the same time share one lookup (a page names tens of images on one CDN at once): each lookup
// of its own was one more query that can be lost, and a resolver whose query is lost waits its retry timer (5 s
// by default) — a page's images waited 5 s here, one lookup in twenty.
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';

import { hostLiteral } from '../protocol/dhttp';
import { HostError } from './errors';

/** The address a name resolves to (rejects when it does not). */
export type Lookup = (name: string) => Promise<{ address: string }>;

export class NameResolver {
  private readonly addresses = new Map<string, string>();
  /** Lookups under way, by host: a fetch that needs the same name waits for the same answer. */
  private readonly pending = new Map<string, Promise<string>>();
  /** Lookups sent (what sharing them saves). */
  lookups = 0;

  constructor(private readonly lookup: Lookup = (name) => dnsLookup(name)) {}

  /** The address `host` (a URL's host: a name, an IPv4 address or a bracketed IPv6 one) connects to; HOST_ERR_DNS if none. */
  async resolve(host: string): Promise<string> {
    const literal = hostLiteral(host);
    if (isIP(literal)) {
      this.addresses.set(host, literal);
      return literal;
    }
    const cached = this.addresses.get(host);
    if (cached) return cached;
    let p = this.pending.get(host);
    if (p === undefined) {
      p = this.lookupOnce(host, literal);
      this.pending.set(host, p);
    }
    return p;
  }

  private async lookupOnce(host: string, literal: string): Promise<string> {
    this.lookups++;
    try {
      const { address } = await this.lookup(literal);
      this.addresses.set(host, address);
      return address;
    } catch (err) {
      // not remembered: the next fetch asks again (the name may resolve by then)
      throw new HostError('HOST_ERR_DNS', `cannot resolve ${literal}: ${(err as Error).message}`);
    } finally {
      this.pending.delete(host);
    }
  }
}
