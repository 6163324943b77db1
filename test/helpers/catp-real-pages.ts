/**
 * Real pages round trip (shared by real-pages-a/b.test.ts so jest can run the two halves on two cores):
 * every page, under N random arrival orders with 10% of datagrams dropped (and some duplicated), repaired
 * through the real report / resend path, assembles to a tree equal to parse5's parse of the original.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as parse5 from 'parse5';
import { CatpAssembler, encodeTree, parse5TreeBuilder, RepairSender } from '../../protocol/catp';
import { corpusDir } from './html5lib';
import { rng, sha256, shuffle } from './catp-util';

export const ORDERS = Number(process.env.CATP_ORDERS ?? 50);

export function realPages(): { dir: string; files: string[] } | null {
  const c = corpusDir();
  if (!c) return null;
  const dir = path.join(c, 'real-pages');
  if (!fs.existsSync(dir)) return null;
  return { dir, files: fs.readdirSync(dir).filter((f) => f.endsWith('.html')).sort() };
}

export interface PageRun {
  rounds: number;
  resent: number;
  dropped: number;
}

/** One arrival order: first pass shuffled with 10% loss, then report -> resend rounds (also lossy). */
export function runOrder(frames: Uint8Array[], indexFrames: number, seed: number, fullTree: boolean, ref: string) {
  const r = rng(seed);
  const requestId = new Uint8Array([0x80 | (seed & 0x7f), 1, 2, 3, 4, 5, 6, 7]);
  const sender = new RepairSender(frames, indexFrames, { requestId, rateFramesPerSec: 1e12, initialRttMs: 1 });
  const asm = new CatpAssembler({ sha256, requestId });
  asm.start(0);
  const builder = fullTree ? parse5TreeBuilder() : null;
  const slotText: string[][] = [];
  let complete = false;
  let now = 0;
  let rounds = 0;
  let dropped = 0;
  const deliver = (batch: Uint8Array[]): void => {
    const withDups = [...batch, ...batch.filter(() => r() < 0.05)];
    for (const f of shuffle(withDups, r)) {
      if (r() < 0.1) {
        dropped++;
        continue;
      }
      asm.receive(f, now);
      for (let e = asm.nextEvent(); e; e = asm.nextEvent()) {
        if (builder) builder.apply(e);
        else if (e.type === 'block-filled') for (const fl of e.fills) (slotText[fl.slot] ??= [])[fl.part] = fl.text;
        if (e.type === 'page-complete') complete = true;
        if (e.type === 'page-corrupt' || e.type === 'error') throw new Error(`${e.type} ${e.code}`);
      }
    }
  };
  const drain = (): Uint8Array[] => {
    const out: Uint8Array[] = [];
    for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) out.push(d);
    return out;
  };
  deliver(drain());
  while (!complete && rounds < 50) {
    rounds++;
    now += 1000;
    for (let rep = asm.nextReport(now); rep; rep = asm.nextReport(now)) sender.receiveReport(rep, now);
    deliver(drain());
  }
  if (!complete) throw new Error(`page not complete after ${rounds} rounds (seed ${seed})`);
  if (builder) {
    const got = parse5.serialize(builder.root as parse5.DefaultTreeAdapterMap['document']);
    if (got !== ref) throw new Error(`assembled tree differs from parse5's (seed ${seed})`);
  }
  return { rounds, dropped, slotText, asm };
}

export function runPage(dir: string, file: string, orders: number): { frames: number; rounds: number } {
  const html = fs.readFileSync(path.join(dir, file), 'utf8');
  const doc = parse5.parse(html);
  const ref = parse5.serialize(doc);
  const page = encodeTree(doc, { sha256 });
  let rounds = 0;
  let expectSlots: string | null = null;
  for (let o = 0; o < orders; o++) {
    // Every order builds a parse5 tree and compares serializations (CATP_FULL_ORDERS=n limits that to the
    // first n orders for a quick run; the others then compare the final
    // text of every slot with the first order's (same verified index => same tree) and check the page
    // digest (page-complete only follows a verified canonical digest).
    const full = o < Number(process.env.CATP_FULL_ORDERS ?? ORDERS);
    const res = runOrder(page.frames, page.indexFrames, o * 7919 + file.length, full, ref);
    rounds += res.rounds;
    if (!full) {
      const s = JSON.stringify(res.slotText.map((p) => p.join('')));
      if (expectSlots === null) expectSlots = s;
      else if (s !== expectSlots) throw new Error(`${file}: order ${o} filled slots differently`);
    }
  }
  return { frames: page.frames.length, rounds };
}
