// A page whose HTML carries <script>, inline event handlers (onload, onclick, onerror on img), a javascript:
// link, an SVG script and an iframe srcdoc script runs NONE of them, whichever transport painted it: each
// would set a global in the app or the frame, change the DOM, or request the host's canary endpoint.
import { join } from 'node:path';

import { chromiumPresent, parse5Of, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

const EVIL = `<!DOCTYPE html><html><head><title>evil</title>
<script>parent.pwned = 'script'; new Image().src = '/__catp/canary?script'; document.title = 'pwned';</script>
</head><body onload="parent.pwned='onload'; new Image().src='/__catp/canary?onload'">
<p id="p" onclick="this.textContent='clicked'; new Image().src='/__catp/canary?onclick'">click me</p>
<img id="i" src="missing.png" onerror="parent.pwned='onerror'; new Image().src='/__catp/canary?onerror'">
<a id="js" href="javascript:parent.pwned='js';new Image().src='/__catp/canary?js'">js link</a>
<svg><script>parent.pwned='svg'</script></svg>
<iframe srcdoc="<script>parent.parent.pwned='srcdoc'</script>"></iframe>
<div id="late"></div><script>document.getElementById('late').textContent = 'ran'</script>
</body></html>`;

const GLOBALS = `(() => {
  const f = document.getElementById('page');
  return { app: window.pwned ?? null, frame: f.contentWindow.pwned ?? null, title: f.contentDocument.title,
    p: f.contentDocument.getElementById('p').textContent, late: f.contentDocument.getElementById('late').textContent };
})()`;

maybe('no page script runs', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig({ extraFiles: { 'evil.html': EVIL } });
  });
  afterAll(async () => {
    await rig?.close();
  });

  test.each(['catp', 'inorder', 'tcp'] as const)('%s: scripts, handlers and javascript: links do nothing', async (transport) => {
    const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/evil.html` : `${rig.base}/evil.html`;
    const record = await rig.loadUrl(url, transport);
    expect(record.outcome).toBe('complete');
    expect(record.transport).toBe(transport);
    const frame = rig.page.frameLocator('#page');
    await frame.locator('#p').click();
    await frame.locator('#js').click();
    await frame.locator('#i').click();
    await rig.page.waitForTimeout(300);
    expect(await rig.page.evaluate(GLOBALS)).toEqual({ app: null, frame: null, title: 'evil', p: 'click me', late: '' });
    expect(rig.session.shell.canaryHits).toEqual([]);
    // the javascript: link did not navigate anywhere
    expect((await rig.state()).url).toBe(url);
    if (transport === 'catp') expect(await rig.dump()).toBe(parse5Of(join(rig.root, 'evil.html')));
  });
});
