/**
 * Stream loads in the protocol layer (protocol/catp/stream-load.ts), alone and as the DHTTP client runs them for a
 * request made with `stream`: frames in any order with their times, reports out as the client's actions, one
 * `nextTimerAt`, the ID kept a tail after completion, kernel receive times passed in reaching the frame records.
 * Sans-IO: a fake clock and an in-memory pipe, no sockets.
 */
import * as parse5 from 'parse5';
import {
  createSender,
  decodeReport,
  encodePage,
  encodeRaw,
  HEADER_BYTES,
  parse5TreeBuilder,
  StreamLoad,
  STREAM_TAIL_MS,
  unpackPayload,
  type CatpEvent,
  type FrameRecord,
  type StreamEvent,
  type StreamSummary,
} from '../../../protocol/catp';
import { DhttpClient, decodeRequest, hexToId, isPaddingDatagram, isRequestCopy, type ClientAction, type ClientEvent } from '../../../protocol/dhttp';
import { codec, kindOf, rng, scramble, seqOf, sha256 } from '../../helpers/catp-util';
import { drainClient as drain } from '../protocol/helpers/pipe';

const HTML = `<!DOCTYPE html><title>t</title><body>${Array.from({ length: 24 }, (_, i) => `<p id="p${i}">paragraph ${i}: ${'lorem ipsum dolor sit amet '.repeat(12)}</p>`).join('\n')}</body>`;
const WANT = parse5.serialize(parse5.parse(HTML, { scriptingEnabled: false }));
// small frames: several index frames interleaved with the data frames
const PAGE = encodePage(HTML, { sha256, codec, maxPayload: 400 });
const ID = new Uint8Array([0x80, 9, 8, 7, 6, 5, 4, 3]);
const SERVER = { address: '10.0.0.1', port: 8080 };
const URL = 'dhttp://10.0.0.1:8080/page.html';
/** CLOCK_REALTIME when the request left, in the tests' kernel times. */
const SENT_NS = 1_700_000_000_000_000_000n;

const withId = (frames: Uint8Array[], id: Uint8Array): Uint8Array[] =>
  frames.map((f) => {
    const g = f.slice();
    g.set(id, 0);
    return g;
  });

const treeOf = (events: readonly StreamEvent[]): string => {
  const b = parse5TreeBuilder();
  for (const e of events) b.apply(e as CatpEvent);
  return b.root ? parse5.serialize(b.root) : '';
};

type Ev<T extends ClientEvent['type']> = Extract<ClientEvent, { type: T }>;
const sends = (actions: ClientAction[]) => actions.filter((a): a is Extract<ClientAction, { type: 'send-datagram' }> => a.type === 'send-datagram');
/** A CATP report, not an HTTP request: byte 11 is the CATP magic. */
const isReport = (d: Uint8Array) => d[11] === 0xca;


function newClient(): DhttpClient {
  return new DhttpClient({ udpPort: 40000, tcpPort: 40001, catp: { sha256, codec } });
}

