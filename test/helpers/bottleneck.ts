/**
 * A simulated bottleneck for the sans-IO senders, on a fake clock: the lab's link model (lab/README.md) in a few
 * lines. Down (server → client): random loss at arrival (a lost packet uses no bandwidth), then one FIFO queue
 * serializing at `rate` bytes per ms with a tail-drop bound in bytes, then propagation delay. Up (reports): delay,
 * and random loss when `upLoss` is given (the lab drops both ways). The rate may change over time. Both directions are FIFO, so arrivals are two queues, not a heap.
 */
import { RawAssembler, RepairSender, CatpAssembler } from '../../protocol/catp';
import { rng } from './catp-util';

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
  /**
   * Address validation's first contact, as the server runs it: the session starts unproven with `budgetBytes`
   * to send (3× the padded request, less the token answer), and the proof (the repeated request) reaches the
   * sender one handshake round trip after the token answer left: the token answer's serialization (`tokenBytes`
   * at the link's rate), the delay down, the proof's serialization (`proofBytes`; the way up is not a queue here)
   * and the delay up. Then the budget lifts and the sender is given that RTT (`onHandshakeRtt`), as
   * server/catp.ts does. (The reports' own 3× allowance before the proof is left out.)
   */
  firstFlight?: { budgetBytes: number; tokenBytes?: number; proofBytes?: number };
  /**
   * The sender's wake-ups as the server gives them (server/catp.ts): on a report, or on its timer, which Node fires
   * never sooner than 1 ms after it was armed (`setTimeout(ceil(due - now))`) and `timerLateMs` after that. Without
   * it the sender is asked at every event of the simulation (wakes exactly when due, and more often).
   */
  timerLateMs?: number;
}

export interface BottleneckResult {
  completeAt: number | null;
  endMs: number;
  /** every packet the bottleneck passed: when its last bit left the queue, and its size */
  departures: Array<{ at: number; bytes: number }>;
  /** every queue admission: when, and the queueing delay it met (ms) */
  queueDelays: Array<{ at: number; ms: number }>;
  lossDrops: number;
  queueDrops: number;
  sent: number;
}

export function runBottleneck(sender: RepairSender, client: RawAssembler | CatpAssembler, o: BottleneckOptions): BottleneckResult {
  const r = rng(o.seed ?? 1);
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
  const res: BottleneckResult = { completeAt: null, endMs: 0, departures: [], queueDelays: [], lossDrops: 0, queueDrops: 0, sent: 0 };
  let now = 0;
  client.start(0);
  let proofAt = Infinity;
  if (o.firstFlight) {
    sender.setSendBudget(o.firstFlight.budgetBytes);
    proofAt = (o.firstFlight.tokenBytes ?? 130) / rateAt(0) + 2 * o.delayMs + (o.firstFlight.proofBytes ?? 170) / rateAt(0);
  }
  const enqueue = (d: Uint8Array) => {
    res.sent++;
    if (r() < (o.loss ?? 0)) {
      res.lossDrops++;
      return;
    }
    while (qHead < inQueue.length && inQueue[qHead].depart <= now) qHead++;
    let backlog = 0;
    for (let i = qHead; i < inQueue.length; i++) backlog += inQueue[i].size;
    if (backlog + d.length > queueBytes) {
      res.queueDrops++;
      return;
    }
    const start = Math.max(now, lastDepart);
    const depart = start + d.length / rateAt(now);
    lastDepart = depart;
    inQueue.push({ depart, size: d.length });
    res.queueDelays.push({ at: now, ms: start - now });
    res.departures.push({ at: depart, bytes: d.length });
    down.push({ at: depart + o.delayMs, bytes: d });
  };
  const timers = o.timerLateMs !== undefined;
  let wakeAt = 0;
  const serve = () => {
    for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) enqueue(d);
    const at = sender.nextTimerAt();
    if (timers) wakeAt = at === null ? Infinity : now + Math.max(1, Math.ceil(at - now)) + o.timerLateMs!;
  };
  for (let iter = 0; iter < 50_000_000; iter++) {
    let woken = !timers || now >= wakeAt;
    if (now >= proofAt) {
      sender.setSendBudget(null);
      sender.onHandshakeRtt(now, proofAt);
      proofAt = Infinity;
      woken = true;
    }
    if (woken) serve();
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
    }
    if (sender.finished && client.finished) break;
    if (client.finished && res.completeAt !== null && upHead >= up.length && client.nextTimerAt() === null) break;
    const cands = [timers ? (Number.isFinite(wakeAt) ? wakeAt : null) : sender.nextTimerAt(), client.nextTimerAt(), Number.isFinite(proofAt) ? proofAt : null, downHead < down.length ? down[downHead].at : null, upHead < up.length ? up[upHead].at : null];
    let next = Infinity;
    for (const c of cands) if (c !== null && c < next) next = c;
    if (next === Infinity) break;
    now = Math.max(now + 1e-6, next);
    if (now > maxMs) break;
  }
  res.endMs = now;
  return res;
}

/** Bytes per ms that left the bottleneck in [from, to). */
export function throughput(r: BottleneckResult, from: number, to: number): number {
  let b = 0;
  for (const d of r.departures) if (d.at >= from && d.at < to) b += d.bytes;
  return b / (to - from);
}

/** Largest queueing delay met by a packet admitted in [from, to). */
export function maxQueueDelay(r: BottleneckResult, from: number, to = Infinity): number {
  let m = 0;
  for (const q of r.queueDelays) if (q.at >= from && q.at < to && q.ms > m) m = q.ms;
  return m;
}
