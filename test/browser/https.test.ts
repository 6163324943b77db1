// An https:// page in the app (headless Chromium on our renderer): served by Debian's nginx with a test CA, its
// stylesheet and its image fetched through the host over TLS; the frame's DOM is parse5's tree of the page, the
// style applies, the image decodes. An expired certificate shows the error page.
import { parse, serialize } from 'parse5';

import { chromiumPresent, pageFrame, poll, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';
import { startTlsLab, tlsLabPresent, type TlsLab } from '../helpers/tls';

const maybe = describeIf(chromiumPresent && tlsLabPresent, 'Chromium, nginx and openssl (apt-get install chromium nginx-light openssl)');
jest.setTimeout(120_000);

const PAGE = '<!doctype html><html><head><title>tls</title><link rel="stylesheet" href="style.css"></head><body><p id="p">over TLS</p><img id="img" src="dot.png"></body></html>';
const CSS = '#p { color: rgb(1, 2, 3) }';
// a 1×1 PNG
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

maybe('https:// in the app', () => {
  let lab: TlsLab;
  let rig: Rig;
  const before = process.env.CATP_EXTRA_CA_CERTS;
  beforeAll(async () => {
    lab = await startTlsLab({ 'page.html': PAGE, 'style.css': CSS, 'dot.png': PNG });
    process.env.CATP_EXTRA_CA_CERTS = lab.caFile;
    rig = await startRig();
  });
  afterAll(async () => {
    if (before === undefined) delete process.env.CATP_EXTRA_CA_CERTS;
    else process.env.CATP_EXTRA_CA_CERTS = before;
    await rig?.close();
    await lab?.close();
  });

  test('the page, its stylesheet and its image over TLS: DOM equals parse5, the style applies, the image decodes', async () => {
    const url = `https://127.0.0.1:${lab.ports.good}/page.html`;
    const record = await rig.loadUrl(url);
    expect(record.outcome).toBe('complete');
    expect(await rig.dump()).toBe(serialize(parse(PAGE, { scriptingEnabled: false })));
    const frame = pageFrame(rig.page);
    // (the page's globals, typed by hand: the tests compile without the DOM library)
    const color = (el: unknown) => (globalThis as unknown as { getComputedStyle(e: unknown): { color: string } }).getComputedStyle(el).color;
    expect(await poll(() => frame.locator('#p').evaluate(color), 'rgb(1, 2, 3)')).toBe('rgb(1, 2, 3)');
    expect(await poll(() => frame.locator('#img').evaluate((el) => (el as unknown as { naturalWidth: number }).naturalWidth), 1)).toBe(1);
    expect(await rig.page.inputValue('#url')).toBe(url);
  });

  test('an expired certificate: the error page says so', async () => {
    const record = await rig.loadUrl(`https://127.0.0.1:${lab.ports.expired}/page.html`);
    expect(record.outcome).toBe('error');
    expect(JSON.stringify(record)).toMatch(/HTTP_ERR_TLS_CERT_EXPIRED|has expired/);
  });
});
