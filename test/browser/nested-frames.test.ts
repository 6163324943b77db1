// The frames a page nests (ads, video players, widgets: 24 `<iframe>`s on gmw, 23 on cnet) show nothing and cost
// nothing: their navigation goes to the shell, which answers it with no document (204), so each keeps its empty
// about:blank document. Blocked by the page frame's CSP instead, each one became Chromium's error page (an
// "is blocked" document with its own scripts, chrome-error://chromewebdata/) in the page's renderer, a few tens of
// ms of its main thread apiece while the page was being built. A canary on loopback shows no connection leaves.
import { chromiumPresent, startRig, type Rig, pageFrame } from './helpers';
import { startCanary, type Canary } from '../helpers/canary';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

function page(canary: number): string {
  return `<!DOCTYPE html><html><head><title>frames</title></head><body><h1 id="h">a page with frames</h1>
<iframe id="f-http" src="http://127.0.0.1:${canary}/ad.html"></iframe>
<iframe id="f-https" src="https://127.0.0.1:${canary}/player.html"></iframe>
<iframe id="f-root" src="/ads/slot.html"></iframe>
<iframe id="f-none"></iframe>
<p id="end">the end</p>
</body></html>`;
}

/** What a frame of the page holds: its document's URL, or null when that document is not ours to read (an error page). */
async function frameUrl(rig: Rig, id: string): Promise<string | null> {
  return pageFrame(rig.page).locator(`#${id}`).evaluate((f) => {
    try {
      return (f as unknown as { contentDocument: { URL: string } | null }).contentDocument?.URL ?? null;
    } catch {
      return null;
    }
  });
}

maybe('frames the page nests', () => {
  let rig: Rig;
  let canary: Canary;

  beforeAll(async () => {
    canary = await startCanary();
    rig = await startRig({ extraFiles: { 'frames.html': page(canary.port) } });
  });
  afterAll(async () => {
    await rig?.close();
    canary?.close();
  });

  test.each(['catp', 'inorder', 'tcp'] as const)('%s: each keeps an empty document, no error page, and nothing leaves', async (transport) => {
    const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/frames.html` : `${rig.base}/frames.html`;
    const shell = rig.session.shell;
    const before = shell.refused['nested-frame'] ?? 0;
    const record = await rig.loadUrl(url, transport);
    expect(record.outcome).toBe('complete');
    expect(await pageFrame(rig.page).locator('#end').textContent()).toBe('the end');
    // the three that go somewhere (http:// through the proxy, https:// through a tunnel, root-relative on the frame
    // origin) were each answered with no document
    const until = Date.now() + 10_000;
    while ((shell.refused['nested-frame'] ?? 0) - before < 3 && Date.now() < until) await new Promise((ok) => setTimeout(ok, 100));
    expect((shell.refused['nested-frame'] ?? 0) - before).toBe(3);
    await rig.page.waitForTimeout(300);
    for (const id of ['f-http', 'f-https', 'f-root', 'f-none']) expect([id, await frameUrl(rig, id)]).toEqual([id, 'about:blank']);
    expect(canary.connections).toBe(0);
  });

  test('the origin of a frame the page names is named as one (a tunnel opens for it), and no other', async () => {
    await rig.load('frames.html', 'catp');
    const service = rig.session.service;
    expect(service.namesFramesOn(`https://127.0.0.1:${canary.port}`)).toBe(true);
    expect(service.namesFramesOn('https://elsewhere.test')).toBe(false);
    expect(service.namesSubresourcesOn(`https://127.0.0.1:${canary.port}`)).toBe(false);
  });
});
