// The pure half of the congestion benchmark (bench/congestion/run.ts): reading `catp get -v` output, summary
// statistics, and what the emulator's per-packet log (lab/README.md) says about one load or about two flows
// sharing the bottleneck. No processes, no clock: everything here takes its input as arguments.
import type { LogEvent } from '../../lab/link';

/** What `catp get -v` said about a finished load. */
export interface GetOutcome {
  /** 'stream': a CATP / in-order page, complete and verified; 'http': a whole response (the tcp transport) */
  kind: 'stream' | 'http';
  /** request sent to last byte (the client's startedAtMs → completedAtMs), ms */
  completionMs: number;
  /** stream: first frame after the request, ms */
  firstFrameMs?: number;
  /** stream: frames the page had */
  frames?: number;
  /** http: HTTP status and the channel the answer came on (`plain HTTP/1.1 over TCP`, `UDP`, ...) */
  status?: number;
  via?: string;
  /** http: body bytes after content decoding (`catp get` decodes a brotli or gzip answer before it reports) */
  bodyBytes?: number;
}

const STREAM_LINE = /^< (?:CATP|in-order) page complete and verified: (\d+) frames .*? in ([\d.]+) ms, first frame after ([\d.]+|-) ms/m;
const HTTP_LINE = /^< (\d{3}) .*?\s+via (.+?), (\d+) bytes in ([\d.]+) ms/m;

/** Reads the completion line of `catp get -v`'s stderr; null when there is none (the load failed). */
export function parseGetOutput(stderr: string): GetOutcome | null {
  const s = STREAM_LINE.exec(stderr);
  if (s) {
    return {
      kind: 'stream',
      frames: Number(s[1]),
      completionMs: Number(s[2]),
      ...(s[3] !== '-' ? { firstFrameMs: Number(s[3]) } : {}),
    };
  }
  const h = HTTP_LINE.exec(stderr);
  if (h) return { kind: 'http', status: Number(h[1]), via: h[2]!, bodyBytes: Number(h[3]), completionMs: Number(h[4]) };
  return null;
}