describe('StreamLoad alone', () => {
  test.each([
    ['in send order', (f: Uint8Array[]) => f],
    ['in reverse', (f: Uint8Array[]) => [...f].reverse()],
    ['scrambled, with duplicates', (f: Uint8Array[]) => scramble(f, rng(7), 0.3)],
  ])('frames %s: the page completes once; each record names its frame, its times and what it made displayable', (_name, order) => {
    const load = new StreamLoad({ mode: 'catp', requestId: ID, otherPort: 40001, sha256, codec, sentAtMs: 100, sentRealtimeNs: SENT_NS });
    const frames = order(withId(PAGE.frames, ID));
    const events: StreamEvent[] = [];
    const ends: string[] = [];
    frames.forEach((f, i) => {
      const now = 110 + i;
      const { record, step } = load.receive(f, now, SENT_NS + BigInt(i) * 1_000_000n + 500_000n);
      events.push(...step.events);
      if (step.ended) ends.push(step.ended.outcome);
      expect(record).toMatchObject({ atMs: now - 100, kernelAtMs: i + 0.5, bytes: f.length, seq: seqOf(f), kind: kindOf(f) === 1 ? 'index' : 'data' });
      if (!record.accepted) expect(record.code).toBe('CATP_DUPLICATE');
      expect(record.displayable.map((d) => d.type)).toEqual(step.events.map((e) => e.type));
    });
    expect(ends).toEqual(['complete']);
    expect(treeOf(events)).toBe(WANT);
    // the final "complete" report is queued with the rest
    const reports: Uint8Array[] = [];
    for (let r = load.nextReport(); r !== null; r = load.nextReport()) reports.push(r);
    expect(reports.some((r) => decodeReport(r).complete)).toBe(true);
    const s = load.summary();
    expect(s).toMatchObject({ mode: 'catp', frames: frames.length, firstFrameAtMs: 110, lastFrameAtMs: 110 + frames.length - 1 });
    expect(s.blocks?.total).toBe(PAGE.frames.length - PAGE.indexFrames);
    expect(s.blocks?.received).toHaveLength(PAGE.frames.length - PAGE.indexFrames);
  });

  test('a report\'s echo delay runs from the kernel\'s receive time: frames that waited behind a busy client do not lengthen the sender\'s RTT sample', () => {
    const echoAfter = (rxNs: bigint | null) => {
      const load = new StreamLoad({ mode: 'catp', requestId: ID, otherPort: 40001, sha256, codec, sentAtMs: 100, sentRealtimeNs: SENT_NS });
      const frames = withId(PAGE.frames, ID);
      // handed over at 140 on the caller's clock (a batch the client was busy with)
      load.receive(frames[0], 140, rxNs);
      load.receive(frames[1], 140, rxNs);
      const reports: Uint8Array[] = [];
      for (let r = load.nextReport(); r !== null; r = load.nextReport()) reports.push(r);
      expect(reports.length).toBeGreaterThan(0);
      return decodeReport(reports[reports.length - 1]).echoDelayMs;
    };
    // the kernel had both 10 ms after the request: 110 on the caller's clock, 30 ms before the report
    expect(echoAfter(SENT_NS + 10_000_000n)).toBeCloseTo(30, 3);
    // no kernel time: from the handing over
    expect(echoAfter(null)).toBe(0);
    // a stepped realtime clock is believed no further than a second back, and never ahead
    expect(echoAfter(SENT_NS - 86_400_000_000_000n)).toBeCloseTo(1000, 3);
    expect(echoAfter(SENT_NS + 86_400_000_000_000n)).toBe(0);
  });

  test('the report timer starts with the first frame; after the end only the tail keeps the load', () => {
    const load = new StreamLoad({ mode: 'catp', requestId: ID, otherPort: 40001, sha256, codec, sentAtMs: 0, sentRealtimeNs: null });
    expect(load.nextTimerAt()).toBeNull();
    const frames = withId(PAGE.frames, ID);
    const first = load.receive(frames[0], 10, null);
    expect(first.record.kernelAtMs).toBeNull();
    expect(load.nextTimerAt()).not.toBeNull();
    let endAt = -1;
    frames.slice(1).forEach((f, i) => {
      if (load.receive(f, 11 + i, null).step.ended) endAt = 11 + i;
    });
    expect(endAt).toBeGreaterThan(0);
    expect(load.drained(endAt + STREAM_TAIL_MS - 1)).toBe(false);
    expect(load.drained(endAt + STREAM_TAIL_MS)).toBe(true);
    expect(load.nextTimerAt()).toBeLessThanOrEqual(endAt + STREAM_TAIL_MS);
  });

  test('in-order mode: raw frames extend the prefix; a frame past a gap is held until the gap fills', () => {
    const raw = encodeRaw(new TextEncoder().encode(HTML), { sha256, maxPayload: 300 });
    const frames = withId(raw.frames, ID);
    const load = new StreamLoad({ mode: 'inorder', requestId: ID, otherPort: 40001, sha256, sentAtMs: 0, sentRealtimeNs: null });
    const second = load.receive(frames[1], 1, null);
    expect(second.record).toMatchObject({ seq: 1, kind: 'raw', accepted: true, displayable: [] });
    const firstRec = load.receive(frames[0], 2, null).record;
    expect(firstRec.displayable).toEqual([{ type: 'prefix-extended', length: expect.any(Number) as number, total: HTML.length }]);
    let ended: string | undefined;
    for (const f of frames.slice(2)) ended = load.receive(f, 3, null).step.ended?.outcome ?? ended;
    expect(ended).toBe('complete');
    expect(load.summary().blocks).toBeNull();
  });
});

/**
 * A streamed request through the DHTTP client and a repairing sender, over an in-memory link that drops,
 * delays and reorders (quiche's Pipe, with the client's own actions and its one timer). Every datagram reaches
 * the client with a kernel receive time 0.25 ms before it is handed over.
 */
