// The network floor of a load (DESIGN.md "Silent time"): the longest gap between arrivals of *useful*
// packets, the first gap starting at the request, taken from the emulator's per-packet log.
//
// Arrival = the emulator's departure (D event) toward the client: the moment the packet is written to
// the client's TUN, i.e. handed to the client's kernel. Only packets that crossed the link count; the
// emulator's drops never arrive.
//
// Useful, for the page's flows (server → client packets from the server's port):
//  * TCP: the segment carries payload bytes that no earlier departure of that connection carried (the
//    connection's delivered byte ranges are kept, in 32-bit sequence arithmetic from the first sequence
//    number seen). "Beyond the highest sequence seen" is not enough: after a loss the retransmission that
//    fills the hole lies below the highest sequence already delivered, yet it is exactly the packet the
//    client was waiting for. A retransmission of bytes that already arrived (spurious, or a duplicate),
//    a pure ACK, SYN/FIN without data, a window probe of old data are not useful; a segment that re-sends
//    some old bytes and brings new ones is (newBytes counts only the new ones).
//  * UDP: the first copy of each distinct datagram payload (a resent frame with identical bytes is not
//    useful). Transports whose resends differ in bytes need their own rule (see README).
//
// The emulator's log has no sequence numbers, so each logged departure is joined with the packet capture
// of the client side (capture.ts) on (ports, IP id, length), first unmatched first.
import { type LinkLog, type LogEvent } from '../link';
import { type CapturedPacket } from './capture';
import { longestGap, mean } from './stats';

export interface UsefulPacket {
  tNs: bigint;
  len: number;
  sport: number;
  dport: number;
  proto: number;
  /** new payload bytes it brought */
  newBytes: number;
}

export interface FloorResult {
  /** useful departures inside the window, in time order */
  useful: UsefulPacket[];
  /** server → client data packets of the page's flows in the window that brought nothing new */
  duplicates: number;
  /** departures of the page's flows that found no match in the capture (classified by length alone) */
  unmatched: number;
  /** server → client packets of the page's flows dropped by the emulator in the window, by reason */
  dropped: { loss: number; queue: number; other: number };
  /** longest gap (ms), the first from the request; null without useful packets */
  floorMs: number | null;
  floorGap: { fromNs: bigint; toNs: bigint } | null;
  /** D: mean gap between consecutive useful arrivals (ms); null with fewer than two */
  meanGapMs: number | null;
  /** E(T) = D / (1 - p) (CATP paper §2) for the configured loss p; null without D */
  expectedMs: number | null;
}

const MOD = 2 ** 32;
/** a - b in 32-bit sequence space, as a signed number */
function seqDiff(a: number, b: number): number {
  const d = (a - b + MOD) % MOD;
  return d >= MOD / 2 ? d - MOD : d;
}

/** Adds [a, b) to a sorted list of disjoint ranges; returns how many of its bytes were not covered before. */
export function addRange(covered: Array<[number, number]>, a: number, b: number): number {
  if (b <= a) return 0;
  let overlap = 0;
  let lo = a;
  let hi = b;
  const keep: Array<[number, number]> = [];
  for (const [x, y] of covered) {
    if (y < a || x > b) {
      keep.push([x, y]);
      continue;
    }
    overlap += Math.max(0, Math.min(y, b) - Math.max(x, a));
    lo = Math.min(lo, x);
    hi = Math.max(hi, y);
  }
  keep.push([lo, hi]);
  keep.sort((p, q) => p[0] - q[0]);
  covered.splice(0, covered.length, ...keep);
  return b - a - overlap;
}

function key(proto: number, sport: number, dport: number, ipId: number, len: number): string {
  return `${proto}:${sport}>${dport}#${ipId}#${len}`;
}

/**
 * When the first packet from the server's port reached the client after `afterNs` (its departure from the
 * emulator toward the client), or null if none did. Nothing of the page can be on screen before it: a change
 * seen earlier is the browser's own (our app empties its page frame when a load starts, which the capture may
 * stamp a few ms after the request), not content.
 */
export function firstDeliveryNs(log: LinkLog, o: { serverAddress: string; clientAddress: string; serverPort: number; afterNs: bigint }): bigint | null {
  const e = log.events.find((x) => x.dir === 's2c' && x.ev === 'depart' && x.tNs > o.afterNs && x.src === o.serverAddress && x.sport === o.serverPort && x.dst === o.clientAddress);
  return e ? e.tNs : null;
}

