// Shared setup for the DTD tests: a served directory, a reference server, a host with a payload store.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { DhttpHost, type DhttpHostOptions } from '../../app';
import { PayloadStore, type PayloadStoreOptions } from '../../app/payload-store';
import type { DtdPolicyOptions } from '../../protocol/dtd';

export function tempDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  // a store's background write may still be landing in it: retry (ENOTEMPTY) rather than fail the test
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 }) };
}

let mtimeCounter = 1_600_000_000;
/** Writes a file with a fresh, distinct mtime (the server's ETag is size + mtime). */
export function writeServed(root: string, name: string, body: Uint8Array): void {
  writeFileSync(join(root, name), body);
  mtimeCounter += 10;
  utimesSync(join(root, name), mtimeCounter, mtimeCounter);
}

export function payload(n: number): Buffer {
  return randomBytes(n);
}

export async function hostWithStore(
  storeDir: string,
  dtd: DtdPolicyOptions,
  storeOpts: Partial<PayloadStoreOptions> = {},
  hostOpts: Partial<DhttpHostOptions> = {},
): Promise<{ host: DhttpHost; store: PayloadStore }> {
  const store = await PayloadStore.open({ dir: storeDir, ...storeOpts });
  const host = new DhttpHost({ client: { initialTimeoutMs: 400 }, ...hostOpts, store, dtd });
  return { host, store };
}
