/**
 * A simulated bottleneck for the sans-IO senders, on a fake clock: the lab's link model (lab/README.md) in a few
 * lines. Down (server → client): random loss at arrival (a lost packet uses no bandwidth), then one FIFO queue
 * serializing at `rate` bytes per ms with a tail-drop bound in bytes, then propagation delay. Up (reports): delay,
 * and random loss when `upLoss` is given (the lab drops both ways). The rate may change over time. Both directions are FIFO, so arrivals are two queues, not a heap.
 * A bulk TCP flow (a CUBIC model, `tcp`) may share the queue, as in bench:congestion's fairness run.
 * The clock starts when the request has reached the server (the lab's times start when it is sent: one delay
 * earlier). Used by the rate-control tests and by bench:sim (bench/sim/).
 */
import { RawAssembler, RepairSender, CatpAssembler, type CatpEvent, type RawAssemblerEvent } from '../protocol/catp';
import { FIRST_CONTACT_STEP_BYTES, STREAM_FIRST_CONTACT_WIRE_BYTES, STREAM_REQUEST_BYTES } from '../protocol/dhttp/address-validation';
import { seededRng } from '../protocol/random';

/** IPv4 and UDP headers, which the server's address budget counts with every datagram. */
const HEADERS = 28;
/** The token answer's payload as the reference server sends it (`421`, `DHTTP-Retry: token`, `Catp-Token`). */
const TOKEN_ANSWER = 151;
/**
 * A stream's first contact as the DHTTP client makes it and the server budgets it (address-validation.ts): the
 * request (160 bytes) pays for the token answer and leaves a few bytes; the padded copy and the padding datagrams
 * behind it (quarter datagrams, 4,652 bytes on the wire in all) bring the budget for three full frames as they come;
 * each counted with its headers; the proof is the request again with the token.
 */
export const FIRST_CONTACT = {
  budgetBytes: STREAM_REQUEST_BYTES + HEADERS - (TOKEN_ANSWER + HEADERS),
  paddingBytes: STREAM_FIRST_CONTACT_WIRE_BYTES - (STREAM_REQUEST_BYTES + HEADERS),
  paddingDatagramBytes: FIRST_CONTACT_STEP_BYTES + HEADERS,
  perFrame: HEADERS,
  tokenBytes: TOKEN_ANSWER + HEADERS,
  proofBytes: 148 + HEADERS,
} as const;

export interface BottleneckOptions {
  /** bytes per ms the queue drains at; a function of the time a packet enters the queue */
  rate: number | ((nowMs: number) => number);
  delayMs: number;
  /** tail-drop bound in bytes, the packet being serialized included (default: the lab's, max(15000, 200 ms)) */
  queueBytes?: number;
  loss?: number;
  /** random loss of the reports (default none) */
  upLoss?: number;
  seed?: number;
  maxMs?: number;
  /** Which client events count as something new to show (`usefulAt`); default every index piece and block fill. */
  useful?: (e: CatpEvent | RawAssemblerEvent) => boolean;
  /**
   * Address validation's first contact, as the server runs it: the session starts unproven with `budgetBytes`
   * to send (what the request brought, less the token answer), each frame costing `perFrame` more (its IP and UDP
   * headers, as the server counts them), and `paddingBytes` more as the copy and padding behind the request come in
   * (datagrams of at most `paddingDatagramBytes` on the wire, default a full 1,488, each its serialization at the
   * link's rate after the one before).
   * The proof (the repeated request) reaches the sender one handshake round trip after the token answer left: the
   * token answer's serialization (`tokenBytes` at the link's rate), the delay down, the proof's serialization
   * (`proofBytes`) and the delay up, and not before the padding ahead of it on the way up is in. Then the budget
   * lifts and the sender is given that RTT (`onHandshakeRtt`), as server/catp.ts does. (The reports' own allowance before the proof is left out.)
   */
  firstFlight?: { budgetBytes: number; paddingBytes?: number; paddingDatagramBytes?: number; perFrame?: number; tokenBytes?: number; proofBytes?: number };
  /**
   * The sender's wake-ups as the server gives them (server/catp.ts): on a report, or on its timer, which Node fires
   * never sooner than 1 ms after it was armed (`setTimeout(ceil(due - now))`) and `timerLateMs` after that. Without
   * it the sender is asked at every event of the simulation (wakes exactly when due, and more often).
   */
  timerLateMs?: number;
  /**
   * A bulk TCP flow sharing the queue from `startMs` on (the lab's fairness run: curl from nginx), modelled as
   * Linux's default sender: CUBIC (RFC 9438: C = 0.4, β = 0.7; slow start from an initial window of 10), 1,500-byte
   * packets, ack-clocked, a loss found when a later packet's ack comes (three duplicate acks, roughly), one
   * reduction per window, a retransmission timeout of max(200 ms, 2 × srtt) when nothing is acknowledged. Its acks
   * come back uncongested. Random `loss` applies to it as to everything else.
   */
  tcp?: { startMs: number; packetBytes?: number };
  /** When the UDP flow's request goes (default 0): a TCP flow may have filled the queue by then. */
  udpStartMs?: number;
}

