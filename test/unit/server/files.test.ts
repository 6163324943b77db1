import { promises as fsp } from 'fs';
import * as os from 'os';
import * as path from 'path';
import { execFileSync } from 'child_process';
import { serializeResponse } from '../../../protocol/dhttp/http1';
import { FileServer, mimeType, resolveTarget, type FileResponse } from '../../../server/files';

const text = (r: FileResponse) => Buffer.from(r.body).toString('utf8');
const header = (r: FileResponse, name: string) => r.headers.find(([n]) => n.toLowerCase() === name.toLowerCase())?.[1];

let tmp: string;
let root: string;
let files: FileServer;

beforeAll(async () => {
  tmp = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'catp-files-')));
  root = path.join(tmp, 'root');
  await fsp.mkdir(path.join(root, 'sub', 'deeper'), { recursive: true });
  await fsp.mkdir(path.join(root, 'empty'));
  await fsp.writeFile(path.join(root, 'index.html'), '<!doctype html><p>home</p>');
  await fsp.writeFile(path.join(root, 'sub', 'index.html'), '<p>sub</p>');
  await fsp.writeFile(path.join(root, 'sub', 'style.css'), 'p{}');
  await fsp.writeFile(path.join(root, 'sub', 'deeper', 'a b.txt'), 'spaced');
  await fsp.writeFile(path.join(root, 'data.json'), '{"a":1}');
  await fsp.writeFile(path.join(tmp, 'secret.txt'), 'top secret');
  await fsp.symlink(path.join(tmp, 'secret.txt'), path.join(root, 'link-out.txt'));
  await fsp.symlink(tmp, path.join(root, 'dir-out'));
  await fsp.symlink(path.join(root, 'data.json'), path.join(root, 'link-in.json'));
  files = await FileServer.create({ root });
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const get = (target: string, method = 'GET', headers: [string, string][] = []) => files.handle({ method, target, headers });

describe('resolveTarget', () => {
  test.each([
    ['/', []],
    ['/a/b', ['a', 'b']],
    ['/a//b/./c/', ['a', 'b', 'c']],
    ['/a%20b', ['a b']],
    ['/x?y=../../etc', ['x']],
    ['/x#../..', ['x']],
    ['http://example.com/a/b?q', ['a', 'b']],
    ['http://example.com', []],
  ])('%s -> %j', (t, segs) => {
    const r = resolveTarget(t);
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.segments).toEqual(segs);
  });

  test.each([
    ['/../etc/passwd', 403],
    ['/a/../../etc/passwd', 403],
    ['/%2e%2e/etc/passwd', 403],
    ['/%2E%2E/etc/passwd', 403],
    ['/..%2fetc%2fpasswd', 403],
    ['/a%2f..%2f..%2fetc', 403],
    ['/..%5c..%5cwindows', 403],
    ['/a%00.html', 403],
    ['/a\0b', 403],
    ['/%zz', 400],
    ['/%', 400],
    ['etc/passwd', 400],
    ['*', 400],
    ['', 400],
  ])('%j refused with %d', (t, status) => {
    const r = resolveTarget(t);
    expect(r).toMatchObject({ ok: false, status });
  });
});

