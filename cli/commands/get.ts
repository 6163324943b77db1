import { createWriteStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';

import { serialize } from 'parse5';

import { DhttpHost, FIRST_CONTACT, channels, type FetchResult, type FrameRecord, type LoadResult, type StreamEvent } from '../../app';
import type { DtdOutcome } from '../../app/dtd';
import type { ReuseOutcome } from '../../app/block-reuse';
import { PayloadStore, defaultStoreDir } from '../../app/payload-store';
import { parse5TreeBuilder, type CatpEvent } from '../../protocol/catp';
import { intOption, parse, UsageError, type Io } from '../args';
import { HostError } from '../../app/errors';

const HELP = `usage: catp get URL [options]

Fetches a URL and writes the body to stdout (or -o FILE).
  dhttp://HOST[:PORT]/PATH    DHTTP: the request goes over UDP; the answer over UDP or a TCP connection
                              the server opens back to us. Falls back to plain HTTP/1.1 when the server
                              does not speak DHTTP.
  dhttpt://HOST[:PORT]/PATH   DHTTP over a TCP connection only
  http://HOST[:PORT]/PATH     plain HTTP/1.1
  https://HOST[:PORT]/PATH    HTTP/1.1 over TLS (the system's CA store; CATP_EXTRA_CA_CERTS=FILE adds a PEM CA)

With --catp, an HTML page comes as CATP frames over UDP, in any order, and is rebuilt frame by frame; the
output is parse5's serialization of the rebuilt tree. With --inorder, the page's bytes come in datagrams (as one
brotli stream when the server codes it, as it codes them for TCP), usable only up to the first gap (the baseline
CATP is measured against); the output is the page's bytes. A server that does not stream the
URL (not HTML, an error, an old server) answers normally and its body is written as usual.

options:
  -o, --output FILE        write the body to FILE
  -v, --verbose            show the request ID, the channel the answer came on, resends, fall-back and timings
  -X, --method METHOD      request method (default GET)
  -H, --header 'N: V'      add a request header (repeatable)
  -d, --data TEXT          request body
      --timeout MS         give up after MS milliseconds (default 30000)
      --bind ADDRESS       send DHTTP requests from this local address and take the server's connections on it
                           (default: the loopback address for a loopback server, else every address)
      --catp               load the page as CATP frames (dhttp:// only)
      --inorder            load the page's bytes as in-order datagrams (dhttp:// only)
      --rate BYTES_PER_S   ask the server to send --catp / --inorder frames at most this fast (Catp-Rate)
      --timeline FILE      with --catp / --inorder: one JSON line per arriving frame (arrival time, frame,
                           what became displayable)
      --store DIR          payload store (default ${defaultStoreDir().replace(/^.*\/\.cache\//, '~/.cache/')}):
                           a payload already held (same site) is not transferred again (DTD); with --catp,
                           the page's blocks already held are filled from it and never sent (block reuse),
                           and its blocks are stored for the next load. -v shows the DTD mode chosen
                           (latency model), the decision taken and why, and the blocks reused
      --no-store           no payload store: no DTD, no block reuse
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
  bind: { type: 'string' },
  catp: { type: 'boolean' },
  inorder: { type: 'boolean' },
  rate: { type: 'string' },
  timeline: { type: 'string' },
  store: { type: 'string' },
  'no-store': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const VIA = { udp: 'UDP', tcp: 'TCP (DHTTP)', http: 'plain HTTP/1.1 over TCP', https: 'HTTP/1.1 over TLS' } as const;

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
  if (values.catp && values.inorder) throw new UsageError('--catp and --inorder exclude each other');
  const mode = values.catp ? 'catp' : values.inorder ? 'inorder' : null;
  if (mode === null && (values.rate !== undefined || values.timeline !== undefined)) {
    throw new UsageError('--rate and --timeline need --catp or --inorder');
  }
  if (mode !== null && !url.startsWith('dhttp://')) throw new UsageError(`--${mode} needs a dhttp:// URL`);
  const rate = intOption(values.rate, 'rate', 1000, 1_000_000_000);

  if (values.store !== undefined && values['no-store']) throw new UsageError('--store and --no-store exclude each other');
  // in-order mode has no blocks and streamed answers no DTD: no store there
  const store = values['no-store'] || mode === 'inorder' ? null : await PayloadStore.open({ dir: values.store ?? defaultStoreDir() });
  const bind = values.bind;
  if (bind !== undefined && isIP(bind) === 0) throw new UsageError(`--bind needs an IP address, not '${bind}'`);
  const host = new DhttpHost({ client: FIRST_CONTACT, ...(store ? { store } : {}), ...(bind !== undefined ? { bind } : {}) });
  const unsubscribe = [
    channels.request.subscribe(({ requestId }) => log(`> ${values.method ?? 'GET'} ${url}  request id ${requestId}`)),
    channels.resend.subscribe((e) => {
      if (e.type === 'resend') log(`! resend #${e.attempt} with the resend flag${e.overTcp ? ' over TCP' : ' over UDP'}`);
      else log(`! ${e.type}`);
    }),
    channels.fallback.subscribe((e) => log(`! falling back to plain HTTP/1.1 over TCP (${e.reason})`)),
    channels.dropped.subscribe((e) => log(`! dropped input: ${JSON.stringify(e)}`)),
    channels.dtd.subscribe((o) => logDtd(o, log)),
    channels.reuse.subscribe((o) => logReuse(o, log)),
  ];
  try {
    if (mode !== null) {
      const out = await loadStream(host, url, mode, { timeoutMs, rate, timeline: values.timeline, log });
      if (out.kind === 'response') return await writeAnswer(out.result, values.output, io, log);
      if (values.output !== undefined) await writeFile(values.output, out.body);
      else await new Promise<void>((done, fail) => io.stdout.write(out.body, (e) => (e ? fail(e) : done())));
      return 0;
    }
    const result = await host.fetch(url, {
      method: values.method ?? 'GET',
      headers,
      ...(values.data !== undefined ? { body: new TextEncoder().encode(values.data) } : {}),
      timeoutMs,
    });
    return await writeAnswer(result, values.output, io, log);
  } finally {
    if (verbose) {
      for (const lane of host.counters().lanes) {
        const nonZero = Object.entries(lane.endpoint).filter(([, v]) => v !== 0).map(([k, v]) => `${k}=${v}`);
        log(`  endpoint ${lane.bind} udp:${lane.udpPort} tcp:${lane.tcpPort}  ${nonZero.join(' ')}`);
      }
    }
    for (const off of unsubscribe) off();
    host.close();
    await host.flushStore(); // a CATP page's blocks are being stored: let them land before exiting
  }
}

