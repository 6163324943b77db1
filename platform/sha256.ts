// sha-256 with Node's crypto, for the host (app/) and the server (server/): DTD digests, CATP block digests,
// address tokens. protocol/ is Node-free and takes this function as an argument where it needs one.
import { createHash } from 'node:crypto';

/** The sha-256 digest of `bytes` (32 bytes). */
export function sha256(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(createHash('sha256').update(bytes).digest());
}
