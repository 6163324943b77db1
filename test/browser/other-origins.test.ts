// Images, stylesheets and fonts on other origins than the page's (issue "browse the real web", item 5), within the
// host rule of issue "safe on the open Internet": the frame's browser asks its proxy (the shell) for them, and the
// host fetches what the page names as such a sub-resource — over plain HTTP/1.1, or over TLS through a tunnel the
// shell answers with its own certificate — and nothing else: not a link, a frame or a prefetch, not an http://
// sub-resource of an https:// page. A real page (daringfireball-1 from the corpus) with its stylesheet on a second
// local origin renders styled on every transport; its DOM stays parse5's tree of the page.
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';

import { parse, serialize } from 'parse5';
import type { Locator } from 'playwright-core';

import { artifact, chromiumPresent, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';
import { startTlsLab, tlsLabPresent, type TlsLab } from '../helpers/tls';

const maybe = describeIf(chromiumPresent && tlsLabPresent, 'Chromium, nginx and openssl (apt-get install chromium nginx-light openssl)');
jest.setTimeout(180_000);

const CORPUS = join(__dirname, '..', '..', '..', 'shared', 'corpus', 'real-pages');
// a 1×1 PNG
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');
// Daring Fireball's look, as a stylesheet of our own (the corpus keeps the page's HTML, not its stylesheets); its
// background image is named relative to the stylesheet, on the stylesheet's origin.
const FIREBALL_CSS = `body { background: #4a525a url(img/dot.png); color: rgb(34, 34, 34); font: 14px/1.6 Verdana, sans-serif; margin: 0; }
#Main { background: rgb(255, 255, 255); width: 640px; margin: 0 auto; padding: 20px 40px; }
#Banner { background: rgb(45, 50, 55); padding: 12px 40px; }
#Banner a { color: rgb(204, 204, 204); font-size: 22px; text-decoration: none; }
h1, h2 { color: rgb(58, 64, 71); font-family: Georgia, serif; }
a { color: rgb(51, 102, 153); }
#Sidebar { display: none; }
`;

type Counted = Record<string, number>;
const delta = (now: Counted, before: Counted, key: string) => (now[key] ?? 0) - (before[key] ?? 0);
// (the page's globals, typed by hand: the tests compile without the DOM library)
const style = (at: Locator, prop: string) =>
  at.evaluate((el, p) => (globalThis as unknown as { getComputedStyle(e: unknown): Record<string, string> }).getComputedStyle(el)[p], prop);
const naturalWidth = (el: unknown) => (el as { naturalWidth: number }).naturalWidth;

/** `get()` until it returns `want` (or 10 s pass): what it returned last. */
async function poll(get: () => Promise<unknown>, want: unknown): Promise<unknown> {
  const until = Date.now() + 10_000;
  let got: unknown;
  do {
    got = await get();
    if (got === want) return got;
    await new Promise((r) => setTimeout(r, 100));
  } while (Date.now() < until);
  return got;
}

/** A proxied request to the shell, as the frame's browser sends one for another origin: its status. */
function proxied(shellPort: number, url: string): Promise<number> {
  return new Promise((ok, fail) => {
    request({ host: '127.0.0.1', port: shellPort, path: url, headers: { host: new URL(url).host } }, (res) => {
      res.resume();
      ok(res.statusCode ?? 0);
    }).on('error', fail).end();
  });
}

maybe('resources from other origins', () => {
  let lab: TlsLab;
  let rig: Rig;
  let fireball: string;
  const before = process.env.CATP_EXTRA_CA_CERTS;

  beforeAll(async () => {
    lab = await startTlsLab({ 'site.css': FIREBALL_CSS, 'img/dot.png': PNG, 'dot.png': PNG, 'secret.txt': 'not for the page' });
    const plain = `http://127.0.0.1:${lab.ports.plain}`;
    // the page's own stylesheets move to the second origin (one absolute URL instead of the root-relative three)
    fireball = readFileSync(join(CORPUS, 'daringfireball-1.html'), 'utf8')
      .replace(/<link rel="stylesheet"[^>]*>/g, '')
      .replace('</head>', `<link rel="stylesheet" href="${plain}/site.css">\n<link rel="prefetch" href="${plain}/secret.txt">\n</head>`)
      .replace('</body>', `<p><img id="x-img" src="${plain}/dot.png" alt=""> <a id="x-link" href="${plain}/secret.txt">elsewhere</a></p>\n</body>`);
    const tlsPage = `<!doctype html><html><head><title>tls</title><link rel="stylesheet" href="https://127.0.0.1:${lab.ports.good2}/site.css"></head>`
      + `<body><div id="Main"><h1 id="h">over TLS, styled from another https origin</h1><img id="tls-img" src="https://127.0.0.1:${lab.ports.good2}/dot.png" alt="">`
      + `<img id="mixed-img" src="${plain}/dot.png?mixed" alt=""></div></body></html>`;
    lab.write('tls-page.html', tlsPage);
    process.env.CATP_EXTRA_CA_CERTS = lab.caFile;
    rig = await startRig({ extraFiles: { 'fireball.html': fireball } });
  });
  afterAll(async () => {
    if (before === undefined) delete process.env.CATP_EXTRA_CA_CERTS;
    else process.env.CATP_EXTRA_CA_CERTS = before;
    await rig?.close();
    await lab?.close();
  });

  for (const transport of ['catp', 'inorder', 'tcp'] as const) {
    test(`${transport}: a corpus page with its stylesheet on a second local origin renders styled; its DOM is parse5's tree`, async () => {
      const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/fireball.html` : `${rig.base}/fireball.html`;
      const record = await rig.loadUrl(url, transport);
      expect(record.outcome).toBe('complete');
      expect(await rig.dump()).toBe(serialize(parse(fireball, { scriptingEnabled: false })));
      const frame = rig.page.frameLocator('#page');
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

  test('a public page never has the host reach a loopback or private address (Private Network Access)', async () => {
    await rig.loadUrl(`${rig.base}/fireball.html`, 'catp');
    const shell = rig.session.shell;
    const host = rig.session.service.host;
    const counted = { ...shell.refused };
    // the page's own address is public (the one seam: this machine has no public address to serve it from)
    const spaceOf = jest.spyOn(host, 'addressSpaceOf').mockResolvedValue('public');
    try {
      expect(await proxied(shell.port, `http://127.0.0.1:${lab.ports.plain}/dot.png`)).toBe(403);
      expect(delta(shell.refused, counted, 'private-network')).toBe(1);
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
    const frame = rig.page.frameLocator('#page');
    expect(await poll(() => style(frame.locator('#Main'), 'backgroundColor'), 'rgb(255, 255, 255)')).toBe('rgb(255, 255, 255)');
    expect(await poll(() => style(frame.locator('#h'), 'color'), 'rgb(58, 64, 71)')).toBe('rgb(58, 64, 71)');
    expect(await poll(() => frame.locator('#tls-img').evaluate(naturalWidth), 1)).toBe(1);
    expect(await poll(async () => delta(shell.refused, counted, 'mixed-content'), 1)).toBe(1);
    expect(await frame.locator('#mixed-img').evaluate(naturalWidth)).toBe(0);
    // a tunnel to an origin the page names nothing on is refused
    expect(delta(shell.refused, counted, 'proxied')).toBe(0);
  });
});
