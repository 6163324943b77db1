// bench:viewport's CATP side: the bytes until given text nodes of the finished tree hold their final text, followed
// through the assembly. The head's unpainted markup goes after the top of the body (protocol/README.md), so while it
// is missing the body's nodes stand at other positions than in the finished tree: counted by position, the heading
// below would be "on hand" only once the whole head had come.
import * as parse5 from 'parse5';
import type { DefaultTreeAdapterMap } from 'parse5';

import { catpBytesUntilSettled, preorder } from '../../bench/catp/first-text';
import { CatpAssembler, encodePage, parse5TreeBuilder } from '../../protocol/catp';
import { seededRng } from '../../protocol/random';
import { codec, sha256 } from '../helpers/catp-util';

type Node = DefaultTreeAdapterMap['node'];
type Text = DefaultTreeAdapterMap['textNode'];

/** Text of several blocks: it arrives in parts. */
const LONG = 'Words and more words. '.repeat(900);

function page(): string {
  const r = seededRng(3);
  const word = () => Array.from({ length: 16 }, () => 'abcdefghijklmnopqrstuvwxyz0123456789'[Math.floor(r() * 36)]).join('');
  const unpainted = Array.from({ length: 60 }, (_, i) => `<meta name="m${i}" content="${word()}"><script src="/js/${word()}.js"></script><link rel="icon" href="/${word()}.png">\n`).join('');
  return `<!DOCTYPE html><html><head><title>T</title>${unpainted}</head><body><h1>Heading</h1><p>${LONG}</p><p>Last line</p></body></html>`;
}

/** The pre-order number of the text node holding `text` in the scripting-off parse. */
function numberOf(html: string, text: string): number {
  return preorder(parse5.parse(html, { scriptingEnabled: false }) as Node).findIndex((n) => n.nodeName === '#text' && (n as Text).value === text);
}

describe('bench:viewport catpBytesUntilSettled', () => {
  const html = page();
  const encoded = encodePage(html, { sha256, codec });
  const total = encoded.frames.reduce((n, f) => n + f.length, 0);

  /** The first frame (1-based count) after which a text node with exactly `text` (or, `part`, a prefix) is in the tree. */
  function framesUntilText(text: string, part = false): number {
    const asm = new CatpAssembler({ sha256, codec });
    const tree = parse5TreeBuilder();
    for (let k = 0; k < encoded.frames.length; k++) {
      asm.receive(encoded.frames[k], 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) tree.apply(e);
      const has = (n: Node) => n.nodeName === '#text' && (part ? (n as Text).value.length > 0 && text.startsWith((n as Text).value) : (n as Text).value === text);
      if (tree.root && preorder(tree.root as Node).some(has)) return k + 1;
    }
    return -1;
  }

  test('the heading counts from the frame that brings its text, long before the head is whole', () => {
    const heading = numberOf(html, 'Heading');
    const got = catpBytesUntilSettled(encoded.frames, sha256, codec, [heading]);
    expect(got).not.toBeNull();
    expect(got?.frames).toBe(framesUntilText('Heading'));
    expect(got?.bytes).toBe(encoded.frames.slice(0, got?.frames).reduce((n, f) => n + f.length, 0));
    expect(got?.bytes).toBeLessThan(total / 2);
    // at that frame the heading's text node is not yet at its final position (the head's unpainted pieces are missing)
    const asm = new CatpAssembler({ sha256, codec });
    const tree = parse5TreeBuilder();
    for (const f of encoded.frames.slice(0, got?.frames)) {
      asm.receive(f, 0);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) tree.apply(e);
    }
    const atPosition = preorder(tree.root as Node)[heading];
    expect(atPosition?.nodeName === '#text' && (atPosition as Text).value === 'Heading').toBe(false);
  });

  test('several targets: the last of them to settle; a text that grows counts when it is whole', () => {
    const heading = numberOf(html, 'Heading');
    const long = numberOf(html, LONG);
    const lastLine = numberOf(html, 'Last line');
    const both = catpBytesUntilSettled(encoded.frames, sha256, codec, [heading, long]);
    const alone = catpBytesUntilSettled(encoded.frames, sha256, codec, [long]);
    expect(both).toEqual(alone);
    expect(alone?.frames).toBe(framesUntilText(LONG));
    expect(framesUntilText(LONG, true)).toBeLessThan(framesUntilText(LONG)); // (its first part came frames before)
    expect(catpBytesUntilSettled(encoded.frames, sha256, codec, [lastLine])?.frames).toBe(framesUntilText('Last line'));
  });

  test('a number that is not a text node of the finished tree, or frames that never finish the page: null', () => {
    expect(catpBytesUntilSettled(encoded.frames, sha256, codec, [1])).toBeNull(); // the doctype
    expect(catpBytesUntilSettled(encoded.frames.slice(0, -1), sha256, codec, [numberOf(html, 'Heading')])).toBeNull();
  });
});
