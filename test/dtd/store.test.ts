// The payload store on cacache: verified writes and reads, corruption removal, LRU budget, several payloads
// per URL, the privacy scope, and a real SIGKILL in the middle of a large write.
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

import ts from 'typescript';

import { PayloadStore, StoreError, defaultStoreDir, siteOf } from '../../app/payload-store';
import { sha256 } from '../../platform/sha256';
import { tempDir } from './helpers';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('catp-store-');
});
afterEach(() => dir.cleanup());

const A = 'dhttp://a.example:8080/x.bin';
const A2 = 'dhttp://a.example:8080/other.bin';
const B = 'dhttp://b.example:8080/y.bin';

/** Every file under `root`/`sub`, recursively (none when it does not exist). */
function filesUnder(root: string, sub: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    let names: string[] = [];
    try {
      names = readdirSync(d);
    } catch {
      return;
    }
    for (const n of names) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(p);
    }
  };
  walk(join(root, sub));
  return out;
}

const contentFiles = (root: string): string[] => filesUnder(root, 'content-v2');

test('defaults: location under XDG_CACHE_HOME, 256 MiB, site scope', () => {
  expect(defaultStoreDir({ XDG_CACHE_HOME: '/x/cache' })).toBe('/x/cache/catp-browser/payloads');
  expect(defaultStoreDir({})).toMatch(/\.cache\/catp-browser\/payloads$/);
  expect(siteOf('dhttp://Example.org/a')).toBe('dhttp://example.org:80');
  expect(siteOf('http://127.0.0.1:8080/a?b')).toBe('http://127.0.0.1:8080');
});

test('put verifies against the announced digest and refuses wrong bytes; get verifies and serves', async () => {
  const store = await PayloadStore.open({ dir: dir.dir });
  const body = randomBytes(10_000);
  await expect(store.put(A, body, sha256(randomBytes(10)))).rejects.toMatchObject({ code: 'STORE_ERR_INTEGRITY' });
  expect(store.list()).toHaveLength(0);
  expect(contentFiles(dir.dir)).toHaveLength(0);
  const { digest } = await store.put(A, body, sha256(body));
  expect(store.lookup(digest, A)).toEqual({ hit: true, size: body.length });
  expect(Buffer.from((await store.get(digest, A)) as Uint8Array).equals(body)).toBe(true);
});

test('a corrupted payload is refused on read and removed', async () => {
  const store = await PayloadStore.open({ dir: dir.dir });
  const body = randomBytes(5000);
  const { digest } = await store.put(A, body);
  const [file] = contentFiles(dir.dir);
  const bytes = readFileSync(file);
  bytes[100] ^= 0xff;
  writeFileSync(file, bytes);
  expect(await store.get(digest, A)).toBeNull();
  expect(store.lookup(digest, A).hit).toBe(false);
  expect(store.counters().corruptRemoved).toBe(1);
  await store.flush();
  expect(contentFiles(dir.dir)).toHaveLength(0);
  const reopened = await PayloadStore.open({ dir: dir.dir });
  expect(reopened.list()).toHaveLength(0);
});

test('a FIFO planted under a payload\'s name is never opened: a miss at once, removed (a read would block for ever)', async () => {
  const store = await PayloadStore.open({ dir: dir.dir });
  const { digest } = await store.put(A, randomBytes(5000));
  const [file] = contentFiles(dir.dir);
  // the store's idea of cacache's layout is right: the payload's file is where it looks
  expect(relative(dir.dir, file!)).toBe(join('content-v2', 'sha256', Buffer.from(sha256(readFileSync(file!))).toString('hex').replace(/^(..)(..)/, '$1/$2/')));
  rmSync(file!);
  execFileSync('mkfifo', [file!]);
  const t0 = Date.now();
  expect(await store.get(digest, A)).toBeNull();
  expect(Date.now() - t0).toBeLessThan(2000);
  expect(store.counters().corruptRemoved).toBe(1);
  expect(store.lookup(digest, A).hit).toBe(false);
});

