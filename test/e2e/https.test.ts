// https:// and a real legacy server (issue "Browse the real web", items 1–3): Debian's nginx on loopback with a test
// CA made here (openssl), trusted through CATP_EXTRA_CA_CERTS. A page, its stylesheet and its image load over TLS
// on the browser's own path (the `tcp` transport) and through the host (sub-resources); an expired certificate,
// one for another name and one from an unknown issuer stop the load with an error that says which; nginx's gzip
// answers decode; a 301 → 302 → 200 chain ends on the right URL; a redirect loop stops.

import { DhttpHost } from '../../app';
import { BrowserService } from '../../app/browser/service';
import type { BrowserEvent } from '../../protocol/browser/api';
import { getHeader } from '../../protocol/dhttp';
import { describeIf } from '../helpers/requires';
import { startTlsLab, tlsLabPresent, type TlsLab } from '../helpers/tls';

jest.setTimeout(60_000);
const maybe = describeIf(tlsLabPresent, 'nginx and openssl (apt-get install nginx-light openssl)');

const PAGE = `<!doctype html><title>tls</title><link rel=stylesheet href=style.css><p>over TLS ${'and compressed '.repeat(200)}</p><img src=dot.png>`;
const CSS = 'p { color: rgb(1, 2, 3) }';
const PNG = Buffer.from('89504e470d0a1a0a0000000d4948445200000001000000010806000000', 'hex');

maybe('https:// against nginx with a test CA', () => {
  let lab: TlsLab;
  let ports: TlsLab['ports'];
  let host: DhttpHost;
  const before = process.env.CATP_EXTRA_CA_CERTS;

  beforeAll(async () => {
    lab = await startTlsLab({ 'page.html': PAGE, 'style.css': CSS, 'dot.png': PNG });
    ports = lab.ports;
    process.env.CATP_EXTRA_CA_CERTS = lab.caFile;
    host = new DhttpHost();
  });

  afterAll(async () => {
    if (before === undefined) delete process.env.CATP_EXTRA_CA_CERTS;
    else process.env.CATP_EXTRA_CA_CERTS = before;
    host?.close();
    await lab?.close();
  });

  /** Navigate the browser service and wait for the navigation's end. */
  async function navigate(url: string): Promise<{ end: BrowserEvent; events: BrowserEvent[] }> {
    const s = new BrowserService({ host, store: null });
    const events: BrowserEvent[] = [];
    s.attach((e) => events.push(e));
    try {
      s.navigate(url);
      const until = Date.now() + 20_000;
      for (;;) {
        const end = events.find((e) => e.type === 'complete' || e.type === 'error');
        if (end) return { end, events };
        if (Date.now() > until) throw new Error(`no end for ${url}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      s.close();
    }
  }
  const text = (events: BrowserEvent[]) => events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text).join('');

  test('a page over TLS in the browser (its tcp path), and its stylesheet (gzip) and image through the host', async () => {
    const base = `https://127.0.0.1:${ports.good}`;
    const { end, events } = await navigate(`${base}/page.html`);
    expect(end.type).toBe('complete');
    expect(text(events)).toBe(PAGE);
    expect((events.find((e) => e.type === 'load-started') as { transport: string }).transport).toBe('tcp');
    const css = await host.fetch(`${base}/style.css`);
    expect(css.channel).toBe('https');
    expect(Buffer.from(css.response.body).toString()).toBe(CSS);
    const png = await host.fetch(`${base}/dot.png`);
    expect(Buffer.from(png.response.body).equals(PNG)).toBe(true);
    expect(getHeader(png.response.headers, 'content-type')).toBe('image/png');
  });

  test.each([
    ['expired', 'HTTP_ERR_TLS_CERT_EXPIRED', /has expired/],
    ['wrong', 'HTTP_ERR_TLS_WRONG_NAME', /another name/],
  ] as const)('a certificate that is %s stops the load with an error that says so', async (which, code, message) => {
    const { end } = await navigate(`https://127.0.0.1:${ports[which]}/page.html`);
    expect(end).toMatchObject({ type: 'error', code });
    expect((end as { message: string }).message).toMatch(message);
    await expect(host.fetch(`https://127.0.0.1:${ports[which]}/style.css`)).rejects.toMatchObject({ code });
  });

  test('a CA the browser does not trust: unknown issuer', async () => {
    delete process.env.CATP_EXTRA_CA_CERTS;
    try {
      const { end } = await navigate(`https://127.0.0.1:${ports.good}/page.html`);
      expect(end).toMatchObject({ type: 'error', code: 'HTTP_ERR_TLS_UNKNOWN_ISSUER' });
    } finally {
      process.env.CATP_EXTRA_CA_CERTS = lab.caFile;
    }
  });

  test.each(['https', 'http'] as const)("nginx's 301 → 302 → 200 over %s ends on the right URL; a loop stops", async (scheme) => {
    const base = `${scheme}://127.0.0.1:${scheme === 'https' ? ports.good : ports.plain}`;
    const { end, events } = await navigate(`${base}/r1`);
    expect(end.type).toBe('complete');
    const started = events.filter((e) => e.type === 'load-started') as { url: string }[];
    expect(started.map((e) => e.url)).toEqual([`${base}/r1`, `${base}/r2`, `${base}/page.html`]);
    expect(text(events)).toBe(PAGE);
    expect((await navigate(`${base}/loop`)).end).toMatchObject({ type: 'error', code: 'HOST_ERR_REDIRECT_LOOP' });
  });
});
