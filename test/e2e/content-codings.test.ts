// Content codings on the host's plain HTTP/1.1 path (issue "Browse the real web", item 3): it asks for gzip, deflate
// and br, decodes what comes (the reference server's br, a server's gzip and raw deflate), and a corrupt body, an
// unknown coding or a body that decodes past the size limit is a named error, never garbage.
import { createServer, type Server, type Socket } from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as zlib from 'node:zlib';

import { DhttpHost } from '../../app';
import { getHeader } from '../../protocol/dhttp';
import { startServer, type DhttpServer } from '../../server';

const page = Buffer.from(`<!doctype html><title>coded</title>${'<p>a paragraph that compresses well</p>\n'.repeat(400)}`);

/** A one-answer-per-connection HTTP/1.1 server: `answer` gives the coding and the body for each request. */
function rawServer(answer: (req: string) => { coding: string; body: Buffer }): Promise<{ server: Server; port: number; requests: string[] }> {
  const requests: string[] = [];
  const server = createServer((sock: Socket) => {
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      if (!buf.includes('\r\n\r\n')) return;
      requests.push(buf);
      const { coding, body } = answer(buf);
      sock.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Encoding: ${coding}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`), body]));
    });
    sock.on('error', () => undefined);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok({ server, port: (server.address() as { port: number }).port, requests })));
}

describe('the host decodes plain HTTP/1.1 answers', () => {
  let root: string;
  let ref: DhttpServer;
  let host: DhttpHost;
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'catp-e2e-coding-'));
    writeFileSync(join(root, 'page.html'), page);
    ref = await startServer({ root, port: 0, host: '127.0.0.1' });
    host = new DhttpHost({ client: { maxBodyBytes: 1024 * 1024 } });
  });
  afterAll(async () => {
    host.close();
    await ref.close();
    rmSync(root, { recursive: true, force: true });
  });

  test("the reference server's br answer comes out as the page", async () => {
    const r = await host.fetch(`http://127.0.0.1:${ref.port}/page.html`);
    expect(Buffer.from(r.response.body).equals(readFileSync(join(root, 'page.html')))).toBe(true);
    expect(getHeader(r.response.headers, 'content-encoding')).toBeNull();
    expect(getHeader(r.response.headers, 'content-length')).toBe(String(page.length));
    expect(getHeader(r.response.headers, 'vary')).toBe('Accept-Encoding'); // it was coded on the way
  });

  test.each([
    ['gzip', (b: Buffer) => zlib.gzipSync(b)],
    ['deflate', (b: Buffer) => zlib.deflateSync(b)],
    ['deflate', (b: Buffer) => zlib.deflateRawSync(b)], // raw DEFLATE, as some servers send it
    ['br', (b: Buffer) => zlib.brotliCompressSync(b)],
    ['gzip, br', (b: Buffer) => zlib.brotliCompressSync(zlib.gzipSync(b))],
  ])('%s from another server: asked for, and decoded', async (coding, code) => {
    const s = await rawServer(() => ({ coding, body: code(page) }));
    try {
      const r = await host.fetch(`http://127.0.0.1:${s.port}/x.html`);
      expect(Buffer.from(r.response.body).equals(page)).toBe(true);
      expect(s.requests[0]).toMatch(/\r\nAccept-Encoding: gzip, deflate, br\r\n/);
    } finally {
      s.server.close();
    }
  });

  test.each([
    ['a corrupt gzip body', 'gzip', Buffer.from('this is not gzip at all'), 'HOST_ERR_BAD_CODING'],
    ['a truncated br body', 'br', zlib.brotliCompressSync(page).subarray(0, 40), 'HOST_ERR_BAD_CODING'],
    ['a coding nobody asked for', 'compress', Buffer.from('xyz'), 'HOST_ERR_UNKNOWN_CODING'],
    ['a gzip bomb (50 KB that decodes to 50 MiB, past the 1 MiB body limit)', 'gzip', zlib.gzipSync(Buffer.alloc(50 * 1024 * 1024)), 'HOST_ERR_BAD_CODING'],
  ])('%s is an error with a code', async (_name, coding, body, code) => {
    const s = await rawServer(() => ({ coding, body }));
    try {
      await expect(host.fetch(`http://127.0.0.1:${s.port}/x.html`)).rejects.toMatchObject({ code });
    } finally {
      s.server.close();
    }
  });
});
