/**
 * Real pages round trip (shared by real-pages-a/b.test.ts so jest can run the two halves on two cores):
 * every page, encoded with the brotli codec (quality 5: the wire bytes are not what this tests), under N random
 * arrival orders — index frames and data frames shuffled together — with 10% of datagrams dropped and 5%
 * duplicated, repaired through the real report / resend path, assembles to a tree equal to parse5's parse of
 * the original.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as parse5 from 'parse5';
import { encodeTree, parse5TreeBuilder, RepairSender } from '../../protocol/catp';
import { corpusDir } from './html5lib';
import { codec, newAssembler, rng, sha256, shuffle } from './catp-util';

export const ORDERS = Number(process.env.CATP_ORDERS ?? 20);
/** Orders that build and compare a whole parse5 tree (the rest compare slot texts and rely on the page digest). */
export const FULL_ORDERS = 5;

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
  const sender = new RepairSender(frames, indexFrames, { requestId, pacing: 'fixed', rateFramesPerSec: 1e12, initialRttMs: 1 });
  const asm = newAssembler({ requestId });
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
        if (e.type === 'block-filled' || e.type === 'index-piece') for (const fl of e.fills) (slotText[fl.slot] ??= [])[fl.part] = fl.text;
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
  const doc = parse5.parse(html, { scriptingEnabled: false }); // as the server parses (CATP_SCRIPTING)
  const ref = parse5.serialize(doc);
  const page = encodeTree(doc, { sha256, codec });
  let rounds = 0;
  let expectSlots: string | null = null;
  for (let o = 0; o < orders; o++) {
    // The first FULL_ORDERS orders (CATP_FULL_ORDERS=n to change it) build a parse5 tree and compare
    // serializations; every order compares the final text of every slot with the first order's (whose tree
    // was compared: same verified index => same tree) and checks the page digest (page-complete only follows
    // a verified canonical digest).
    const full = o < Number(process.env.CATP_FULL_ORDERS ?? FULL_ORDERS);
    const res = runOrder(page.frames, page.indexFrames, o * 7919 + file.length, full, ref);
    rounds += res.rounds;
    const s = JSON.stringify(res.slotText.map((p) => p.join('')));
    if (expectSlots === null) expectSlots = s;
    else if (s !== expectSlots) throw new Error(`${file}: order ${o} filled slots differently`);
  }
  return { frames: page.frames.length, rounds };
}