function logDtd(o: DtdOutcome, log: (line: string) => void): void {
  log(`  dtd: mode ${o.mode}: ${o.modeReason}`);
  if (o.mode === 'plain') return;
  const digest = o.digest === null ? 'no digest' : `sha-256 ${o.digest.slice(0, 16)}… (${o.digestSource ?? 'computed'})`;
  const how = o.announced ? (o.held ? 'announced and held for our decision' : 'announced, body sent at once') : 'answered at once';
  log(`  dtd: ${how}; ${digest}`);
  const what = { hit: o.savedBytes > 0 || o.held ? "DON'T-BOTHER: served from the store" : 'in the store', miss: 'PROCEED / transferred', 'no-digest': 'transferred', 'not-eligible': 'not a payload', refetched: 'refetched', mismatch: 'refused' }[o.decision];
  log(`  dtd: ${o.decision} — ${what}: ${o.decisionReason}` + (o.savedBytes > 0 ? `; saved ${o.savedBytes} bytes, ~${o.savedMs.toFixed(1)} ms` : ''));
}

function logReuse(o: ReuseOutcome, log: (line: string) => void): void {
  if (!o.asked) {
    log(`  catp reuse: no blocks of this site in the store: nothing to reuse; the page's ${o.blocks} blocks are stored for the next load`);
    return;
  }
  const rate = o.rateBytesPerSec >= 1e6 ? `${(o.rateBytesPerSec / 1e6).toFixed(2)} MB/s` : `${(o.rateBytesPerSec / 1e3).toFixed(1)} kB/s`;
  const source = { measured: "measured from this origin's CATP frames", paced: 'the pacing rate asked for', assumed: 'assumed' }[o.rateSource];
  log(
    `  catp reuse: ${o.reused} of ${o.blocks} blocks filled from the store in ${o.fillMs.toFixed(1)} ms ` +
      `(asked the server to hold its data frames; ${o.acked ? 'it acknowledged' : 'it did not acknowledge: an old server, so it sent them anyway'})`,
  );
  log(
    `  catp reuse: ${o.bytesSaved} bytes not transferred (${o.reused - o.arrivedAnyway} data frames never sent), ` +
      `~${o.savedMs.toFixed(1)} ms at ${rate} (${source})` +
      (o.arrivedAnyway > 0 ? `; ${o.arrivedAnyway} reused blocks arrived anyway (the server's hold ran out first)` : ''),
  );
  if (o.crossSiteMisses > 0) log(`  catp reuse: ${o.crossSiteMisses} blocks held only for another site: not used (privacy scope)`);
  if (o.corrupt > 0) log(`  catp reuse: ${o.corrupt} stored blocks failed verification: removed and fetched again`);
}

