// CATP through the reference server over real loopback sockets. The client is Node's dgram plus the sans-IO
// protocol/catp assemblers: it drops a seeded 20% of the frames it receives and sends the assembler's loss
// reports, so the server's sessions must repair them.
import * as crypto from 'crypto';
import * as dgram from 'dgram';
import * as zlib from 'zlib';
import { existsSync, readFileSync } from 'fs';
import { promises as fsp } from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import * as parse5 from 'parse5';
import { seededRng } from '../../protocol/random';
import { sha256 } from '../../platform/sha256';
import { startServer, type DhttpServer, type ServerCounters } from '../../server';
import {
  decodeResponseDatagram,
  getHeader,
  encodePadding,
  MAX_DATAGRAM_PAYLOAD,
  REQUEST_PREFIX_BYTES,
  encodeRequest,
  idToHex,
  newRequestId,
  parseResponseDatagram,
  serializeRequest,
  type HttpResponse,
} from '../../protocol/dhttp';
import { DhttpResponseStream } from '../../protocol/dhttp/stream';
import { FIRST_CONTACT_STEP_BYTES, MIN_UNPROVEN_REQUEST_BYTES, STREAM_FIRST_CONTACT_WIRE_BYTES, STREAM_REQUEST_BYTES } from '../../protocol/dhttp/address-validation';

/** IPv4 and UDP headers: what the server's address budget adds to each datagram's payload (loopback is IPv4 here). */
const UDP_IPV4_HEADERS = 28;
import { brotliCodec, CATP_VERSION, CatpAssembler, decodeHeader, FRAME_FLAG_BROTLI, FRAME_KIND, RawAssembler, isCatpFrame, parse5TreeBuilder, encodeReport, NO_ECHO } from '../../protocol/catp';

jest.setTimeout(30_000);

/** The server compresses every frame on its own (brotli); the client decodes with the same codec. */
const codec = brotliCodec(zlib);
const newId = () => newRequestId((n) => crypto.randomBytes(n));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function waitFor(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

// ------------------------------------------------------------------ fixtures

const CORPUS = process.env.CATP_CORPUS ?? path.resolve(__dirname, '../../../shared/corpus');
const REAL = path.join(CORPUS, 'real-pages');
/** Different sizes: ~10 KB, ~48 KB, ~180 KB. */
const REAL_PICKS = ['daringfireball-1.html', 'medium-2.html', 'wordpress.html'];

function generatedPage(seed: number, paragraphs: number): string {
  const rng = seededRng(seed);
  const words = ['alpha', 'beta', 'gamma', 'delta', 'čeština', 'ünïcödé', '日本語', '🙂', '&amp;', 'x'];
  const para = () => Array.from({ length: 40 }, () => words[Math.floor(rng() * words.length)]).join(' ');
  const body = Array.from({ length: paragraphs }, (_, i) => `<p id=p${i}>${para()}</p>\n<!-- c${i} --><div class="d"><span>${para()}</span></div>`).join('\n');
  return `<!DOCTYPE html><html><head><title>generated ${seed}</title><style>p{color:red}</style></head><body>${body}<script>var x = 1;</script></body></html>`;
}

let tmp: string;
let root: string;
const pages: { name: string; bytes: Buffer }[] = [];
const binary = crypto.randomBytes(40 * 1024);
let page10k: Buffer;

beforeAll(async () => {
  tmp = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'catp-server-catp-')));
  root = path.join(tmp, 'www');
  await fsp.mkdir(root, { recursive: true });
  const real = REAL_PICKS.filter((n) => existsSync(path.join(REAL, n)));
  if (real.length === REAL_PICKS.length) {
    for (const n of real) pages.push({ name: n, bytes: readFileSync(path.join(REAL, n)) });
  } else {
    for (const [i, n] of [4, 20, 80].entries()) pages.push({ name: `gen-${i}.html`, bytes: Buffer.from(generatedPage(i + 1, n)) });
  }
  for (const p of pages) await fsp.writeFile(path.join(root, p.name), p.bytes);
  // 10 KB of HTML whose text does not compress much (random letters), so the wire bytes stay near 10 KB
  const r = seededRng(99);
  const letters = Array.from({ length: 12_000 }, (_, i) => (i % 9 === 8 ? ' ' : String.fromCharCode(97 + Math.floor(r() * 26)))).join('');
  page10k = Buffer.from(`<!DOCTYPE html><title>10k</title><p>${letters}`).subarray(0, 10_000);
  expect(page10k.length).toBe(10_000);
  await fsp.writeFile(path.join(root, 'page10k.html'), page10k);
  await fsp.writeFile(path.join(root, 'small.html'), '<!doctype html><title>s</title><p>small page</p>');
  await fsp.writeFile(path.join(root, 'note.txt'), 'plain text, not HTML');
  await fsp.writeFile(path.join(root, 'data.bin'), binary);
  await fsp.writeFile(path.join(root, 'deep.html'), '<div>'.repeat(3000));
});

afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

// ------------------------------------------------------------------ a CATP client made of dgram + assemblers

/** How a test client makes a first contact (CatpClient.request). */
type FirstContactPad = true | 'first' | 'split' | 'padding' | 'copy-only' | 'copy-alone';

interface FetchOptions {
  mode?: string;
  rate?: number;
  loss?: number;
  seed?: number;
  method?: string;
  id?: Uint8Array;
  resend?: boolean;
  /** Resolve as soon as the request is sent (the transfer continues in the background). */
  noWait?: boolean;
  /**
   * First contact (no token yet; the request padded to 1200 bytes as a DHTTP client pads it). On the server's
   * `421 … token` answer: 'answer' repeats the request with the token after `proofDelayMs`; 'ignore-first' drops
   * the first such answer (lost) and answers the next; 'never' never proves the address.
   */
  firstContact?: 'answer' | 'ignore-first' | 'never';
  /** First contact: how the request is padded (CatpClient.request; default 'split', as a DHTTP client does). */
  firstContactPad?: FirstContactPad;
  proofDelayMs?: number;
  /** First contact: lose every frame that arrives before the proof goes (no report can echo one before it). */
  loseFirstFlight?: boolean;
  /** An Accept-Encoding header (in-order streams may then come brotli-coded; the assembler gets the codec). */
  acceptEncoding?: string;
  /** Hold each report this long before sending it (a long path back to the server: its RTT samples grow by as much). */
  reportDelayMs?: number;
}

interface FetchResult {
  id: Uint8Array;
  /** CATP: parse5 serialization of the assembled tree. */
  html?: string;
  /** CATP: index pieces shown before the last index frame arrived (index frames stand alone). */
  piecesBeforeIndexComplete?: number;
  /** CATP: frames whose payload was compressed (method 1), by kind; both modes: frames with FRAME_FLAG_BROTLI. */
  compressed?: { index: number; data: number; frames: number; brotliFlag: number };
  /** In-order: the page bytes. */
  bytes?: Buffer;
  elapsedMs: number;
  framesReceived: number;
  /** Of those, different frames (the page's frames, each counted once however often it came). */
  framesDistinct: number;
  /** Bytes of the frames taken (after the client's own drops). */
  bytesReceived: number;
  framesDropped: number;
  reportsSent: number;
  /**
   * First contact, until the request with the token went: bytes (on the wire) and frames received, the first
   * request's size (payloads), all bytes sent on the wire (the request and the reports on the first flight), token
   * answers received.
   */
  beforeProof?: { bytes: number; frames: number; requestBytes: number; sentBytes: number; tokenAnswers: number };
}

