// Content codings on the plain HTTP/1.1 side: the reference server compresses as real servers do (so the
// baselines CATP is measured against get what users get), and the browser's tcp transport undoes the coding
// as the bytes arrive. Real loopback sockets, the real server, the real native endpoint.
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as zlib from 'node:zlib';

import { httpStream, HttpStreamError } from '../../app/browser/http-stream';
import { negotiate } from '../../server/content-coding';
import { startServer, type DhttpServer } from '../../server';

const PAGE = `<!doctype html><title>t</title><style>${'p{margin:0}'.repeat(200)}</style>${'<p>Crème brûlée, again and again.</p>'.repeat(300)}`;

let dir: string;
let server: DhttpServer;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-coding-'));
  fs.writeFileSync(path.join(dir, 'page.html'), PAGE);
  fs.writeFileSync(path.join(dir, 'tiny.html'), '<p>hi</p>');
  fs.writeFileSync(path.join(dir, 'img.png'), Buffer.alloc(4000, 7));
  server = await startServer({ root: dir, port: 0, host: '127.0.0.1' });
});
afterAll(async () => {
  await server.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function get(p: string, acceptEncoding?: string, method = 'GET'): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((ok, fail) => {
    const req = http.request({ host: '127.0.0.1', port: server.port, path: p, method, headers: acceptEncoding === undefined ? {} : { 'accept-encoding': acceptEncoding } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => ok({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
    });
    req.on('error', fail);
    req.end();
  });
}

test('Accept-Encoding negotiation (RFC 9110 12.5.3)', () => {
  expect(negotiate(null)).toBeNull();
  expect(negotiate('')).toBeNull();
  expect(negotiate('identity')).toBeNull();
  expect(negotiate('gzip, deflate')).toBe('gzip');
  expect(negotiate('gzip, deflate, br, zstd')).toBe('br');
  expect(negotiate('br;q=0, gzip')).toBe('gzip');
  expect(negotiate('br;q=0.5, gzip;q=0.8')).toBe('gzip');
  expect(negotiate('*')).toBe('br');
  expect(negotiate('*;q=0, identity')).toBeNull();
  expect(negotiate('gzip;q=0, br;q=0')).toBeNull();
  expect(negotiate('x-gzip')).toBe('gzip');
  expect(negotiate('compress, zstd')).toBeNull();
});

test('the server answers br, gzip or identity as asked, with Vary and a coding-specific ETag', async () => {
  const plain = await get('/page.html');
  expect(plain.headers['content-encoding']).toBeUndefined();
  expect(plain.headers.vary).toBe('Accept-Encoding');
  expect(plain.body.toString()).toBe(PAGE);

  const br = await get('/page.html', 'gzip, deflate, br');
  expect(br.headers['content-encoding']).toBe('br');
  expect(zlib.brotliDecompressSync(br.body).toString()).toBe(PAGE);
  expect(Number(br.headers['content-length'])).toBe(br.body.length);
  expect(br.body.length).toBeLessThan(PAGE.length / 10);
  expect(br.headers.etag).toMatch(/-br"$/);

  const gz = await get('/page.html', 'gzip, deflate');
  expect(gz.headers['content-encoding']).toBe('gzip');
  expect(zlib.gunzipSync(gz.body).toString()).toBe(PAGE);
  expect(gz.headers.etag).toMatch(/-gzip"$/);
  expect(gz.headers.etag).not.toBe(br.headers.etag);

  // a second answer comes from the cache, byte for byte
  expect((await get('/page.html', 'br')).body.equals(br.body)).toBe(true);

  // HEAD: the coded length, no body
  const head = await get('/page.html', 'br', 'HEAD');
  expect(head.headers['content-encoding']).toBe('br');
  expect(Number(head.headers['content-length'])).toBe(br.body.length);
  expect(head.body.length).toBe(0);

  // not worth it / not compressible: identity
  expect((await get('/tiny.html', 'br')).headers['content-encoding']).toBeUndefined();
  const png = await get('/img.png', 'br');
  expect(png.headers['content-encoding']).toBeUndefined();
  expect(png.body.length).toBe(4000);
  // q=0 refuses
  expect((await get('/page.html', 'br;q=0, gzip;q=0')).headers['content-encoding']).toBeUndefined();
});

function stream(url: string): Promise<{ text: string; coding: string | undefined; chunks: number }> {
  return new Promise((ok, fail) => {
    let text = '';
    let chunks = 0;
    let coding: string | undefined;
    void httpStream(url, {
      onHead: (h) => (coding = h.headers.find(([n]) => n.toLowerCase() === 'content-encoding')?.[1]),
      onData: (b) => {
        chunks++;
        text += Buffer.from(b).toString('latin1');
      },
      onEnd: () => ok({ text: Buffer.from(text, 'latin1').toString('utf8'), coding, chunks }),
      onError: fail,
    }).catch(fail);
  });
}

test('the tcp transport asks for a coding and undoes it as the bytes arrive', async () => {
  const r = await stream(`http://127.0.0.1:${server.port}/page.html`);
  expect(r.coding).toBe('br');
  expect(r.text).toBe(PAGE);
});

/** A one-shot HTTP server that answers with `head` + `body` as given. */
async function rawServer(head: string, body: Buffer): Promise<{ port: number; close: () => void }> {
  const s = net.createServer((sock) => {
    sock.once('data', () => sock.end(Buffer.concat([Buffer.from(head), body])));
  });
  await new Promise<void>((ok) => s.listen(0, '127.0.0.1', ok));
  return { port: (s.address() as net.AddressInfo).port, close: () => s.close() };
}

test('a corrupt or unknown coding ends the stream with HTTP_ERR_CONTENT_ENCODING', async () => {
  const good = zlib.gzipSync(Buffer.from(PAGE));
  const bad = Buffer.from(good);
  bad.fill(0x55, 20, Math.min(120, bad.length - 8));
  for (const [coding, body] of [['gzip', bad], ['br', Buffer.from('not brotli at all, really not')], ['zstd', good]] as const) {
    const s = await rawServer(`HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: ${coding}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`, body);
    try {
      const err = await stream(`http://127.0.0.1:${s.port}/`).then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(HttpStreamError);
      expect((err as HttpStreamError).code).toBe('HTTP_ERR_CONTENT_ENCODING');
    } finally {
      s.close();
    }
  }
});