/** The competing TCP flow's packets in `departures` (flow 'tcp'), and what it went through. */
export interface TcpFlowStats {
  sent: number;
  retransmits: number;
  reductions: number;
  timeouts: number;
}

export interface BottleneckResult {
  completeAt: number | null;
  endMs: number;
  /** every packet the bottleneck passed: when its last bit left the queue, its size, and whose it was */
  departures: Array<{ at: number; bytes: number; flow: 'udp' | 'tcp' }>;
  /** every queue admission: when, and the queueing delay it met (ms) */
  queueDelays: Array<{ at: number; ms: number }>;
  lossDrops: number;
  queueDrops: number;
  sent: number;
  /** the competing TCP flow's counts (null without one) */
  tcp: TcpFlowStats | null;
  /**
   * when the client could show something new: each `index-piece` and `block-filled` event (a CATP client's), or each
   * event `BottleneckOptions.useful` says so of
   */
  usefulAt: number[];
}

/**
 * The competing TCP flow (BottleneckOptions.tcp): a CUBIC sender counted in packets. `sendable` says what it sends
 * now, `acked` takes an ack; a dropped packet is never reported to it: it finds the loss from later acks, as TCP
 * does, or by its timeout (which does not back off: Linux's own recovers sooner, with SACK and tail loss probes, so
 * this one suffers more from a burst of drops than the lab's does).
 */
class CubicFlow {
  cwnd = 10;
  ssthresh = Infinity;
  private wMax = 0;
  private epochAt = 0;
  private k = 0;
  private nextSeq = 0;
  private readonly outstanding = new Map<number, number>(); // seq -> sent at
  private readonly lost: number[] = [];
  private recoverUntil = -1;
  private srtt = 0;
  private lastAckAt = 0;
  readonly stats: TcpFlowStats = { sent: 0, retransmits: 0, reductions: 0, timeouts: 0 };

  constructor(readonly packetBytes: number) {}

  /** Packets to send now (new or retransmitted sequence numbers). */
  sendable(now: number): number[] {
    if (this.lastAckAt === 0) this.lastAckAt = now;
    const rto = Math.max(200, 2 * this.srtt);
    if (this.outstanding.size > 0 && now - this.lastAckAt > rto) {
      // timeout: everything outstanding is lost, back to one packet
      this.stats.timeouts++;
      this.ssthresh = Math.max(2, this.cwnd * 0.7);
      this.wMax = this.cwnd;
      this.cwnd = 1;
      for (const seq of [...this.outstanding.keys()].sort((a, b) => a - b)) this.lost.push(seq);
      this.outstanding.clear();
      this.lastAckAt = now;
      this.recoverUntil = this.nextSeq;
    }
    const out: number[] = [];
    while (this.outstanding.size < Math.floor(this.cwnd)) {
      const resend = this.lost.length > 0;
      const seq = resend ? (this.lost.shift() as number) : this.nextSeq++;
      if (resend) this.stats.retransmits++;
      this.outstanding.set(seq, now);
      this.stats.sent++;
      out.push(seq);
    }
    return out;
  }