class CatpClient {
  readonly udp: dgram.Socket;
  /** Datagrams that are not CATP frames (normal DHTTP responses). */
  readonly responses: Buffer[] = [];
  private onFrame: ((msg: Buffer) => void) | null = null;
  /** Every frame, beside fetch's own handler (a test's probe). */
  onFrameSeen: ((msg: Buffer) => void) | null = null;
  private onResponse: ((msg: Buffer) => void) | null = null;
  framesSeen = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    readonly server: DhttpServer,
    readonly host = '127.0.0.1',
  ) {
    this.udp = dgram.createSocket('udp4');
    this.udp.on('message', (msg) => {
      this.bytesSeen += msg.length;
      this.wireSeen += msg.length + UDP_IPV4_HEADERS;
      if (isCatpFrame(msg)) {
        this.frameIds.add(idToHex(msg.subarray(0, 8)));
        this.framesSeen++;
        this.onFrame?.(msg);
        this.onFrameSeen?.(msg);
      } else {
        this.responses.push(msg);
        this.onResponse?.(msg);
      }
    });
  }

  /** The server's address token for us (address-validation.ts): without it, no stream starts. */
  token: string | null = null;

  /** `proven: false`: no first contact here (the address has sent the server nothing yet). */
  async start(opts: { proven?: boolean } = {}): Promise<this> {
    await new Promise<void>((r) => this.udp.bind(0, this.host, () => r()));
    if (opts.proven === false) return this;
    // first contact, as a DHTTP client makes it: a request padded to 1200 bytes, whose answer carries the token
    const id = newId();
    const http = serializeRequest({ method: 'HEAD', target: '/', headers: [['Host', 'test'], ['Catp-Pad', 'x'.repeat(1100)]], body: new Uint8Array(0) });
    await this.send(encodeRequest({ id, otherPort: this.port, resend: false, http }));
    const res = await this.normalResponse(id, 'HEAD');
    this.token = getHeader(res.headers, 'catp-token');
    this.responses.length = 0;
    return this;
  }

  get port(): number {
    return this.udp.address().port;
  }

  /** Request IDs of every frame received. */
  readonly frameIds = new Set<string>();
  /** Bytes of every datagram sent to the server, and received from it: payloads, and on the wire (with IP and UDP headers, as the server's budget counts them). */
  bytesSent = 0;
  bytesSeen = 0;
  wireSent = 0;
  wireSeen = 0;

  send(bytes: Uint8Array): Promise<void> {
    this.bytesSent += bytes.length;
    this.wireSent += bytes.length + UDP_IPV4_HEADERS;
    return new Promise((resolve, reject) => this.udp.send(bytes, this.server.port, '127.0.0.1', (e) => (e ? reject(e) : resolve())));
  }

  /**
   * `pad` (no token only): true, the request padded to a full datagram (MIN_UNPROVEN_REQUEST_BYTES, as a request that
   * is not a stream's is); 'first', padded to STREAM_REQUEST_BYTES alone; 'split', that, a padded copy of it right
   * behind it and padding datagrams up to STREAM_FIRST_CONTACT_WIRE_BYTES on the wire, a quarter datagram each, as a
   * DHTTP client makes a stream's first contact; 'padding', the request and padding datagrams instead (a resend's
   * first contact); 'copy-only', the copy and the padding (the request was lost); 'copy-alone', the copy alone.
   */
  request(target: string, headers: [string, string][], opts: { id?: Uint8Array; method?: string; resend?: boolean; pad?: FirstContactPad | false } = {}): Promise<Uint8Array> {
    const id = opts.id ?? newId();
    const build = (extra: [string, string][], copy = false) => {
      const http = serializeRequest({ method: opts.method ?? 'GET', target, headers: [['Host', 'test'], ...headers, ...extra], body: new Uint8Array(0) });
      return encodeRequest({ id, otherPort: this.port, resend: opts.resend ?? false, copy, http });
    };
    const padded = (to: number, copy = false) => build([['Catp-Pad', 'x'.repeat(to - build([], copy).length - 'Catp-Pad: \r\n'.length)]], copy);
    const pad = this.token ? false : (opts.pad ?? false);
    const sends: Uint8Array[] = [];
    if (pad === false) sends.push(build(this.token ? [['Catp-Token', this.token]] : []));
    else if (pad === true) sends.push(padded(MIN_UNPROVEN_REQUEST_BYTES));
    else {
      const first = padded(STREAM_REQUEST_BYTES);
      // on the wire, as the client counts it: each datagram with its IPv4 and UDP headers
      const h = UDP_IPV4_HEADERS;
      let rest = STREAM_FIRST_CONTACT_WIRE_BYTES - (first.length + h);
      if (pad !== 'copy-only' && pad !== 'copy-alone') sends.push(first);
      if (pad === 'split' || pad === 'copy-only' || pad === 'copy-alone') {
        const copy = padded(Math.min(rest - h, FIRST_CONTACT_STEP_BYTES), true);
        sends.push(copy);
        rest -= copy.length + h;
      }
      while (pad !== 'first' && pad !== 'copy-alone' && rest - h > REQUEST_PREFIX_BYTES) {
        const n = Math.min(rest - h, FIRST_CONTACT_STEP_BYTES);
        sends.push(encodePadding(id, this.port, n));
        rest -= n + h;
      }
    }
    this.lastRequestBytes = sends.reduce((n, d) => n + d.length + UDP_IPV4_HEADERS, 0); // on the wire
    return sends.reduce((p: Promise<void>, d) => p.then(() => this.send(d)), Promise.resolve()).then(() => id);
  }

  /** What the last request() sent, on the wire (each datagram with its IPv4 and UDP headers). */
  lastRequestBytes = 0;

  async normalResponse(id: Uint8Array, method = 'GET'): Promise<HttpResponse> {
    const hex = idToHex(id);
    let found: Buffer | undefined;
    await waitFor(() => (found = this.responses.find((d) => d.length >= 8 && idToHex(d.subarray(0, 8)) === hex)) !== undefined, `response ${hex}`);
    return parseResponseDatagram(decodeResponseDatagram(found as Buffer).http, { method });
  }

  /**
   * Fetch `target` with Catp-Mode; rebuild it while dropping `loss` of the frames. Resolves once the page is
   * complete and the server has counted the session completed (the client's `complete` report arrived), so
   * no session outlives the test that started it.
   */
  fetch(target: string, opts: FetchOptions = {}): Promise<FetchResult> {
    const mode = opts.mode ?? 'catp';
    const rng = seededRng(opts.seed ?? 1);
    const loss = opts.loss ?? 0;
    const id = opts.id ?? newId();
    const asm =
      mode === 'inorder'
        ? new RawAssembler({ sha256, requestId: id, otherPort: this.port, ...(opts.acceptEncoding !== undefined ? { codec } : {}) })
        : new CatpAssembler({ sha256, codec, requestId: id, otherPort: this.port });
    const builder = parse5TreeBuilder();
    const parts: Buffer[] = [];
    let received = 0;
    const distinct = new Set<number>();
    let bytesReceived = 0;
    let dropped = 0;
    let pieces = 0;
    let piecesBeforeIndexComplete = -1;
    const compressed = { index: 0, data: 0, frames: 0, brotliFlag: 0 };
    const t0 = performance.now();
    const completedBefore = this.server.counters().catpCompleted;
    const settled = (r: FetchResult): Promise<FetchResult> =>
      waitFor(() => this.server.counters().catpCompleted > completedBefore, 'the server to count the session completed').then(() => r);
    return new Promise<FetchResult>((resolve, reject) => {
      let finished = false;
      const finish = (err: Error | null, r?: FetchResult) => {
        if (finished) return;
        finished = true;
        if (err) {
          this.onFrame = null;
          if (this.timer) clearTimeout(this.timer);
          reject(err);
        } else settled(r as FetchResult).then(resolve, reject);
        // keep pumping (complete reports) until the socket closes
      };
      const pump = () => {
        const now = performance.now();
        asm.handleTimer(now);
        for (let rep = asm.nextReport(now); rep !== null; rep = asm.nextReport(now)) {
          const r = rep;
          if (opts.reportDelayMs === undefined) void this.send(r).catch(() => undefined);
          else setTimeout(() => void this.send(r).catch(() => undefined), opts.reportDelayMs);
        }
        for (let ev = asm.nextEvent(); ev !== null; ev = asm.nextEvent()) {
          if (ev.type === 'prefix-extended') parts.push(Buffer.from(ev.bytes));
          else if (ev.type === 'index-piece' || ev.type === 'block-filled') {
            builder.apply(ev);
            if (ev.type === 'index-piece') pieces++;
          } else if (ev.type === 'index-complete') piecesBeforeIndexComplete = pieces - 1;
          else if (ev.type === 'page-complete') {
            const elapsedMs = performance.now() - t0;
            const base = { id, elapsedMs, framesReceived: received, framesDistinct: distinct.size, bytesReceived, framesDropped: dropped, reportsSent: asm.receiver.reportsSent, ...(beforeProof ? { beforeProof } : {}) };
            // counts as of completion (frames may still come: a tail resend's copy)
            if (mode === 'inorder') finish(null, { ...base, bytes: Buffer.concat(parts), compressed: { ...compressed } });
            else finish(null, { ...base, html: parse5.serialize(builder.root as parse5.DefaultTreeAdapterMap['document']), piecesBeforeIndexComplete, compressed: { ...compressed } });
          } else finish(new Error(`${ev.type}: ${ev.code} ${ev.message}`));
        }
        if (this.timer) clearTimeout(this.timer);
        this.timer = null;
        const at = asm.nextTimerAt();
        if (at !== null) this.timer = setTimeout(pump, Math.max(0, at - performance.now()));
      };
      const first = opts.firstContact;
      const headers: [string, string][] = [['Catp-Mode', mode]];
      if (opts.rate !== undefined) headers.push(['Catp-Rate', String(opts.rate)]);
      if (opts.acceptEncoding !== undefined) headers.push(['Accept-Encoding', opts.acceptEncoding]);
      // first contact: everything that arrives until the request with the token goes (token answers included)
      const beforeProof = first === undefined ? undefined : { bytes: 0, frames: 0, requestBytes: 0, sentBytes: 0, tokenAnswers: 0 };
      let proofSent = first === undefined;
      this.onResponse = (msg) => {
        if (beforeProof === undefined || idToHex(msg.subarray(0, 8)) !== idToHex(id)) return;
        if (!proofSent) beforeProof.bytes += msg.length + UDP_IPV4_HEADERS;
        const res = parseResponseDatagram(decodeResponseDatagram(msg).http, { method: 'GET' });
        if (res.status !== 421 || getHeader(res.headers, 'dhttp-retry') !== 'token') return;
        beforeProof.tokenAnswers++;
        if (first === 'never' || (first === 'ignore-first' && beforeProof.tokenAnswers === 1)) return;
        this.token = getHeader(res.headers, 'catp-token');
        setTimeout(() => {
          if (finished || proofSent) return;
          proofSent = true;
          beforeProof.sentBytes = this.wireSent;
          void this.request(target, headers, { id, method: opts.method }).catch(() => undefined);
        }, opts.proofDelayMs ?? 0);
      };
      this.onFrame = (msg) => {
        if (beforeProof !== undefined && !proofSent) {
          beforeProof.bytes += msg.length + UDP_IPV4_HEADERS;
          beforeProof.frames++;
          if (opts.loseFirstFlight) {
            dropped++;
            return;
          }
        }
        if (loss > 0 && rng() < loss) {
          dropped++;
          return;
        }
        received++;
        if (msg.length >= 32) distinct.add(decodeHeader(msg).seq);
        bytesReceived += msg.length;
        if (msg.length >= 32 && (msg[11] & FRAME_FLAG_BROTLI) !== 0) compressed.brotliFlag++;
        if (msg.length > 33) {
          compressed.frames++;
          // index: 8-byte check, then the method byte; data: the method byte first
          if (msg[10] === FRAME_KIND.INDEX && msg[32 + 8] === 1) compressed.index++;
          if (msg[10] === FRAME_KIND.DATA && msg[32] === 1) compressed.data++;
        }
        asm.receive(msg, performance.now());
        pump();
      };
      if (first !== undefined) this.token = null;
      this.request(target, headers, { id, method: opts.method, resend: opts.resend, pad: first === undefined ? false : (opts.firstContactPad ?? 'split') })
        .then(() => {
          if (beforeProof !== undefined) beforeProof.requestBytes = this.lastRequestBytes;
          asm.start(performance.now());
          pump();
          if (opts.noWait) resolve({ id, elapsedMs: 0, framesReceived: 0, framesDistinct: 0, bytesReceived: 0, framesDropped: 0, reportsSent: 0 });
        })
        .catch((e: Error) => finish(e));
    });
  }

  close(): void {
    this.onFrame = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.udp.close();
  }
}

