import { statSync } from 'node:fs';
import { resolve } from 'node:path';

import { startServer } from '../../server';
import { intOption, parse, UsageError, type Io } from '../args';
import { urlHost } from '../../protocol/dhttp/url';

const HELP = `usage: catp serve DIR [options]

Runs the reference server on DIR: DHTTP over UDP and TCP, and plain HTTP/1.1, all on one port number.
Small responses go over UDP, large ones over a TCP connection the server opens back to the client.

options:
  -p, --port N     port number for both UDP and TCP (default 8080; 0 picks a free one)
      --host H     address to listen on (default 127.0.0.1; ::1 for IPv6 loopback)
      --cold-encode Q  how a page not yet in the CATP cache is encoded for its first request (in a worker
                   thread): fast (default: brotli 5, served at once; the best copy replaces it in the
                   background) or best (brotli 11 straight away: the first request waits longer)
      --pacing P   how CATP and in-order senders set their rate: discover (default: each finds its
                   path's rate; a client's Catp-Rate only bounds it) or fixed (pace at the client's
                   Catp-Rate, else 10 Mbit/s: the lab's oracle-rate ablation; never on the Internet)
      --dotfiles   serve paths with a segment that starts with a dot (.git/, .env); default: 404
  -q, --quiet      print nothing but errors
  -h, --help       show this help

Stop it with Ctrl-C; it prints its counters on the way out.
`;

const options = {
  port: { type: 'string', short: 'p' },
  host: { type: 'string' },
  'cold-encode': { type: 'string' },
  dotfiles: { type: 'boolean' },
  pacing: { type: 'string' },
  quiet: { type: 'boolean', short: 'q' },
  help: { type: 'boolean', short: 'h' },
} as const;

export async function serve(argv: string[], io: Io, signal?: AbortSignal): Promise<number> {
  const { values, positionals } = parse(argv, options);
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError('expected exactly one DIR to serve');
  const root = resolve(positionals[0]!);
  let isDir = false;
  try {
    isDir = statSync(root).isDirectory();
  } catch {
    // reported below
  }
  if (!isDir) throw new UsageError(`${root} is not a directory`);
  const port = intOption(values.port, 'port', 0, 65535) ?? 8080;
  const host = values.host ?? '127.0.0.1';
  const cold = values['cold-encode'] ?? 'fast';
  if (cold !== 'fast' && cold !== 'best') throw new UsageError(`--cold-encode: expected fast or best, not ${cold}`);

  const pacing = values.pacing ?? 'discover';
  if (pacing !== 'discover' && pacing !== 'fixed') throw new UsageError(`--pacing: expected discover or fixed, not ${pacing}`);

  const server = await startServer({ root, port, host, catp: { coldEncode: cold, pacing }, ...(values.dotfiles ? { serveDotfiles: true } : {}) });
  const shown = urlHost(host);
  if (!values.quiet) {
    io.stdout.write(
      `catp serve: serving ${root}\n` +
        `  dhttp://${shown}:${server.port}/   (UDP and TCP port ${server.port})\n` +
        `  http://${shown}:${server.port}/    (plain HTTP/1.1)\n` +
        `try: npx catp get --verbose dhttp://${shown}:${server.port}/\n`,
    );
  }

  await new Promise<void>((done) => {
    const stop = () => done();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    signal?.addEventListener('abort', stop, { once: true });
  });
  await server.close();
  if (!values.quiet) io.stdout.write(`catp serve: stopped; counters ${JSON.stringify(server.counters())}\n`);
  return 0;
}