export function mean(xs: readonly number[]): number {
  return xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** The q-quantile of xs (nearest rank on the sorted copy; the median of an even count is the mean of the two middles). */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  if (q === 0.5 && s.length % 2 === 0) return (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

export const median = (xs: readonly number[]): number => quantile(xs, 0.5);

/** What crossed the link server → client (and back) between two instants: one load's traffic. */
export interface WindowStats {
  /** s2c packets that reached the bottleneck (sent by the server) */
  s2cPackets: number;
  /** s2c IP bytes delivered to the client */
  s2cDeliveredBytes: number;
  s2cLossDrops: number;
  /** s2c tail drops at the bottleneck queue (the sender overran the link) */
  s2cQueueDrops: number;
  c2sPackets: number;
  c2sLossDrops: number;
  c2sQueueDrops: number;
}

/** Counts the log's events with fromNs ≤ t < toNs. Only the experiment's own traffic crosses the link. */
export function windowStats(events: readonly LogEvent[], fromNs: bigint, toNs: bigint): WindowStats {
  const w: WindowStats = { s2cPackets: 0, s2cDeliveredBytes: 0, s2cLossDrops: 0, s2cQueueDrops: 0, c2sPackets: 0, c2sLossDrops: 0, c2sQueueDrops: 0 };
  for (const e of events) {
    if (e.tNs < fromNs || e.tNs >= toNs || e.idx < 0) continue;
    if (e.dir === 's2c') {
      if (e.ev === 'arrive') w.s2cPackets++;
      else if (e.ev === 'depart') w.s2cDeliveredBytes += e.len;
      else if (e.reason === 'loss') w.s2cLossDrops++;
      else if (e.reason === 'queue') w.s2cQueueDrops++;
    } else {
      if (e.ev === 'arrive') w.c2sPackets++;
      else if (e.reason === 'loss') w.c2sLossDrops++;
      else if (e.reason === 'queue') w.c2sQueueDrops++;
    }
  }
  return w;
}

/** One flow, server → client, as the bottleneck saw it. */
export interface FlowStats {
  /** first and last s2c departure of the flow (CLOCK_MONOTONIC ns), null when it sent nothing */
  firstNs: bigint | null;
  lastNs: bigint | null;
  /** IP bytes delivered within the overlap, and that over the overlap's length (bytes/s) */
  overlapBytes: number;
  overlapBytesPerSec: number;
  /** share of an even split of the link's rate: overlapBytesPerSec / (rate / 2) */
  shareOfEven: number;
  /** s2c drops of this flow within the overlap */
  overlapQueueDrops: number;
  overlapLossDrops: number;
  /** all s2c IP bytes the flow got delivered, whole run */
  totalBytes: number;
}

export interface QueueDelay {
  /** packets measured */
  n: number;
  medianMs: number;
  p95Ms: number;
  maxMs: number;
}

export interface FairnessAnalysis {
  tcp: FlowStats;
  udp: FlowStats;
  /** when both flows were sending: [max(first departures), min(last departures)], null when they never overlapped */
  overlap: { fromNs: bigint; toNs: bigint; ms: number } | null;
  /** udp / tcp throughput over the overlap */
  udpOverTcp: number;
  /** (tcp + udp) over the overlap / the link's rate */
  utilization: number;
  /** time s2c packets waited in the bottleneck queue behind others, for packets that arrived in the overlap */
  queueDelay: QueueDelay;
  /** the same while TCP ran alone, before the UDP flow's first departure (the reference: what CUBIC alone does) */
  queueDelayTcpAlone: QueueDelay;
  /** TCP's throughput while it ran alone (bytes/s; NaN when it never did): did it fill the link before? */
  tcpAloneBytesPerSec: number;
}

export interface FlowMatch {
  /** the nginx port: s2c TCP from it is the bulk flow */
  tcpPort: number;
  /** the catp server's port: s2c UDP from it is the CATP / in-order flow */
  udpPort: number;
  /** the link's s2c rate (bytes/s) and one-way delay (ns), to take serialization and propagation out of the delay */
  rate: number;
  delayNs: bigint;
}

function queueDelays(events: readonly LogEvent[], rate: number, delayNs: bigint, fromNs: bigint, toNs: bigint): QueueDelay {
  // Departure = max(arrival, previous departure) + len/rate (+ propagation, + timer lateness): the wait behind
  // other packets is what remains of (departure − arrival) without the packet's own serialization, the
  // propagation delay and the timer's lateness.
  const arrived = new Map<number, bigint>();
  const waits: number[] = [];
  for (const e of events) {
    if (e.dir !== 's2c' || e.idx < 0) continue;
    if (e.ev === 'arrive') {
      if (e.tNs >= fromNs && e.tNs < toNs) arrived.set(e.idx, e.tNs);
    } else if (e.ev === 'depart') {
      const a = arrived.get(e.idx);
      if (a === undefined) continue;
      arrived.delete(e.idx);
      const sojournNs = Number(e.tNs - a - delayNs) - (e.lateNs ?? 0);
      const serNs = rate > 0 ? (e.len / rate) * 1e9 : 0;
      waits.push(Math.max(0, sojournNs - serNs) / 1e6);
    }
  }
  return { n: waits.length, medianMs: median(waits), p95Ms: quantile(waits, 0.95), maxMs: waits.length ? Math.max(...waits) : NaN };
}

/** Throughput, share and queueing delay of a bulk TCP flow and a UDP flow sharing the bottleneck (s2c). */
export function analyseFairness(events: readonly LogEvent[], m: FlowMatch): FairnessAnalysis {
  const isTcp = (e: LogEvent) => e.dir === 's2c' && e.proto === 6 && e.sport === m.tcpPort;
  const isUdp = (e: LogEvent) => e.dir === 's2c' && e.proto === 17 && e.sport === m.udpPort;
  const span = (match: (e: LogEvent) => boolean) => {
    let first: bigint | null = null;
    let last: bigint | null = null;
    let total = 0;
    for (const e of events) {
      if (e.ev !== 'depart' || !match(e)) continue;
      if (first === null) first = e.tNs;
      last = e.tNs;
      total += e.len;
    }
    return { first, last, total };
  };
  const t = span(isTcp);
  const u = span(isUdp);
  let overlap: FairnessAnalysis['overlap'] = null;
  if (t.first !== null && t.last !== null && u.first !== null && u.last !== null) {
    const fromNs = t.first > u.first ? t.first : u.first;
    const toNs = t.last < u.last ? t.last : u.last;
    if (toNs > fromNs) overlap = { fromNs, toNs, ms: Number(toNs - fromNs) / 1e6 };
  }
  const flow = (s: { first: bigint | null; last: bigint | null; total: number }, match: (e: LogEvent) => boolean): FlowStats => {
    let bytes = 0;
    let queue = 0;
    let loss = 0;
    if (overlap) {
      for (const e of events) {
        if (e.tNs < overlap.fromNs || e.tNs > overlap.toNs || !match(e)) continue;
        if (e.ev === 'depart') bytes += e.len;
        else if (e.ev === 'drop' && e.reason === 'queue') queue++;
        else if (e.ev === 'drop' && e.reason === 'loss') loss++;
      }
    }
    const bps = overlap ? bytes / (overlap.ms / 1000) : NaN;
    return {
      firstNs: s.first, lastNs: s.last, overlapBytes: bytes, overlapBytesPerSec: bps,
      shareOfEven: bps / (m.rate / 2), overlapQueueDrops: queue, overlapLossDrops: loss, totalBytes: s.total,
    };
  };
  const tcp = flow(t, isTcp);
  const udp = flow(u, isUdp);
  const none: QueueDelay = { n: 0, medianMs: NaN, p95Ms: NaN, maxMs: NaN };
  const alone = t.first !== null && u.first !== null && u.first > t.first ? { fromNs: t.first, toNs: u.first } : null;
  let aloneBytes = 0;
  if (alone) for (const e of events) if (e.ev === 'depart' && e.tNs >= alone.fromNs && e.tNs < alone.toNs && isTcp(e)) aloneBytes += e.len;
  return {
    tcp, udp, overlap,
    udpOverTcp: udp.overlapBytesPerSec / tcp.overlapBytesPerSec,
    utilization: (udp.overlapBytesPerSec + tcp.overlapBytesPerSec) / m.rate,
    queueDelay: overlap ? queueDelays(events, m.rate, m.delayNs, overlap.fromNs, overlap.toNs) : none,
    queueDelayTcpAlone: alone ? queueDelays(events, m.rate, m.delayNs, alone.fromNs, alone.toNs) : none,
    tcpAloneBytesPerSec: alone ? aloneBytes / (Number(alone.toNs - alone.fromNs) / 1e9) : NaN,
  };
}

/** A plain-text table: the first row is the header; columns after the first `left` are right-aligned. */
export function table(rows: readonly (readonly string[])[], left = 1): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  const line = (r: readonly string[]) => r.map((c, i) => (i < left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  const out = [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  ')];
  for (const r of rows.slice(1)) out.push(line(r));
  return out.join('\n');
}