describe('FileServer', () => {
  test('serves files with Content-Length and MIME type', async () => {
    const r = await get('/sub/style.css');
    expect(r.status).toBe(200);
    expect(text(r)).toBe('p{}');
    expect(header(r, 'content-type')).toBe('text/css; charset=utf-8');
    expect(header(r, 'content-length')).toBe('3');
    expect(header(r, 'etag')).toMatch(/^"[0-9a-f]+-[0-9a-f]+"$/);
    expect(header(r, 'last-modified')).toMatch(/GMT$/);
  });

  test('directory with slash serves index.html; without slash redirects', async () => {
    const r = await get('/');
    expect(r.status).toBe(200);
    expect(text(r)).toContain('home');
    expect(header(r, 'content-type')).toBe('text/html; charset=utf-8');
    const s = await get('/sub/');
    expect(text(s)).toBe('<p>sub</p>');
    const red = await get('/sub');
    expect(red.status).toBe(301);
    expect(header(red, 'location')).toBe('/sub/');
    expect((await get('/empty/')).status).toBe(404);
  });

  test('percent-encoded names', async () => {
    const r = await get('/sub/deeper/a%20b.txt');
    expect(r.status).toBe(200);
    expect(text(r)).toBe('spaced');
  });

  test('HEAD carries the same headers (the body is left out by serializeResponse({ head: true }))', async () => {
    const g = await get('/data.json');
    const h = await get('/data.json', 'HEAD');
    expect(h.status).toBe(200);
    expect(h.headers).toEqual(g.headers);
    const wire = Buffer.from(serializeResponse(h, { head: true })).toString('latin1');
    expect(wire).toMatch(/\r\nContent-Length: 7\r\n/i);
    expect(wire.endsWith('\r\n\r\n')).toBe(true);
    expect(header(h, 'content-length')).toBe('7');
    expect(header(h, 'content-type')).toBe('application/json');
  });

  test.each([
    '/../etc/passwd',
    '/../../../../../../etc/passwd',
    '/%2e%2e/secret.txt',
    '/%2e%2e%2fsecret.txt',
    '/..%2fsecret.txt',
    '/sub/%2e%2e/%2e%2e/secret.txt',
    '/index.html%00.txt',
    '/link-out.txt',
    '/dir-out/secret.txt',
    '/dir-out/',
  ])('%s is refused', async (t) => {
    const r = await get(t);
    expect([403, 404]).toContain(r.status);
    expect(text(r)).not.toContain('top secret');
  });

  test('symlinks inside the root are served', async () => {
    const r = await get('/link-in.json');
    expect(r.status).toBe(200);
    expect(text(r)).toBe('{"a":1}');
  });

  test('missing file is 404, malformed target 400', async () => {
    expect((await get('/nope.html')).status).toBe(404);
    expect((await get('/%zz')).status).toBe(400);
  });

  test('methods: 405 with Allow for known, 501 for unknown', async () => {
    for (const m of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      const r = await get('/index.html', m);
      expect(r.status).toBe(405);
      expect(header(r, 'allow')).toBe('GET, HEAD');
    }
    expect((await get('/index.html', 'BREW')).status).toBe(501);
  });

  test('If-None-Match with the current ETag gives 304', async () => {
    const g = await get('/data.json');
    const r = await get('/data.json', 'GET', [['If-None-Match', header(g, 'etag') as string]]);
    expect(r.status).toBe(304);
    expect(r.body.length).toBe(0);
  });

  test('a changed file is read again (cache keyed by size and mtime)', async () => {
    const p = path.join(root, 'changing.txt');
    await fsp.writeFile(p, 'one');
    expect(text(await get('/changing.txt'))).toBe('one');
    await fsp.writeFile(p, 'two!');
    await fsp.utimes(p, new Date(), new Date(Date.now() + 5000));
    expect(text(await get('/changing.txt'))).toBe('two!');
  });

  test('non-regular files (a FIFO) are never opened', async () => {
    const fifo = path.join(root, 'fifo.txt');
    execFileSync('mkfifo', [fifo]);
    const r = await get('/fifo.txt');
    expect(r.status).toBe(404);
  });

  test('dotfiles (.env, .git/, and symlinks into them) answer 404 unless serveDotfiles; .well-known style names too', async () => {
    await fsp.mkdir(path.join(root, '.git'), { recursive: true });
    await fsp.writeFile(path.join(root, '.git', 'config'), '[core]');
    await fsp.writeFile(path.join(root, '.env'), 'KEY=secret');
    await fsp.symlink(path.join(root, '.env'), path.join(root, 'env-link.txt'));
    await fsp.mkdir(path.join(root, 'pub'), { recursive: true });
    await fsp.symlink(path.join(root, '.env'), path.join(root, 'pub', 'index.html'));
    const before = files.dotfilesRefused;
    for (const t of ['/.env', '/.git/config', '/%2Eenv', '/./.env', '/env-link.txt', '/pub/']) expect([t, (await get(t)).status]).toEqual([t, 404]);
    expect(files.dotfilesRefused - before).toBe(6);
    expect((await get('/data.json')).status).toBe(200);
    const open = await FileServer.create({ root, serveDotfiles: true });
    expect(text(await open.handle({ method: 'GET', target: '/.env', headers: [] }))).toBe('KEY=secret');
    expect(text(await open.handle({ method: 'GET', target: '/env-link.txt', headers: [] }))).toBe('KEY=secret');
  });

  test('mime table', () => {
    expect(mimeType('a.PNG')).toBe('image/png');
    expect(mimeType('a.jpg')).toBe('image/jpeg');
    expect(mimeType('a.svg')).toBe('image/svg+xml');
    expect(mimeType('a.woff2')).toBe('font/woff2');
    expect(mimeType('a.js')).toBe('text/javascript; charset=utf-8');
    expect(mimeType('a.webp')).toBe('image/webp');
    expect(mimeType('a.ico')).toBe('image/x-icon');
    expect(mimeType('a.gif')).toBe('image/gif');
    expect(mimeType('a.txt')).toBe('text/plain; charset=utf-8');
    expect(mimeType('noext')).toBe('application/octet-stream');
  });

  test('root must be a directory', async () => {
    await expect(FileServer.create({ root: path.join(root, 'index.html') })).rejects.toThrow();
  });
});

describe('HTML answers say the charset their bytes have (protocol/html-encoding.ts)', () => {
  const latin1 = (s: string) => Buffer.from(s, 'latin1');
  test.each([
    ['meta.html', latin1('<meta charset="iso-8859-2"><p>\xe9</p>'), 'text/html; charset=iso-8859-2'],
    ['none-utf8.html', Buffer.from('<p>Crème 日本</p>'), 'text/html; charset=utf-8'],
    ['none-latin.html', latin1('<p>Cr\xe8me br\xfbl\xe9e</p>'), 'text/html; charset=windows-1252'],
    ['bom16.html', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('<p>é</p>', 'utf16le')]), 'text/html; charset=utf-16le'],
  ])('%s (read whole, and streamed from disk above the threshold)', async (name, bytes, want) => {
    const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'catp-files-enc-'));
    try {
      // streamed: the page is made larger than the threshold by a comment after its first bytes
      await fsp.writeFile(path.join(dir, name), bytes);
      await fsp.writeFile(path.join(dir, `big-${name}`), Buffer.concat([bytes, Buffer.from(name.startsWith('bom16') ? '<!---->'.repeat(300) : '<!--' + 'x'.repeat(3000) + '-->', name.startsWith('bom16') ? 'utf16le' : 'latin1')]));
      const fsrv = await FileServer.create({ root: dir, streamAboveBytes: 2000 });
      const small = await fsrv.handle({ method: 'GET', target: `/${name}`, headers: [] }, { stream: true });
      expect(small.file).toBeUndefined();
      expect(header(small, 'content-type')).toBe(want);
      const big = await fsrv.handle({ method: 'GET', target: `/big-${name}`, headers: [] }, { stream: true });
      expect(big.file).toBeDefined();
      expect(header(big, 'content-type')).toBe(want);
    } finally {
      await fsp.rm(dir, { recursive: true, force: true });
    }
  });
});
