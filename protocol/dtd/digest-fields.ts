/**
 * Digest fields on the wire.
 *
 * - RFC 9530 `Repr-Digest: sha-256=:<base64>:` (an sf-dictionary of byte sequences) and
 *   `Want-Repr-Digest: sha-256=10, sha-512=3` (an sf-dictionary of integer weights 0..10; 0 = "not acceptable").
 * - RFC 3230 `Digest: SHA-256=<base64>` (RFC 5843 names SHA-256) and `Want-Digest: SHA-256;q=0.5, MD5;q=0`,
 *   which older servers send.
 *
 * Only sha-256 is used; other algorithms are parsed (so a field naming them is not an error) and ignored.
 * Every parser assumes hostile input and throws a DtdError with a stable code.
 */
import { getHeaders } from '../dhttp/http1';
import { dtdError } from './errors';
import { base64Decode, base64Encode, isItem, parseDictionary, MAX_FIELD_CHARS, MAX_MEMBERS } from './structured-fields';

export const SHA256_BYTES = 32;
/** Injected hashing (protocol/ is sans-IO): sha-256 of the bytes, 32 bytes. */
export type Sha256 = (bytes: Uint8Array) => Uint8Array;

/** Algorithms in Repr-Digest are lowercase sf-keys; the value of each is its raw digest bytes. */
export function parseReprDigest(value: string): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  for (const [alg, member] of parseDictionary(value)) {
    if (!isItem(member) || member.item.type !== 'bytes') throw dtdError('DTD_ERR_SYNTAX', `Repr-Digest member ${alg} is not a byte sequence`);
    checkAlgorithmLength(alg, member.item.value);
    out.set(alg, member.item.value);
  }
  return out;
}

export function formatReprDigest(sha256: Uint8Array): string {
  checkAlgorithmLength('sha-256', sha256);
  return `sha-256=:${base64Encode(sha256)}:`;
}

/** Want-Repr-Digest / Want-Content-Digest: algorithm → weight (0..10). */
export function parseWantReprDigest(value: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const [alg, member] of parseDictionary(value)) {
    if (!isItem(member) || member.item.type !== 'integer') throw dtdError('DTD_ERR_SYNTAX', `Want-Repr-Digest member ${alg} is not an integer`);
    const w = member.item.value;
    if (w < 0 || w > 10) throw dtdError('DTD_ERR_BAD_WEIGHT', `weight ${w} for ${alg} is outside 0..10`);
    out.set(alg, w);
  }
  return out;
}

export function formatWantReprDigest(prefs: ReadonlyMap<string, number> | [string, number][]): string {
  const parts: string[] = [];
  for (const [alg, w] of prefs) {
    if (!/^[a-z*][a-z0-9_\-.*]*$/.test(alg)) throw dtdError('DTD_ERR_SYNTAX', `algorithm ${JSON.stringify(alg)} is not an sf-key`);
    if (!Number.isInteger(w) || w < 0 || w > 10) throw dtdError('DTD_ERR_BAD_WEIGHT', `weight ${w} is outside 0..10`);
    parts.push(`${alg}=${w}`);
  }
  return parts.join(', ');
}

function checkAlgorithmLength(alg: string, bytes: Uint8Array): void {
  if (alg === 'sha-256' && bytes.length !== SHA256_BYTES) {
    throw dtdError('DTD_ERR_DIGEST_LENGTH', `a sha-256 digest is ${SHA256_BYTES} bytes, not ${bytes.length}`);
  }
}

function splitList(value: string, field: string): string[] {
  if (value.length > MAX_FIELD_CHARS) throw dtdError('DTD_ERR_TOO_LONG', `${field} of ${value.length} characters exceeds ${MAX_FIELD_CHARS}`);
  if (/[^\x20-\x7e\t]/.test(value)) throw dtdError('DTD_ERR_SYNTAX', `${field} is ASCII only`);
  const parts = value.split(',').map((p) => p.trim()).filter((p) => p.length > 0);
  if (parts.length > MAX_MEMBERS) throw dtdError('DTD_ERR_TOO_LONG', `more than ${MAX_MEMBERS} members in ${field}`);
  return parts;
}

const TOKEN = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;

/**
 * RFC 3230 `Digest`: algorithm (case-insensitive, returned lowercase) → encoded value. SHA-256's value is
 * decoded (base64, 32 bytes); others are returned as their bytes in Latin-1 (not interpreted).
 */
