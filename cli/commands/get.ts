import diagnostics from 'node:diagnostics_channel';
import { writeFile } from 'node:fs/promises';

import { DhttpHost, channels } from '../../app';
import { intOption, parse, UsageError, type Io } from '../args';

const HELP = `usage: catp get URL [options]

Fetches a URL and writes the body to stdout (or -o FILE).
  dhttp://HOST[:PORT]/PATH    DHTTP: the request goes over UDP; the answer over UDP or a TCP connection
                              the server opens back to us. Falls back to plain HTTP/1.1 when the server
                              does not speak DHTTP.
  dhttpt://HOST[:PORT]/PATH   DHTTP over a TCP connection only
  http://HOST[:PORT]/PATH     plain HTTP/1.1

options:
  -o, --output FILE        write the body to FILE
  -v, --verbose            show the request ID, the channel the answer came on, resends, fall-back and timings
  -X, --method METHOD      request method (default GET)
  -H, --header 'N: V'      add a request header (repeatable)
  -d, --data TEXT          request body
      --timeout MS         give up after MS milliseconds (default 30000)
  -h, --help               show this help

Exit status: 0 on a 2xx/3xx answer, 1 on an error or a 4xx/5xx answer (reported on stderr), 2 on bad usage.
`;

const options = {
  output: { type: 'string', short: 'o' },
  verbose: { type: 'boolean', short: 'v' },
  method: { type: 'string', short: 'X' },
  header: { type: 'string', short: 'H', multiple: true },
  data: { type: 'string', short: 'd' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function parseHeader(text: string): [string, string] {
  const colon = text.indexOf(':');
  if (colon <= 0) throw new UsageError(`header '${text}' is not of the form 'Name: value'`);
  return [text.slice(0, colon).trim(), text.slice(colon + 1).trim()];
}

export async function get(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, options);
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError('expected exactly one URL');
  const url = positionals[0]!;
  const timeoutMs = intOption(values.timeout, 'timeout', 1, 3_600_000) ?? 30_000;
  const headers = (values.header ?? []).map(parseHeader);
  const verbose = values.verbose === true;
  const log = (line: string) => {
    if (verbose) io.stderr.write(`${line}\n`);
  };

  const host = new DhttpHost();
  const subscriptions: [diagnostics.Channel, (message: unknown) => void][] = [
    [channels.request, (m) => {
      const { requestId } = m as { requestId: string };
      log(`> ${values.method ?? 'GET'} ${url}  request id ${requestId}`);
    }],
    [channels.resend, (m) => {
      const e = m as { type: string; attempt?: number; overTcp?: boolean };
      if (e.type === 'resend') log(`! resend #${e.attempt} with the resend flag${e.overTcp ? ' over TCP' : ' over UDP'}`);
      else log(`! ${e.type}`);
    }],
    [channels.fallback, (m) => log(`! falling back to plain HTTP/1.1 over TCP (${(m as { reason: string }).reason})`)],
    [channels.dropped, (m) => log(`! dropped input: ${JSON.stringify(m)}`)],
  ];
  for (const [ch, fn] of subscriptions) ch.subscribe(fn);
  try {
    const result = await host.fetch(url, {
      method: values.method ?? 'GET',
      headers,
      ...(values.data !== undefined ? { body: new TextEncoder().encode(values.data) } : {}),
      timeoutMs,
    });
    const { response } = result;
    const ms = (result.completedAtMs - result.startedAtMs).toFixed(1);
    const via = { udp: 'UDP', tcp: 'TCP (DHTTP)', http: 'plain HTTP/1.1 over TCP' }[result.channel];
    log(
      `< ${response.status} ${response.reason}  via ${via}, ${response.body.length} bytes in ${ms} ms, ` +
        `${result.resends} resend${result.resends === 1 ? '' : 's'}${result.fellBack ? ', after fall-back' : ''}`,
    );
    if (verbose) {
      for (const lane of host.counters().lanes) {
        const nonZero = Object.entries(lane.endpoint).filter(([, v]) => v !== 0).map(([k, v]) => `${k}=${v}`);
        log(`  endpoint ${lane.bind} udp:${lane.udpPort} tcp:${lane.tcpPort}  ${nonZero.join(' ')}`);
      }
    }
    if (response.status >= 400) {
      io.stderr.write(`catp get: ${url}: ${response.status} ${response.reason}\n`);
      return 1;
    }
    if (values.output !== undefined) await writeFile(values.output, response.body);
    else await new Promise<void>((done, fail) => io.stdout.write(response.body, (e) => (e ? fail(e) : done())));
    return 0;
  } finally {
    for (const [ch, fn] of subscriptions) ch.unsubscribe(fn);
    host.close();
  }
}
