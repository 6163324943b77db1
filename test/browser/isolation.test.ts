// A page cannot make the browser reach another origin except for the images, stylesheets, fonts and media it names
// (issue "safe on the open Internet", item 6; those go through the host: other-origins.test.ts): not Chromium (an
// <iframe>, preconnect, prefetch or link to another origin opens no connection there: its proxy is the shell,
// which refuses and counts), and not the host (another origin named under the shell's /view/ path is refused, so
// no DHTTP datagram or TCP connection goes there). A canary on loopback counts connections and datagrams, not
// just requests.
import * as dgram from 'node:dgram';

import { chromiumPresent, startRig, type Rig, pageFrame } from './helpers';
import { startCanary, type Canary } from '../helpers/canary';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

function page(canary: number): string {
  const http = `http://127.0.0.1:${canary}`;
  const view = (origin: string, path: string) => `/view/${encodeURIComponent(origin)}${path}`;
  return `<!DOCTYPE html><html><head><title>reach out</title>
<link rel="preconnect" href="${http}"><link rel="dns-prefetch" href="${http}"><link rel="prefetch" href="${http}/prefetch">
<link rel="alternate" href="${http}/feed">
</head><body><h1 id="h">a page that names another origin</h1>
<iframe src="${http}/frame"></iframe>
<img src="${view(http, '/via-host.png')}" alt="through the host, http">
<img src="${view(`dhttp://127.0.0.1:${canary}`, '/via-host-dhttp.png')}" alt="through the host, dhttp">
<a id="out" href="${http}/link">a link</a>
<p>the end</p>
</body></html>`;
}

maybe('a page reaches nothing but its own origin', () => {
  let rig: Rig;
  let canary: Canary;

  beforeAll(async () => {
    canary = await startCanary();
    rig = await startRig({ extraFiles: { 'reach.html': page(canary.port) } });
  });
  afterAll(async () => {
    await rig?.close();
    canary?.close();
  });

  test('the canary counts what reaches it (control)', async () => {
    const { connect } = await import('node:net');
    await new Promise<void>((ok) => connect(canary.port, '127.0.0.1').once('close', () => ok()).once('error', () => ok()));
    const udp = dgram.createSocket('udp4');
    await new Promise<void>((ok) => udp.send(Buffer.from('x'), canary.port, '127.0.0.1', () => ok()));
    udp.close();
    await new Promise((r) => setTimeout(r, 100));
    expect([canary.connections, canary.datagrams]).toEqual([1, 1]);
    canary.reset();
  });

  test.each(['catp', 'inorder', 'tcp'] as const)('%s: no connection and no datagram reach the other origin', async (transport) => {
    const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/reach.html` : `${rig.base}/reach.html`;
    const before = { ...rig.session.shell.refused };
    const record = await rig.loadUrl(url, transport);
    expect(record.outcome).toBe('complete');
    // the page is there; what it names elsewhere had time to be tried
    expect(await pageFrame(rig.page).locator('#h').textContent()).toBe('a page that names another origin');
    await rig.page.waitForTimeout(1500);
    expect({ connections: canary.connections, datagrams: canary.datagrams }).toEqual({ connections: 0, datagrams: 0 });
    // the host refused the two /view/ fetches of another origin, and counted them
    const refused = rig.session.shell.refused;
    expect((refused['cross-origin'] ?? 0) - (before['cross-origin'] ?? 0)).toBeGreaterThanOrEqual(2);
  });
});
