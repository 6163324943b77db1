// Address validation (QUIC's answer to spoofed sources, RFC 9000 §8, applied to DHTTP): a UDP source address is
// not proven until the client shows it receives there. Until then the server sends that address no more bytes than
// it received from it (1×, counted on the wire: each datagram's IP and UDP headers with its payload; QUIC allows 3×,
// our brief allows none), never opens a TCP connection to it, and never starts a stream to it beyond what that
// allows. Proof is a token the server handed out at that address and the client echoes in a later request:
//
//   Catp-Token: 1.<bucket>.<mac>     mac = HMAC-SHA256(server key, "1|<address>|<bucket>"), first 16 bytes,
//                                    base64url; bucket = floor(now / bucketMs), base 36
//
// Stateless on the server (any token it issued in the current or the previous bucket checks out against the
// source address alone), cached per origin on the client. A client that has no token pads its request datagram to
// a full datagram (MIN_UNPROVEN_REQUEST_BYTES) with a Catp-Pad header, so a one-datagram answer fits; a stream
// request (padded to STREAM_REQUEST_BYTES, which pays for the token answer) is followed at once by a padded copy
// of itself (wire.ts FLAG_COPY) and padding datagrams (FLAG_PADDING; a resend, by padding alone), each a quarter
// datagram (FIRST_CONTACT_STEP_BYTES), up to STREAM_FIRST_CONTACT_WIRE_BYTES on the wire, which pays for the
// stream's first frames; the server takes the first of the request and its copy to arrive as the request
// (first-contact-pairs.ts). Sans-IO: the key, sha-256 and the time come in.

import { MAX_DATAGRAM_PAYLOAD } from './wire';

export const TOKEN_HEADER = 'Catp-Token';
export const PAD_HEADER = 'Catp-Pad';
/** An unproven address gets at most this many times the bytes it sent, both counted on the wire (`datagramOverhead`). */
export const AMPLIFICATION_FACTOR = 1;
/** IPv4 (20) and UDP (8) headers of a datagram; IPv6's are 40 and 8. */
export const IPV4_UDP_HEADER_BYTES = 28;
const IPV6_UDP_HEADER_BYTES = 48;
/** What a datagram to or from `address` costs the link beyond its payload (its IP and UDP headers). */
export function datagramOverhead(address: string): number {
  return canonicalAddress(address).includes(':') ? IPV6_UDP_HEADER_BYTES : IPV4_UDP_HEADER_BYTES;
}
/** What the server keeps room for, for its token answer (`421`, `Dhttp-Retry: token`, `Catp-Token`: ~150 bytes). */
export const TOKEN_ANSWER_BYTES = 160;
/**
 * A request datagram without a token is padded to a full datagram (1,460 bytes): any one-datagram answer fits what
 * it received. Every byte of padding costs the uplink its serialization before the server can answer (146 ms for
 * 1,460 bytes on a 10,000 B/s link); a request with a token is padded to 160 bytes at most (client-records.ts).
 */
export const MIN_UNPROVEN_REQUEST_BYTES = MAX_DATAGRAM_PAYLOAD;
/**
 * A stream request without a token is padded to this (160): it pays for the token answer, which goes as soon as the
 * request is in (the sooner the token is back, the sooner the proof), and no more, so that it is in soon.
 */
export const STREAM_REQUEST_BYTES = TOKEN_ANSWER_BYTES;
/**
 * Each datagram behind a first contact's request (its copy, then padding) carries this much (365 bytes, a quarter of
 * a full datagram's payload). An unproven address's budget grows by a datagram only once the whole datagram has
 * crossed the client's uplink, so full datagrams held the first frame back for the copy's whole serialization (30 ms
 * at 50,000 B/s, 149 ms at 10,000 B/s) though it often needed a third of it; in quarters the budget comes about as
 * fast as the uplink carries it, and the copy still spans enough time for its dispersion to tell the uplink's rate
 * (server/catp.ts `takeDispersion`).
 */
export const FIRST_CONTACT_STEP_BYTES = MAX_DATAGRAM_PAYLOAD / 4;
/**
 * What a stream request without a token sends in all, counted on the wire as the server counts its budget (each
 * datagram with its IP and UDP headers): 4,652 bytes — the request, a padded copy of it and padding datagrams, back
 * to back — which pays for the token answer and three full frames, each with its headers (151 + 3 × 1,488), the top
 * of the page while the proof travels (the first text of the median corpus page is about 2,000 bytes of frames in,
 * two to three frames; bench:catp `firstTextBytes`). QUIC's first flight is about as large (3 × its 1,200-byte
 * Initial). Counted on the wire so that more, smaller datagrams bring no more budget than fewer large ones and the
 * proof, which queues behind them on the uplink, leaves no later. Behind the request, not in it, so the token answer
 * goes as soon as the request is in; a copy, not zeros, so a lost request costs a round trip for the proof, not the
 * resend timer. On a link as fast up as down the padding costs no time: each datagram of it pays for what the
 * server sends as it comes, and that cannot leave faster anyway.
 */
export const STREAM_FIRST_CONTACT_WIRE_BYTES = STREAM_REQUEST_BYTES + 3 * MAX_DATAGRAM_PAYLOAD + 4 * IPV4_UDP_HEADER_BYTES;
/** `Dhttp-Retry: token`: the answer was too large for an unproven address; send the request again with the token. */
export const RETRY_TOKEN = 'token';

const TOKEN_VERSION = '1';
const MAC_BYTES = 16;

export type Sha256 = (bytes: Uint8Array) => Uint8Array;

