/**
 * DHTTP message framing (see protocol/README.md).
 *
 *   Request  = ID(8) | otherPort(2, big-endian) | flags(1; bit 0 = resend, others 0) | HTTP/1.1 request
 *   Response = ID(8) | HTTP/1.1 response
 *   Padding  = ID(8) | otherPort(2) | flags(1) = 2 | zeros (≥ 1)      (UDP only; see FLAG_PADDING)
 *   Copy     = ID(8) | otherPort(2) | flags(1) = 4 | HTTP/1.1 request (UDP only; see FLAG_COPY)
 *
 * Every request ID has the top bit of byte 0 set (63 random bits), so the first byte of a TCP
 * connection tells a DHTTP request stream (>= 0x80) from plain HTTP/1.1 (an ASCII token char).
 */
import { LocalProtocolError, RemoteProtocolError } from '../errors';
import { toHex } from './bytes';

export const ID_BYTES = 8;
/** ID(8) + otherPort(2) + flags(1). */
export const REQUEST_PREFIX_BYTES = 11;
/** Largest UDP payload a DHTTP datagram may carry (one Ethernet MTU minus IP and UDP/TCP headers). */
export const MAX_DATAGRAM_PAYLOAD = 1460;
/** Flags bit 0: this request is a resend of one sent before with the same ID. */
export const FLAG_RESEND = 1;
/**
 * Flags = 2 (alone): a padding datagram sent right behind a first-contact stream request's resend (the first
 * attempt sends a copy instead, FLAG_COPY) with the same ID. It
 * carries nothing but zeros; the server counts its bytes toward the sender's address budget (no more than the
 * address sent, address-validation.ts), so the stream's first flight may go on. UDP only: a DHTTP request stream over TCP
 * refuses the bit (decodeRequestPrefix), and so does a server that predates it (its bytes count all the same).
 */
export const FLAG_PADDING = 2;
/**
 * Flags = 4 (alone): a padded copy of a first-contact stream request, sent right behind it with the same ID. Where
 * the request came, the server takes the copy as its padding (its bytes in the address's budget, the pair's
 * dispersion); where the request was lost, the copy is the request, and the load does not wait for a resend. A
 * first contact's resend is followed by a padding datagram instead (a copy never has the resend bit). UDP only,
 * like FLAG_PADDING: a DHTTP request stream over TCP refuses it, and so does a server that predates it.
 */
export const FLAG_COPY = 4;
/** Ports below this are refused in the otherPort field (DHTTP paper IV-C: no low client ports). */
export const MIN_CLIENT_PORT = 1024;

export interface DhttpRequestMessage {
  /** 8 bytes, top bit of byte 0 set. */
  id: Uint8Array;
  /** The client's port on the *other* channel (TCP port when sent over UDP, UDP port when over TCP). */
  otherPort: number;
  resend: boolean;
  /** A first contact's padded copy of the request (FLAG_COPY; UDP only, never with `resend`). */
  copy?: boolean;
  /** The HTTP/1.1 request bytes. */
  http: Uint8Array;
}

export interface DhttpResponseMessage {
  id: Uint8Array;
  http: Uint8Array;
}

/** True when `id` is a well-formed request ID: 8 bytes, top bit set. */
export function isValidId(id: Uint8Array): boolean {
  return id.length === ID_BYTES && (id[0] & 0x80) !== 0;
}

/** True when the first byte of a TCP connection starts a DHTTP request stream (an ID has its top bit set). */
export function isDhttpStreamStart(firstByte: number): boolean {
  return (firstByte & 0x80) !== 0;
}

/** Draw a request ID: 8 bytes from the CSPRNG with the top bit of byte 0 forced on (63 random bits). */
export function newRequestId(randomBytes: (n: number) => Uint8Array): Uint8Array {
  const raw = randomBytes(ID_BYTES);
  if (!(raw instanceof Uint8Array) || raw.length < ID_BYTES) {
    throw new LocalProtocolError('DHTTP_ERR_RANDOM', `randomBytes(${ID_BYTES}) returned too few bytes`);
  }
  const id = raw.slice(0, ID_BYTES);
  id[0] |= 0x80;
  return id;
}

export function idToHex(id: Uint8Array): string {
  return toHex(id);
}

