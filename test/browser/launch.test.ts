// A browser we launch builds no browser UI it never shows. Chromium 156 builds its omnibox's "AI mode" popup in a
// renderer of its own with every tabbed window, headless too, and that took about 0.5 s of CPU at launch, while
// the first page loaded (app/browser/chromium.ts, UNUSED_BROWSER_UI). Chromium lists such UI as targets of type
// browser_ui; a new one appearing here is worth a look, and a flag if we never show it.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

import { openHeadless, type HeadlessPage } from '../../app/browser/chromium';
import { chromiumPresent } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(60_000);

maybe('launch', () => {
  let server: Server;
  let head: HeadlessPage | null = null;
  beforeAll(async () => {
    server = createServer((_req, res) => res.end('<!DOCTYPE html><p>hello</p>'));
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  });
  afterAll(async () => {
    await head?.close();
    await new Promise((ok) => server.close(ok));
  });

  test('a page opens with no browser UI target beside it', async () => {
    head = await openHeadless(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    expect(await head.page.textContent('p')).toBe('hello');
    const cdp = await head.browser.newBrowserCDPSession();
    // the popup's target appeared 10-30 ms after the page when it was built; look for a second
    const seen = new Set<string>();
    for (let i = 0; i < 10; i++) {
      const { targetInfos } = await cdp.send('Target.getTargets');
      for (const t of targetInfos) seen.add(`${t.type} ${t.url}`);
      await new Promise((ok) => setTimeout(ok, 100));
    }
    expect([...seen].filter((t) => !t.startsWith('page '))).toEqual([]);
    expect([...seen].filter((t) => t.startsWith('page '))).toHaveLength(1);
  });
});
