/**
 * Target URLs: `dhttp://host[:port]/path` (UDP allowed), `dhttpt://...` (DHTTP over TCP only),
 * `http://...` (plain HTTP/1.1) and `https://...` (HTTP/1.1 over TLS, which the host speaks, not the DHTTP
 * client). The default port is 80 for the first three (the DHTTP server listens on one port number for UDP and
 * TCP), 443 for https. IPv6 literals are written in brackets and kept in brackets in `host`.
 */
import { LocalProtocolError } from '../errors';

export type Scheme = 'dhttp' | 'dhttpt' | 'http' | 'https';

export interface Target {
  scheme: Scheme;
  /** Lower-cased host name or IPv4 literal, or an IPv6 literal in brackets (`[::1]`). */
  host: string;
  port: number;
  /** Origin-form request target: path and query, no fragment; `/` when empty; non-ASCII percent-encoded. */
  path: string;
  /** `scheme://host[:port]` (port omitted when it is the scheme's default). */
  origin: string;
}

export const DEFAULT_PORT = 80;
export const DEFAULT_TLS_PORT = 443;

const te = new TextEncoder();

function bad(message: string, code = 'DHTTP_ERR_BAD_URL'): never {
  throw new LocalProtocolError(code, message);
}

function encodePath(raw: string): string {
  let out = '';
  for (const ch of raw) {
    const c = ch.codePointAt(0) as number;
    if (c > 0x20 && c < 0x7f) {
      out += ch;
    } else {
      for (const byte of te.encode(ch)) out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
    }
  }
  return out;
}

/** A URL's host as an address or name to resolve: an IPv6 literal without its brackets (`[::1]` → `::1`). */
export function hostLiteral(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/** An address as a URL writes it: an IPv6 address in brackets (`::1` → `[::1]`); the inverse of hostLiteral. */
export function urlHost(address: string): string {
  return address.includes(':') && !address.startsWith('[') ? `[${address}]` : address;
}

/** Parse a target URL. Throws LocalProtocolError DHTTP_ERR_BAD_SCHEME or DHTTP_ERR_BAD_URL. */
export function parseTarget(url: string): Target {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)(.*)$/s.exec(url.trim());
  if (m === null) bad(`not an absolute URL: ${JSON.stringify(url.slice(0, 100))}`);
  const scheme = m[1].toLowerCase();
  if (scheme !== 'dhttp' && scheme !== 'dhttpt' && scheme !== 'http' && scheme !== 'https') {
    bad(`unsupported scheme ${scheme}: (dhttp, dhttpt, http and https are)`, 'DHTTP_ERR_BAD_SCHEME');
  }
  const defaultPort = scheme === 'https' ? DEFAULT_TLS_PORT : DEFAULT_PORT;
  const authority = m[2];
  if (authority.includes('@')) bad('user information in the URL is not supported');
  let host: string;
  let portText = '';
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0) bad('unterminated IPv6 literal');
    const literal = authority.slice(1, close).toLowerCase();
    if (!/^[0-9a-f:.]+$/.test(literal) || !literal.includes(':')) bad('invalid IPv6 literal');
    host = `[${literal}]`;
    const rest = authority.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) bad('junk after IPv6 literal');
      portText = rest.slice(1);
    }
  } else {
    const colon = authority.lastIndexOf(':');
    host = (colon >= 0 ? authority.slice(0, colon) : authority).toLowerCase();
    portText = colon >= 0 ? authority.slice(colon + 1) : '';
    if (!/^[a-z0-9._~-]+$/.test(host)) bad(`invalid host ${JSON.stringify(host)}`);
  }
  if (host === '' || host === '[]') bad('empty host');
  let port = defaultPort;
  if (portText !== '') {
    if (!/^[0-9]{1,5}$/.test(portText)) bad(`invalid port ${JSON.stringify(portText)}`);
    port = Number(portText);
    if (port < 1 || port > 65535) bad(`port ${port} out of range`);
  }
  let path = m[3];
  const hash = path.indexOf('#');
  if (hash >= 0) path = path.slice(0, hash);
  if (path === '') path = '/';
  else if (path.startsWith('?')) path = `/${path}`;
  path = encodePath(path);
  const origin = `${scheme}://${host}${port === defaultPort ? '' : `:${port}`}`;
  return { scheme, host, port, path, origin };
}