const expectedTree = (bytes: Uint8Array): string => parse5.serialize(parse5.parse(new TextDecoder('utf-8').decode(bytes), { scriptingEnabled: false }));

function delta(after: ServerCounters, before: ServerCounters, k: keyof ServerCounters): number {
  return (after[k] as number) - (before[k] as number);
}

// ------------------------------------------------------------------ tests

describe('CATP sessions', () => {
  let server: DhttpServer;

  beforeAll(async () => {
    server = await startServer({ root, rng: seededRng(7) });
  });

  afterAll(async () => {
    await server.close();
  });

  test('real pages under 20% frame loss are rebuilt exactly and the sessions complete', async () => {
    expect(pages.length).toBeGreaterThanOrEqual(3);
    const start = server.counters();
    for (const [i, p] of pages.entries()) {
      const before = server.counters();
      const client = await new CatpClient(server).start();
      try {
        const r = await client.fetch(`/${p.name}`, { loss: 0.2, seed: 100 + i });
        expect(r.html).toBe(expectedTree(p.bytes));
        // the server's frames are compressed (brotli, each on its own), and index pieces were shown one by one
        expect(r.compressed!.index).toBeGreaterThan(0);
        expect(r.compressed!.data).toBeGreaterThan(0);
        expect(r.piecesBeforeIndexComplete).toBeGreaterThanOrEqual(0);
        await waitFor(() => server.counters().catpCompleted === before.catpCompleted + 1, `session for ${p.name} to complete`);
        const c = server.counters();
        expect(delta(c, before, 'catpSessions')).toBe(1);
        expect(c.catpModes.catp - before.catpModes.catp).toBe(1);
        expect(delta(c, before, 'catpReports')).toBeGreaterThan(0);
        if (r.framesDropped > 0) expect(delta(c, before, 'catpFramesResent')).toBeGreaterThan(0);
        expect(delta(c, before, 'catpFramesCopied')).toBeLessThanOrEqual(delta(c, before, 'catpFramesResent') / 2);
        expect(c.catpActive).toBe(0);
        expect(client.responses).toHaveLength(0); // frames only, no HTTP response
      } finally {
        client.close();
      }
    }
    const c = server.counters();
    expect(c.catpGaveUp).toBe(0);
    expect(c.catpTimers).toBe(0); // nothing left to drive
    // a resend in a load's tail went with a copy (RepairSender repeatTailRepairs): some did, over these pages at 20%
    expect(delta(c, start, 'catpFramesCopied')).toBeGreaterThan(0);
  });

  test('a repeated load is served from the encoded-page cache', async () => {
    const before = server.counters();
    const client = await new CatpClient(server).start();
    try {
      const r = await client.fetch(`/${pages[0].name}`);
      expect(r.html).toBe(expectedTree(pages[0].bytes));
    } finally {
      client.close();
    }
    const c = server.counters();
    expect(delta(c, before, 'catpCacheHits')).toBe(1);
    expect(delta(c, before, 'catpCacheMisses')).toBe(0);
  });

  test('Catp-Mode: inorder rebuilds the exact bytes under 20% loss (HTML and binary)', async () => {
    for (const [target, bytes] of [
      [`/${pages[1].name}`, pages[1].bytes],
      ['/data.bin', binary],
    ] as const) {
      const before = server.counters();
      const client = await new CatpClient(server).start();
      try {
        const r = await client.fetch(target, { mode: 'inorder', loss: 0.2, seed: 7 });
        expect(r.framesDropped).toBeGreaterThan(0);
        expect((r.bytes as Buffer).equals(bytes)).toBe(true);
        await waitFor(() => server.counters().catpCompleted === before.catpCompleted + 1, 'inorder session to complete');
        expect(server.counters().catpModes.inorder - before.catpModes.inorder).toBe(1);
      } finally {
        client.close();
      }
    }
  });

  test('Catp-Mode: inorder with Accept-Encoding: br sends the page as one brotli stream (what TCP gets), rebuilt exactly under 20% loss', async () => {
    const target = `/${pages[1].name}`;
    const bytes = pages[1].bytes;
    const plain = await (async () => {
      const client = await new CatpClient(server).start();
      try {
        return await client.fetch(target, { mode: 'inorder' });
      } finally {
        client.close();
      }
    })();
    expect(plain.compressed?.brotliFlag).toBe(0);
    // gzip alone is not offered for a stream: the page goes as it is
    for (const [accept, coded] of [['gzip, deflate, br', true], ['gzip', false]] as const) {
      const client = await new CatpClient(server).start();
      try {
        const r = await client.fetch(target, { mode: 'inorder', loss: coded ? 0.2 : 0, seed: 11, acceptEncoding: accept });
        expect((r.bytes as Buffer).equals(bytes)).toBe(true);
        if (coded) {
          expect(r.framesDropped).toBeGreaterThan(0);
          expect(r.compressed?.brotliFlag).toBe(r.framesReceived);
          // fewer frames than the page as it is (counted once each: lost ones went again, some of them twice)
          expect(r.framesDistinct).toBeLessThan(plain.framesDistinct);
        } else {
          expect(r.compressed?.brotliFlag).toBe(0);
          expect(r.framesReceived).toBe(plain.framesReceived);
        }
      } finally {
        client.close();
      }
    }
  });

  test('Catp-Rate is honoured: 10 KB (about 7 KB of compressed frames) at 20,000 B/s takes at least ~0.3 s', async () => {
    const client = await new CatpClient(server).start();
    try {
      const r = await client.fetch('/page10k.html', { rate: 20_000 });
      expect(r.html).toBe(expectedTree(page10k));
      // the rate counts the frames' bytes (compressed): everything after the first burst waits its turn
      expect(r.bytesReceived).toBeGreaterThan(5_000);
      expect(r.bytesReceived).toBeLessThan(page10k.length);
      expect(r.elapsedMs).toBeGreaterThanOrEqual(((r.bytesReceived - 1460) / 20_000) * 1000 * 0.9);
    } finally {
      client.close();
    }
  });

  test('404, non-HTML in catp mode, HEAD, a POST: normal DHTTP answers, no session', async () => {
    const before = server.counters();
    const client = await new CatpClient(server).start();
    try {
      const cm: [string, string][] = [['Catp-Mode', 'catp']];
      const r404 = await client.normalResponse(await client.request('/missing.html', cm));
      expect(r404.status).toBe(404);
      const rTxt = await client.normalResponse(await client.request('/note.txt', cm));
      expect(rTxt.status).toBe(200);
      expect(Buffer.from(rTxt.body).toString()).toBe('plain text, not HTML');
      const rHead = await client.normalResponse(await client.request('/small.html', cm, { method: 'HEAD' }), 'HEAD');
      expect(rHead.status).toBe(200);
      expect(rHead.body.length).toBe(0);
      const rHeadRaw = await client.normalResponse(await client.request('/small.html', [['Catp-Mode', 'inorder']], { method: 'HEAD' }), 'HEAD');
      expect(rHeadRaw.status).toBe(200);
      const rPost = await client.normalResponse(await client.request('/small.html', cm, { method: 'POST' }));
      expect(rPost.status).toBe(421);
      const rUnknown = await client.normalResponse(await client.request('/small.html', [['Catp-Mode', 'bogus']]));
      expect(rUnknown.status).toBe(200);
      expect(client.framesSeen).toBe(0);
    } finally {
      client.close();
    }
    expect(delta(server.counters(), before, 'catpSessions')).toBe(0);
  });

  test('a page CATP cannot encode gets the normal answer, counted (and the failure is cached)', async () => {
    const before = server.counters();
    const client = await new CatpClient(server).start();
    try {
      // The second request comes once the first one's encoding has failed (in the encode worker): it is cached.
      for (let i = 1; i <= 2; i++) {
        await client.request('/deep.html', [['Catp-Mode', 'catp']]);
        await waitFor(() => delta(server.counters(), before, 'catpEncodeErrors') === i, `encode error ${i}`);
      }
      // 15 KB: the normal answer goes over TCP to the announced port (nobody listens there in this test).
      await waitFor(() => delta(server.counters(), before, 'tcpConnectsOpened') + delta(server.counters(), before, 'tcpConnectsReused') === 2, 'normal answers');
      const c = server.counters();
      expect(delta(c, before, 'catpSessions')).toBe(0);
      expect(delta(c, before, 'catpCacheHits')).toBe(1);
      expect(client.framesSeen).toBe(0);
    } finally {
      client.close();
    }
  });

  test('a 304 is never streamed', async () => {
    const client = await new CatpClient(server).start();
    try {
      const first = await client.normalResponse(await client.request('/small.html', []));
      const etag = first.headers.find(([n]) => n.toLowerCase() === 'etag')?.[1] as string;
      const r = await client.normalResponse(await client.request('/small.html', [['Catp-Mode', 'catp'], ['If-None-Match', etag]]));
      expect(r.status).toBe(304);
      expect(client.framesSeen).toBe(0);
    } finally {
      client.close();
    }
  });

  test('a request over TCP (DHTTP stream) gets the normal answer', async () => {
    const before = server.counters();
    const id = newId();
    const http = serializeRequest({ method: 'GET', target: `/${pages[0].name}`, headers: [['Host', 'test'], ['Catp-Mode', 'catp']], body: new Uint8Array(0) });
    const stream = new DhttpResponseStream();
    const res = await new Promise<HttpResponse>((resolve, reject) => {
      const sock = net.connect(server.port, '127.0.0.1', () => sock.write(encodeRequest({ id, otherPort: 40000, resend: false, http })));
      sock.on('error', reject);
      sock.on('data', (d) => {
        stream.push(d);
        const m = stream.next();
        if (m) {
          sock.destroy();
          resolve(m.response);
        }
      });
    });
    expect(res.status).toBe(200);
    expect(Buffer.from(res.body).equals(pages[0].bytes)).toBe(true);
    expect(delta(server.counters(), before, 'catpSessions')).toBe(0);
  });

  test('reports for an unknown ID, or from another address, are counted and ignored', async () => {
    const before = server.counters();
    const client = await new CatpClient(server).start();
    const other = dgram.createSocket('udp4');
    try {
      // A slow session to aim at.
      const started = server.counters().catpSessions;
      const slow = await client.fetch(`/${pages[1].name}`, { rate: 20_000, noWait: true });
      await waitFor(() => server.counters().catpSessions === started + 1, 'session to start');
      const report = (id: Uint8Array) =>
        encodeReport({
          id,
          otherPort: 0,
          complete: true,
          truncated: false,
          pageId: new Uint8Array(8),
          reportNo: 1_000_000,
          total: 0,
          received: 0,
          echoSeq: NO_ECHO,
          echoDelayMs: 0,
          missing: [],
        });
      await client.send(report(newId())); // unknown ID
      await new Promise<void>((r) => other.bind(0, '127.0.0.2', () => r()));
      await new Promise<void>((r, j) => other.send(report(slow.id), server.port, '127.0.0.1', (e) => (e ? j(e) : r()))); // right ID, wrong address
      await waitFor(() => server.counters().catpUnknownReports >= before.catpUnknownReports + 2, 'unknown reports');
      const c = server.counters();
      expect(delta(c, before, 'catpUnknownReports')).toBe(2);
      expect(delta(c, before, 'catpCompleted')).toBe(0); // the "complete" from 127.0.0.2 did not end it
      expect(c.catpActive).toBeGreaterThanOrEqual(1);
      // From the right address, the same report does end the session.
      await client.send(report(slow.id));
      await waitFor(() => server.counters().catpCompleted === before.catpCompleted + 1, 'session to end');
      // A late report for that transfer is not "unknown".
      await client.send(report(slow.id));
      await waitFor(() => server.counters().catpLateReports >= before.catpLateReports + 1, 'late report');
      expect(delta(server.counters(), before, 'catpUnknownReports')).toBe(2);
    } finally {
      other.close();
      client.close();
    }
  });

  test('a repeated request during a session is ignored and counted; a resend with no session starts one', async () => {
    const client = await new CatpClient(server).start();
    try {
      const before = server.counters();
      const id = newId();
      const done = client.fetch(`/${pages[0].name}`, { rate: 20_000, id, loss: 0.1 });
      await waitFor(() => server.counters().catpSessions === before.catpSessions + 1, 'session to start');
      await client.request(`/${pages[0].name}`, [['Catp-Mode', 'catp']], { id, resend: true });
      await client.request(`/${pages[0].name}`, [['Catp-Mode', 'catp']], { id });
      await waitFor(() => server.counters().catpIgnoredRepeats === before.catpIgnoredRepeats + 2, 'repeats ignored');
      const r = await done;
      expect(r.html).toBe(expectedTree(pages[0].bytes));
      await waitFor(() => server.counters().catpCompleted === before.catpCompleted + 1, 'session to complete');
      expect(delta(server.counters(), before, 'catpSessions')).toBe(1);
      expect(client.responses).toHaveLength(0);
      // A repeat after completion is still not served again.
      await client.request(`/${pages[0].name}`, [['Catp-Mode', 'catp']], { id, resend: true });
      await waitFor(() => server.counters().catpIgnoredRepeats === before.catpIgnoredRepeats + 3, 'late repeat ignored');
    } finally {
      client.close();
    }
    // A first request that arrives flagged as a resend (the original was lost) starts a session over UDP.
    const c2 = await new CatpClient(server).start();
    try {
      const r = await c2.fetch(`/${pages[0].name}`, { resend: true });
      expect(r.html).toBe(expectedTree(pages[0].bytes));
      expect(c2.responses).toHaveLength(0);
    } finally {
      c2.close();
    }
  });

  test('garbage reports (0xCA at byte 11, random after) never crash the server and are counted', async () => {
    const client = await new CatpClient(server).start();
    const rng = seededRng(42);
    const rand = (n: number) => Uint8Array.from({ length: n }, () => Math.floor(rng() * 256));
    try {
      const started = server.counters().catpSessions;
      const slow = await client.fetch(`/${pages[1].name}`, { rate: 20_000, noWait: true });
      await waitFor(() => server.counters().catpSessions === started + 1, 'session to start');
      const before = server.counters();
      const N = 1500;
      for (let i = 0; i < N; i++) {
        const len = 12 + Math.floor(rng() * (rng() < 0.1 ? 2000 : 80));
        const b = rand(len);
        if (i % 2 === 0) b.set(slow.id, 0); // half aimed at the live session
        b[11] = 0xca;
        if (i % 3 === 0) {
          b[12] = CATP_VERSION; // version and kind right, so the decoder gets further
          if (len > 13) b[13] = 4;
          if (len > 14) b[14] &= 2; // never "complete"
          b[10] = 0;
          if (i % 6 === 0 && len >= 43) {
            b.fill(0, 15, 23); // page id "nothing received yet"
            b.fill(0, 27, 31); // total unknown: the decoder reaches the ranges
            b[41] = 0;
            b[42] = Math.min(b[42], 20);
          }
        }
        await client.send(b);
      }
      // Every datagram after `before` is a report (the garbage plus the client's own): each is counted once.
      const routed = (c: ServerCounters) => delta(c, before, 'catpUnknownReports') + delta(c, before, 'catpReports') + delta(c, before, 'catpLateReports');
      await waitFor(() => delta(server.counters(), before, 'udpDatagrams') >= N, 'garbage to arrive');
      await waitFor(() => routed(server.counters()) === delta(server.counters(), before, 'udpDatagrams'), 'every report counted').catch((e: Error) => {
        const c = server.counters();
        throw new Error(`${e.message}: ${JSON.stringify({ unknown: delta(c, before, 'catpUnknownReports'), reports: delta(c, before, 'catpReports'), late: delta(c, before, 'catpLateReports'), dg: delta(c, before, 'udpDatagrams'), req: delta(c, before, 'udpRequests'), ign: delta(c, before, 'catpIgnoredRepeats'), mal: c.udpMalformed })}`);
      });
      const c = server.counters();
      expect(delta(c, before, 'catpReports')).toBeGreaterThan(0);
      const bad = Object.values(c.catpBadReports).reduce((a, b) => a + b, 0) - Object.values(before.catpBadReports).reduce((a, b) => a + b, 0);
      expect(bad).toBeGreaterThan(0);
      // Garbage from the session's own (address, ID) is the client's own doing: it may end that session
      // (e.g. poisoned RTT samples exhaust a frame's resend budget), but only as a counted give-up.
      expect(c.catpActive + delta(c, before, 'catpGaveUp') + delta(c, before, 'catpCompleted')).toBeGreaterThanOrEqual(1);
    } finally {
      client.close();
    }
    // Still serving.
    const c2 = await new CatpClient(server).start();
    try {
      const r = await c2.fetch(`/${pages[0].name}`, { loss: 0.2, seed: 5 });
      expect(r.html).toBe(expectedTree(pages[0].bytes));
    } finally {
      c2.close();
    }
  });
});

