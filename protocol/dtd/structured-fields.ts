/**
 * A small, strict RFC 8941 structured-field parser: dictionaries and items (with parameters), which is all
 * RFC 9530 (`Repr-Digest`, `Want-Repr-Digest`) and our `DTD-Mode` / `DTD-Announce` fields need.
 * Bounded: a field value ≤ 4096 characters, ≤ 64 members, ≤ 16 parameters, ≤ 32 items per inner list.
 * Everything malformed throws a DtdError (`DTD_ERR_SYNTAX`, `DTD_ERR_TOO_LONG`, `DTD_ERR_BAD_BASE64`).
 */
import { dtdError } from './errors';

export const MAX_FIELD_CHARS = 4096;
export const MAX_MEMBERS = 64;
export const MAX_PARAMS = 16;
export const MAX_INNER = 32;

export type BareItem =
  | { type: 'integer'; value: number }
  | { type: 'decimal'; value: number }
  | { type: 'string'; value: string }
  | { type: 'token'; value: string }
  | { type: 'bytes'; value: Uint8Array }
  | { type: 'boolean'; value: boolean };

export type Params = Map<string, BareItem>;
export interface Item {
  item: BareItem;
  params: Params;
}
export interface InnerList {
  inner: Item[];
  params: Params;
}
export type Member = Item | InnerList;

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Map<string, number>([...B64].map((c, i) => [c, i]));

/** Strict base64 (RFC 4648 alphabet; "=" padding optional). Throws DTD_ERR_BAD_BASE64. */
export function base64Decode(s: string): Uint8Array {
  let body = s;
  const pad = /=*$/.exec(s)?.[0].length ?? 0;
  if (pad > 2) throw dtdError('DTD_ERR_BAD_BASE64', 'too much padding');
  body = s.slice(0, s.length - pad);
  if (pad > 0 && s.length % 4 !== 0) throw dtdError('DTD_ERR_BAD_BASE64', 'padding on a length not a multiple of 4');
  if (body.length % 4 === 1) throw dtdError('DTD_ERR_BAD_BASE64', 'truncated base64');
  const out = new Uint8Array(Math.floor((body.length * 3) / 4));
  let acc = 0;
  let bits = 0;
  let o = 0;
  for (const c of body) {
    const v = B64_INDEX.get(c);
    if (v === undefined) throw dtdError('DTD_ERR_BAD_BASE64', `character ${JSON.stringify(c)} is not base64`);
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  if ((acc & ((1 << bits) - 1)) !== 0) throw dtdError('DTD_ERR_BAD_BASE64', 'non-zero trailing bits');
  return out;
}

export function base64Encode(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    s += B64[(n >> 18) & 63] + B64[(n >> 12) & 63];
    s += i + 1 < bytes.length ? B64[(n >> 6) & 63] : '=';
    s += i + 2 < bytes.length ? B64[n & 63] : '=';
  }
  return s;
}

class Reader {
  i = 0;
  constructor(readonly s: string) {}
  peek(): string {
    return this.s[this.i] ?? '';
  }
  eof(): boolean {
    return this.i >= this.s.length;
  }
  skipSp(): void {
    while (this.peek() === ' ') this.i++;
  }
  skipOws(): void {
    while (this.peek() === ' ' || this.peek() === '\t') this.i++;
  }
  fail(what: string): never {
    throw dtdError('DTD_ERR_SYNTAX', `${what} at offset ${this.i}`);
  }
}

function checkLength(value: string): void {
  if (value.length > MAX_FIELD_CHARS) throw dtdError('DTD_ERR_TOO_LONG', `field value of ${value.length} characters exceeds ${MAX_FIELD_CHARS}`);
  // Field values are visible ASCII plus SP/HTAB (our HTTP parser already refused CR/LF/NUL).
  if (/[^\x20-\x7e\t]/.test(value)) throw dtdError('DTD_ERR_SYNTAX', 'a structured field is ASCII only');
}

function parseKey(r: Reader): string {
  const c = r.peek();
  if (!/[a-z*]/.test(c) || c === '') r.fail('a key starts with a lowercase letter or *');
  const start = r.i;
  while (/[a-z0-9_\-.*]/.test(r.peek()) && r.peek() !== '') r.i++;
  return r.s.slice(start, r.i);
}

