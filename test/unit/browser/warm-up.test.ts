// The session's warm-up (app/browser/warm-up.ts): the small page goes through the same code as a real load's
// frames, CATP (index and data frames into DOM operations) and in-order (raw frames into its markup), and
// completes both ways; a failure throws.
import { parse, serialize } from 'parse5';

import { warmUpInBackground, warmUpLoadPath, WARM_UP_PAGE } from '../../../app/browser/warm-up';

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

test('the warm-up page is what a real page is made of: head, styles, links, lists, a table, images, SVG, comments', () => {
  const html = serialize(parse(WARM_UP_PAGE, { scriptingEnabled: false }));
  for (const tag of ['<style>', '<link ', '<script>', '<a href=', '<ul>', '<table>', '<img ', '<svg ', '<!--']) expect(html).toContain(tag);
});

test('in the background it runs its rounds a turn of the event loop each, and stops when a load begins', async () => {
  expect(await warmUpInBackground(() => false, 4)).toBe(4);
  // other work of the event loop goes on between rounds (here a chain of its own): the shell is never kept waiting
  let turns = 0;
  let stop = false;
  const tick = () => {
    turns++;
    if (!stop) setImmediate(tick);
  };
  setImmediate(tick);
  // busy after the second round: the load's own frames take over
  let asked = 0;
  expect(await warmUpInBackground(() => ++asked > 2, 10)).toBe(2);
  stop = true;
  expect(turns).toBeGreaterThanOrEqual(2);
  expect(await warmUpInBackground(() => true)).toBe(0);
});
