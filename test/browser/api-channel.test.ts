// The Chromium shell's connection to the host runs in a shared worker (renderer/api-worker.ts): a page driven
// through DevTools (the lab, `catp browse --headless`) has the Network domain on, which copied every message of
// the page's own socket into a protocol event for the host to parse. Shown here with a DevTools session of our
// own on the shell page: with the worker it reports no message while a page loads; without the worker's script
// (an old renderer directory) the shell falls back to its own socket, loads as well, and every message shows.
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { buildRenderer, chromiumPresent, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

/** Loads a page with a DevTools session of ours listening on the shell page; the WebSocket messages it saw. */
async function loadWatched(rig: Rig): Promise<{ complete: boolean; messages: number }> {
  const cdp = await rig.page.context().newCDPSession(rig.page);
  await cdp.send('Network.enable');
  let messages = 0;
  cdp.on('Network.webSocketFrameReceived', () => messages++);
  const record = await rig.load('index.html');
  await cdp.detach();
  return { complete: record.outcome === 'complete', messages };
}

maybe('the shell API channel', () => {
  test('through the shared worker: loads, and the page reports no socket message', async () => {
    const rig = await startRig();
    try {
      const { complete, messages } = await loadWatched(rig);
      expect(complete).toBe(true);
      expect(messages).toBe(0);
      const browserCdp = await rig.page.context().browser()!.newBrowserCDPSession();
      const { targetInfos } = await browserCdp.send('Target.getTargets');
      expect(targetInfos.filter((t) => t.type === 'shared_worker' && t.url.endsWith('/__catp/api-worker.js'))).toHaveLength(1);
    } finally {
      await rig.close();
    }
  });

  test("without the worker's script: the page's own socket, every message reported", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'catp-renderer-noworker-'));
    cpSync(await buildRenderer(), dir, { recursive: true });
    rmSync(join(dir, 'api-worker.js'));
    const rig = await startRig({ rendererDir: dir });
    try {
      const { complete, messages } = await loadWatched(rig);
      expect(complete).toBe(true);
      expect(messages).toBeGreaterThan(0);
    } finally {
      await rig.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
