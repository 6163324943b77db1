// Link navigation, back, forward, reload; a URL to a dead server shows a clear error page and the app keeps
// working after it.
import { createSocket } from 'node:dgram';
import type { AddressInfo } from 'node:net';

import { artifact, chromiumPresent, startRig, type ProbeState, type Rig, pageFrame } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

async function until(rig: Rig, ok: (s: ProbeState) => boolean, what: string, timeoutMs = 20_000): Promise<ProbeState> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const s = await rig.state();
    if (s && ok(s)) return s;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

maybe('navigation', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig({ extraFiles: { 'sub/index.html': '<!doctype html><title>sub</title><p>the directory page</p>' } });
  });
  afterAll(async () => {
    await rig?.close();
  });

  test('a redirect (the server\'s 301 for a directory) is followed: the address bar shows where it led, and its record is the last hop\'s', async () => {
    const record = await rig.load('sub', 'catp');
    expect(record.outcome).toBe('complete');
    expect(record.url).toBe(`${rig.base}/sub/`);
    expect(await rig.page.inputValue('#url')).toBe(`${rig.base}/sub/`);
    expect(await rig.dump()).toContain('the directory page');
  });

  test('links, back, forward, reload', async () => {
    const index = `${rig.base}/index.html`;
    const article = `${rig.base}/article.html`;
    await rig.load('index.html');
    await pageFrame(rig.page).locator('a[href="article.html"]').first().click();
    const a = await until(rig, (s) => s.url === article && s.finished, 'the article after a click');
    expect(a.record?.outcome).toBe('complete');
    expect(await rig.page.inputValue('#url')).toBe(article);

    await rig.page.click('#back');
    await until(rig, (s) => s.url === index && s.finished && s.loadId > a.loadId, 'back to the index');
    expect(await rig.page.isEnabled('#forward')).toBe(true);
    await rig.page.click('#forward');
    const f = await until(rig, (s) => s.url === article && s.finished && s.loadId > a.loadId + 1, 'forward to the article');
    expect(await rig.page.isEnabled('#forward')).toBe(false);
    await rig.page.click('#reload');
    const r = await until(rig, (s) => s.url === article && s.finished && s.loadId > f.loadId, 'the reload');
    expect(r.record?.outcome).toBe('complete');
    expect(r.missingSlots).toBe(0);
  });

  test('typing a URL in the address bar loads it', async () => {
    await rig.page.fill('#url', `${rig.base}/table.html`);
    await rig.page.press('#url', 'Enter');
    const s = await until(rig, (st) => st.url === `${rig.base}/table.html` && st.finished, 'the typed URL');
    expect(s.record?.outcome).toBe('complete');
  });

  test('a dead server shows a clear error page; the app keeps working', async () => {
    // a port nobody listens on (bound, then closed)
    const sock = createSocket('udp4');
    await new Promise<void>((ok) => sock.bind(0, '127.0.0.1', ok));
    const port = (sock.address() as AddressInfo).port;
    await new Promise<void>((ok) => sock.close(() => ok()));
    const record = await rig.loadUrl(`dhttp://127.0.0.1:${port}/index.html`);
    expect(record.outcome).toBe('error');
    expect(await rig.page.isVisible('#error')).toBe(true);
    const text = await rig.page.textContent('#error');
    expect(text).toContain('This page could not be loaded');
    expect(text).toContain(`127.0.0.1:${port}`);
    await rig.page.screenshot({ path: artifact('browser-error.png') });
    const ok = await rig.load('index.html');
    expect(ok.outcome).toBe('complete');
    expect(await rig.page.isVisible('#error')).toBe(false);
  });
});