function load(seed: number, loss: number) {
  const r = rng(seed);
  const c = newClient();
  const id = c.request({ url: URL, headers: [['Catp-Mode', 'catp']], stream: { mode: 'catp', sentRealtimeNs: SENT_NS } }, 0);
  const first = drain(c);
  const request = sends(first.actions);
  // a first contact: the request, its padded copy and padding datagrams, a quarter datagram each (address-validation.ts)
  expect(request).toHaveLength(13);
  expect(isRequestCopy(request[1].data)).toBe(true);
  expect(request.slice(2).every((a) => isPaddingDatagram(a.data))).toBe(true);
  const sender = createSender(PAGE, { requestId: decodeRequest(request[0].data).id, rateFramesPerSec: 2000, initialRttMs: 30 });
  const inflight: Array<{ at: number; down: boolean; bytes: Uint8Array }> = [];
  const put = (down: boolean, bytes: Uint8Array, now: number) => {
    if (r() < loss) return;
    inflight.push({ at: now + 10 + r() * 8, down, bytes });
  };
  const events: Array<{ at: number; e: ClientEvent }> = [];
  const reports: Array<{ at: number; to: unknown; data: Uint8Array }> = [];
  let forgotAt: number | null = null;
  let now = 0;
  const take = () => {
    const { actions, events: evs } = drain(c);
    for (const a of actions) {
      if (a.type === 'forget-id') forgotAt = now;
      if (a.type === 'send-datagram' && isReport(a.data)) {
        reports.push({ at: now, to: a.to, data: a.data });
        put(false, a.data, now);
      }
    }
    for (const e of evs) events.push({ at: now, e });
  };
  for (let i = 0; i < 200_000 && forgotAt === null; i++) {
    for (let d = sender.nextDatagram(now); d; d = sender.nextDatagram(now)) put(true, d, now);
    inflight.sort((a, b) => a.at - b.at);
    while (inflight.length > 0 && inflight[0].at <= now) {
      const m = inflight.shift() as (typeof inflight)[number];
      if (m.down) c.receiveDatagram(m.bytes, SERVER, now, SENT_NS + BigInt(Math.round((now - 0.25) * 1e6)));
      else sender.receiveReport(m.bytes, now);
      take();
    }
    const t = c.nextTimerAt();
    if (t !== null && t <= now) {
      c.handleTimer(now);
      take();
    }
    const next = [sender.finished ? null : sender.nextTimerAt(), c.nextTimerAt(), inflight[0]?.at ?? null].filter((x): x is number => x !== null);
    if (next.length === 0) break;
    now = Math.max(now + 1e-6, Math.min(...next));
  }
  return { c, id, events, reports, forgotAt: forgotAt as number | null };
}

