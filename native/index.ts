// Typed wrapper around the catp_native addon (native/src): one UDP socket + one listening TCP socket +
// the table of outstanding 8-byte request IDs, with kernel receive timestamps and counters.
//
// Semantics worth knowing (the addon's own comments have the details):
// - Delivery: everything that arrives in one event-loop iteration (a UDP burst, TCP reads, ICMP errors,
//   connection events) reaches `onIncoming` as ONE array, in arrival order per source. Never called
//   synchronously from a method: even a connect() that fails at once reports `tcp-closed` later.
// - Only datagrams whose first 8 bytes are an outstanding ID (expect()) are delivered; the rest are
//   counted (udpUnmatched / udpMalformed: shorter than 8 bytes or longer than 2048 bytes) and dropped.
// - Inbound TCP (opened by a server to our tcpPort) is admitted only if its first 8 bytes are an
//   outstanding ID within acceptDeadlineMs; then `tcp-open` (inbound: true) and the bytes, ID included.
// - `tcp-closed` comes exactly once for every connection that was reported open or returned by
//   connect(), also after closeConnection() (graceful: queued bytes are flushed first). After
//   closeConnection() no more `tcp-data` is read from that connection.
// - sendDatagram() never queues: a full socket buffer throws NativeError code 'EAGAIN'.
// - sendTcp() queues what the kernel does not take (at most 64 MiB per connection, then
//   'NATIVE_ERR_QUEUE_FULL'); write errors close the connection and arrive as `tcp-closed` with error.
//   On a connection that is unknown or already closed it throws 'NATIVE_ERR_NO_CONNECTION' (this can
//   race a `tcp-closed` that is about to be delivered), on one being closed 'NATIVE_ERR_CONNECTION_CLOSING'.
// - An open endpoint keeps the process alive, like a listening server; close() releases everything and
//   drops events not yet delivered. Every method but close() then throws 'NATIVE_ERR_CLOSED'.
// - If onIncoming throws, the exception is caught here and reported with process.emitWarning
//   (type 'CatpNativeCallbackWarning', its message and stack in the warning); the endpoint keeps running and
//   the rest of that batch is not redelivered.
import * as fs from 'node:fs';
import * as path from 'node:path';

export type Family = 4 | 6;
export interface Peer { address: string; port: number; family: Family }
export type Incoming =
  | { kind: 'datagram'; data: Buffer /* whole datagram, first 8 bytes = ID */; peer: Peer; rxNs: bigint }
  | { kind: 'tcp-open'; conn: number; peer: Peer; inbound: boolean }
  | { kind: 'tcp-data'; conn: number; data: Buffer; rxNs: bigint }
  | { kind: 'tcp-closed'; conn: number; error?: { code: string; errno: number; message: string } }
  | { kind: 'icmp-unreachable'; peer: Peer; errno: number; code: string };
export interface EndpointOptions { host?: string; acceptDeadlineMs?: number; maxPendingConnections?: number; recvBatch?: number }
export interface EndpointCounters {
  udpReceived: number; udpMatched: number; udpUnmatched: number; udpMalformed: number; kernelDrops: number;
  icmpErrors: number; udpSent: number; tcpAccepted: number; tcpRejected: number; tcpConnected: number;
  tcpBytesReceived: number; tcpBytesSent: number; batches: number; tcpTimestampFallback: number;
}

export class NativeError extends Error {
  readonly code: string;
  readonly errno?: number;
  readonly syscall?: string;

  constructor(code: string, message: string, errno?: number, syscall?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'NativeError';
    this.code = code;
    if (errno !== undefined) this.errno = errno;
    if (syscall !== undefined) this.syscall = syscall;
  }
}

// ----- loading -----------------------------------------------------------------------------------

type Dispatch = (ints: Int32Array, ts: BigInt64Array, data: Buffer | undefined, objs: unknown[]) => void;