export function parseDigest(value: string): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  for (const part of splitList(value, 'Digest')) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw dtdError('DTD_ERR_SYNTAX', `Digest member ${JSON.stringify(part.slice(0, 40))} has no algorithm=value`);
    const alg = part.slice(0, eq).trim().toLowerCase();
    const encoded = part.slice(eq + 1).trim();
    if (!TOKEN.test(alg)) throw dtdError('DTD_ERR_SYNTAX', 'Digest algorithm is not a token');
    if (alg === 'sha-256') {
      const bytes = base64Decode(encoded);
      checkAlgorithmLength(alg, bytes);
      out.set(alg, bytes);
    } else {
      out.set(alg, Uint8Array.from(encoded, (c) => c.charCodeAt(0)));
    }
  }
  return out;
}

export function formatDigest(sha256: Uint8Array): string {
  checkAlgorithmLength('sha-256', sha256);
  return `SHA-256=${base64Encode(sha256)}`;
}

/** RFC 3230 `Want-Digest`: algorithm (lowercase) → q (0..1; absent = 1). */
export function parseWantDigest(value: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const part of splitList(value, 'Want-Digest')) {
    const [algRaw, ...params] = part.split(';').map((p) => p.trim());
    const alg = algRaw.toLowerCase();
    if (!TOKEN.test(alg)) throw dtdError('DTD_ERR_SYNTAX', 'Want-Digest algorithm is not a token');
    let q = 1;
    for (const p of params) {
      const m = /^q\s*=\s*(\S+)$/i.exec(p);
      if (m === null) throw dtdError('DTD_ERR_SYNTAX', `Want-Digest parameter ${JSON.stringify(p.slice(0, 40))}`);
      if (!/^(0(\.[0-9]{0,3})?|1(\.0{0,3})?)$/.test(m[1])) throw dtdError('DTD_ERR_BAD_WEIGHT', `q=${m[1].slice(0, 10)} is not a qvalue`);
      q = Number(m[1]);
    }
    out.set(alg, q);
  }
  return out;
}

/** What a request asks for: sha-256 by RFC 9530 (`repr`) and/or by RFC 3230 (`legacy`). Bad fields count as absent. */
export function wantedDigests(headers: readonly (readonly [string, string])[]): { repr: boolean; legacy: boolean; errors: string[] } {
  const errors: string[] = [];
  let repr = false;
  let legacy = false;
  for (const v of getHeaders(headers, 'want-repr-digest')) {
    try {
      const w = parseWantReprDigest(v);
      // A client that asks for any digest gets sha-256 unless it refused sha-256 explicitly.
      if ((w.get('sha-256') ?? (w.size > 0 ? 1 : 0)) > 0) repr = true;
    } catch (e) {
      errors.push(codeOf(e));
    }
  }
  for (const v of getHeaders(headers, 'want-digest')) {
    try {
      const w = parseWantDigest(v);
      if ((w.get('sha-256') ?? 0) > 0) legacy = true;
    } catch (e) {
      errors.push(codeOf(e));
    }
  }
  return { repr, legacy, errors };
}

export type DigestSource = 'repr-digest' | 'digest';

/**
 * The sha-256 representation digest a response announces: Repr-Digest first, else RFC 3230 Digest. Several
 * field lines are combined; two different sha-256 values (in one field or across both) are
 * DTD_ERR_CONFLICT. Returns null when the response names no sha-256 digest. Throws DtdError on a bad field.
 */
export function responseDigest(headers: readonly (readonly [string, string])[]): { sha256: Uint8Array; source: DigestSource } | null {
  let found: { sha256: Uint8Array; source: DigestSource } | null = null;
  const take = (d: Uint8Array | undefined, source: DigestSource) => {
    if (d === undefined) return;
    if (found !== null && !digestEquals(found.sha256, d)) throw dtdError('DTD_ERR_CONFLICT', 'two different sha-256 digests for one response');
    found ??= { sha256: d, source };
  };
  const repr = getHeaders(headers, 'repr-digest');
  if (repr.length > 0) take(parseReprDigest(repr.join(', ')).get('sha-256'), 'repr-digest');
  const legacy = getHeaders(headers, 'digest');
  if (legacy.length > 0) take(parseDigest(legacy.join(', ')).get('sha-256'), 'digest');
  return found;
}

export function digestEquals(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

export function digestToHex(d: Uint8Array): string {
  let s = '';
  for (const b of d) s += b.toString(16).padStart(2, '0');
  return s;
}

export function digestFromHex(hex: string): Uint8Array {
  if (!/^[0-9a-f]{64}$/i.test(hex)) throw dtdError('DTD_ERR_DIGEST_LENGTH', 'a sha-256 digest is 64 hex digits');
  const out = new Uint8Array(SHA256_BYTES);
  for (let i = 0; i < SHA256_BYTES; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function codeOf(e: unknown): string {
  return e !== null && typeof e === 'object' && 'code' in e && typeof (e as { code: unknown }).code === 'string'
    ? (e as { code: string }).code
    : 'DTD_ERR_SYNTAX';
}
