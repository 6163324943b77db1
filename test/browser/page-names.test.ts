// The host fetches only what the page names (issue "safe on the open Internet", item 6): a /view/ request is
// answered for a URL in the current page's own tree or in a stylesheet it loaded, and refused (404, counted as
// not-named) for anything else on the page's origin, so a request to the shell cannot make the host fetch an
// arbitrary path. Every transport: the CATP tree, the in-order text and the TCP text are all read for names.
import { chromiumPresent, startRig, type Rig, pageFrame } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

// 1x1 transparent GIF: the images decode, so the frame asks for them like any page's
const GIF = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64').toString('latin1');
const PAGE = (n: number) => `<!DOCTYPE html><html><head><title>names</title>
<link rel="stylesheet" href="css/site.css">
<style>#s { background-image: url("img/from-style.gif") }</style>
</head><body>
<h1 id="h">a page with its own resources</h1>
<img id="plain" src="img/plain.gif" alt="">
<img id="set" src="img/set-1x.gif" srcset="img/set-1x.gif 1x, img/set-2x.gif 2x" alt="">
<div id="s" style="width:10px;height:10px"></div>
<div id="i" style="width:${n}px;height:10px;background-image:url(img/from-attr.gif)"></div>
<div id="c" class="from-css" style="width:10px;height:10px"></div>
</body></html>`;
const CSS = `@import "more.css";\n.from-css { background-image: url(../img/from-sheet.gif) }`;
const MORE = `#h { background-image: url(../img/from-import.gif) }`;
const EXPECTED = ['css/site.css', 'css/more.css', 'img/from-style.gif', 'img/plain.gif', 'img/from-attr.gif', 'img/from-sheet.gif', 'img/from-import.gif'];

maybe('the host fetches only what the page names', () => {
  let rig: Rig;

  beforeAll(async () => {
    // a directory per transport: a document keeps the images it already has (the frame is reused between loads)
    const files: Record<string, string> = {};
    // (and Chromium keeps a parsed style attribute across document.open, URLs resolved as they were: each differs)
    for (const [n, dir] of ['names', 'names-catp', 'names-inorder', 'names-tcp'].entries()) {
      Object.assign(files, { [`${dir}/page.html`]: PAGE(10 + n), [`${dir}/css/site.css`]: CSS, [`${dir}/css/more.css`]: MORE, [`${dir}/secret.txt`]: 'not for the frame' });
      for (const g of ['plain', 'set-1x', 'set-2x', 'from-style', 'from-attr', 'from-sheet', 'from-import']) files[`${dir}/img/${g}.gif`] = GIF;
    }
    rig = await startRig({ extraFiles: files });
  });
  afterAll(async () => {
    await rig?.close();
  });

  test.each(['catp', 'inorder', 'tcp'] as const)('%s: everything the page names loads, nothing is refused', async (transport) => {
    const path = `names-${transport}/page.html`;
    const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/${path}` : `${rig.base}/${path}`;
    const before = rig.session.shell.refused['not-named'] ?? 0;
    const served: string[] = [];
    const onResponse = (r: import('playwright-core').Response) => {
      if (r.status() === 200 && r.url().includes('/view/')) served.push(r.url().replace(/^.*\/names-[a-z]+\//, ''));
    };
    rig.page.on('response', onResponse);
    try {
      const record = await rig.loadUrl(url, transport);
      expect(record.outcome).toBe('complete');
      const frame = pageFrame(rig.page);
      const missing = () => EXPECTED.filter((p) => !served.includes(p));
      for (const until = Date.now() + 10_000; missing().length > 0 && Date.now() < until;) await rig.page.waitForTimeout(50);
      expect(missing()).toEqual([]);
      // the stylesheet chain applied: the frame really used what the host fetched
      // (functions run in the page; this file is compiled without the DOM library)
      type View = { getComputedStyle(e: unknown): { backgroundImage: string } };
      expect(await frame.locator('#c').evaluate((e) => (e.ownerDocument.defaultView as unknown as View).getComputedStyle(e).backgroundImage)).toContain('from-sheet.gif');
      expect(await frame.locator('#plain').evaluate((e) => (e as unknown as { naturalWidth: number }).naturalWidth)).toBe(1);
    } finally {
      rig.page.off('response', onResponse);
    }
    expect((rig.session.shell.refused['not-named'] ?? 0) - before).toBe(0);
  });

  test('a path the page does not name is refused, counted, and never fetched', async () => {
    await rig.loadUrl(`${rig.base}/names/page.html`, 'catp');
    const shell = rig.session.shell;
    const origin = encodeURIComponent(rig.base);
    const before = shell.refused['not-named'] ?? 0;
    const secret = await fetch(`${shell.frameOrigin}/view/${origin}/names/secret.txt`);
    expect(secret.status).toBe(404);
    expect(await secret.text()).not.toContain('not for the frame');
    const rootRelative = await fetch(`${shell.frameOrigin}/names/secret.txt`);
    expect(rootRelative.status).toBe(404);
    expect((shell.refused['not-named'] ?? 0) - before).toBe(2);
    // what the page names is answered the same way
    const named = await fetch(`${shell.frameOrigin}/view/${origin}/names/img/plain.gif`);
    expect(named.status).toBe(200);
    // (the page frame and its sub-resources live on the frame origin only)
    expect((await fetch(`${shell.origin}/view/${origin}/names/img/plain.gif`)).status).toBe(404);
  });
});