  /** The ack of `seq` came back at `now`. */
  acked(seq: number, now: number): void {
    const sentAt = this.outstanding.get(seq);
    if (sentAt === undefined) return;
    this.outstanding.delete(seq);
    this.lastAckAt = now;
    const rtt = now - sentAt;
    this.srtt = this.srtt === 0 ? rtt : 0.875 * this.srtt + 0.125 * rtt;
    // anything outstanding sent before this one by more than a little is lost (three later packets acked, roughly)
    let lossSeen = false;
    for (const [q, at] of this.outstanding) {
      if (q < seq - 2 && at <= sentAt) {
        this.outstanding.delete(q);
        this.lost.push(q);
        lossSeen = true;
      }
    }
    if (lossSeen) this.lost.sort((a, b) => a - b);
    if (lossSeen && seq > this.recoverUntil) {
      this.stats.reductions++;
      this.wMax = this.cwnd;
      this.cwnd = Math.max(2, this.cwnd * 0.7);
      this.ssthresh = this.cwnd;
      this.epochAt = now;
      this.k = Math.cbrt((this.wMax * 0.3) / 0.4);
      this.recoverUntil = this.nextSeq;
      return;
    }
    if (this.cwnd < this.ssthresh) this.cwnd += 1;
    else {
      const t = (now - this.epochAt) / 1000;
      const target = 0.4 * (t - this.k) ** 3 + this.wMax;
      this.cwnd += target > this.cwnd ? Math.min(1, (target - this.cwnd) / this.cwnd) : 0.01 / this.cwnd;
    }
  }
}

