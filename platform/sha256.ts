// sha-256 with Node's crypto, for the host (app/) and the server (server/): DTD digests, CATP block digests,
// address tokens. protocol/ is Node-free and takes this function as an argument where it needs one.
import * as crypto from 'node:crypto';

// One-shot `crypto.hash` (Node 20.12+, 21.7+): no Hash object per call, which for a CATP frame's kilobyte was half
// the cost of its digest (and, on a cold client, most of it). Older Node falls back to createHash.
const oneShot: ((bytes: Uint8Array) => Buffer) | null =
  typeof crypto.hash === 'function' ? (bytes) => crypto.hash('sha256', bytes, 'buffer') : null;

/** The sha-256 digest of `bytes` (32 bytes). */
export function sha256(bytes: Uint8Array): Uint8Array {
  const d = oneShot !== null ? oneShot(bytes) : crypto.createHash('sha256').update(bytes).digest();
  return new Uint8Array(d); // a copy: callers may keep it, and must not hold a slice of Node's buffer pool
}
