// Images, stylesheets and fonts on other origins than the page's (issue "browse the real web", item 5), within the
// host rule of issue "safe on the open Internet": the frame's browser asks its proxy (the shell) for them, and the
// host fetches what the page names as such a sub-resource — over plain HTTP/1.1, or over TLS through a tunnel the
// shell answers with its own certificate — and nothing else: not a link, a frame or a prefetch, not an http://
// sub-resource of an https:// page. A real page (daringfireball-1 from the corpus) with its stylesheet on a second
// local origin renders styled on every transport; its DOM stays parse5's tree of the page.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { join } from 'node:path';

import { parse, serialize } from 'parse5';
import type { Locator } from 'playwright-core';

import { startServer, type DhttpServer } from '../../server';
import { artifact, chromiumPresent, pageFrame, poll, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';
import { startTlsLab, tlsLabPresent, type TlsLab } from '../helpers/tls';

const maybe = describeIf(chromiumPresent && tlsLabPresent, 'Chromium, nginx and openssl (apt-get install chromium nginx-light openssl)');
jest.setTimeout(180_000);

const CORPUS = join(__dirname, '..', '..', '..', 'shared', 'corpus', 'real-pages');
// a 1×1 PNG
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');
// Daring Fireball's look, as a stylesheet of our own (the corpus keeps the page's HTML, not its stylesheets); its
// background image is named relative to the stylesheet, on the stylesheet's origin.
const FIREBALL_CSS = `@font-face { font-family: "Fire"; src: url(fonts/cors/dv.ttf) }
@font-face { font-family: "NoCors"; src: url(fonts/nocors/dv.ttf) }
body { background: #4a525a url(img/dot.png); color: rgb(34, 34, 34); font: 14px/1.6 Verdana, sans-serif; margin: 0; }
#Main { background: rgb(255, 255, 255); width: 640px; margin: 0 auto; padding: 20px 40px; }
#Banner { background: rgb(45, 50, 55); padding: 12px 40px; }
#Banner a { color: rgb(204, 204, 204); font-size: 22px; text-decoration: none; }
h1, h2 { color: rgb(58, 64, 71); font-family: Fire, Georgia, serif; }
h3, h2 em { font-family: NoCors, serif; }
a { color: rgb(51, 102, 153); }
#Sidebar { display: none; }
`;

type Counted = Record<string, number>;
const delta = (now: Counted, before: Counted, key: string) => (now[key] ?? 0) - (before[key] ?? 0);
// (the page's globals, typed by hand: the tests compile without the DOM library)
const style = (at: Locator, prop: string) =>
  at.evaluate((el, p) => (globalThis as unknown as { getComputedStyle(e: unknown): Record<string, string> }).getComputedStyle(el)[p], prop);
const naturalWidth = (el: unknown) => (el as { naturalWidth: number }).naturalWidth;
/** The status of the frame's font face `family` ('loaded'; 'error' when it was refused). */
const fontStatus = (at: Locator, family: string) =>
  at.evaluate((el, f) => {
    const fonts = (el as { ownerDocument: { fonts: Iterable<{ family: string; status: string }> } }).ownerDocument.fonts;
    return [...fonts].find((x) => x.family.replace(/"/g, '') === f)?.status ?? 'absent';
  }, family);
const FONT = readFileSync('/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf');

/** A proxied request to the shell, as the frame's browser sends one for another origin: its status. */
function proxied(shellPort: number, url: string): Promise<number> {
  return new Promise((ok, fail) => {
    request({ host: '127.0.0.1', port: shellPort, path: url, headers: { host: new URL(url).host } }, (res) => {
      res.resume();
      ok(res.statusCode ?? 0);
    }).on('error', fail).end();
  });
}

/** Hands `ok` the first line `s` sends, then closes it; returns what has come so far. */
function statusLine(s: Socket, ok: (line: string) => void): () => string {
  let got = '';
  s.on('data', (d: Buffer) => {
    got += d.toString('latin1');
    if (got.includes('\r\n')) {
      ok(got.slice(0, got.indexOf('\r\n')));
      s.destroy();
    }
  });
  return () => got;
}

/** What the shell answers a CONNECT with: its status line, or 'closed'. */
function connectAnswer(shellPort: number, authority: string): Promise<string> {
  return new Promise((ok) => {
    const s = connect(shellPort, '127.0.0.1', () => s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
    const got = statusLine(s, ok);
    s.on('close', () => ok(got() === '' ? 'closed' : got()));
    s.on('error', () => undefined);
  });
}

/** A request inside a tunnel the shell answers (its own certificate, not checked here): the status line. */
function throughTunnel(shellPort: number, authority: string, request: string): Promise<string> {
  return new Promise((ok, fail) => {
    const s = connect(shellPort, '127.0.0.1', () => s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
    s.once('data', () => {
      const t = tlsConnect({ socket: s, rejectUnauthorized: false, servername: 'example.test' }, () => t.write(request));
      statusLine(t, ok);
      t.on('error', fail);
    });
    s.on('error', fail);
  });
}

maybe('resources from other origins', () => {
  let lab: TlsLab;
  let rig: Rig;
  let fireball: string;
  // a second origin that speaks DHTTP (our reference server), for the stylesheet of `fromDhttp.html`
  let second: DhttpServer;
  let secondRoot: string;
  const before = process.env.CATP_EXTRA_CA_CERTS;

  beforeAll(async () => {
    // a font with the CORS header a cross-origin font needs, and one without it (which Chromium refuses to use)
    lab = await startTlsLab({ 'site.css': FIREBALL_CSS, 'img/dot.png': PNG, 'dot.png': PNG, 'secret.txt': 'not for the page',
      'fonts/cors/dv.ttf': FONT, 'fonts/nocors/dv.ttf': FONT });
    const plain = `http://127.0.0.1:${lab.ports.plain}`;
    // the page's own stylesheets move to the second origin (one absolute URL instead of the root-relative three)
    fireball = readFileSync(join(CORPUS, 'daringfireball-1.html'), 'utf8')
      .replace(/<link rel="stylesheet"[^>]*>/g, '')
      .replace('</head>', `<link rel="stylesheet" href="${plain}/site.css">\n<link rel="prefetch" href="${plain}/secret.txt">\n</head>`)
      .replace('</body>', `<p><img id="x-img" src="${plain}/dot.png" alt=""> <a id="x-link" href="${plain}/secret.txt">elsewhere</a></p>\n</body>`);
    const tlsPage = `<!doctype html><html><head><title>tls</title><link rel="stylesheet" href="https://127.0.0.1:${lab.ports.good2}/site.css"></head>`
      + `<body><div id="Main"><h1 id="h">over TLS, styled from another https origin</h1><img id="tls-img" src="https://127.0.0.1:${lab.ports.good2}/dot.png" alt="">`
      + `<img id="mixed-img" src="${plain}/dot.png?mixed" alt=""><h3 id="h3">no CORS, no font</h3></div></body></html>`;
    lab.write('tls-page.html', tlsPage);
    process.env.CATP_EXTRA_CA_CERTS = lab.caFile;
    secondRoot = mkdtempSync(join(tmpdir(), 'catp-second-origin-'));
    writeFileSync(join(secondRoot, 'site.css'), FIREBALL_CSS);
    writeFileSync(join(secondRoot, 'index.html'), '<!doctype html><title>second</title><p>the second origin</p>');
    second = await startServer({ root: secondRoot, port: 0, host: '127.0.0.1' });
    const fromDhttp = (n: number) => `<!doctype html><html><head><title>css over dhttp</title><link rel="stylesheet" href="http://127.0.0.1:${second.port}/site.css?${n}"></head>`
      + '<body><div id="Main"><h1 id="h">styled from a second origin</h1></div></body></html>';
    rig = await startRig({ extraFiles: { 'fireball.html': fireball, 'fromDhttp1.html': fromDhttp(1), 'fromDhttp2.html': fromDhttp(2) } });
  });
  afterAll(async () => {
    if (before === undefined) delete process.env.CATP_EXTRA_CA_CERTS;
    else process.env.CATP_EXTRA_CA_CERTS = before;
    await rig?.close();
    await lab?.close();
    await second?.close();
    if (secondRoot) rmSync(secondRoot, { recursive: true, force: true });
  });

  for (const transport of ['catp', 'inorder', 'tcp'] as const) {
    test(`${transport}: a corpus page with its stylesheet on a second local origin renders styled; its DOM is parse5's tree`, async () => {
      const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/fireball.html` : `${rig.base}/fireball.html`;
      const record = await rig.loadUrl(url, transport);
      expect(record.outcome).toBe('complete');
      expect(await rig.dump()).toBe(serialize(parse(fireball, { scriptingEnabled: false })));
      const frame = pageFrame(rig.page);
      expect(await poll(() => style(frame.locator('#Main'), 'backgroundColor'), 'rgb(255, 255, 255)')).toBe('rgb(255, 255, 255)');
      expect(await poll(() => style(frame.locator('body'), 'backgroundColor'), 'rgb(74, 82, 90)')).toBe('rgb(74, 82, 90)');
      expect(await poll(() => frame.locator('#x-img').evaluate(naturalWidth), 1)).toBe(1);
      if (transport === 'catp') await rig.page.screenshot({ path: artifact('other-origin-stylesheet.png') });
    });
  }

  test('only what the page names as an image, stylesheet, font or media: not its links, prefetches or anything else', async () => {
    await rig.loadUrl(`${rig.base}/fireball.html`, 'catp');
    const shell = rig.session.shell;
    const plain = `http://127.0.0.1:${lab.ports.plain}`;
    // The frame's own refused requests (its <link rel=prefetch>, which Chromium sends when idle, after the load)
    // land at their own time: count from when they have stopped (no new one for 1 s), or they race the requests below.
    let seen = -1;
    for (let quiet = 0, waited = 0; quiet < 1000 && waited < 10_000; waited += 100) {
      const now = shell.refused['not-named'] ?? 0;
      quiet = now === seen ? quiet + 100 : 0;
      seen = now;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    const counted = { ...shell.refused };
    // named by the page as a link (and as a prefetch): the host does not fetch it for the frame
    expect(await proxied(shell.port, `${plain}/secret.txt`)).toBe(404);
    // named nowhere
    expect(await proxied(shell.port, `${plain}/img/other.png`)).toBe(404);
    // named as a sub-resource: fetched
    expect(await proxied(shell.port, `${plain}/dot.png`)).toBe(200);
    // the stylesheet's own url(), relative to the stylesheet's origin, is the page's too
    expect(await proxied(shell.port, `${plain}/img/dot.png`)).toBe(200);
    expect(delta(shell.refused, counted, 'not-named')).toBe(2);
  });

  test('another origin is reached over DHTTP once its server has answered over DHTTP, over HTTP/1.1 before', async () => {
    const shell = rig.session.shell;
    const frame = pageFrame(rig.page);
    const before = { ...shell.otherOrigins };
    // first contact with the second origin: its stylesheet comes over plain HTTP/1.1 (nothing says it speaks DHTTP)
    expect((await rig.loadUrl(`${rig.base}/fromDhttp1.html`, 'catp')).outcome).toBe('complete');
    expect(await poll(() => style(frame.locator('#Main'), 'backgroundColor'), 'rgb(255, 255, 255)')).toBe('rgb(255, 255, 255)');
    // (the stylesheet, and the background image it names on its own origin, which that server does not have)
    expect(delta(shell.otherOrigins, before, 'http')).toBeGreaterThanOrEqual(1);
    expect(delta(shell.otherOrigins, before, 'udp')).toBe(0);
    const mid = { ...shell.otherOrigins };
    // the user visits the second origin over DHTTP; from then on its sub-resources come over DHTTP too
    expect((await rig.loadUrl(`dhttp://127.0.0.1:${second.port}/index.html`, 'catp')).outcome).toBe('complete');
    expect((await rig.loadUrl(`${rig.base}/fromDhttp2.html`, 'catp')).outcome).toBe('complete');
    expect(await poll(() => style(frame.locator('#h'), 'color'), 'rgb(58, 64, 71)')).toBe('rgb(58, 64, 71)');
    expect(delta(shell.otherOrigins, mid, 'udp')).toBeGreaterThanOrEqual(1);
    expect(delta(shell.otherOrigins, mid, 'http')).toBe(0);
  });

  test('a public page never has the host reach a loopback or private address (Private Network Access)', async () => {
    await rig.loadUrl(`${rig.base}/fireball.html`, 'catp');
    const shell = rig.session.shell;
    const host = rig.session.service.host;
    const counted = { ...shell.refused };
    // the page's own address is public (the one seam: this machine has no public address to serve it from)
    const spaceOf = jest.spyOn(host, 'addressSpaceOf').mockResolvedValue('public');
    try {
      expect(await proxied(shell.port, `http://127.0.0.1:${lab.ports.plain}/dot.png`)).toBe(403);
      // at least ours: a late sub-resource of the page (from this loopback host too) is refused as well while
      // everything reads public (seen once in a full run: 2)
      expect(delta(shell.refused, counted, 'private-network')).toBeGreaterThanOrEqual(1);
    } finally {
      spaceOf.mockRestore();
    }
    expect(await proxied(shell.port, `http://127.0.0.1:${lab.ports.plain}/dot.png`)).toBe(200);
  });

  test('an https page: a stylesheet and an image on another https origin through the shell\'s tunnel; an http image is mixed content', async () => {
    const shell = rig.session.shell;
    const counted = { ...shell.refused };
    const record = await rig.loadUrl(`https://127.0.0.1:${lab.ports.good}/tls-page.html`);
    expect(record.outcome).toBe('complete');
    const frame = pageFrame(rig.page);
    expect(await poll(() => style(frame.locator('#Main'), 'backgroundColor'), 'rgb(255, 255, 255)')).toBe('rgb(255, 255, 255)');
    expect(await poll(() => style(frame.locator('#h'), 'color'), 'rgb(58, 64, 71)')).toBe('rgb(58, 64, 71)');
    expect(await poll(() => frame.locator('#tls-img').evaluate(naturalWidth), 1)).toBe(1);
    expect(await poll(async () => delta(shell.refused, counted, 'mixed-content') >= 1, true)).toBe(true);
    expect(await frame.locator('#mixed-img').evaluate(naturalWidth)).toBe(0);
    // a font on another origin: used when that origin's CORS answer allows it, refused as Chromium would when not
    expect(await poll(() => fontStatus(frame.locator('#h'), 'Fire'), 'loaded')).toBe('loaded');
    expect(await poll(() => fontStatus(frame.locator('#h'), 'NoCors'), 'error')).toBe('error');
    // a tunnel to an origin the page names nothing on is refused; to one it names, answered by the shell itself
    expect(await connectAnswer(shell.port, `127.0.0.1:${lab.ports.expired}`)).toBe('closed');
    expect(await connectAnswer(shell.port, `127.0.0.1:${lab.ports.good2}`)).toBe('HTTP/1.1 200 Connection Established');
    // inside a tunnel, a request for another host than the tunnel's, or a Host that is no host: refused, and the
    // shell carries on
    const authority = `127.0.0.1:${lab.ports.good2}`;
    expect(await throughTunnel(shell.port, authority, 'GET /dot.png HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n')).toBe('HTTP/1.1 421 Misdirected Request');
    expect(await throughTunnel(shell.port, authority, 'GET /dot.png HTTP/1.1\r\nHost: [bad host\r\n\r\n')).toBe('HTTP/1.1 421 Misdirected Request');
    expect(await throughTunnel(shell.port, authority, `GET /dot.png HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)).toBe('HTTP/1.1 200 OK');
  });
});