describe("first contact: an unproven address gets its session's first flight, the rest once the token proves it", () => {
  test.each([
    ['catp', 'split'],
    ['inorder', 'split'],
    ['catp', true],
    ['catp', 'padding'],
    ['catp', 'copy-only'],
    ['inorder', 'copy-only'],
  ] as const)('%s (first contact: %s): the token answer and no more than the address sent before the proof, on the wire; after it, the whole page, exactly', async (mode, pad) => {
    const server = await startServer({ root, rng: seededRng(11) });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      const page = pages[1]; // ~48 KB: far more than a first flight
      // the proof waits 300 ms, so what the server sends unproven has all arrived before it
      const r = await client.fetch(`/${page.name}`, { mode, firstContact: 'answer', proofDelayMs: 300, firstContactPad: pad });
      if (mode === 'catp') expect(r.html).toBe(expectedTree(page.bytes));
      else expect(r.bytes!.equals(page.bytes)).toBe(true);
      const b = r.beforeProof!;
      // the request lost: its copy is the request, and the padding behind it pays for frames as before
      expect(b.requestBytes).toBeGreaterThanOrEqual(pad === 'copy-only' ? STREAM_FIRST_CONTACT_WIRE_BYTES - (STREAM_REQUEST_BYTES + UDP_IPV4_HEADERS) : pad === true ? MIN_UNPROVEN_REQUEST_BYTES + UDP_IPV4_HEADERS : STREAM_FIRST_CONTACT_WIRE_BYTES);
      expect(b.tokenAnswers).toBeGreaterThanOrEqual(1); // (again on its reports while the proof is held back)
      // what is behind the request pays for the token answer and the top of the page, not nothing (a full datagram
      // alone pays for the token answer and less than a full frame)
      if (pad !== true) expect(b.frames).toBeGreaterThanOrEqual(2);
      expect(b.bytes).toBeLessThanOrEqual(b.sentBytes);
      expect(r.framesReceived).toBeGreaterThan(b.frames + 5);
      const c = server.counters();
      expect(c.catpUnprovenStarts).toBe(1);
      expect(c.catpProven).toBe(1);
      expect(c.catpUnprovenExpired).toBe(0);
      expect([c.udpCopiesPaired, c.udpCopiesAsRequests, c.udpPadding]).toEqual(pad === 'split' ? [1, 0, 11] : pad === 'copy-only' ? [0, 1, 11] : pad === 'padding' ? [0, 0, 12] : [0, 0, 0]);
      // every token answer counted arrived, or was held back by the budget (the first flight may use it all)
      expect(c.tokenRetries).toBe(b.tokenAnswers + c.amplificationDropped);
    } finally {
      client.close();
      await server.close();
    }
  });

  test("a stream's first contact in parts: the request alone (160 B) brings the token answer, each padding datagram behind it a frame more; never more than the address sent, on the wire", async () => {
    const server = await startServer({ root, rng: seededRng(15) });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      const page = pages[1];
      const id = await client.request(`/${page.name}`, [['Catp-Mode', 'catp']], { pad: 'first' });
      expect(client.bytesSent).toBe(STREAM_REQUEST_BYTES);
      const res = await client.normalResponse(id);
      expect([res.status, getHeader(res.headers, 'dhttp-retry')]).toEqual([421, 'token']);
      await sleep(200);
      expect(client.framesSeen).toBe(0); // the budget held the frames back
      expect(client.wireSeen).toBeLessThanOrEqual(client.wireSent);
      await client.send(encodePadding(id, client.port, MAX_DATAGRAM_PAYLOAD));
      await waitFor(() => client.framesSeen >= 1, 'the first flight to go on after the padding');
      await sleep(200);
      expect(client.bytesSent).toBe(STREAM_REQUEST_BYTES + MAX_DATAGRAM_PAYLOAD);
      expect(client.wireSeen).toBeLessThanOrEqual(client.wireSent);
      expect(client.wireSeen).toBeGreaterThan(client.wireSent - 1500); // the budget used up to its last frame
      const c = server.counters();
      expect(c.udpPadding).toBe(1);
      expect(c.catpUnprovenStarts).toBe(1);
      // a padding datagram with a byte that is not zero: refused and counted, nothing sent for it
      const bad = encodePadding(id, client.port, 100);
      bad[50] = 1;
      const seen = client.bytesSeen;
      await client.send(bad);
      await waitFor(() => server.counters().udpMalformed.DHTTP_ERR_BAD_PADDING === 1, 'the bad padding counted');
      expect(server.counters().udpPadding).toBe(1);
      await sleep(100);
      expect(client.bytesSeen).toBe(seen);
    } finally {
      client.close();
      await server.close();
    }
  });

  test.each(['copy', 'padding'] as const)("a first contact's %s 40 ms behind its request (a slow uplink): after the proof the initial window is paced at that dispersion, not sent at once", async (second) => {
    const server = await startServer({ root, rng: seededRng(16) });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      const page = pages[2];
      const id = await client.request(`/${page.name}`, [['Catp-Mode', 'catp']], { pad: 'first' });
      const token = getHeader((await client.normalResponse(id)).headers, 'catp-token');
      expect(token).not.toBeNull();
      await sleep(40);
      if (second === 'copy') await client.request(`/${page.name}`, [['Catp-Mode', 'catp']], { id, pad: 'copy-only' });
      else await client.send(encodePadding(id, client.port, MAX_DATAGRAM_PAYLOAD));
      await waitFor(() => server.counters().catpDispersionHints === 1, 'the dispersion taken');
      await sleep(50); // the rest of the first flight (the budget's, unpaced) arrives
      const times: number[] = [];
      client.onFrameSeen = () => times.push(performance.now());
      client.token = token;
      await client.request(`/${page.name}`, [['Catp-Mode', 'catp']], { id }); // the proof
      await waitFor(() => times.length >= 5, 'five frames after the proof', 10_000);
      // ≤ 1,488 B / 40 ms = 37 B/ms (the datagram with its IP and UDP headers): frames of ~1.3 kB go ≥ ~35 ms apart
      // (at once without the hint)
      expect(times[4] - times[0]).toBeGreaterThan(100);
      expect(server.counters().catpProven).toBe(1);
    } finally {
      client.close();
      await server.close();
    }
  });

  test('a copy that overtook its request starts the session and the request behind it is its padding (no dispersion: the pair came reversed); a copy behind a request answered without a stream is not answered again', async () => {
    const server = await startServer({ root, rng: seededRng(17) });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    const answersTo = (id: Uint8Array) => client.responses.filter((d) => idToHex(d.subarray(0, 8)) === idToHex(id)).length;
    try {
      const page = pages[1];
      // the copy alone first: padding right behind it would be a pair sent in order, whose dispersion the server
      // rightly takes when it spans ≥ 2 ms (a busy machine's loopback): only the reversed pair is under test
      const id = await client.request(`/${page.name}`, [['Catp-Mode', 'catp']], { pad: 'copy-alone' });
      await waitFor(() => answersTo(id) === 1, 'the token answer, to the copy');
      await client.request(`/${page.name}`, [['Catp-Mode', 'catp']], { id, pad: 'first' }); // the request, reordered behind it
      for (let i = 0; i < 8; i++) await client.send(encodePadding(id, client.port, FIRST_CONTACT_STEP_BYTES)); // the padding, after it
      await waitFor(() => client.framesSeen >= 1, 'the first frame, the request being padding');
      await sleep(100);
      let c = server.counters();
      expect([c.udpCopiesAsRequests, c.udpCopiesPaired, c.tokenRetries, c.catpUnprovenStarts, c.catpDispersionHints]).toEqual([1, 1, 1, 1, 0]);
      expect(answersTo(id)).toBe(1); // one token answer
      expect(client.wireSeen).toBeLessThanOrEqual(client.wireSent);
      // a page that is not there: answered once (404), its copy taken as padding, not as a second request
      const gone = await client.request('/no-such-page.html', [['Catp-Mode', 'catp']], { pad: 'split' });
      expect((await client.normalResponse(gone)).status).toBe(404);
      await sleep(100);
      c = server.counters();
      expect([c.udpCopiesAsRequests, c.udpCopiesPaired]).toEqual([1, 2]);
      expect(answersTo(gone)).toBe(1);
    } finally {
      client.close();
      await server.close();
    }
  });

  test("the proof's round trip (token answer out, proof back) is the sender's first RTT sample", async () => {
    const server = await startServer({ root, rng: seededRng(14) });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      const page = pages[1];
      // (a report echoing a first-flight frame before the proof would give the sender its first sample instead)
      const r = await client.fetch(`/${page.name}`, { firstContact: 'answer', loseFirstFlight: true });
      expect(r.html).toBe(expectedTree(page.bytes));
      expect(r.beforeProof!.tokenAnswers).toBe(1);
      expect(server.counters().catpProven).toBe(1);
      expect(server.counters().catpHandshakeRtts).toBe(1);
    } finally {
      client.close();
      await server.close();
    }
  });

  test("the token answer lost: the client's reports on its first flight bring it again, and the load completes", async () => {
    const server = await startServer({ root, rng: seededRng(12) });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      const page = pages[1];
      const r = await client.fetch(`/${page.name}`, { firstContact: 'ignore-first' });
      expect(r.html).toBe(expectedTree(page.bytes));
      expect(r.beforeProof!.tokenAnswers).toBe(2);
      expect(r.beforeProof!.frames).toBeGreaterThanOrEqual(1);
      expect(server.counters().catpProven).toBe(1);
      // which of the two token answers the proof answered is unknown: no RTT sample from it
      expect(server.counters().catpHandshakeRtts).toBe(0);
    } finally {
      client.close();
      await server.close();
    }
  });

  test('the token answer lost while the address keeps the budget full (no frame held up by it): the proof, overdue, is asked for again, and the load completes proven', async () => {
    const server = await startServer({ root, rng: seededRng(15), catp: { proofOverdueMs: 100, unprovenTimeoutMs: 2000 } });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      // what a browser's sub-resource requests do before their token: each padded to a full datagram (their small
      // answers take a little of it back), far more than the page
      for (let i = 0; i < 40; i++) await client.request(`/missing-${i}.png`, [], { pad: true });
      await sleep(100);
      const page = pages[1];
      // every frame before the proof lost: the page cannot complete unproven, whatever the budget lets the server send
      const r = await client.fetch(`/${page.name}`, { firstContact: 'ignore-first', loseFirstFlight: true });
      expect(r.html).toBe(expectedTree(page.bytes));
      const c = server.counters();
      expect(r.beforeProof!.tokenAnswers).toBe(2);
      expect([c.catpProven, c.catpUnprovenExpired]).toEqual([1, 0]);
    } finally {
      client.close();
      await server.close();
    }
  });

  test('never proven: the session ends after unprovenTimeoutMs, counted; the address got no more than it sent, on the wire', async () => {
    const server = await startServer({ root, rng: seededRng(13), catp: { unprovenTimeoutMs: 400 } });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      void client.fetch(`/${pages[1].name}`, { firstContact: 'never' }).catch(() => undefined);
      await waitFor(() => server.counters().catpUnprovenExpired === 1, 'the unproven session to expire', 5000);
      const c = server.counters();
      expect(c.catpActive).toBe(0);
      expect(c.catpProven).toBe(0);
      expect(client.framesSeen).toBeGreaterThanOrEqual(1);
      expect(client.wireSeen).toBeLessThanOrEqual(client.wireSent);
      // and nothing more comes (once what was sent before the end has landed: the two share a busy event loop)
      await sleep(100);
      const seen = client.bytesSeen;
      await sleep(300);
      expect(client.bytesSeen).toBe(seen);
    } finally {
      client.close();
      await server.close();
    }
  });

  test('a padded request from an address with sessions waiting already, or an unpadded one: the token answer alone, no frames', async () => {
    const server = await startServer({ root, rng: seededRng(14), catp: { maxUnprovenPerAddress: 1 } });
    const client = await new CatpClient(server, '127.0.0.1').start({ proven: false });
    try {
      void client.fetch(`/${pages[1].name}`, { firstContact: 'never' }).catch(() => undefined);
      await waitFor(() => server.counters().catpUnprovenStarts === 1, 'the first unproven session');
      const padded = await client.request(`/${pages[2].name}`, [['Catp-Mode', 'catp']], { pad: true });
      const unpadded = await client.request(`/${pages[2].name}`, [['Catp-Mode', 'catp']]); // (token null): ~100 B, its answer paid by what the address sent before
      for (const id of [padded, unpadded]) {
        const res = await client.normalResponse(id);
        expect([res.status, getHeader(res.headers, 'dhttp-retry')]).toEqual([421, 'token']);
      }
      await sleep(300);
      expect(server.counters().catpUnprovenStarts).toBe(1);
      expect(client.frameIds.has(idToHex(padded))).toBe(false);
      expect(client.frameIds.has(idToHex(unpadded))).toBe(false);
    } finally {
      client.close();
      await server.close();
    }
  });
});

