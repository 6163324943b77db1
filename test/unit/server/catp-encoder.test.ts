// The CATP encode pool (server/catp-encoder.ts) with a real worker thread: one job per page version and
// quality, a queue bounded in bytes, a worker that dies fails its job and the next job gets a new worker.
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { CatpEncoder } from '../../../server/catp-encoder';
import { encodeForMode } from '../../../server/catp-encode';

jest.setTimeout(60_000);

const page = (n: number): Uint8Array =>
  new TextEncoder().encode(`<!doctype html><title>p</title>${Array.from({ length: n }, (_, i) => `<p class=c${i % 7}>paragraph ${i} of the page</p>`).join('')}`);

test('a worker thread encodes exactly what the server thread would, once per page version and quality', async () => {
  const enc = new CatpEncoder();
  try {
    expect(enc.threaded).toBe(true); // dist/server/catp-encode-worker.js is built before the tests run
    const body = page(400);
    const a = enc.encode('v1', 'catp', body, 'content', 'fast');
    const b = enc.encode('v1', 'catp', body, 'content', 'fast');
    expect(a).not.toBeNull();
    expect(b).toBe(a); // one job, however many ask
    const r = await a!;
    if ('failed' in r) throw new Error(r.failed);
    const local = encodeForMode('catp', body, 'content', 'fast');
    expect(r.indexFrames).toBe(local.indexFrames);
    expect(r.frames.map((f) => Buffer.from(f).toString('hex'))).toEqual(local.frames.map((f) => Buffer.from(f).toString('hex')));
    expect(r.quality).toBe('fast');
    const best = await enc.encode('v1', 'catp', body, 'content', 'best')!;
    if ('failed' in best) throw new Error(best.failed);
    expect(best.quality).toBe('best');
    expect(enc.c.catpEncodesFast).toBe(1);
    expect(enc.c.catpEncodesBest).toBe(1);
  } finally {
    enc.close();
  }
});

test('the queue is bounded in bytes: a job beyond it is refused and counted; close fails what waits', async () => {
  const enc = new CatpEncoder({ maxQueuedBytes: 50_000 });
  const body = page(800); // ~35 KB
  expect(body.length).toBeLessThan(50_000);
  const running = enc.encode('a', 'catp', body, 'content', 'best'); // taken by the worker at once
  const waiting = enc.encode('b', 'catp', body, 'content', 'best'); // waits: ~35 KB queued
  expect(running).not.toBeNull();
  expect(waiting).not.toBeNull();
  expect(enc.encode('c', 'catp', body, 'content', 'best')).toBeNull(); // ~70 KB > 50 KB
  expect(enc.c.catpEncodeQueueFull).toBe(1);
  enc.close();
  expect(await waiting!).toEqual({ failed: 'CATP_ERR_ENCODER_CLOSED' });
  expect(enc.encode('d', 'catp', body, 'content', 'best')).toBeNull();
});

test('a worker that dies fails its job (counted); the next job gets a new worker', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-encoder-'));
  const script = path.join(dir, 'dies.js');
  // dies on its first job only (a marker file remembers), then answers like the real worker
  const marker = path.join(dir, 'died');
  const real = path.resolve(__dirname, '../../../dist/server/catp-encode-worker.js');
  fs.writeFileSync(script, `const fs = require('fs'); if (!fs.existsSync(${JSON.stringify(marker)})) { require('worker_threads').parentPort.on('message', () => { fs.writeFileSync(${JSON.stringify(marker)}, ''); process.exit(3); }); } else { require(${JSON.stringify(real)}); }`);
  const enc = new CatpEncoder({ workerScript: script });
  try {
    const body = page(50);
    expect(await enc.encode('x', 'catp', body, 'content', 'fast')!).toEqual({ failed: 'CATP_ERR_ENCODER_CRASHED' });
    expect(enc.c.catpEncoderCrashes).toBe(1);
    const again = await enc.encode('x', 'catp', body, 'content', 'fast')!;
    expect('failed' in again).toBe(false);
  } finally {
    enc.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
