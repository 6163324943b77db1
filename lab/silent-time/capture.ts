// A packet capture inside one side of the link, so that the network floor can tell new data from
// retransmitted data: the emulator's log names each packet (ports, IP id, length) but not its TCP
// sequence number. The capture is a short Python program (AF_PACKET, no libpcap needed; python3 is a build
// dependency anyway) that prints one line per IPv4 packet seen on any interface of its namespace:
//
//   t_ns pkttype proto src sport dst dport ipid iplen seq payload flags digest
//
// t_ns is CLOCK_MONOTONIC at receipt (time.monotonic_ns(), the emulator's clock); seq is the TCP sequence
// number (0 for UDP); payload the transport payload length; flags the TCP flags byte; digest the first 16
// hex digits of the payload's SHA-1 for UDP ('-' for TCP). The times are informational: the floor takes
// its times from the emulator's log and only the classification from here.
import { type ChildProcess } from 'node:child_process';
import * as readline from 'node:readline';

import { LabError } from '../errors';
import { type Link, type Side } from '../link';

export const CAPTURE_PY = `
import hashlib, os, signal, socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
out = []
def stop(*_):
    sys.stdout.write(''.join(out))
    sys.stdout.write('end\\n')
    sys.stdout.flush()
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
sys.stdout.write('ready\\n')
sys.stdout.flush()
while True:
    data, addr = s.recvfrom(65535)
    t = time.monotonic_ns()
    if addr[1] != 0x0800 or len(data) < 20 or (data[0] >> 4) != 4:
        continue
    ihl = (data[0] & 15) * 4
    tot, ipid = struct.unpack('!HH', data[2:6])
    proto = data[9]
    src = socket.inet_ntoa(data[12:16])
    dst = socket.inet_ntoa(data[16:20])
    sport = dport = seq = plen = flags = 0
    digest = '-'
    if proto == 6 and len(data) >= ihl + 20:
        sport, dport, seq = struct.unpack('!HHI', data[ihl:ihl + 8])
        doff = (data[ihl + 12] >> 4) * 4
        flags = data[ihl + 13]
        plen = tot - ihl - doff
    elif proto == 17 and len(data) >= ihl + 8:
        sport, dport = struct.unpack('!HH', data[ihl:ihl + 4])
        plen = tot - ihl - 8
        digest = hashlib.sha1(data[ihl + 8:tot]).hexdigest()[:16]
    out.append('%d %d %d %s %d %s %d %d %d %d %d %d %s\\n' % (t, addr[2], proto, src, sport, dst, dport, ipid, tot, seq, plen, flags, digest))
`;

export interface CapturedPacket {
  tNs: bigint;
  /** AF_PACKET packet type: 0 host (incoming), 4 outgoing */
  pktType: number;
  proto: number;
  src: string;
  sport: number;
  dst: string;
  dport: number;
  ipId: number;
  len: number;
  seq: number;
  payload: number;
  flags: number;
  digest: string;
}

export function parseCapture(lines: readonly string[]): CapturedPacket[] {
  const out: CapturedPacket[] = [];
  for (const l of lines) {
    const f = l.split(' ');
    if (f.length !== 13) continue;
    out.push({
      tNs: BigInt(f[0]!),
      pktType: Number(f[1]),
      proto: Number(f[2]),
      src: f[3]!,
      sport: Number(f[4]),
      dst: f[5]!,
      dport: Number(f[6]),
      ipId: Number(f[7]),
      len: Number(f[8]),
      seq: Number(f[9]),
      payload: Number(f[10]),
      flags: Number(f[11]),
      digest: f[12]!,
    });
  }
  return out;
}

export interface Capture {
  /** stops the capture and returns what it saw */
  stop(): Promise<CapturedPacket[]>;
}

export const PYTHON = process.env.CATP_PYTHON ?? 'python3';

/** Starts a capture on one side of the link; resolves once it is listening. */
export async function startCapture(link: Link, side: Side = 'client', timeoutMs = 10_000): Promise<Capture> {
  const child: ChildProcess = link.spawnIn(side, PYTHON, ['-u', '-c', CAPTURE_PY], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    if (stderr.length < 4096) stderr += d;
  });
  const rl = readline.createInterface({ input: child.stdout! });
  let onLine: ((l: string) => void) | undefined;
  rl.on('line', (l) => {
    lines.push(l);
    onLine?.(l);
  });
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new LabError('LAB_ERR_CAPTURE', `the packet capture did not start within ${timeoutMs} ms: ${stderr.trim()}`));
    }, timeoutMs);
    onLine = (l) => {
      if (l === 'ready') {
        clearTimeout(timer);
        resolve();
      }
    };
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new LabError('LAB_ERR_CAPTURE', `cannot run ${PYTHON} for the packet capture: ${e.message}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new LabError('LAB_ERR_CAPTURE', `the packet capture exited (${code}): ${stderr.trim()}`));
    });
  });
  return {
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await closed;
      clearTimeout(killer);
      if (!lines.includes('end')) throw new LabError('LAB_ERR_CAPTURE', `the packet capture ended without its packets: ${stderr.trim() || 'no message'}`);
      return parseCapture(lines);
    },
  };
}