describe('CATP limits and shutdown', () => {
  test('maxSessions exceeded: the normal answer, counted as catpRefused', async () => {
    const server = await startServer({ root, rng: seededRng(3), catp: { maxSessions: 1 } });
    const client = await new CatpClient(server).start();
    const c2 = await new CatpClient(server).start();
    try {
      await client.fetch(`/${pages[1].name}`, { rate: 20_000, noWait: true });
      await waitFor(() => server.counters().catpActive === 1, 'session to start');
      const id = await c2.request('/small.html', [['Catp-Mode', 'catp']]);
      const res = await c2.normalResponse(id);
      expect(res.status).toBe(200);
      expect(Buffer.from(res.body).toString()).toContain('small page');
      const c = server.counters();
      expect(c.catpRefused).toBe(1);
      expect(c.catpSessions).toBe(1);
      expect(c2.framesSeen).toBe(0);
    } finally {
      client.close();
      c2.close();
      await server.close();
    }
  });

  test("maxSessionsPerAddress: one address's sessions beyond its share are asked to resend over TCP; another address still gets frames", async () => {
    const server = await startServer({ root, rng: seededRng(3), catp: { maxSessionsPerAddress: 2 } });
    const greedy = await new CatpClient(server, '127.0.9.9').start();
    const other = await new CatpClient(server).start();
    try {
      // two sessions that never report (a silent peer): they stay in the table
      for (let i = 0; i < 2; i++) await greedy.request(`/${pages[1].name}`, [['Catp-Mode', 'catp']]);
      await waitFor(() => server.counters().catpActive === 2, 'two sessions');
      const third = await greedy.request(`/${pages[1].name}`, [['Catp-Mode', 'catp']]);
      const res = await greedy.normalResponse(third);
      expect(res.status).toBe(421);
      expect(getHeader(res.headers, 'dhttp-retry')).toBe('tcp');
      expect(server.counters().catpRefusedPerAddress).toBe(1);
      await other.request('/small.html', [['Catp-Mode', 'catp']]);
      await waitFor(() => other.framesSeen > 0, 'frames for the other address');
    } finally {
      greedy.close();
      other.close();
      await server.close();
    }
  });

  test('enabled: false answers Catp-Mode requests normally', async () => {
    const server = await startServer({ root, rng: seededRng(3), catp: { enabled: false } });
    const client = await new CatpClient(server).start();
    try {
      const res = await client.normalResponse(await client.request('/small.html', [['Catp-Mode', 'catp']]));
      expect(res.status).toBe(200);
      expect(server.counters().catpSessions).toBe(0);
    } finally {
      client.close();
      await server.close();
    }
  });

  test('close() during sessions stops them and clears the timer', async () => {
    const server = await startServer({ root, rng: seededRng(3), catp: { rateBytesPerSec: 20_000, maxRateBytesPerSec: 20_000 } });
    const clients = await Promise.all([0, 1, 2].map(() => new CatpClient(server).start()));
    try {
      for (const c of clients) await c.fetch(`/${pages[2].name}`, { noWait: true });
      await waitFor(() => server.counters().catpActive === 3 && clients.every((x) => x.framesSeen > 0), 'three sessions');
      expect(server.counters().catpTimers).toBe(1);
      await server.close();
      const c = server.counters();
      expect(c.catpActive).toBe(0);
      expect(c.catpTimers).toBe(0);
      await sleep(20); // frames already on the wire
      const seen = clients.map((x) => x.framesSeen);
      await sleep(100);
      expect(clients.map((x) => x.framesSeen)).toEqual(seen); // nothing sent after close
    } finally {
      for (const c of clients) c.close();
      await server.close();
    }
  });

  test('bad catp options are refused before anything is bound', async () => {
    await expect(startServer({ root, catp: { rateBytesPerSec: 10 } })).rejects.toThrow(/rateBytesPerSec/);
    await expect(startServer({ root, catp: { maxSessions: -1 } })).rejects.toThrow(/maxSessions/);
  });
});

