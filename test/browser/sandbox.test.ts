// A page whose HTML carries <script>, inline event handlers (onload, onclick, onerror on img), a javascript:
// link, an SVG script and an iframe srcdoc script runs NONE of them, whichever transport painted it: each
// would set a global in the app or the frame, change the DOM, or request the host's canary endpoint. The frame is
// on another origin than the app page (the shell's frame origin): a script that did run there reaches neither the
// app page, its secret nor its API.
import { join } from 'node:path';

import { chromiumPresent, parse5Of, startRig, type Rig, pageFrame } from './helpers';
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

// read in the app page, and in the frame (another origin: through the browser's own frame API)
const APP_GLOBALS = `(() => ({ app: window.pwned ?? null }))()`;
const FRAME_GLOBALS = `(() => ({ frame: window.pwned ?? null, title: document.title, p: document.getElementById('p').textContent,
  late: document.getElementById('late').textContent, agent: [...document.scripts].some((s) => s.src.includes('/__catp/')) }))()`;

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
    const frame = pageFrame(rig.page);
    await frame.locator('#p').click();
    await frame.locator('#js').click();
    await frame.locator('#i').click();
    await rig.page.waitForTimeout(300);
    expect(await rig.page.evaluate(APP_GLOBALS)).toEqual({ app: null });
    const view = rig.page.frames().find((f) => f.url().includes('/view/'));
    // (the page's own <script> elements stay in its tree, inert; our agent's removed itself)
    expect(await view?.evaluate(FRAME_GLOBALS)).toEqual({ frame: null, title: 'evil', p: 'click me', late: '', agent: false });
    expect(rig.session.shell.canaryHits).toEqual([]);
    // the javascript: link did not navigate anywhere
    expect((await rig.state()).url).toBe(url);
    if (transport === 'catp') expect(await rig.dump()).toBe(parse5Of(join(rig.root, 'evil.html')));
  });

  test('a script that did run in the page frame (as if the sandbox had failed) reaches neither the app page, its secret nor its API', async () => {
    await rig.load('evil.html', 'catp');
    const view = rig.page.frames().find((f) => f.url().includes('/view/'));
    expect(view).toBeDefined();
    // run in the page frame's own world, as a page script would be: it sits on the frame origin, the app on another
    const reach = await view!.evaluate(`(() => {
      const tryIt = (f) => { try { return f(); } catch (e) { return 'refused: ' + e.name; } };
      return {
        appUrl: tryIt(() => top.location.href),
        appDocument: tryIt(() => top.document.title),
        appApi: tryIt(() => typeof top.catp + ' ' + typeof top.__catp),
        storage: tryIt(() => sessionStorage.getItem('catp-secret')),
      };
    })()`);
    expect(reach).toEqual({
      appUrl: 'refused: SecurityError',
      appDocument: 'refused: SecurityError',
      appApi: 'refused: SecurityError',
      storage: null,
    });
    // the page frame's origin is the shell's frame origin, not the app page's
    expect(new URL(view!.url()).origin).toBe(rig.session.shell.frameOrigin);
    expect(rig.session.shell.frameOrigin).not.toBe(rig.session.shell.origin);
    // the app page itself still has its secret (the WebSocket works): the page above could not read it
    expect(await rig.page.evaluate(`sessionStorage.getItem('catp-secret')`)).toBe(rig.session.shell.secret);
  });
});