export interface FloorOptions {
  serverAddress: string;
  clientAddress: string;
  /** the server's port: packets from it are the page's flows */
  serverPort: number;
  /** the request (start of the first gap), CLOCK_MONOTONIC ns */
  startNs: bigint;
  /** end of the load (departures after it are not counted) */
  endNs: bigint;
  /** configured loss probability p toward the client */
  loss: number;
}

const ns2ms = (ns: bigint): number => Number(ns) / 1e6;

export function networkFloor(log: LinkLog, capture: readonly CapturedPacket[], o: FloorOptions): FloorResult {
  const isPageFlow = (e: { src: string; sport: number; dst: string }) =>
    e.src === o.serverAddress && e.sport === o.serverPort && e.dst === o.clientAddress;

  // Captured server → client packets, queued per join key in capture order.
  const byKey = new Map<string, CapturedPacket[]>();
  for (const p of capture) {
    if (p.pktType === 4 || !isPageFlow(p)) continue;
    const k = key(p.proto, p.sport, p.dport, p.ipId, p.len);
    let q = byKey.get(k);
    if (!q) byKey.set(k, (q = []));
    q.push(p);
  }

  const ranges = new Map<string, { base: number; covered: Array<[number, number]> }>(); // TCP: delivered bytes per connection
  const seen = new Map<string, Set<string>>(); // UDP: payload digests per flow
  const useful: UsefulPacket[] = [];
  const dropped = { loss: 0, queue: 0, other: 0 };
  let duplicates = 0;
  let unmatched = 0;
  const events: LogEvent[] = log.events.filter((e) => e.dir === 's2c' && isPageFlow(e));
  for (const e of events) {
    const inWindow = e.tNs >= o.startNs && e.tNs <= o.endNs;
    if (e.ev === 'drop') {
      if (inWindow) dropped[e.reason === 'loss' ? 'loss' : e.reason === 'queue' ? 'queue' : 'other']++;
      continue;
    }
    if (e.ev !== 'depart') continue;
    const p = byKey.get(key(e.proto, e.sport, e.dport, e.ipId, e.len))?.shift();
    const flow = `${e.proto}:${e.sport}>${e.dport}`;
    let newBytes = 0;
    if (!p) {
      unmatched++;
      // Without the capture: any packet longer than bare headers (IP 20 + TCP 32 with timestamps, UDP 8).
      newBytes = Math.max(0, e.len - (e.proto === 6 ? 52 : 28));
    } else if (p.proto === 6) {
      let r = ranges.get(flow);
      if (!r) ranges.set(flow, (r = { base: p.seq, covered: [] }));
      const syn = (p.flags & 0x02) !== 0;
      const start = seqDiff(p.seq, r.base) + (syn ? 1 : 0);
      if (p.payload > 0) {
        newBytes = addRange(r.covered, start, start + p.payload);
        if (newBytes === 0 && inWindow) duplicates++;
      }
    } else if (p.proto === 17) {
      let s = seen.get(flow);
      if (!s) seen.set(flow, (s = new Set()));
      if (!s.has(p.digest)) {
        s.add(p.digest);
        newBytes = p.payload;
      } else if (inWindow) {
        duplicates++;
      }
    }
    if (inWindow && newBytes > 0) useful.push({ tNs: e.tNs, len: e.len, sport: e.sport, dport: e.dport, proto: e.proto, newBytes });
  }
  useful.sort((a, b) => (a.tNs < b.tNs ? -1 : a.tNs > b.tNs ? 1 : 0));

  const times = useful.map((u) => ns2ms(u.tNs - o.startNs));
  const g = longestGap(0, times);
  const gaps: number[] = [];
  for (let i = 1; i < times.length; i++) gaps.push(times[i]! - times[i - 1]!);
  const d = gaps.length > 0 ? mean(gaps) : null;
  return {
    useful,
    duplicates,
    unmatched,
    dropped,
    floorMs: g ? g.ms : null,
    floorGap: g ? { fromNs: o.startNs + BigInt(Math.round(g.from * 1e6)), toNs: o.startNs + BigInt(Math.round(g.to * 1e6)) } : null,
    meanGapMs: d,
    expectedMs: d === null ? null : o.loss < 1 ? d / (1 - o.loss) : null,
  };
}