describe('encoding a page off the server thread', () => {
  // ~1 MB of real HTML when the corpus is there: encoding it takes the better part of a second or more.
  const BIG = path.join(REAL, 'wikipedia-2.html');

  test("a cold page's first request: others are answered meanwhile, the fast copy is served, the best replaces it", async () => {
    const big = existsSync(BIG) ? readFileSync(BIG) : Buffer.from(generatedPage(5, 3000));
    await fsp.writeFile(path.join(root, 'big.html'), big);
    const server = await startServer({ root, rng: seededRng(11) });
    const c1 = await new CatpClient(server).start();
    const c2 = await new CatpClient(server).start();
    try {
      const first = c1.fetch('/big.html');
      // While the worker encodes, the server's thread answers a plain request; frames of the big page come later.
      await waitFor(() => server.counters().catpCacheMisses === 1, 'the big page to be requested');
      const id = await c2.request('/small.html', []);
      const small = await c2.normalResponse(id);
      expect(small.status).toBe(200);
      expect(c1.framesSeen).toBe(0);
      const r1 = await first;
      expect(r1.html).toBe(expectedTree(big));
      let c = server.counters();
      expect(c.catpEncodesFast).toBe(1);
      // The best-quality copy follows in the background and replaces the fast one in the cache.
      await waitFor(() => server.counters().catpEncodesBest === 1, 'the best-quality encoding', 150_000);
      const r2 = await c2.fetch('/big.html');
      expect(r2.html).toBe(expectedTree(big));
      c = server.counters();
      expect(c.catpCacheHits).toBe(1);
      expect(c.catpEncodesFast).toBe(1);
      expect(r2.bytesReceived).toBeLessThan(r1.bytesReceived);
      expect(c.catpEncoderCrashes).toBe(0);
    } finally {
      c1.close();
      c2.close();
      await server.close();
    }
  }, 180_000);

  test("a resend that comes while the server still encodes the page is not a loss: the client's prefix keeps small answers on UDP", async () => {
    // The lab's warm-up met this: a best-quality first encode outlasts the client's 300 ms resend timer, and the
    // resend put the client's whole /24 in high-loss mode, so every small answer of the next loads went over TCP.
    const big = existsSync(BIG) ? readFileSync(BIG) : Buffer.from(generatedPage(5, 3000));
    await fsp.writeFile(path.join(root, 'big.html'), big);
    const server = await startServer({ root, rng: seededRng(12), catp: { coldEncode: 'best' } });
    const c1 = await new CatpClient(server).start();
    try {
      const id = newId();
      const first = c1.fetch('/big.html', { id });
      await waitFor(() => server.counters().catpCacheMisses === 1, 'the big page to be requested');
      await c1.request('/big.html', [['Catp-Mode', 'catp']], { id, resend: true });
      await waitFor(() => server.counters().resentRequests === 1, 'the resend seen');
      expect(server.counters().catpEncodesBest).toBe(0); // it came while the page was being encoded
      const r1 = await first;
      expect(r1.html).toBe(expectedTree(big));
      const c = server.counters();
      expect(c.resentRequests).toBe(1);
      expect(c.channel.resentUnanswered).toBe(1);
      expect(c.channel.resent).toBe(0);
      expect(c.channel.highLossMode).toBe(false);
      // a small answer to the same client goes over UDP (in high-loss mode, 99 of 100 would go over TCP)
      const small = await c1.request('/small.html', []);
      expect((await c1.normalResponse(small)).status).toBe(200);
      // A resend of a request already answered is a loss, as before, once it comes later than the path's round trip
      // after the answer (the session's samples on this busy loopback: ~170 ms); one sooner is early and answered
      // again. Resent as a client backs off, until one counts.
      for (let wait = 100, sent = 1; server.counters().channel.resent === 0 && wait <= 6400; wait *= 2) {
        await sleep(wait);
        await c1.request('/small.html', [], { id: small, resend: true });
        sent++;
        await waitFor(() => server.counters().resentRequests === sent, 'the resend seen');
      }
      expect(server.counters().channel.resent).toBe(1);
      expect(server.counters().channel.highLossMode).toBe(true);
    } finally {
      c1.close();
      await server.close();
    }
  }, 180_000);
});

