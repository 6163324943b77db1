/* global require, process, console */
/* eslint-disable @typescript-eslint/no-require-imports -- a plain Node script, run against built dist/ trees */
// Session 41: CATP over the simulated bottleneck (lab/sim-link.ts: the first contact, timers 1 ms late), an old build
// (/work/E) against a new one (NEW=dir, default /work/main): first useful frame, longest gap between useful frames,
// completion, resends, means over seeds 1..N. Usage: NEW=/work/N node ab-s41-echo-sim.js RATE_B_PER_MS DELAY_MS LOSS "" N
const fs = require('fs');
const [rate, delay, loss] = [Number(process.argv[2]), Number(process.argv[3]), Number(process.argv[4])];
const pages = (process.argv[5] || 'daringfireball-1,001,hukumusume,v8-blog,medium-2,heise,keep-tabular-data,ehow-1,dropbox-blog,lemonde-1,ehow-2,liberation-1').split(',');
const seeds = Number(process.argv[6] || 10);
const out = {};
for (const root of ['/work/E', process.env.NEW || '/work/main']) {
  const { encodePage, RepairSender, CatpAssembler } = require(root + '/dist/protocol/catp');
  const { runBottleneck, FIRST_CONTACT } = require(root + '/dist/lab/sim-link.js');
  const { hostCodec } = require(root + '/dist/app/catp-codec.js');
  const crypto = require('crypto');
  const sha256 = (b) => new Uint8Array(crypto.createHash('sha256').update(b).digest());
  const codec = hostCodec({ finalQuality: 5 });
  const ID = new Uint8Array([0x80, 9, 8, 7, 6, 5, 4, 3]);
  for (const name of pages) {
    const page = encodePage(new Uint8Array(fs.readFileSync(`/work/shared/corpus/real-pages/${name}.html`)), { sha256, codec });
    const r = { first: 0, gap: 0, end: 0, resent: 0 };
    for (let seed = 1; seed <= seeds; seed++) {
      const sender = new RepairSender(page.frames, page.indexFrames, { requestId: ID });
      const client = new CatpAssembler({ sha256, codec, requestId: ID, otherPort: 40000 });
      const res = runBottleneck(sender, client, { rate, delayMs: delay, loss, seed, firstFlight: FIRST_CONTACT, timerLateMs: 1 });
      const u = [0, ...res.usefulAt]; let g = 0; for (let i = 1; i < u.length; i++) g = Math.max(g, u[i] - u[i - 1]);
      r.first += res.usefulAt[0] / seeds; r.gap += g / seeds; r.end += (res.completeAt ?? NaN) / seeds; r.resent += sender.stats.resent / seeds;
    }
    (out[name] ??= {})[root] = r;
  }
}
let lg = 0;
for (const [name, v] of Object.entries(out)) {
  const a = v['/work/E'], b = v[process.env.NEW || '/work/main'];
  lg += Math.log(b.gap / a.gap);
  console.log(name.padEnd(18), 'first', a.first.toFixed(0), b.first.toFixed(0), ' gap', a.gap.toFixed(0), b.gap.toFixed(0), ' end', a.end.toFixed(0), b.end.toFixed(0), ' resent', a.resent.toFixed(1), b.resent.toFixed(1));
}
console.log('geomean gap new/old', Math.exp(lg / Object.keys(out).length).toFixed(3));
