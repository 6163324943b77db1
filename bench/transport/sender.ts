// Benchmark sender (runs in its own process, forked by run.ts): on each {port, count, size, ids} message
// it sends `count` datagrams to 127.0.0.1:port as fast as it can, alternating an outstanding ID and an
// unknown one, then reports back. Sending goes through the native addon's sendDatagram (a plain
// sendto), which is cheaper per datagram than dgram.send, so the receiver is what gets measured.
import * as crypto from 'node:crypto';
import { Endpoint } from '../../native';

export interface SendJob { port: number; count: number; size: number; ids: string[] }
export interface SendResult { sent: number; eagain: number; elapsedMs: number }

const ep = new Endpoint({ host: '127.0.0.1' }, () => undefined);

function pool(job: SendJob): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < 1024; i++) {
    const d = crypto.randomBytes(Math.max(8, job.size));
    if (i % 2 === 0) {
      Buffer.from(job.ids[(i / 2) % job.ids.length], 'hex').copy(d, 0);
    } else {
      d[0] &= 0x7f;  // IDs always have the top bit set, so this one is never outstanding
    }
    out.push(d);
  }
  return out;
}

process.on('message', (job: SendJob | 'exit') => {
  if (job === 'exit') {
    ep.close();
    process.disconnect();
    return;
  }
  const datagrams = pool(job);
  let eagain = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < job.count; i++) {
    for (;;) {
      try {
        ep.sendDatagram(datagrams[i & 1023], '127.0.0.1', job.port);
        break;
      } catch (err) {
        if ((err as { code?: string }).code !== 'EAGAIN') throw err;
        eagain++;
      }
    }
  }
  const result: SendResult = { sent: job.count, eagain, elapsedMs: Number(process.hrtime.bigint() - t0) / 1e6 };
  process.send?.(result);
});