interface RawEndpoint {
  address(): { host: string; udpPort: number; tcpPort: number };
  expect(id: Uint8Array): void;
  forget(id: Uint8Array): void;
  outstanding(): number;
  sendDatagram(data: Uint8Array, address: string, port: number): void;
  connect(address: string, port: number): number;
  sendTcp(conn: number, data: Uint8Array): void;
  closeConnection(conn: number): void;
  counters(): EndpointCounters;
  close(): void;
}

interface Binding {
  Endpoint: new (options: EndpointOptions, dispatch: Dispatch) => RawEndpoint;
  realtimeNs(): bigint;
  monotonicNs(): bigint;
  setErrorFactory(make: (code: string, message: string, errno?: number, syscall?: string) => Error): void;
  /** libbrotli's decoder (native/src/brotli.cc), when the addon was built with it. */
  brotli?: { available: boolean; decode?: (bytes: Uint8Array, maxBytes: number) => Uint8Array };
}

/** The directory holding package.json, walking up from this file (works from source and from dist/). */
export function packageRoot(start: string = __dirname): string {
  let dir = start;
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return start;
    dir = parent;
  }
}

/** Where the addon is expected: <package root>/build/Release/catp_native.node. */
export function addonPath(): string {
  return path.join(packageRoot(), 'build', 'Release', 'catp_native.node');
}

let binding: Binding | undefined;

function load(): Binding {
  if (binding !== undefined) return binding;
  const file = addonPath();
  if (!fs.existsSync(file)) {
    throw new NativeError('NATIVE_ERR_ADDON_MISSING',
      `The native transport addon is not built (${file} is missing). Run \`npm install\` ` +
      '(or `npx node-gyp rebuild`) in the project root.');
  }
  const mod = { exports: {} as Binding };
  try {
    process.dlopen(mod, file);
  } catch (err) {
    throw new NativeError('NATIVE_ERR_ADDON_LOAD',
      `The native transport addon at ${file} failed to load: ${(err as Error).message}. ` +
      'Rebuild it with `npm install` (or `npx node-gyp rebuild`).', undefined, undefined, { cause: err });
  }
  mod.exports.setErrorFactory((code, message, errno, syscall) => new NativeError(code, message, errno, syscall));
  binding = mod.exports;
  return binding;
}

/** CLOCK_REALTIME in nanoseconds: the clock kernel receive timestamps (rxNs) use. */
export function realtimeNs(): bigint {
  return load().realtimeNs();
}

/**
 * libbrotli's one-call decoder for a CATP frame's payload (at most `maxBytes` out; a corrupt, cut or oversized stream,
 * or bytes after its end, throw NativeError 'NATIVE_ERR_BROTLI'), or null when the addon was built without libbrotli's
 * headers (Debian: libbrotli-dev) or is not built: then Node's decoder is the one to use.
 */
export function nativeBrotliDecode(): ((bytes: Uint8Array, maxBytes: number) => Uint8Array) | null {
  let b: Binding;
  try {
    b = load();
  } catch {
    return null;
  }
  return b.brotli?.available === true && typeof b.brotli.decode === 'function' ? b.brotli.decode : null;
}

/** CLOCK_MONOTONIC in nanoseconds. */
export function monotonicNs(): bigint {
  return load().monotonicNs();
}

// ----- decoding one crossing ---------------------------------------------------------------------

// Must match EventKind in native/src/endpoint.h. Six int32 per event.
const EV_DATAGRAM = 0;
const EV_TCP_OPEN = 1;
const EV_TCP_DATA = 2;
const EV_TCP_CLOSED = 3;
const EV_ICMP = 4;
const INTS = 6;