async function writeAnswer(result: FetchResult, output: string | undefined, io: Io, log: (line: string) => void): Promise<number> {
  const { response } = result;
  const ms = (result.completedAtMs - result.startedAtMs).toFixed(1);
  log(
    `< ${response.status} ${response.reason}  via ${VIA[result.channel]}, ${response.body.length} bytes in ${ms} ms, ` +
      `${result.resends} resend${result.resends === 1 ? '' : 's'}${result.fellBack ? ', after fall-back' : ''}`,
  );
  if (response.status >= 400) {
    io.stderr.write(`catp get: ${result.url}: ${response.status} ${response.reason}\n`);
    return 1;
  }
  if (output !== undefined) await writeFile(output, response.body);
  else await new Promise<void>((done, fail) => io.stdout.write(response.body, (e) => (e ? fail(e) : done())));
  return 0;
}

interface StreamOptions {
  timeoutMs: number;
  rate: number | undefined;
  timeline: string | undefined;
  log: (line: string) => void;
}

/** Loads a page as a stream and rebuilds it: the parse5 serialization (CATP) or the raw bytes (in order). */
async function loadStream(
  host: DhttpHost,
  url: string,
  mode: 'catp' | 'inorder',
  opts: StreamOptions,
): Promise<{ kind: 'stream'; body: Uint8Array } | Extract<LoadResult, { kind: 'response' }>> {
  const tree = parse5TreeBuilder();
  const chunks: Uint8Array[] = [];
  const timeline = opts.timeline === undefined ? null : createWriteStream(opts.timeline);
  const timelineDone = timeline
    ? new Promise<void>((ok, fail) => timeline.on('close', () => ok()).on('error', fail))
    : null;
  let refused = 0;
  // The tree is built once the load is over, from the events in their order: as in the browser, where the
  // renderer builds it in its own process, parse5's work does not sit between the datagrams (and delay their
  // reports); `catp get` renders nothing before the end anyway.
  const treeEvents: CatpEvent[] = [];
  const onFrame = (record: FrameRecord, events: StreamEvent[]) => {
    if (!record.accepted) refused++;
    for (const ev of events) {
      if (ev.type === 'prefix-extended') chunks.push(ev.bytes);
      else if (mode === 'catp') treeEvents.push(ev as CatpEvent);
    }
    timeline?.write(`${JSON.stringify(record)}\n`);
  };
  try {
    const result = await host.load(url, {
      mode,
      timeoutMs: opts.timeoutMs,
      onFrame,
      // blocks filled from the store (block reuse) go into the same tree
      onLocalFill: (events) => {
        for (const ev of events) if (mode === 'catp') treeEvents.push(ev as CatpEvent);
      },
      ...(opts.rate !== undefined ? { rateBytesPerSec: opts.rate } : {}),
    });
    if (result.kind === 'response') {
      opts.log(`! the server answered without streaming (${result.result.response.status})`);
      return result;
    }
    const c = result.counters;
    opts.log(
      `< ${mode === 'catp' ? 'CATP' : 'in-order'} page complete and verified: ${result.frames} frames ` +
        `(${c.accepted ?? 0} accepted, ${refused} refused or duplicate) in ` +
        `${(result.completedAtMs - result.startedAtMs).toFixed(1)} ms, first frame after ` +
        `${result.firstFrameAtMs === null ? '-' : (result.firstFrameAtMs - result.startedAtMs).toFixed(1)} ms`,
    );
    if (mode === 'inorder') return { kind: 'stream', body: Buffer.concat(chunks) };
    for (const ev of treeEvents) tree.apply(ev);
    if (tree.root === null) throw new HostError('HOST_ERR_NO_SKELETON', 'the page completed without a skeleton');
    return { kind: 'stream', body: Buffer.from(serialize(tree.root)) };
  } finally {
    if (timeline) {
      timeline.end();
      await timelineDone;
    }
  }
}
