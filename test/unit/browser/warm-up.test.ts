// The session's warm-up (app/browser/warm-up.ts): the generated page goes through the same code as a real load's
// frames, CATP (index and data frames into DOM operations) and in-order (raw frames into its markup), and
// completes both ways; a failure throws.
import { parse, serialize } from 'parse5';

import { BrowserService } from '../../../app/browser/service';
import { warmUpInBackground, warmUpLoadPath, WARM_UP_PAGE } from '../../../app/browser/warm-up';
import { DOM_OP, type BrowserEvent, type DomOps } from '../../../protocol/browser/api';

test('the warm-up page completes over CATP (several index and data frames, DOM operations) and in-order (its markup)', () => {
  const { catp, inorder } = warmUpLoadPath(1);
  // several frames of each kind, so the warm-up runs the assembler's index and data paths
  expect(catp.indexFrames).toBeGreaterThanOrEqual(2);
  expect(catp.frames - catp.indexFrames).toBeGreaterThanOrEqual(2);
  expect(catp.domEvents).toBeGreaterThanOrEqual(2);
  expect(catp.domOps).toBeGreaterThan(500);
  expect(inorder.frames).toBeGreaterThanOrEqual(3);
  expect(inorder.textChars).toBe(WARM_UP_PAGE.length);
});

test('every round completes (a second warm-up is as good as the first)', () => {
  const first = warmUpLoadPath(1);
  expect(warmUpLoadPath(2)).toEqual(first);
});

test('the warm-up page is what a real page is made of: head, styles, links, lists, tables, images, SVG, comments', () => {
  const html = serialize(parse(WARM_UP_PAGE, { scriptingEnabled: false }));
  for (const tag of ['<meta ', '<style>', '<link ', '<script>', '<a ', '<ul ', '<ol>', '<table ', '<img ', '<picture>', '<svg ', '<template ', '<form ', '<pre>', '<!--']) {
    expect(html).toContain(tag);
  }
  // text in scripts of two, three and four UTF-8 bytes a character
  expect(html).toMatch(/Straße/);
  expect(html).toMatch(/日本語/);
  expect(html).toMatch(/😀/);
  // large enough for V8 to optimize what it runs (warm-up.ts), small enough to encode in a few tens of ms
  expect(WARM_UP_PAGE.length).toBeGreaterThan(30_000);
  expect(WARM_UP_PAGE.length).toBeLessThan(100_000);
});

test('in the background it runs its rounds a frame a turn of the event loop, and stops when a load begins', async () => {
  const { catp, inorder } = warmUpLoadPath(1);
  const stepsPerRound = catp.frames + inorder.frames;
  // other work of the event loop goes on between frames (here a chain of its own): the shell is never kept waiting
  let turns = 0;
  let stop = false;
  const tick = () => {
    turns++;
    if (!stop) setImmediate(tick);
  };
  setImmediate(tick);
  expect(await warmUpInBackground(() => false, 2)).toBe(2);
  stop = true;
  expect(turns).toBeGreaterThanOrEqual(2 * stepsPerRound - 2);
  // busy three frames into the second round: the load's own frames take over, the round is not finished
  let asked = 0;
  expect(await warmUpInBackground(() => ++asked > stepsPerRound + 3, 10)).toBe(1);
  expect(asked).toBe(stepsPerRound + 4);
  expect(await warmUpInBackground(() => true)).toBe(0);
});

test('its first round hands over its CATP load as DOM operations, batch by batch, once (the renderer warms up on them)', async () => {
  const handed: DomOps[][] = [];
  expect(await warmUpInBackground(() => false, 2, (b) => handed.push(b))).toBe(2);
  expect(handed).toHaveLength(1);
  const { catp } = warmUpLoadPath(1);
  const batches = handed[0]!;
  expect(batches).toHaveLength(catp.domEvents);
  expect(batches.reduce((n, b) => n + b.length, 0)).toBe(catp.domOps);
  // a load's operations: the first batch starts the page (its first created node's handle, then RESET)
  expect(batches[0]![0]).toBe(1);
  expect(batches[0]![1]).toBe(DOM_OP.RESET);
  // a load that begins before the first round ends: nothing is handed over
  const none: DomOps[][] = [];
  let asked = 0;
  expect(await warmUpInBackground(() => ++asked > 3, 2, (b) => none.push(b))).toBe(0);
  expect(none).toHaveLength(0);
});

test('the host hands the warm-up to a renderer that is ready before any load, and to none once a load has begun', () => {
  const service = new BrowserService({ shell: 'test', store: null });
  const events: BrowserEvent[] = [];
  service.attach((e) => events.push(e));
  const types = () => events.map((e) => e.type).filter((t) => t === 'hello' || t === 'warm-up' || t === 'load-started');
  try {
    const batches: DomOps[] = [[1, DOM_OP.RESET, 0, DOM_OP.ELEMENT, 'html', 0, 0]];
    // ready before the operations exist (the warm-up's first round was still running): they go when they come
    service.handle({ type: 'ready' });
    expect(types()).toEqual(['hello']);
    service.setWarmUpOps(batches);
    expect(types()).toEqual(['hello', 'warm-up']);
    expect(events.find((e) => e.type === 'warm-up')).toEqual({ type: 'warm-up', batches });
    // another renderer (a reload) before any load gets them with its hello
    service.handle({ type: 'ready' });
    expect(types()).toEqual(['hello', 'warm-up', 'hello', 'warm-up']);
    // once a load has begun the renderer's code is warming on the page itself (port 9: nothing answers)
    service.navigate('dhttp://127.0.0.1:9/page.html');
    service.handle({ type: 'ready' });
    expect(types()).toEqual(['hello', 'warm-up', 'hello', 'warm-up', 'load-started', 'hello']);
  } finally {
    service.close();
  }
});