test('several payloads per URL; LRU eviction keeps the byte budget', async () => {
  const store = await PayloadStore.open({ dir: dir.dir, budgetBytes: 30_000, maxEntryBytes: 30_000 });
  const p = [randomBytes(10_000), randomBytes(10_000), randomBytes(10_000), randomBytes(10_000)];
  const d0 = (await store.put(A, p[0])).digest;
  const d1 = (await store.put(A, p[1])).digest;
  expect(store.byUrl(A)).toHaveLength(2);
  const d2 = (await store.put(A2, p[2])).digest;
  expect(await store.get(d0, A)).not.toBeNull(); // d0 used again: d1 is now the least recently used
  await store.put(A2, p[3]);
  await store.flush();
  expect(store.counters().bytes).toBeLessThanOrEqual(30_000);
  expect(store.lookup(d1, A).hit).toBe(false);
  expect(store.lookup(d0, A).hit).toBe(true);
  expect(store.lookup(d2, A2).hit).toBe(true);
  expect(store.counters().evictions).toBe(1);
  const reopened = await PayloadStore.open({ dir: dir.dir, budgetBytes: 30_000 });
  expect(reopened.list().map((e) => e.digestHex).sort()).toEqual(store.list().map((e) => e.digestHex).sort());
  expect(reopened.byUrl(A).map((e) => e.digestHex)).toEqual([Buffer.from(d0).toString('hex')]);
});

/** Index lines on disk (cacache appends one per insert or delete and never shortens a bucket). */
function indexLines(root: string): number {
  return filesUnder(root, 'index-v5').reduce((n, f) => n + readFileSync(f, 'utf8').split('\n').filter((l) => l.includes('\t')).length, 0);
}

test('the index is compacted when most of its lines are stale: one line per payload, evicted ones gone, everything still served', async () => {
  const store = await PayloadStore.open({ dir: dir.dir, budgetBytes: 30_000, maxEntryBytes: 30_000, maxUrlsPerEntry: 4 });
  const kept = randomBytes(5_000);
  const d = (await store.put(A, kept)).digest;
  // every new URL for the same payload appends a line (150 of them), and evictions append deletions
  for (let i = 0; i < 150; i++) await store.put(`dhttp://a.example:8080/copy-${i}.bin`, kept);
  for (let i = 0; i < 6; i++) {
    await store.put(A2, randomBytes(10_000));
    expect(await store.get(d, A)).not.toBeNull(); // the kept payload stays the most recently used
  }
  expect(store.counters().evictions).toBeGreaterThan(0);
  await store.flush();
  const before = indexLines(dir.dir);
  expect(before).toBeGreaterThan(150);
  const live = store.list().length;
  const reopened = await PayloadStore.open({ dir: dir.dir, budgetBytes: 30_000 });
  await reopened.flush(); // the compaction runs in the store's write queue
  expect(reopened.counters().indexCompactions).toBe(1);
  expect(indexLines(dir.dir)).toBe(live);
  expect(reopened.counters().indexLinesDropped).toBe(before - live);
  expect(Buffer.from((await reopened.get(d, A))!).equals(kept)).toBe(true);
  expect(reopened.byUrl('dhttp://a.example:8080/copy-149.bin')).toHaveLength(1);
  // and a third open reads the same store, with nothing left to compact
  const third = await PayloadStore.open({ dir: dir.dir, budgetBytes: 30_000 });
  await third.flush();
  expect(third.counters().indexCompactions).toBe(0);
  expect(third.list().map((e) => e.digestHex).sort()).toEqual(reopened.list().map((e) => e.digestHex).sort());
});