function parseBareItem(r: Reader): BareItem {
  const c = r.peek();
  if (c === '-' || /[0-9]/.test(c)) return parseNumber(r);
  if (c === '"') return parseString(r);
  if (c === ':') return parseBytes(r);
  if (c === '?') {
    r.i++;
    const b = r.peek();
    if (b !== '0' && b !== '1') r.fail('a boolean is ?0 or ?1');
    r.i++;
    return { type: 'boolean', value: b === '1' };
  }
  if (/[A-Za-z*]/.test(c) && c !== '') {
    const start = r.i;
    while (/[A-Za-z0-9!#$%&'*+\-.^_`|~:/]/.test(r.peek()) && r.peek() !== '') r.i++;
    return { type: 'token', value: r.s.slice(start, r.i) };
  }
  return r.fail('not an item');
}

function parseNumber(r: Reader): BareItem {
  const start = r.i;
  if (r.peek() === '-') r.i++;
  if (!/[0-9]/.test(r.peek()) || r.peek() === '') r.fail('a number needs a digit');
  let dot = -1;
  while (r.peek() !== '' && (/[0-9]/.test(r.peek()) || (r.peek() === '.' && dot < 0))) {
    if (r.peek() === '.') dot = r.i;
    r.i++;
    if (r.i - start > 20) r.fail('number too long');
  }
  const text = r.s.slice(start, r.i);
  const digits = text.replace('-', '');
  if (dot < 0) {
    if (digits.length > 15) r.fail('integer longer than 15 digits');
    return { type: 'integer', value: Number(text) };
  }
  const [intPart, frac] = digits.split('.');
  if (intPart.length > 12 || frac.length === 0 || frac.length > 3) r.fail('bad decimal');
  return { type: 'decimal', value: Number(text) };
}

function parseString(r: Reader): BareItem {
  r.i++;
  let out = '';
  for (;;) {
    const c = r.peek();
    if (c === '') r.fail('unterminated string');
    r.i++;
    if (c === '"') return { type: 'string', value: out };
    if (c === '\\') {
      const n = r.peek();
      if (n !== '"' && n !== '\\') r.fail('bad escape in string');
      r.i++;
      out += n;
    } else if (c === '\t') {
      r.fail('tab in string');
    } else {
      out += c;
    }
  }
}

function parseBytes(r: Reader): BareItem {
  r.i++;
  const end = r.s.indexOf(':', r.i);
  if (end < 0) r.fail('unterminated byte sequence');
  const text = r.s.slice(r.i, end);
  r.i = end + 1;
  return { type: 'bytes', value: base64Decode(text) };
}

function parseParams(r: Reader): Params {
  const params: Params = new Map();
  while (r.peek() === ';') {
    r.i++;
    r.skipSp();
    const key = parseKey(r);
    let value: BareItem = { type: 'boolean', value: true };
    if (r.peek() === '=') {
      r.i++;
      value = parseBareItem(r);
    }
    params.delete(key);
    params.set(key, value);
    if (params.size > MAX_PARAMS) throw dtdError('DTD_ERR_TOO_LONG', `more than ${MAX_PARAMS} parameters`);
  }
  return params;
}

function parseItemOrInner(r: Reader): Member {
  if (r.peek() === '(') {
    r.i++;
    const inner: Item[] = [];
    for (;;) {
      r.skipSp();
      if (r.peek() === ')') {
        r.i++;
        return { inner, params: parseParams(r) };
      }
      const item = parseBareItem(r);
      inner.push({ item, params: parseParams(r) });
      if (inner.length > MAX_INNER) throw dtdError('DTD_ERR_TOO_LONG', `inner list longer than ${MAX_INNER}`);
      const c = r.peek();
      if (c !== ' ' && c !== ')') r.fail('inner list items are separated by spaces');
    }
  }
  const item = parseBareItem(r);
  return { item, params: parseParams(r) };
}

/** Parses an sf-dictionary. Duplicate keys: the last one wins (RFC 8941 4.2.2). An empty value is an empty map. */
export function parseDictionary(value: string): Map<string, Member> {
  checkLength(value);
  const r = new Reader(value);
  const out = new Map<string, Member>();
  r.skipSp();
  while (!r.eof()) {
    const key = parseKey(r);
    let member: Member;
    if (r.peek() === '=') {
      r.i++;
      member = parseItemOrInner(r);
    } else {
      member = { item: { type: 'boolean', value: true }, params: parseParams(r) };
    }
    out.delete(key);
    out.set(key, member);
    if (out.size > MAX_MEMBERS) throw dtdError('DTD_ERR_TOO_LONG', `more than ${MAX_MEMBERS} members`);
    r.skipOws();
    if (r.eof()) break;
    if (r.peek() !== ',') r.fail('members are separated by commas');
    r.i++;
    r.skipOws();
    if (r.eof()) r.fail('trailing comma');
  }
  return out;
}

/** Parses an sf-item (a bare item with parameters). */
export function parseItem(value: string): Item {
  checkLength(value);
  const r = new Reader(value);
  r.skipSp();
  const item = parseBareItem(r);
  const params = parseParams(r);
  r.skipSp();
  if (!r.eof()) r.fail('trailing characters after the item');
  return { item, params };
}

export function isItem(m: Member): m is Item {
  return 'item' in m;
}
