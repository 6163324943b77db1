// Small Node programs the lab tests run inside the link's namespaces (as `node -e SOURCE ARGS...`, so
// process.argv.slice(1) are the arguments). Every timestamp is process.hrtime.bigint(): CLOCK_MONOTONIC,
// one clock for both namespaces and for the emulator's log.
import { type ChildProcess } from 'node:child_process';
import * as readline from 'node:readline';

import { type Link, type Side } from '../../lab/link';

/**
 * UDP sink: PORT IDLE_MS MAX_MS. Prints "ready", then at the end one line per datagram
 * "seq sendNs recvNs length", then "end". Stops IDLE_MS after the last datagram, or after MAX_MS.
 */
export const UDP_SINK = `
const dgram = require('node:dgram');
const [port, idleMs, maxMs] = process.argv.slice(1).map(Number);
const s = dgram.createSocket({ type: 'udp4', recvBufferSize: 4 << 20 });
const out = [];
let last = 0;
s.on('message', (m) => {
  const t = process.hrtime.bigint();
  if (m.length < 12) return;
  out.push(m.readUInt32BE(0) + ' ' + m.readBigUInt64BE(4) + ' ' + t + ' ' + m.length);
  last = Date.now();
});
s.on('listening', () => process.stdout.write('ready\\n'));
const start = Date.now();
const iv = setInterval(() => {
  if ((last && Date.now() - last > idleMs) || Date.now() - start > maxMs) {
    clearInterval(iv);
    s.close();
    process.stdout.write(out.join('\\n') + (out.length ? '\\n' : '') + 'end\\n');
  }
}, 50);
s.bind(port, '0.0.0.0');
`;

export interface UdpPhase {
  count: number;
  /** UDP payload bytes (the IP packet is 28 more) */
  size: number;
  /** packets per second; 0 = as fast as the socket takes them */
  pps: number;
  seqBase: number;
  pauseMsAfter?: number;
}

/**
 * UDP source: HOST PORT PHASES_JSON. Each datagram carries its sequence number (u32) and its send time
 * (u64 ns). Paced by the clock: at every wake-up (1 ms timer) it sends every packet whose time has come.
 */
export const UDP_SOURCE = `
const dgram = require('node:dgram');
const [host, port, phasesJson] = process.argv.slice(1);
const phases = JSON.parse(phasesJson);
const s = dgram.createSocket({ type: 'udp4', sendBufferSize: 4 << 20 });
let pending = 0, errors = 0, sent = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
s.connect(Number(port), host, async () => {
  for (const ph of phases) {
    const gap = ph.pps > 0 ? 1e9 / ph.pps : 0;
    const start = process.hrtime.bigint();
    let i = 0;
    while (i < ph.count) {
      const due = gap > 0 ? Math.min(ph.count, Math.floor(Number(process.hrtime.bigint() - start) / gap) + 1) : ph.count;
      while (i < due) {
        const b = Buffer.alloc(ph.size);
        b.writeUInt32BE(ph.seqBase + i, 0);
        b.writeBigUInt64BE(process.hrtime.bigint(), 4);
        pending++;
        s.send(b, (err) => { pending--; if (err) errors++; else sent++; });
        i++;
      }
      if (i < ph.count) await sleep(1);
    }
    if (ph.pauseMsAfter) await sleep(ph.pauseMsAfter);
  }
  while (pending > 0) await sleep(5);
  s.close();
  process.stdout.write(JSON.stringify({ sent, errors }) + '\\n');
});
`;

/** TCP server: PORT BYTES. Sends BYTES random bytes to the first client, prints {"sha256"} when done. */
export const TCP_SERVER = `
const net = require('node:net');
const crypto = require('node:crypto');
const [port, bytes] = process.argv.slice(1).map(Number);
const data = crypto.randomBytes(bytes);
const srv = net.createServer((c) => {
  srv.close();
  c.end(data, () => process.stdout.write(JSON.stringify({ sha256: crypto.createHash('sha256').update(data).digest('hex') }) + '\\n'));
  c.on('error', () => {});
});
srv.listen(port, '0.0.0.0', () => process.stdout.write('ready\\n'));
`;

/**
 * TCP client: HOST PORT. Connects, reads to the end, prints one JSON line: connect time, bytes, sha256,
 * and (t, cumulative bytes) samples for the throughput.
 */
export const TCP_CLIENT = `
const net = require('node:net');
const crypto = require('node:crypto');
const [host, port] = process.argv.slice(1);
const h = crypto.createHash('sha256');
const t0 = process.hrtime.bigint();
let tConn = 0n, bytes = 0;
const samples = [];
const c = net.connect(Number(port), host, () => { tConn = process.hrtime.bigint(); });
c.on('data', (d) => {
  bytes += d.length;
  h.update(d);
  samples.push([String(process.hrtime.bigint()), bytes]);
});
c.on('end', () => {
  process.stdout.write(JSON.stringify({ connectNs: String(tConn - t0), bytes, sha256: h.digest('hex'), samples }) + '\\n');
});
c.on('error', (e) => { process.stdout.write(JSON.stringify({ error: e.message }) + '\\n'); });
`;

/** A program running in a side: its output lines, and waits on them. */
export class Program {
  readonly lines: string[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<number | null>;
  private wake: (() => void) | undefined;

  constructor(readonly child: ChildProcess) {
    readline.createInterface({ input: child.stdout! }).on('line', (l) => {
      this.lines.push(l);
      this.wake?.();
    });
    child.stderr!.setEncoding('utf8').on('data', (d: string) => this.stderr.push(d));
    this.exited = new Promise((resolve) => child.on('close', (code) => {
      this.wake?.();
      resolve(code);
    }));
  }

  static start(link: Link, side: Side, source: string, args: readonly (string | number)[]): Program {
    return new Program(link.spawnIn(side, process.execPath, ['-e', source, ...args.map(String)], { stdio: ['ignore', 'pipe', 'pipe'] }));
  }

  async waitForLine(pred: (l: string) => boolean, what: string, timeoutMs = 10000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.lines.find(pred);
      if (hit !== undefined) return hit;
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        throw new Error(`${what}: the program ended (${this.child.exitCode ?? this.child.signalCode}): ${this.stderr.join('')}`);
      }
      if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms; stderr: ${this.stderr.join('')}`);
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, 100);
      });
    }
  }
}
