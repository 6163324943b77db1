// `catp link` (cli/commands/link.ts): runs a command on the client side with the server side reachable.
import { Writable } from 'node:stream';

import { UsageError } from '../../cli/args';
import { link, linkOptionsFromArgs } from '../../cli/commands/link';
import { requireLab } from './helpers';

jest.setTimeout(30_000);

function capture(): { io: { stdout: Writable; stderr: Writable }; out: () => string; err: () => string } {
  let out = '';
  let err = '';
  const w = (f: (s: string) => void) => new Writable({ write(chunk: Buffer, _enc, cb) { f(chunk.toString()); cb(); } });
  return { io: { stdout: w((s) => (out += s)), stderr: w((s) => (err += s)) }, out: () => out, err: () => err };
}

const ECHO_SERVER = "node -e \"const d=require('dgram').createSocket('udp4');d.on('message',(m,r)=>d.send(m,r.port,r.address));d.bind(9000)\"";
const PING = `
const d = require('dgram').createSocket('udp4');
const t = process.hrtime.bigint();
d.on('message', () => { console.log('rtt_ms=' + (Number(process.hrtime.bigint() - t) / 1e6).toFixed(3) + ' server=' + process.env.CATP_LINK_SERVER + ' client=' + process.env.CATP_LINK_CLIENT); process.exit(0); });
d.send('ping', 9000, process.env.CATP_LINK_SERVER);
setTimeout(() => process.exit(4), 5000);
`;

test('runs CMD on the client side, the server command on the other, across the emulated delay', async () => {
  requireLab();
  const c = capture();
  const code = await link(['--delay', '15', '--seed', '9', '--server-cmd', ECHO_SERVER, '--server-wait', '500', '--', process.execPath, '-e', PING], c.io);
  expect(c.err()).toMatch(/catp link: client 10\.77\.0\.1 <-> server 10\.77\.0\.2 \(delay 15 ms, rate unlimited, seed 9\)/);
  expect(code).toBe(0);
  const m = /rtt_ms=([\d.]+) server=10\.77\.0\.2 client=10\.77\.0\.1/.exec(c.out());
  expect(m).not.toBeNull();
  expect(Number(m![1])).toBeGreaterThanOrEqual(30); // two crossings of 15 ms
  expect(c.err()).toMatch(/catp link: counters \{"c2s":\{"packetsIn":1,/);
});

test("exits with CMD's status", async () => {
  requireLab();
  const c = capture();
  expect(await link(['-q', '--', 'sh', '-c', 'exit 3'], c.io)).toBe(3);
  expect(c.err()).toBe('');
});

test('--help, and bad options are usage errors', async () => {
  const c = capture();
  expect(await link(['--help'], c.io)).toBe(0);
  expect(c.out()).toMatch(/usage: catp link/);
  await expect(link(['--loss', '1.5', '--', 'true'], c.io)).rejects.toThrow(UsageError);
  await expect(link(['--delay', '5'], c.io)).rejects.toThrow(/expected a command/);
  await expect(link(['--loss', '0.1', '--burst', '0.1,0.5', '--', 'true'], c.io)).rejects.toThrow(/choose one/);
  await expect(link(['--reorder', '0.1', '--', 'true'], c.io)).rejects.toThrow(/P,MS/);
  await expect(link(['--queue', '20000', '--', 'true'], c.io)).rejects.toThrow(/needs --rate/);
  expect(linkOptionsFromArgs({ delay: '20', rate: '10000', loss: '0.05', seed: '18446744073709551615', log: '/tmp/x' })).toEqual({
    delayMs: 20, rate: 10000, loss: 0.05, seed: 18446744073709551615n, logPath: '/tmp/x',
  });
});