/** HMAC-SHA256 (RFC 2104) over an injected sha-256. */
export function hmacSha256(sha256: Sha256, key: Uint8Array, message: Uint8Array): Uint8Array {
  const block = 64;
  const k = key.length > block ? sha256(key) : key;
  const ipad = new Uint8Array(block + message.length);
  const opad = new Uint8Array(block + 32);
  for (let i = 0; i < block; i++) {
    const b = i < k.length ? k[i]! : 0;
    ipad[i] = b ^ 0x36;
    opad[i] = b ^ 0x5c;
  }
  ipad.set(message, block);
  opad.set(sha256(ipad), block);
  return sha256(opad);
}

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

function base64url(bytes: Uint8Array): string {
  let out = '';
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += B64URL[(acc >> bits) & 63];
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) out += B64URL[(acc << (6 - bits)) & 63];
  return out;
}

/** The address a budget and a token are about: an IPv4-mapped IPv6 address is its IPv4 address. */
export function canonicalAddress(address: string): string {
  const a = address.toLowerCase();
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}

function equalStrings(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return d === 0;
}

export interface AddressTokensOptions {
  /** The server's secret (≥ 16 bytes; a fresh random one per server process is fine). */
  key: Uint8Array;
  sha256: Sha256;
  /** Width of a time bucket (default 10 min): a token is good for one to two buckets. */
  bucketMs?: number;
}

/** Issues and checks address tokens. */
export class AddressTokens {
  private readonly bucketMs: number;

  constructor(private readonly o: AddressTokensOptions) {
    if (o.key.length < 16) throw new RangeError('the token key must have at least 16 bytes');
    this.bucketMs = o.bucketMs ?? 600_000;
    if (!(this.bucketMs > 0)) throw new RangeError('bucketMs must be > 0');
  }

  private mac(address: string, bucket: number): string {
    const msg = new TextEncoder().encode(`${TOKEN_VERSION}|${canonicalAddress(address)}|${bucket}`);
    return base64url(hmacSha256(this.o.sha256, this.o.key, msg).subarray(0, MAC_BYTES));
  }

  issue(address: string, nowMs: number): string {
    const bucket = Math.floor(nowMs / this.bucketMs);
    return `${TOKEN_VERSION}.${bucket.toString(36)}.${this.mac(address, bucket)}`;
  }

  /** True when `token` was issued to `address` in the current or the previous bucket. */
  check(token: string, address: string, nowMs: number): boolean {
    if (token.length > 64) return false;
    const m = /^1\.([0-9a-z]{1,12})\.([A-Za-z0-9_-]{22})$/.exec(token.trim());
    if (!m) return false;
    const bucket = parseInt(m[1]!, 36);
    const now = Math.floor(nowMs / this.bucketMs);
    if (bucket !== now && bucket !== now - 1) return false;
    return equalStrings(this.mac(address, bucket), m[2]!);
  }
}

export interface AmplificationCounters {
  /** addresses tracked now */
  addresses: number;
  /** sends refused because they would pass what the address sent */
  limited: number;
  limitedBytes: number;
}

interface Budget {
  /** bytes on the wire: payloads and their datagrams' headers */
  received: number;
  sent: number;
  /** a datagram's headers to and from this address (`datagramOverhead`), worked out once */
  overhead: number;
}

/**
 * Per source address: bytes received from it and bytes sent to it unproven, on the wire (each datagram's payload
 * and its IP and UDP headers: an answer in two datagrams to a request in one costs one more header). Proof is per
 * request (a request that carries a valid token is answered in full), never remembered per address: an attacker
 * spoofing a client that once proved itself has no token and meets the budget. Bounded: the least recently seen
 * addresses are forgotten first (a forgotten address starts again from nothing received).
 */
export class AmplificationBudget {
  private readonly map = new Map<string, Budget>(); // Map order = least recently seen first
  private limited = 0;
  private limitedBytes = 0;

  constructor(private readonly o: { factor?: number; maxAddresses?: number } = {}) {}

  private entry(address: string): Budget {
    const key = canonicalAddress(address);
    let b = this.map.get(key);
    if (b !== undefined) this.map.delete(key);
    else {
      b = { received: 0, sent: 0, overhead: datagramOverhead(key) };
      if (this.map.size >= (this.o.maxAddresses ?? 65_536)) this.map.delete(this.map.keys().next().value as string);
    }
    this.map.set(key, b);
    return b;
  }

  /** A datagram with `bytes` of payload came from `address`. */
  received(address: string, bytes: number): void {
    const b = this.entry(address);
    b.received += bytes + b.overhead;
  }

  /** May a datagram with `bytes` of payload go, unproven, to `address` now? While what it got stays ≤ factor × what it sent. */
  allows(address: string, bytes: number): boolean {
    const b = this.map.get(canonicalAddress(address));
    const ok = b !== undefined && bytes + b.overhead <= this.left(b);
    if (!ok) {
      this.limited++;
      this.limitedBytes += bytes;
    }
    return ok;
  }

  /** How many bytes, on the wire, may still go unproven to `address` (0 for an address never heard from). */
  remaining(address: string): number {
    const b = this.map.get(canonicalAddress(address));
    return b === undefined ? 0 : this.left(b);
  }

  private left(b: Budget): number {
    return Math.max(0, (this.o.factor ?? AMPLIFICATION_FACTOR) * b.received - b.sent);
  }

  /** A datagram with `bytes` of payload went to `address`. */
  sent(address: string, bytes: number): void {
    const b = this.map.get(canonicalAddress(address));
    if (b !== undefined) b.sent += bytes + b.overhead;
  }

  counters(): AmplificationCounters {
    return { addresses: this.map.size, limited: this.limited, limitedBytes: this.limitedBytes };
  }
}
