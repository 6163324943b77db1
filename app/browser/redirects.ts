// Following redirects (RFC 9110 §15.4): where a 3xx answer sends the browser, or why the navigation ends there.
import { parseTarget } from '../../protocol/dhttp';
import { HostError } from '../errors';

/** Answers that send the browser on to their Location. */
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Redirects followed in one navigation before it fails (as Chromium's net::ERR_TOO_MANY_REDIRECTS). */
export const MAX_REDIRECTS = 20;

/** The next hop and the URLs that led to it, first first; or the error that ends the navigation. */
export type RedirectStep = { next: string; chain: string[] } | { error: HostError };

/**
 * Where an answer from `url` (reached through `redirectedFrom`) leads: null when it is no redirect (not a
 * redirect status, or no Location). It fails on a Location this browser cannot open, a loop, or a chain longer
 * than MAX_REDIRECTS.
 */
export function redirectStep(url: string, redirectedFrom: readonly string[], status: number, location: string | null): RedirectStep | null {
  if (!REDIRECT_STATUSES.has(status) || location === null) return null;
  let next: string;
  try {
    next = new URL(location.trim(), url).href; // relative Locations resolve against the URL that answered
    parseTarget(next);
  } catch {
    return { error: new HostError('HOST_ERR_BAD_REDIRECT', `${url} redirects to ${JSON.stringify(location)}, which this browser cannot open`) };
  }
  const chain = [...redirectedFrom, url];
  if (chain.includes(next)) return { error: new HostError('HOST_ERR_REDIRECT_LOOP', `${url} redirects in a loop (${[...chain, next].join(' → ')})`) };
  if (chain.length > MAX_REDIRECTS) return { error: new HostError('HOST_ERR_TOO_MANY_REDIRECTS', `more than ${MAX_REDIRECTS} redirects from ${chain[0]}`) };
  return { next, chain };
}