function decode(ints: Int32Array, ts: BigInt64Array, data: Buffer | undefined, objs: unknown[]): Incoming[] {
  const n = ts.length;
  const out: Incoming[] = new Array<Incoming>(n);
  const peers = new Map<number, Peer>();
  const peer = (i: number): Peer => {
    let p = peers.get(i);
    if (p === undefined) {
      p = { address: objs[i] as string, port: objs[i + 1] as number, family: objs[i + 2] as Family };
      peers.set(i, p);
    }
    return p;
  };
  const bytes = (off: number, len: number): Buffer => (data as Buffer).subarray(off, off + len);
  for (let e = 0, k = 0; e < n; e++, k += INTS) {
    switch (ints[k]) {
      case EV_DATAGRAM:
        out[e] = { kind: 'datagram', data: bytes(ints[k + 2], ints[k + 3]), peer: peer(ints[k + 1]), rxNs: ts[e] };
        break;
      case EV_TCP_OPEN:
        out[e] = { kind: 'tcp-open', conn: ints[k + 1], peer: peer(ints[k + 2]), inbound: ints[k + 3] !== 0 };
        break;
      case EV_TCP_DATA:
        out[e] = { kind: 'tcp-data', conn: ints[k + 1], data: bytes(ints[k + 2], ints[k + 3]), rxNs: ts[e] };
        break;
      case EV_TCP_CLOSED:
        out[e] = ints[k + 2] === 0
          ? { kind: 'tcp-closed', conn: ints[k + 1] }
          : {
            kind: 'tcp-closed', conn: ints[k + 1],
            error: { code: objs[ints[k + 3]] as string, errno: ints[k + 2], message: objs[ints[k + 4]] as string },
          };
        break;
      case EV_ICMP:
        out[e] = { kind: 'icmp-unreachable', peer: peer(ints[k + 1]), errno: ints[k + 2], code: objs[ints[k + 3]] as string };
        break;
      default:
        throw new NativeError('NATIVE_ERR_PROTOCOL', `unknown event kind ${ints[k]} from the addon`);
    }
  }
  return out;
}

// ----- Endpoint ----------------------------------------------------------------------------------

export class Endpoint {
  readonly host: string;
  readonly udpPort: number;
  readonly tcpPort: number;
  readonly #raw: RawEndpoint;

  constructor(options: EndpointOptions, onIncoming: (batch: Incoming[]) => void) {
    const { Endpoint: Raw } = load();
    if (typeof onIncoming !== 'function') {
      throw new NativeError('NATIVE_ERR_INVALID_ARG', 'onIncoming must be a function');
    }
    const dispatch: Dispatch = (ints, ts, data, objs) => {
      const batch = decode(ints, ts, data, objs);
      try {
        onIncoming(batch);
      } catch (err) {
        // A string warning (not an Error object) so this also works across vm realms (jest, Electron).
        process.emitWarning(`catp native endpoint: onIncoming threw: ${err instanceof Error ? err.message : String(err)}`, {
          type: 'CatpNativeCallbackWarning',
          detail: err instanceof Error ? err.stack : undefined,
        });
      }
    };
    this.#raw = new Raw(options ?? {}, dispatch);
    const a = this.#raw.address();
    this.host = a.host;
    this.udpPort = a.udpPort;
    this.tcpPort = a.tcpPort;
  }

  /** Adds an 8-byte request ID to the table of outstanding IDs. */
  expect(id: Uint8Array): void { this.#raw.expect(id); }
  /** Removes an ID (no error if absent). */
  forget(id: Uint8Array): void { this.#raw.forget(id); }
  /** Number of outstanding IDs. */
  outstanding(): number { return this.#raw.outstanding(); }
  /** sendto(); throws NativeError 'EAGAIN' when the socket buffer is full (nothing is queued). */
  sendDatagram(data: Uint8Array, address: string, port: number): void { this.#raw.sendDatagram(data, address, port); }
  /** Starts a non-blocking connect; the result arrives as tcp-open or tcp-closed (with error). */
  connect(address: string, port: number): number { return this.#raw.connect(address, port); }
  /** Writes or queues bytes on a connection. */
  sendTcp(conn: number, data: Uint8Array): void { this.#raw.sendTcp(conn, data); }
  /** Graceful close (flush, then close); idempotent. A tcp-closed event follows. */
  closeConnection(conn: number): void { this.#raw.closeConnection(conn); }
  counters(): EndpointCounters { return this.#raw.counters(); }
  /** Closes sockets and handles, drops undelivered events; idempotent. */
  close(): void { this.#raw.close(); }
}