test('privacy scope: a payload from site A is no hit for site B unless widened', async () => {
  const store = await PayloadStore.open({ dir: dir.dir });
  const body = randomBytes(2000);
  const { digest } = await store.put(A, body);
  expect(store.lookup(digest, A2).hit).toBe(true); // same site, another URL
  expect(store.lookup(digest, B)).toEqual({ hit: false, reason: 'other-site' });
  expect(await store.get(digest, B)).toBeNull();
  // B transferring it in full itself makes it B's too (B knows it sent it).
  await store.put(B, body);
  expect(store.lookup(digest, B).hit).toBe(true);
  const wide = await PayloadStore.open({ dir: tempDir('catp-store-wide-').dir, scope: 'any' });
  const w = await wide.put(A, body);
  expect(wide.lookup(w.digest, B).hit).toBe(true);
});

test('bad options are refused with a named error', async () => {
  await expect(PayloadStore.open({ dir: dir.dir, budgetBytes: 0 })).rejects.toBeInstanceOf(StoreError);
});

/** The child script and the store, transpiled to plain JS (the child runs outside jest). */
function buildChild(): string {
  const out = tempDir('catp-store-child-').dir;
  const root = join(__dirname, '..', '..');
  for (const rel of ['app/payload-store.ts', 'app/errors.ts', 'platform/sha256.ts', 'protocol/errors.ts', 'protocol/dhttp/url.ts', 'test/dtd/store-writer-child.ts']) {
    const js = ts.transpileModule(readFileSync(join(root, rel), 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
    }).outputText;
    mkdirSync(join(out, rel, '..'), { recursive: true });
    writeFileSync(join(out, rel.replace(/\.ts$/, '.js')), js);
  }
  return join(out, 'test', 'dtd', 'store-writer-child.js');
}

test('SIGKILL in the middle of a large write leaves a store that serves only verified payloads', async () => {
  const script = buildChild();
  const size = 48 * 1024 * 1024;
  const child = spawn(process.execPath, [script, dir.dir, String(size)], {
    env: { ...process.env, NODE_PATH: join(__dirname, '..', '..', 'node_modules') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  const killed = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, sig) => resolve(sig)));
  await new Promise<void>((resolve, reject) => {
    // a child that ends before its third write (it failed to load, say) fails the test at once, not at its timeout
    child.on('exit', (code, sig) => {
      if (sig !== 'SIGKILL') reject(new Error(`the writer child ended early (code ${code}, signal ${sig}); output: ${out}`));
    });
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      // Two payloads are in; the third is being written: kill it a little way into that write.
      if (out.includes('writing 2\n')) {
        setTimeout(() => {
          child.kill('SIGKILL');
          resolve();
        }, 60);
      }
    });
  });
  expect(await killed).toBe('SIGKILL');
  expect(out).not.toContain('wrote 2\n');

  // No file under a final content name holds anything but the bytes its name says.
  for (const f of contentFiles(dir.dir)) {
    const name = relative(join(dir.dir, 'content-v2', 'sha512'), f);
    const nameHex = relative(join(dir.dir, 'content-v2', 'sha256'), f).split('/').join('');
    expect(name.startsWith('..')).toBe(true); // only sha256 content
    expect(createHash('sha256').update(readFileSync(f)).digest('hex')).toBe(nameHex);
  }
  const store = await PayloadStore.open({ dir: dir.dir, budgetBytes: 1024 * 1024 * 1024, maxEntryBytes: size * 2 });
  const entries = store.list();
  expect(entries.length).toBeGreaterThanOrEqual(2);
  for (const e of entries) {
    const body = await store.get(Buffer.from(e.digestHex, 'hex'), e.urls[0]);
    if (body === null) continue; // an index line whose content did not make it: refused, removed
    expect(createHash('sha256').update(body).digest('hex')).toBe(e.digestHex);
    expect(body.length).toBe(size);
  }
  const verified = (await Promise.all(store.list().map((e) => store.get(Buffer.from(e.digestHex, 'hex'), e.urls[0])))).filter((b) => b !== null);
  expect(verified.length).toBeGreaterThanOrEqual(2);
}, 60_000);