describe('the DHTTP client runs the load of a streamed request', () => {
  test.each([
    [1, 0],
    [2, 0.15],
    [3, 0.3],
  ])('seed %i, loss %f: the page completes in the frames\' events; reports go to the server as actions; the ID goes a tail later', (seed, loss) => {
    const { c, id, events, reports, forgotAt } = load(seed, loss);
    const frames = events.filter((x): x is { at: number; e: Ev<'stream-frame'> } => x.e.type === 'stream-frame');
    const done = events.filter((x): x is { at: number; e: Ev<'stream-complete'> } => x.e.type === 'stream-complete');
    expect(events.filter((x) => x.e.type === 'stream-failed' || x.e.type === 'request-failed' || x.e.type === 'resend')).toEqual([]);
    expect(done).toHaveLength(1);
    expect(treeOf(frames.flatMap((x) => x.e.events))).toBe(WANT);
    // the last useful frame came with the completion, and its report said "complete" before the event went up
    const completeAt = done[0].at;
    expect(reports.some((x) => x.at === completeAt && decodeReport(x.data).complete)).toBe(true);
    for (const x of reports) {
      expect(x.to).toEqual({ host: '10.0.0.1', port: 8080 });
      expect(decodeReport(x.data).id).toEqual(hexToId(id));
    }
    // every record carries the receive time it came with (0.25 ms before it was handed over)
    for (const x of frames) {
      expect(x.e.record.atMs).toBeCloseTo(x.at, 6);
      expect(x.e.record.kernelAtMs as number).toBeCloseTo(x.at - 0.25, 5);
    }
    const summary: StreamSummary = done[0].e.summary;
    expect(summary.frames).toBe(frames.length);
    expect(done[0].e.atMs).toBe(completeAt);
    // the ID stays for the tail (a lost "complete" report is repeated only when frames keep coming), then goes
    expect(forgotAt).toBeGreaterThanOrEqual(completeAt + STREAM_TAIL_MS);
    expect(forgotAt).toBeLessThan(completeAt + STREAM_TAIL_MS + 1);
    expect(c.outstanding).toBe(0);
    expect(c.nextTimerAt()).toBeNull();
  });

  test('a kernel receive time passed to receiveDatagram reaches the frame record (and none gives null)', () => {
    const c = newClient();
    const id = c.request({ url: URL, stream: { mode: 'catp', sentRealtimeNs: SENT_NS } }, 1000);
    drain(c);
    const frames = withId(PAGE.frames, hexToId(id));
    c.receiveDatagram(frames[0], SERVER, 1042, SENT_NS + 41_250_000n);
    c.receiveDatagram(frames[1], SERVER, 1043);
    const recs = drain(c).events.filter((e): e is Ev<'stream-frame'> => e.type === 'stream-frame').map((e) => e.record);
    expect(recs.map((r: FrameRecord) => [r.atMs, r.kernelAtMs, r.seq])).toEqual([[42, 41.25, 0], [43, null, 1]]);
  });

  test("block reuse: the index's blocks come out once; blocks filled from a store are local fills, never counted as received", () => {
    const c = newClient();
    const id = c.request({ url: URL, stream: { mode: 'catp' } }, 0);
    drain(c);
    const frames = withId(PAGE.frames, hexToId(id));
    const index = frames.filter((f) => kindOf(f) === 1);
    const data = frames.filter((f) => kindOf(f) === 2);
    index.forEach((f, i) => c.receiveDatagram(f, SERVER, 1 + i));
    const known = drain(c).events.filter((e): e is Ev<'stream-blocks-known'> => e.type === 'stream-blocks-known');
    expect(known).toHaveLength(1);
    const blocks = known[0].blocks;
    expect(blocks).toHaveLength(data.length);
    // the store holds every other block
    const held = new Map(blocks.filter((b) => b.block % 2 === 0).map((b) => [b.block, unpackPayload(frames[b.seq].subarray(HEADER_BYTES), codec)]));
    expect(c.fillLocal(id, held, 50)).toBe(true);
    const fill = drain(c).events;
    expect(fill[0]).toMatchObject({ type: 'stream-local-fill', requestId: id });
    const filled = (fill[0] as Ev<'stream-local-fill'>).events.filter((e) => e.type === 'block-filled');
    expect(filled.map((e) => (e as Extract<CatpEvent, { type: 'block-filled' }>).local)).toEqual([...held.keys()].map(() => true));
    // the network copies of the held blocks first (this sender did not hold them), then the rest
    const heldSeqs = new Set(blocks.filter((b) => held.has(b.block)).map((b) => b.seq));
    const order = [...data.filter((f) => heldSeqs.has(seqOf(f))), ...data.filter((f) => !heldSeqs.has(seqOf(f)))];
    for (const f of order) c.receiveDatagram(f, SERVER, 60);
    const rest = drain(c).events;
    const done = rest.find((e): e is Ev<'stream-complete'> => e.type === 'stream-complete');
    expect(done).toBeDefined();
    const b = done?.summary.blocks;
    expect(b?.local.reused).toBe(held.size);
    expect(b?.local.arrivedAnyway).toBe(held.size);
    expect(b?.received).toHaveLength(blocks.length - held.size);
    expect(b?.reuseAcked).toBe(false);
  });

  test('a stalled load fails: the failure is an event and the ID is released at once', () => {
    const c = newClient();
    const id = c.request({ url: URL, stream: { mode: 'catp' } }, 0);
    drain(c);
    c.receiveDatagram(withId(PAGE.frames, hexToId(id))[0], SERVER, 5);
    drain(c);
    let failed: Ev<'stream-failed'> | undefined;
    let forgot = false;
    for (let t = c.nextTimerAt(); t !== null && failed === undefined; t = c.nextTimerAt()) {
      c.handleTimer(t);
      const { actions, events } = drain(c);
      failed = events.find((e): e is Ev<'stream-failed'> => e.type === 'stream-failed');
      forgot = actions.some((a) => a.type === 'forget-id');
    }
    expect(failed).toMatchObject({ requestId: id, code: 'CATP_ERR_STALLED' });
    expect(forgot).toBe(true);
    expect(c.outstanding).toBe(0);
    expect(c.nextTimerAt()).toBeNull();
  });

  test('a stream load needs the injected hash', () => {
    const c = new DhttpClient({ udpPort: 1, tcpPort: 2 });
    expect(() => c.request({ url: URL, stream: { mode: 'catp' } }, 0)).toThrow(expect.objectContaining({ code: 'DHTTP_ERR_BAD_OPTIONS' }));
  });
});