export function runBottleneck(sender: RepairSender, client: RawAssembler | CatpAssembler, o: BottleneckOptions): BottleneckResult {
  const r = seededRng(o.seed ?? 1);
  const rateAt = typeof o.rate === 'number' ? () => o.rate as number : o.rate;
  const queueBytes = o.queueBytes ?? Math.max(15000, 200 * rateAt(0));
  const maxMs = o.maxMs ?? 120_000;
  const down: Array<{ at: number; bytes: Uint8Array }> = [];
  const up: Array<{ at: number; bytes: Uint8Array }> = [];
  let downHead = 0;
  let upHead = 0;
  const inQueue: Array<{ depart: number; size: number }> = [];
  let qHead = 0;
  let lastDepart = 0;
  const res: BottleneckResult = { completeAt: null, endMs: 0, departures: [], queueDelays: [], lossDrops: 0, queueDrops: 0, sent: 0, tcp: null, usefulAt: [] };
  const tcp = o.tcp ? new CubicFlow(o.tcp.packetBytes ?? 1500) : null;
  if (tcp) res.tcp = tcp.stats;
  const tcpAcks: Array<{ at: number; seq: number }> = [];
  let tcpAckHead = 0;
  let now = 0;
  const udpStart = o.udpStartMs ?? 0;
  client.start(udpStart);
  let proofAt = Infinity;
  /** the first contact's padding datagrams: when each is in, and its bytes */
  const padding: Array<{ at: number; bytes: number }> = [];
  if (o.firstFlight) {
    const ff = o.firstFlight;
    sender.setSendBudget(ff.budgetBytes, ff.perFrame ?? 0);
    let at = udpStart;
    for (let left = ff.paddingBytes ?? 0; left > 0; ) {
      const bytes = Math.min(left, ff.paddingDatagramBytes ?? 1488);
      at += bytes / rateAt(0);
      padding.push({ at, bytes });
      left -= bytes;
    }
    const proofBytes = ff.proofBytes ?? 170;
    proofAt = Math.max(udpStart + (ff.tokenBytes ?? 130) / rateAt(0) + 2 * o.delayMs, padding.at(-1)?.at ?? 0) + proofBytes / rateAt(0);
  }
  let backlog = 0;
  /** Admits `size` bytes to the queue; the time its last bit leaves, or null when lost or dropped. */
  const admit = (size: number, flow: 'udp' | 'tcp'): number | null => {
    if (flow === 'udp') res.sent++;
    if (r() < (o.loss ?? 0)) {
      if (flow === 'udp') res.lossDrops++;
      return null;
    }
    while (qHead < inQueue.length && inQueue[qHead].depart <= now) backlog -= inQueue[qHead++].size;
    if (backlog + size > queueBytes) {
      if (flow === 'udp') res.queueDrops++;
      return null;
    }
    const start = Math.max(now, lastDepart);
    const depart = start + size / rateAt(now);
    lastDepart = depart;
    inQueue.push({ depart, size });
    backlog += size;
    res.queueDelays.push({ at: now, ms: start - now });
    res.departures.push({ at: depart, bytes: size, flow });
    return depart;
  };
  const enqueue = (d: Uint8Array) => {
    const depart = admit(d.length, 'udp');
    if (depart !== null) down.push({ at: depart + o.delayMs, bytes: d });
  };
  const serveTcp = () => {
    if (!tcp || now < o.tcp!.startMs) return;
    for (const seq of tcp.sendable(now)) {
      const depart = admit(tcp.packetBytes, 'tcp');
      if (depart !== null) tcpAcks.push({ at: depart + 2 * o.delayMs, seq });
    }
  };
  const timers = o.timerLateMs !== undefined;
  let wakeAt = 0;
  const serve = () => {
    if (now < udpStart) return;
    for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) enqueue(d);
    const at = sender.nextTimerAt();
    if (timers) wakeAt = at === null ? Infinity : now + Math.max(1, Math.ceil(at - now)) + o.timerLateMs!;
  };
  for (let iter = 0; iter < 50_000_000; iter++) {
    let woken = !timers || now >= wakeAt;
    while (padding.length > 0 && now >= padding[0].at) {
      // what the sender has left of its budget, and this datagram's bytes (none once proven)
      const p = padding.shift()!;
      if (proofAt !== Infinity) sender.setSendBudget((sender.sendBudgetLeft ?? 0) + p.bytes, o.firstFlight!.perFrame ?? 0);
      woken = true;
    }
    if (now >= proofAt) {
      sender.setSendBudget(null);
      sender.onHandshakeRtt(now, proofAt);
      proofAt = Infinity;
      woken = true;
    }
    if (woken) serve();
    while (tcpAckHead < tcpAcks.length && tcpAcks[tcpAckHead].at <= now) tcp!.acked(tcpAcks[tcpAckHead++].seq, now);
    serveTcp();
    while (downHead < down.length && down[downHead].at <= now) {
      client.receive(down[downHead++].bytes, now);
    }
    while (upHead < up.length && up[upHead].at <= now) {
      sender.receiveReport(up[upHead++].bytes, now);
      if (timers) serve();
    }
    for (let rep = client.nextReport(now); rep; rep = client.nextReport(now)) {
      if (o.upLoss !== undefined && o.upLoss > 0 && r() < o.upLoss) continue;
      up.push({ at: now + o.delayMs, bytes: rep });
    }
    for (let e = client.nextEvent(); e; e = client.nextEvent()) {
      if (e.type === 'page-complete' && res.completeAt === null) res.completeAt = now;
      else if (o.useful ? o.useful(e) : e.type === 'index-piece' || e.type === 'block-filled') res.usefulAt.push(now);
    }
    if (sender.finished && client.finished) break;
    if (client.finished && res.completeAt !== null && upHead >= up.length && client.nextTimerAt() === null) break;
    const senderAt = now < udpStart ? udpStart : timers ? (Number.isFinite(wakeAt) ? wakeAt : null) : sender.nextTimerAt();
    const cands = [senderAt, now < udpStart ? udpStart : client.nextTimerAt(), Number.isFinite(proofAt) ? proofAt : null, padding.length > 0 ? padding[0].at : null, downHead < down.length ? down[downHead].at : null, upHead < up.length ? up[upHead].at : null];
    if (tcp) cands.push(tcpAckHead < tcpAcks.length ? tcpAcks[tcpAckHead].at : null, now < o.tcp!.startMs ? o.tcp!.startMs : now + 50);
    let next = Infinity;
    for (const c of cands) if (c !== null && c < next) next = c;
    if (next === Infinity) break;
    now = Math.max(now + 1e-6, next);
    if (now > maxMs) break;
  }
  res.endMs = now;
  return res;
}

/** Bytes per ms that left the bottleneck in [from, to) (of one flow's packets, when `flow` is given). */
export function throughput(r: BottleneckResult, from: number, to: number, flow?: 'udp' | 'tcp'): number {
  let b = 0;
  for (const d of r.departures) if (d.at >= from && d.at < to && (flow === undefined || d.flow === flow)) b += d.bytes;
  return b / (to - from);
}

/** Largest queueing delay met by a packet admitted in [from, to). */
export function maxQueueDelay(r: BottleneckResult, from: number, to = Infinity): number {
  let m = 0;
  for (const q of r.queueDelays) if (q.at >= from && q.at < to && q.ms > m) m = q.ms;
  return m;
}
