// Character encodings end to end (issue "Browse the real web", item 4): pages in windows-1252, ISO-8859-2,
// Shift_JIS, GBK, UTF-16 and UTF-8, labelled by <meta>, by a BOM or by nothing, served by the reference server
// over real sockets. The server announces the charset it found; every transport of the browser service (CATP, in-
// order UDP, HTTP/1.1 over TCP, and whole answers) turns them into the text a browser would, and CATP's tree is
// parse5's tree of that text.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import * as iconv from 'iconv-lite';
import { parse, serialize } from 'parse5';

import { DhttpHost } from '../../app';
import { BrowserService } from '../../app/browser/service';
import type { BrowserEvent, Transport } from '../../protocol/browser/api';
import { parse5TreeBuilder, type CatpEvent } from '../../protocol/catp';
import { startServer, type DhttpServer } from '../../server';
import { getHeader } from '../../protocol/dhttp';

jest.setTimeout(60_000);

const body = (title: string, text: string) => `<title>${title}</title>${`<p>${text}</p>\n`.repeat(60)}`;
interface Page { file: string; bytes: Uint8Array; text: string; charset: string }
const page = (file: string, encoding: string, html: string, opts: { bom?: number[]; charset?: string } = {}): Page => ({
  file,
  bytes: new Uint8Array([...(opts.bom ?? []), ...iconv.encode(html, encoding)]),
  text: html,
  charset: opts.charset ?? encoding.toLowerCase(),
});
const PAGES: Page[] = [
  page('cp1252-meta.html', 'windows-1252', `<!doctype html><meta charset="windows-1252">${body('Crème brûlée', 'Crème brûlée, déjà vu, naïve façade — “quoted”')}`),
  page('cp1252-none.html', 'windows-1252', `<!doctype html>${body('Crème brûlée', 'Crème brûlée, déjà vu, naïve façade')}`),
  page('latin2-meta.html', 'iso-8859-2', `<!doctype html><meta http-equiv="Content-Type" content="text/html; charset=iso-8859-2">${body('Árvíztűrő', 'Árvíztűrő tükörfúrógép, Łódź, Škoda')}`),
  page('sjis-meta.html', 'shift_jis', `<!doctype html><meta charset="Shift_JIS">${body('日本語', '吾輩は猫である。名前はまだ無い。')}`),
  page('gbk-meta.html', 'gbk', `<!doctype html><meta charset="gbk">${body('中文', '天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。')}`),
  page('utf8-bom.html', 'utf-8', `<!doctype html>${body('Crème', 'Crème brûlée 日本語 中文')}`, { bom: [0xef, 0xbb, 0xbf] }),
  page('utf16-bom.html', 'utf-16le', `<!doctype html>${body('Crème', 'Crème brûlée 日本語 中文')}`, { bom: [0xff, 0xfe] }),
  page('utf8-none.html', 'utf-8', `<!doctype html>${body('Crème', 'Crème brûlée 日本語 中文')}`),
];

let root: string;
let server: DhttpServer;
let host: DhttpHost;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'catp-e2e-enc-'));
  for (const p of PAGES) writeFileSync(join(root, p.file), p.bytes);
  server = await startServer({ root, port: 0, host: '127.0.0.1' });
  host = new DhttpHost();
});

afterAll(async () => {
  host.close();
  await server.close();
  rmSync(root, { recursive: true, force: true });
});

const tree = (text: string) => serialize(parse(text, { scriptingEnabled: false }));

test.each(PAGES.map((p) => [p.file, p] as const))('%s: the server announces the charset it found; CATP rebuilds parse5\'s tree of the decoded text', async (_f, p) => {
  const r = await host.fetch(`http://127.0.0.1:${server.port}/${p.file}`);
  expect(getHeader(r.response.headers, 'content-type')).toBe(`text/html; charset=${p.charset}`);
  expect(Buffer.from(r.response.body).equals(Buffer.from(p.bytes))).toBe(true);
  const built = parse5TreeBuilder();
  const res = await host.load(`dhttp://127.0.0.1:${server.port}/${p.file}`, {
    mode: 'catp',
    onFrame: (_record, events) => {
      for (const ev of events) built.apply(ev as CatpEvent);
    },
  });
  expect(res.kind).toBe('stream');
  expect(serialize(built.root!)).toBe(tree(p.text));
});

/** The text the browser service hands the renderer for a load over `transport` (text or whole events). */
async function textOver(transport: Transport, url: string): Promise<string> {
  const service = new BrowserService({ host, store: null });
  const events: BrowserEvent[] = [];
  service.attach((e) => events.push(e));
  try {
    const loadId = service.navigate(url, transport);
    const until = Date.now() + 30_000;
    while (!events.some((e) => (e.type === 'complete' || e.type === 'error') && e.loadId === loadId) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    const err = events.find((e) => e.type === 'error');
    if (err) throw new Error(JSON.stringify(err));
    const whole = events.find((e) => e.type === 'whole');
    if (whole && whole.type === 'whole') return whole.text;
    let text = '';
    for (const e of events) {
      if (e.type !== 'text' || e.loadId !== loadId) continue;
      expect(e.offset).toBe(text.length);
      text += e.text;
    }
    return text;
  } finally {
    service.close();
  }
}

test.each(PAGES.map((p) => [p.file, p] as const))('%s: in-order UDP, HTTP/1.1 over TCP and a whole answer give the text a browser decodes', async (_f, p) => {
  expect(await textOver('inorder', `dhttp://127.0.0.1:${server.port}/${p.file}`)).toBe(p.text);
  expect(await textOver('tcp', `http://127.0.0.1:${server.port}/${p.file}`)).toBe(p.text);
  expect(await textOver('whole', `dhttpt://127.0.0.1:${server.port}/${p.file}`)).toBe(p.text);
});

test('the DOM operations the service sends for a CATP load carry the decoded text', async () => {
  const p = PAGES.find((x) => x.file === 'sjis-meta.html')!;
  const service = new BrowserService({ host, store: null });
  const events: BrowserEvent[] = [];
  service.attach((e) => events.push(e));
  try {
    const loadId = service.navigate(`dhttp://127.0.0.1:${server.port}/${p.file}`, 'catp');
    const until = Date.now() + 30_000;
    while (!events.some((e) => e.type === 'complete' && e.loadId === loadId) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    expect(JSON.stringify(events.filter((e) => e.type === 'dom'))).toContain('吾輩は猫である');
  } finally {
    service.close();
  }
});