/** Parse 16 hex digits back into an ID (throws LocalProtocolError DHTTP_ERR_BAD_ID). */
export function hexToId(hex: string): Uint8Array {
  if (!/^[0-9a-fA-F]{16}$/.test(hex)) {
    throw new LocalProtocolError('DHTTP_ERR_BAD_ID', 'a request id is 16 hex digits');
  }
  const id = new Uint8Array(ID_BYTES);
  for (let i = 0; i < ID_BYTES; i++) id[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return id;
}

function isValidPort(p: number): boolean {
  return Number.isInteger(p) && p >= MIN_CLIENT_PORT && p <= 0xffff;
}

/** `length` bytes (zeros) starting with the 11-byte request prefix. Throws LocalProtocolError on a bad id or port. */
function withPrefix(id: Uint8Array, otherPort: number, flags: number, length: number): Uint8Array {
  if (!isValidId(id)) throw new LocalProtocolError('DHTTP_ERR_BAD_ID', 'request id must be 8 bytes with the top bit set');
  if (!isValidPort(otherPort)) {
    throw new LocalProtocolError('DHTTP_ERR_BAD_PORT', `otherPort ${otherPort} is not in ${MIN_CLIENT_PORT}..65535`);
  }
  const out = new Uint8Array(length);
  out.set(id, 0);
  out[8] = otherPort >> 8;
  out[9] = otherPort & 0xff;
  out[10] = flags;
  return out;
}

/** Request datagram / TCP message bytes. Throws LocalProtocolError on a bad id or port. */
export function encodeRequest(msg: DhttpRequestMessage): Uint8Array {
  const { id, otherPort, resend, http } = msg;
  if (msg.copy === true && resend) throw new LocalProtocolError('DHTTP_ERR_BAD_FLAGS', 'a request copy is never a resend');
  const out = withPrefix(id, otherPort, msg.copy === true ? FLAG_COPY : resend ? FLAG_RESEND : 0, REQUEST_PREFIX_BYTES + http.length);
  out.set(http, REQUEST_PREFIX_BYTES);
  return out;
}

/** The ID and otherPort of a request prefix. Throws RemoteProtocolError DHTTP_ERR_BAD_ID / DHTTP_ERR_BAD_PORT. */
function decodeIdPort(prefix: Uint8Array): { id: Uint8Array; otherPort: number } {
  const id = prefix.slice(0, ID_BYTES);
  if (!isValidId(id)) throw new RemoteProtocolError('DHTTP_ERR_BAD_ID', 'request id must have the top bit set');
  const otherPort = (prefix[8] << 8) | prefix[9];
  if (!isValidPort(otherPort)) throw new RemoteProtocolError('DHTTP_ERR_BAD_PORT', `otherPort ${otherPort} is below ${MIN_CLIENT_PORT}`);
  return { id, otherPort };
}

/**
 * Check the 11-byte prefix of a request (shared by the datagram decoder and the TCP request stream, which leaves
 * `allowCopy` off: FLAG_COPY is UDP only). Throws RemoteProtocolError DHTTP_ERR_BAD_ID / DHTTP_ERR_BAD_PORT /
 * DHTTP_ERR_BAD_FLAGS.
 */
export function decodeRequestPrefix(prefix: Uint8Array, allowCopy = false): { id: Uint8Array; otherPort: number; resend: boolean; copy: boolean } {
  if (prefix.length < REQUEST_PREFIX_BYTES) throw new RemoteProtocolError('DHTTP_ERR_SHORT', 'request prefix is 11 bytes');
  const { id, otherPort } = decodeIdPort(prefix);
  const flags = prefix[10];
  const copy = allowCopy && flags === FLAG_COPY;
  if (!copy && (flags & ~FLAG_RESEND) !== 0) throw new RemoteProtocolError('DHTTP_ERR_BAD_FLAGS', `unknown flag bits 0x${flags.toString(16)}`);
  return { id, otherPort, resend: (flags & FLAG_RESEND) !== 0, copy };
}

/**
 * Decode a request datagram, or a first contact's copy of one (`copy`). `http` is a view into `buf` (not parsed
 * here: see parseRequestDatagram). Throws RemoteProtocolError: DHTTP_ERR_SHORT (no HTTP bytes after the 11-byte prefix),
 * DHTTP_ERR_TOO_LARGE (> MAX_DATAGRAM_PAYLOAD), DHTTP_ERR_BAD_ID, DHTTP_ERR_BAD_PORT, DHTTP_ERR_BAD_FLAGS.
 */
export function decodeRequest(buf: Uint8Array): DhttpRequestMessage {
  if (buf.length <= REQUEST_PREFIX_BYTES) {
    throw new RemoteProtocolError('DHTTP_ERR_SHORT', `request datagram of ${buf.length} bytes has no HTTP request`);
  }
  if (buf.length > MAX_DATAGRAM_PAYLOAD) {
    throw new RemoteProtocolError('DHTTP_ERR_TOO_LARGE', `request datagram of ${buf.length} bytes exceeds ${MAX_DATAGRAM_PAYLOAD}`);
  }
  const p = decodeRequestPrefix(buf, true);
  return { id: p.id, otherPort: p.otherPort, resend: p.resend, copy: p.copy, http: buf.subarray(REQUEST_PREFIX_BYTES) };
}

/** A padding datagram of `bytes` bytes in all (≥ 12) for request `id`. Throws LocalProtocolError on a bad id, port or size. */
export function encodePadding(id: Uint8Array, otherPort: number, bytes: number): Uint8Array {
  if (!Number.isInteger(bytes) || bytes <= REQUEST_PREFIX_BYTES || bytes > MAX_DATAGRAM_PAYLOAD) {
    throw new LocalProtocolError('DHTTP_ERR_BAD_OPTIONS', `a padding datagram is ${REQUEST_PREFIX_BYTES + 1}..${MAX_DATAGRAM_PAYLOAD} bytes, not ${bytes}`);
  }
  return withPrefix(id, otherPort, FLAG_PADDING, bytes);
}

/** True when a datagram claims to be padding (its flags byte is FLAG_PADDING); decodePadding checks the rest. */
export function isPaddingDatagram(buf: Uint8Array): boolean {
  return buf.length > REQUEST_PREFIX_BYTES && buf[10] === FLAG_PADDING;
}

/** True when a datagram claims to be a first contact's copy of its request (flags = FLAG_COPY); decodeRequest checks the rest. */
export function isRequestCopy(buf: Uint8Array): boolean {
  return buf.length > REQUEST_PREFIX_BYTES && buf[10] === FLAG_COPY;
}

/**
 * Decode a padding datagram: the ID it pads for. Throws RemoteProtocolError DHTTP_ERR_TOO_LARGE, DHTTP_ERR_BAD_ID,
 * DHTTP_ERR_BAD_PORT, DHTTP_ERR_BAD_FLAGS, DHTTP_ERR_BAD_PADDING (a byte after the prefix that is not zero).
 */
export function decodePadding(buf: Uint8Array): { id: Uint8Array } {
  if (buf.length <= REQUEST_PREFIX_BYTES) throw new RemoteProtocolError('DHTTP_ERR_SHORT', `padding datagram of ${buf.length} bytes`);
  if (buf.length > MAX_DATAGRAM_PAYLOAD) throw new RemoteProtocolError('DHTTP_ERR_TOO_LARGE', `padding datagram of ${buf.length} bytes exceeds ${MAX_DATAGRAM_PAYLOAD}`);
  if (buf[10] !== FLAG_PADDING) throw new RemoteProtocolError('DHTTP_ERR_BAD_FLAGS', `a padding datagram's flags are ${FLAG_PADDING}, not 0x${buf[10].toString(16)}`);
  const { id } = decodeIdPort(buf);
  for (let i = REQUEST_PREFIX_BYTES; i < buf.length; i++) {
    if (buf[i] !== 0) throw new RemoteProtocolError('DHTTP_ERR_BAD_PADDING', `padding byte ${i} is 0x${buf[i].toString(16)}, not 0`);
  }
  return { id };
}

/** Response bytes (datagram or TCP message): ID | HTTP response. */
export function encodeResponse(id: Uint8Array, http: Uint8Array): Uint8Array {
  if (!isValidId(id)) throw new LocalProtocolError('DHTTP_ERR_BAD_ID', 'response id must be 8 bytes with the top bit set');
  const out = new Uint8Array(ID_BYTES + http.length);
  out.set(id, 0);
  out.set(http, ID_BYTES);
  return out;
}

/**
 * Decode a response datagram. `http` is a view into `buf` (parse it with parseResponseDatagram).
 * Throws RemoteProtocolError DHTTP_ERR_SHORT, DHTTP_ERR_TOO_LARGE, DHTTP_ERR_BAD_ID.
 */
export function decodeResponseDatagram(buf: Uint8Array): DhttpResponseMessage {
  if (buf.length <= ID_BYTES) {
    throw new RemoteProtocolError('DHTTP_ERR_SHORT', `response datagram of ${buf.length} bytes has no HTTP response`);
  }
  if (buf.length > MAX_DATAGRAM_PAYLOAD) {
    throw new RemoteProtocolError('DHTTP_ERR_TOO_LARGE', `response datagram of ${buf.length} bytes exceeds ${MAX_DATAGRAM_PAYLOAD}`);
  }
  const id = buf.slice(0, ID_BYTES);
  if (!isValidId(id)) throw new RemoteProtocolError('DHTTP_ERR_BAD_ID', 'response id must have the top bit set');
  return { id, http: buf.subarray(ID_BYTES) };
}
