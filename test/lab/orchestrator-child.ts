// Not a test: a process of its own that the clean-up tests start (transpiled to JS in a temp directory, so
// it can also run as an unprivileged user). Argument: 'close' (start a link, use it, close it) or 'die'
// (start a link, leave processes inside, and wait to be SIGKILLed). Prints one JSON line per step.
import { startLink } from '../../lab/link';
import { Program, UDP_SINK, UDP_SOURCE } from './programs';

async function main(): Promise<void> {
  const mode = process.argv[2] ?? 'close';
  const link = await startLink({ delayMs: 10 });
  // A process with a child of its own in each side: close() / the emulator's sweep must get them all.
  const sleepers = (['client', 'server'] as const).map((side) =>
    link.spawnIn(side, 'sh', ['-c', 'sleep 1000 & sleep 1000; wait'], { stdio: 'ignore' }),
  );
  // Real traffic across: 20 datagrams client -> server.
  const sink = Program.start(link, 'server', UDP_SINK, [9000, 300, 20000]);
  await sink.waitForLine((l) => l === 'ready', 'sink ready');
  const src = Program.start(link, 'client', UDP_SOURCE, [link.serverAddress, 9000, JSON.stringify([{ count: 20, size: 100, pps: 200, seqBase: 0 }])]);
  await src.exited;
  await sink.waitForLine((l) => l === 'end', 'sink end');
  const owdMs = sink.lines
    .filter((l) => l.split(' ').length === 4)
    .map((l) => {
      const f = l.split(' ');
      return Number(BigInt(f[2]!) - BigInt(f[1]!)) / 1e6;
    });
  const addr = await link.runIn('client', 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'catp0']);
  process.stdout.write(JSON.stringify({
    step: 'up',
    uid: process.getuid?.(),
    pid: link.pid,
    rootless: link.rootless,
    inodes: link.netnsInodes,
    sleepers: sleepers.map((s) => s.pid),
    received: owdMs.length,
    minOwdMs: Math.min(...owdMs),
    clientAddr: addr.stdout.trim(),
  }) + '\n');
  if (mode === 'die') {
    setInterval(() => undefined, 1000);
    return;
  }
  const counters = await link.close();
  process.stdout.write(JSON.stringify({ step: 'closed', counters }) + '\n');
}

main().catch((err: unknown) => {
  process.stdout.write(JSON.stringify({ step: 'error', message: (err as Error).message }) + '\n');
  process.exitCode = 1;
});