describe("a small answer's resend that comes sooner than the path's round trip (channel-choice.ts: early resends)", () => {
  test('is answered over UDP again and not counted as a loss; the path round trip is what the stream measured', async () => {
    const server = await startServer({ root, rng: seededRng(13) });
    const c1 = await new CatpClient(server).start();
    try {
      // A stream whose reports come back 400 ms late: the server measures a round trip of at least that.
      const r = await c1.fetch(`/${pages[0].name}`, { reportDelayMs: 400 });
      expect(r.html).toBe(expectedTree(pages[0].bytes));
      const small = await c1.request('/small.html', []);
      expect((await c1.normalResponse(small)).status).toBe(200);
      const answers = () => c1.responses.filter((d) => idToHex(d.subarray(0, 8)) === idToHex(small)).length;
      // Resent right away, as a client whose timer is shorter than the path's queue: the answer comes again by UDP.
      await c1.request('/small.html', [], { id: small, resend: true });
      await waitFor(() => answers() === 2, 'the answer again, over UDP');
      let c = server.counters();
      expect(c.channel.resentEarly).toBe(1);
      expect(c.channel.resent).toBe(0);
      expect(c.channel.highLossMode).toBe(false);
      expect(c.tcpConnectsOpened).toBe(0);
      // Later than the round trip after the latest answer: a loss, as the DHTTP paper counts it, answered over TCP.
      await sleep(1500);
      await c1.request('/small.html', [], { id: small, resend: true });
      await waitFor(() => server.counters().channel.resent === 1, 'the resend counted');
      await waitFor(() => server.counters().tcpConnectsOpened === 1, 'the answer over a connection the server opens');
      c = server.counters();
      expect(c.channel.resentEarly).toBe(1);
      expect(c.channel.highLossMode).toBe(true);
    } finally {
      c1.close();
      await server.close();
    }
  }, 30_000);
});
