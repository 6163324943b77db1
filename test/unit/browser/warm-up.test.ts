// The session's warm-up (app/browser/warm-up.ts): the small page goes through the same code as a real load's
// frames, CATP (index and data frames into DOM operations) and in-order (raw frames into its markup), and
// completes both ways; a failure throws.
import { parse, serialize } from 'parse5';

import { warmUpLoadPath, WARM_UP_PAGE } from '../../../app/browser/warm-up';

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
