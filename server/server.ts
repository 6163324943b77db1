// Reference DHTTP origin server: one port number for UDP (DHTTP datagrams) and TCP (DHTTP request streams and
// plain HTTP/1.1). Responses to UDP requests go back over UDP or over a TCP connection the server opens to the
// client's announced TCP port, as server/channel-choice.ts decides (DHTTP paper III-C).
// A GET over UDP with `Catp-Mode: catp | inorder` is answered with CATP frames instead (server/catp.ts);
// CATP loss reports (byte 11 = 0xCA) are routed to their session by (client address, request ID).
//
// Every datagram and every TCP byte is treated as hostile: malformed input is dropped and counted by its
// protocol error code; nothing a peer sends can crash the process or grow memory without bound.
import * as dgram from 'dgram';
import * as net from 'net';
import { createHash, randomBytes } from 'crypto';
import { AddressTokens, AmplificationBudget, RETRY_TOKEN, TOKEN_HEADER, type AmplificationCounters } from '../protocol/dhttp/address-validation';
import { ID_BYTES, MAX_DATAGRAM_PAYLOAD, MIN_CLIENT_PORT, decodeRequest, encodeResponse, idToHex, isDhttpStreamStart } from '../protocol/dhttp/wire';
import { RequestParser, getHeader, parseRequestDatagram, serializeResponse, type HttpRequest, type HttpResponse } from '../protocol/dhttp/http1';
import { CodedBodyCache, codeResponse } from './content-coding';
import { DhttpRequestStream } from '../protocol/dhttp/stream';
import { isCatpReport } from '../protocol/catp';
import { ChannelChooser, type ChannelOptions, type ChannelCounters } from './channel-choice';
import { FileServer, bodyLength, resolveTarget, simpleResponse, type FileResponse } from './files';
import { BodyBudget, type BodyBudgetCounters } from './body-budget';
import { BodyWriter } from './body-writer';
import { CatpSessions, parseCatpMode, parseCatpReuse, resolveCatpOptions, type CatpCounters, type CatpMemory, type CatpMode, type CatpOptions } from './catp';
import { isDecisionRequest, parseDecision } from '../protocol/dtd/messages';
import { sniffHtmlEncoding } from '../protocol/html-encoding';
import { HoldTable, announcement, bumpCode, newDtdCounters, planFor, readMode, type DtdCounters, type DtdServerOptions } from './dtd';
import { ServerError } from './errors';

export interface ServerLimits {
  /** Simultaneous client-opened TCP connections. */
  maxConnections: number;
  /** Simultaneous client-opened TCP connections from one address: one address cannot take every slot. */
  maxConnectionsPerAddress: number;
  /**
   * A request on a client-opened connection must be complete this long after its first byte (ms): a client that
   * trickles a header line every few seconds (slowloris) keeps the idle timeout from firing, not this one.
   */
  headTimeoutMs: number;
  /** Idle timeout of client-opened TCP connections (ms). */
  idleTimeoutMs: number;
  /** Server-opened connections kept open to clients (LRU beyond this is closed). */
  poolMax: number;
  /** Idle timeout of server-opened connections (ms). */
  poolIdleMs: number;
  /** Connect timeout of server-opened connections (ms). */
  connectTimeoutMs: number;
  /** Pause reading a client connection while its unsent output exceeds this many bytes. */
  writeHighWater: number;
  /** Drop (and count) a UDP request's TCP answer when the pooled connection already has this much unsent. */
  outboundMaxQueued: number;
  /** Requests parsed but not yet answered on one client connection before reading pauses. */
  maxPipelined: number;
  /** UDP requests being answered at once; more are dropped and counted (the clients resend). */
  maxUdpInFlight: number;
  /** SO_RCVBUF asked for the UDP socket (the kernel caps it at net.core.rmem_max); 0 keeps the default. */
  udpRecvBufferBytes: number;
  /**
   * Bytes of answers held in memory at once (queued on sockets, held for DTD, large CATP pages being encoded),
   * in all and per client address (body-budget.ts). Files above 1 MiB are streamed from disk under it.
   */
  bodyBudgetBytes: number;
  bodyBudgetPerAddressBytes: number;
}

export const DEFAULT_LIMITS: Readonly<ServerLimits> = Object.freeze({
  maxConnections: 1024,
  maxConnectionsPerAddress: 32,
  headTimeoutMs: 10_000,
  idleTimeoutMs: 30_000,
  poolMax: 256,
  poolIdleMs: 30_000,
  connectTimeoutMs: 5_000,
  writeHighWater: 1024 * 1024,
  outboundMaxQueued: 16 * 1024 * 1024,
  maxPipelined: 32,
  maxUdpInFlight: 1024,
  udpRecvBufferBytes: 4 * 1024 * 1024,
  bodyBudgetBytes: 128 * 1024 * 1024,
  bodyBudgetPerAddressBytes: 16 * 1024 * 1024,
});

export interface ServerOptions {
  /** Directory whose files are served. */
  root: string;
  /** Serve `.git/`, `.env` and other paths with a dot segment (default: 404, as if absent). */
  serveDotfiles?: boolean;
  /** 0 (default) picks a free port; UDP and TCP share the number. */
  port?: number;
  /** Address to bind, default 127.0.0.1; '::1' or '::' for IPv6. */
  host?: string;
  channel?: Partial<ChannelOptions>;
  limits?: Partial<ServerLimits>;
  /** Randomness for the high-loss channel draw (default: crypto). */
  rng?: () => number;
  /** Monotonic clock in ms for counter decay (default: performance.now). */
  now?: () => number;
  /** CATP over UDP (see server/README.md): rates, session table, on/off. */
  catp?: CatpOptions;
  /** DTD transfer suppression (see server/README.md): holds, timeouts, on/off. */
  dtd?: DtdServerOptions;
}

export interface ServerCounters extends CatpCounters, DtdCounters {
  udpDatagrams: number;
  udpRequests: number;
  /** Dropped datagrams by error code (DHTTP_ERR_..., HTTP_ERR_...). */
  udpMalformed: Record<string, number>;
  /** Well-formed requests answered "resend over TCP" because maxUdpInFlight were being answered (overload). */
  udpOverload: number;
  /** UDP requests for a file too large to read whole, answered "resend over TCP" (the client's connection streams it). */
  fileAnswersToTcp: number;
  resentRequests: number;
  ignoredResends: number;
  udpResponses: number;
  udpSendErrors: number;
  tcpResponses: number;
  tcpConnectsOpened: number;
  tcpConnectsReused: number;
  tcpConnectFailures: number;
  /** TCP answers to UDP requests dropped because the pooled connection's queue was full, or the body budget. */
  tcpOutboundDropped: number;
  /** 421 "resend over TCP" answers to non-idempotent UDP requests. */
  retryOverTcp: number;
  /** Requests whose otherPort was below 1024 (DHTTP paper IV-C). */
  refusedPorts: number;
  /** Client-opened TCP connections accepted. */
  tcpConnectionsAccepted: number;
  tcpConnectionsRejected: number;
  /** ... of them because their address had maxConnectionsPerAddress open already. */
  tcpConnectionsRejectedPerAddress: number;
  /** Client-opened connections closed because a request was not complete within headTimeoutMs. */
  tcpHeadTimeouts: number;
  /** Requests received over DHTTP request streams (client-opened TCP). */
  dhttpTcpRequests: number;
  /** Plain HTTP/1.1 requests. */
  httpRequests: number;
  /** Client-opened TCP streams closed for malformed input, by error code. */
  tcpMalformed: Record<string, number>;
  tcpIdleTimeouts: number;
  /** Address validation: answers replaced by "ask again with this token", datagrams not sent for the 3× budget, tokens that did not check out. */
  tokenRetries: number;
  amplificationDropped: number;
  badTokens: number;
  amplification: AmplificationCounters;
  /** Answer bytes held in memory against the body budget (ServerLimits.bodyBudgetBytes). */
  bodies: BodyBudgetCounters;
  /** Responses that could not be produced or serialized (a bug, not the peer's fault). */
  internalErrors: number;
  highLossMode: boolean;
  channel: ChannelCounters;
}

export interface DhttpServer {
  readonly port: number;
  readonly host: string;
  readonly address: { address: string; family: string; port: number };
  counters(): ServerCounters;
  close(): Promise<void>;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
/** The "ask again with this token" answer is about 130 bytes (ID included); room kept for it in a first flight. */
const TOKEN_ANSWER_BYTES = 160;

function errorCode(e: unknown): string {
  if (e && typeof e === 'object' && 'code' in e && typeof (e as { code: unknown }).code === 'string') {
    return (e as { code: string }).code;
  }
  return 'UNKNOWN';
}

function bump(rec: Record<string, number>, key: string): void {
  rec[key] = (rec[key] ?? 0) + 1;
}

function cryptoRng(): () => number {
  let pool = randomBytes(0);
  let off = 0;
  return () => {
    if (off + 4 > pool.length) {
      pool = randomBytes(4096);
      off = 0;
    }
    const v = pool.readUInt32BE(off);
    off += 4;
    return v / 4294967296;
  };
}

/** Too large an answer for an unproven address: the token, and "ask again with it" (address-validation.ts). */
function retryWithTokenResponse(token: string): HttpResponse {
  return {
    status: 421,
    reason: 'Misdirected Request',
    headers: [
      ['DHTTP-Retry', RETRY_TOKEN],
      [TOKEN_HEADER, token],
      ['Content-Length', '0'],
    ],
    body: new Uint8Array(0),
  };
}

function retryOverTcpResponse(): HttpResponse {
  return {
    status: 421,
    reason: 'Misdirected Request',
    headers: [
      ['DHTTP-Retry', 'tcp'],
      ['Content-Length', '0'],
    ],
    body: new Uint8Array(0),
  };
}

function hasToken(value: string | undefined, token: string): boolean {
  if (value === undefined) return false;
  return value
    .toLowerCase()
    .split(',')
    .some((t) => t.trim() === token);
}


/** Where a held body goes when the client says PROCEED: the request's source and announced TCP port. */
interface UdpHoldCtx {
  rinfo: dgram.RemoteInfo;
  otherPort: number;
  id: Uint8Array;
  idHex: string;
  /** the request carried a valid address token */
  proven: boolean;
}

/** An announced body being written at once on a server-opened connection (abort / auto-proceed). */
interface Sending {
  ob: Outbound;
  /** Handed to the kernel (the write callback ran). */
  written: boolean;
}

/** A pooled connection the server opened to a client's TCP port. */
interface Outbound {
  key: string;
  socket: net.Socket;
  connected: boolean;
}

class Server implements DhttpServer {
  readonly port: number;
  readonly host: string;
  private readonly c: Omit<ServerCounters, 'highLossMode' | 'channel' | 'amplification' | 'bodies' | keyof CatpCounters | keyof DtdCounters>;
  private readonly catp: CatpSessions;
  private readonly dtdC = newDtdCounters();
  private readonly dtdEnabled: boolean;
  private readonly holds: HoldTable<UdpHoldCtx>;
  private readonly sending = new Map<string, Sending>();
  private readonly holdSweep: NodeJS.Timeout;
  private readonly pool = new Map<string, Outbound>(); // insertion order = LRU order
  private readonly inbound = new Set<net.Socket>();
  /** Open client-opened connections per remote address. */
  private readonly inboundPerAddress = new Map<string, number>();
  /** Compressed bodies for plain HTTP/1.1 answers, per file version and coding. */
  private readonly coded = new CodedBodyCache();
  private udpInFlight = 0;
  /** Address validation: tokens that prove a source address, and what each unproven address may still get. */
  private readonly tokens = new AddressTokens({ key: randomBytes(32), sha256: (b) => new Uint8Array(createHash('sha256').update(b).digest()) });
  private readonly budget = new AmplificationBudget();
  private readonly bodies: BodyBudget;
  private closed = false;
  private closing: Promise<void> | null = null;

  constructor(
    private readonly files: FileServer,
    private readonly chooser: ChannelChooser,
    private readonly limits: ServerLimits,
    private readonly udp: dgram.Socket,
    private readonly tcp: net.Server,
    host: string,
    port: number,
    catp: CatpOptions | undefined,
    dtd: DtdServerOptions | undefined,
    private readonly now: () => number,
  ) {
    this.catp = new CatpSessions(udp, catp);
    this.bodies = new BodyBudget({ totalBytes: limits.bodyBudgetBytes, perAddressBytes: limits.bodyBudgetPerAddressBytes });
    this.dtdEnabled = dtd?.enabled ?? true;
    this.holds = new HoldTable(dtd?.maxHolds ?? 4096, dtd?.holdTimeoutMs ?? 30_000, dtd?.recentMemory ?? 4096, {
      budget: this.bodies,
      addressOf: (ctx: UdpHoldCtx) => ctx.rinfo.address,
    });
    this.holdSweep = setInterval(() => {
      this.dtdC.dtdHoldExpired += this.holds.expire(this.now());
    }, Math.max(100, Math.min(1000, this.holds.holdTimeoutMs / 4)));
    this.holdSweep.unref();
    this.host = host;
    this.port = port;
    this.c = {
      udpDatagrams: 0,
      udpRequests: 0,
      udpMalformed: {},
      udpOverload: 0,
      fileAnswersToTcp: 0,
      resentRequests: 0,
      ignoredResends: 0,
      udpResponses: 0,
      udpSendErrors: 0,
      tcpResponses: 0,
      tcpConnectsOpened: 0,
      tcpConnectsReused: 0,
      tcpConnectFailures: 0,
      tcpOutboundDropped: 0,
      retryOverTcp: 0,
      refusedPorts: 0,
      tcpConnectionsAccepted: 0,
      tcpConnectionsRejected: 0,
      tcpConnectionsRejectedPerAddress: 0,
      tcpHeadTimeouts: 0,
      dhttpTcpRequests: 0,
      httpRequests: 0,
      tcpMalformed: {},
      tcpIdleTimeouts: 0,
      tokenRetries: 0,
      amplificationDropped: 0,
      badTokens: 0,
      internalErrors: 0,
    };
    udp.on('message', (msg, rinfo) => this.onDatagram(msg, rinfo));
    udp.on('error', () => {
      /* e.g. ICMP-induced errors on some platforms: never fatal */
    });
    tcp.on('connection', (sock) => this.onConnection(sock));
    tcp.on('error', () => {
      /* accept errors (EMFILE...) are not fatal */
    });
  }

  get address(): { address: string; family: string; port: number } {
    const a = this.tcp.address();
    if (a && typeof a === 'object') return { address: a.address, family: a.family, port: a.port };
    return { address: this.host, family: net.isIPv6(this.host) ? 'IPv6' : 'IPv4', port: this.port };
  }

  counters(): ServerCounters {
    const channel = this.chooser.counters();
    return {
      ...this.c,
      ...this.catp.counters(),
      ...this.dtdC,
      ...this.files.digestCounters(),
      dtdBadModes: { ...this.dtdC.dtdBadModes },
      dtdBadDecisions: { ...this.dtdC.dtdBadDecisions },
      udpMalformed: { ...this.c.udpMalformed },
      tcpMalformed: { ...this.c.tcpMalformed },
      highLossMode: channel.highLossMode,
      amplification: this.budget.counters(),
      bodies: this.bodies.counters(),
      channel,
    };
  }

  // ---------------------------------------------------------------- UDP

  private onDatagram(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    if (this.closed) return;
    this.c.udpDatagrams++;
    this.budget.received(rinfo.address, msg.length);
    if (isCatpReport(msg)) {
      // A CATP loss report (byte 11 = 0xCA, never the first byte of an HTTP method): routed by
      // (address, ID); its otherPort is not a DHTTP port and is not checked.
      // true: an unproven session sent its first flight and still waits; its token answer may have been lost
      if (this.catp.onReport(msg, rinfo.address, idToHex(msg.subarray(0, ID_BYTES)))) this.refuseUnproven(msg.subarray(0, ID_BYTES), rinfo, false);
      return;
    }
    let dreq;
    try {
      dreq = decodeRequest(msg);
    } catch (e) {
      const code = errorCode(e);
      bump(this.c.udpMalformed, code);
      if (code === 'DHTTP_ERR_BAD_PORT') this.c.refusedPorts++;
      return;
    }
    if (dreq.otherPort < MIN_CLIENT_PORT) {
      // decodeRequest already refuses these; kept as a guard should the codec ever relax.
      this.c.refusedPorts++;
      return;
    }
    let req: HttpRequest;
    try {
      req = parseRequestDatagram(dreq.http, UDP_HTTP_LIMITS);
    } catch (e) {
      bump(this.c.udpMalformed, errorCode(e));
      return;
    }
    // Proven: this request carries a token we handed out at this address (proof is per request, never
    // remembered per address: a spoofer of a client that once proved itself has no token).
    const token = getHeader(req.headers, 'catp-token');
    const proven = token !== null && this.tokens.check(token, rinfo.address, this.now());
    if (token !== null && !proven) this.c.badTokens++;
    if (isDecisionRequest(req)) {
      // DTD PROCEED / DON'T-BOTHER on the ID of a request answered before: not a request, not in the loss ratio.
      this.onDecision(req, dreq.id, dreq.resend, rinfo, proven);
      return;
    }
    if (this.udpInFlight >= this.limits.maxUdpInFlight) {
      // Overloaded: "resend over TCP" (DHTTP paper VI-B3), on the client's own connection, which TCP's own
      // handshake and our connection limits govern; a small answer, within the 3× budget to an unproven address.
      this.c.udpOverload++;
      this.sendUdp(encodeResponse(dreq.id, serializeResponse(retryOverTcpResponse())), rinfo, dreq.resend, proven);
      return;
    }
    // Only well-formed requests reach the channel statistics, so garbage cannot push the server into
    // high-loss mode.
    this.c.udpRequests++;
    const idHex = idToHex(dreq.id);
    const client = rinfo.address;
    if (dreq.resend) this.c.resentRequests++;
    if (this.chooser.admit(client, idHex, dreq.resend) === 'ignore') {
      this.c.ignoredResends++;
      return;
    }
    const id = dreq.id;
    const resend = dreq.resend;
    const otherPort = dreq.otherPort;

    if (!SAFE_METHODS.has(req.method)) {
      // Non-idempotent requests must not be executed from a datagram (DHTTP paper III-A): ask for TCP.
      this.c.retryOverTcp++;
      this.sendUdp(encodeResponse(id, serializeResponse(retryOverTcpResponse())), rinfo, resend);
      return;
    }

    // CATP (Catp-Mode: catp | inorder) applies to GET only; anything else is answered as usual.
    const mode = req.method === 'GET' && this.catp.enabled ? parseCatpMode(getHeader(req.headers, 'catp-mode')) : null;
    const catpKey = mode === null ? null : CatpSessions.key(client, idHex);
    if (catpKey !== null) {
      // A stream is far more than any request. To an address that has not shown it receives there, only its
      // first flight (what the 3× budget allows, after the token answer), and the rest once a request with the
      // token repeats this one (address-validation.ts; protocol/README.md).
      if (proven && this.catp.prove(catpKey)) return;
      if (!proven) {
        if (this.catp.isUnproven(catpKey)) {
          this.refuseUnproven(id, rinfo, resend); // a repeat: our token answer may have been lost
          return;
        }
        if (this.budget.remaining(client) < TOKEN_ANSWER_BYTES + MAX_DATAGRAM_PAYLOAD || !this.catp.canStartUnproven(client)) {
          this.refuseUnproven(id, rinfo, resend); // no room for a first flight: the token alone
          return;
        }
      }
      const admitted = this.catp.admit(catpKey, client);
      if (admitted === 'repeat') return; // repeats a running session: its repair covers it
      if (admitted === 'over-limit') {
        // This address has its share of the session table: ask for TCP (its own connection), as an overloaded
        // server does (DHTTP paper VI-B3); the answer is smaller than the request.
        this.c.retryOverTcp++;
        this.sendUdp(encodeResponse(id, serializeResponse(retryOverTcpResponse())), rinfo, resend);
        return;
      }
    }

    // DTD: a repeat of a request whose body is held gets the announcement again (it was lost).
    const dtdKey = `${client}|${idHex}`;
    const held = this.holds.get(dtdKey);
    if (held !== undefined) {
      this.sendAnswer(announcement(held.res, true), 'GET', id, idHex, rinfo, otherPort, resend, proven || held.ctx.proven);
      return;
    }
    const dtdMode = this.dtdEnabled && mode === null ? readMode(req.headers, this.dtdC) : null;

    this.udpInFlight++;
    let taken = 0; // body budget held for a large CATP page while it is read and encoded
    // A session's frames take over from the page read for it (the address's share is not charged twice).
    const memory: CatpMemory = {
      take: (n) => {
        if (taken > 0) this.bodies.give(client, taken);
        taken = 0;
        return this.bodies.tryTake(client, n);
      },
      give: (n) => this.bodies.give(client, n),
    };
    void this.files
      .handle(req, { reprDigest: dtdMode !== null, stream: true })
      .then(async (answer) => {
        if (this.closed) return;
        // A file too large to read whole: CATP reads it (its encoder needs every byte) within the body budget;
        // any other answer streams it over the client's own connection.
        const res = answer.file !== undefined && mode !== null ? await this.readForCatp(answer, client) : answer;
        if (res !== answer) taken = bodyLength(res);
        if (this.closed) return;
        // (The request stays pending while its page is encoded: repeats meanwhile are ignored.)
        if (res.file === undefined && mode !== null && (await this.startCatp(mode, req, res, id, idHex, rinfo, memory, proven ? null : () => this.refuseUnproven(id, rinfo, resend)))) {
          // The answer goes over UDP: it counts as a fresh UDP answer in the loss ratio, like any other.
          this.chooser.sentUdp(resend, client);
          return;
        }
        if (catpKey !== null) this.catp.abandon(catpKey);
        if (this.closed) return;
        if (answer.file !== undefined) {
          this.c.fileAnswersToTcp++;
          this.sendUdp(encodeResponse(id, serializeResponse(retryOverTcpResponse())), rinfo, resend, proven);
          return;
        }
        const plan = planFor(dtdMode, req.method, res);
        if (plan === 'hold') {
          if (this.holds.add(dtdKey, res, { rinfo, otherPort, id, idHex, proven }, this.now())) {
            this.dtdC.dtdAnnounced++;
            this.dtdC.dtdHeld++;
            this.sendAnswer(announcement(res, true), 'GET', id, idHex, rinfo, otherPort, resend, proven);
            return;
          }
          this.dtdC.dtdHoldRefused++;
        }
        if (plan !== 'none') {
          const http = serializeResponse(res);
          if (ID_BYTES + http.length > MAX_DATAGRAM_PAYLOAD && !proven) {
            this.refuseUnproven(id, rinfo, resend); // it would go over a connection we open: only to a proven address
            return;
          }
          if (ID_BYTES + http.length > MAX_DATAGRAM_PAYLOAD) {
            // Announce, then the body at once on the same server-opened connection; a DON'T-BOTHER (or the
            // client closing that connection) cuts it short.
            this.dtdC.dtdAnnounced++;
            this.dtdC.dtdSentAtOnce++;
            this.countPayload(res, 'GET');
            const ann = encodeResponse(id, serializeResponse(announcement(res, false)));
            const full = encodeResponse(id, http);
            const bytes = new Uint8Array(ann.length + full.length);
            bytes.set(ann, 0);
            bytes.set(full, ann.length);
            const entry: Sending = { ob: null as unknown as Outbound, written: false };
            const ob = this.sendTcp(client, otherPort, idHex, bytes, () => {
              entry.written = true; // handed to the kernel; its send queue can still be cut
            });
            if (ob !== null) {
              entry.ob = ob;
              this.sending.set(dtdKey, entry);
              while (this.sending.size > this.holds.maxHolds) this.sending.delete(this.sending.keys().next().value as string);
            }
            return;
          }
          // One datagram: no announcement; the digest rides in the answer.
        }
        this.sendAnswer(res, req.method, id, idHex, rinfo, otherPort, resend, proven);
      })
      .catch(() => {
        this.c.internalErrors++;
      })
      .finally(() => {
        if (catpKey !== null) this.catp.abandon(catpKey);
        if (taken > 0) this.bodies.give(client, taken);
        this.udpInFlight--;
      });
  }

  /**
   * A full response (or an announcement) on the channel the chooser picks. To an unproven address (`proven`
   * false: the request had no valid token) it carries a token, and it goes only if it fits the address's 3×
   * budget over UDP; else the answer is "ask again with this token" (address-validation.ts).
   */
  private sendAnswer(res: HttpResponse, method: string, id: Uint8Array, idHex: string, rinfo: dgram.RemoteInfo, otherPort: number, resend: boolean, proven: boolean): void {
    const withToken = proven ? res : { ...res, headers: [...res.headers, [TOKEN_HEADER, this.tokens.issue(rinfo.address, this.now())] as [string, string]] };
    const http = serializeResponse(withToken, { head: method === 'HEAD' });
    const decision = this.chooser.choose(ID_BYTES + http.length, resend, rinfo.address);
    const bytes = encodeResponse(id, http);
    if (!proven && (decision.channel === 'tcp' || !this.budget.allows(rinfo.address, bytes.length))) {
      this.refuseUnproven(id, rinfo, resend);
      return;
    }
    this.countPayload(res, method);
    if (decision.channel === 'udp') this.sendUdp(bytes, rinfo, resend, proven);
    else this.sendTcp(rinfo.address, otherPort, idHex, bytes);
  }

  /** "Ask again with this token": a small answer (≤ 3× the padded request a client without a token sends). */
  private refuseUnproven(id: Uint8Array, rinfo: dgram.RemoteInfo, resend: boolean): void {
    this.c.tokenRetries++;
    this.sendUdp(encodeResponse(id, serializeResponse(retryWithTokenResponse(this.tokens.issue(rinfo.address, this.now())))), rinfo, resend, false);
  }

  /**
   * A CATP page too large for the file server to read unasked: read whole if the address's share of the body
   * budget has room for it (taken here; the caller gives it back once the page is encoded or refused); else the
   * answer as it was (a file, sent over TCP).
   */
  private async readForCatp(res: FileResponse, client: string): Promise<FileResponse> {
    const file = res.file;
    if (file === undefined || !this.bodies.tryTake(client, file.size)) return res;
    let body: Uint8Array | null = null;
    try {
      body = await this.files.readWhole(file);
    } catch {
      body = null;
    }
    // unreadable, or changed under us: the file as it was (streamed over TCP, where a short file fails cleanly)
    if (body === null || body.length !== file.size) {
      this.bodies.give(client, file.size);
      return res;
    }
    return { status: res.status, reason: res.reason, headers: res.headers, body };
  }

  private countPayload(res: HttpResponse, method: string): void {
    if (method === 'HEAD' || res.body.length === 0) return;
    this.dtdC.payloadBytesSent += res.body.length;
    this.dtdC.payloadResponses++;
  }

  /** PROCEED / DON'T-BOTHER from a client (UDP). Hostile ones are counted by reason and dropped. */
  private onDecision(req: HttpRequest, id: Uint8Array, resend: boolean, rinfo: dgram.RemoteInfo, proven: boolean): void {
    let decision;
    try {
      decision = parseDecision(req);
    } catch (e) {
      bumpCode(this.dtdC.dtdBadDecisions, errorCode(e));
      return;
    }
    const idHex = idToHex(id);
    const key = `${rinfo.address}|${idHex}`;
    const hold = this.holds.decide(key, decision);
    if (hold !== undefined) {
      if (decision === 'proceed') {
        this.dtdC.dtdProceeds++;
        const ctx = hold.ctx;
        this.sendAnswer(hold.res, 'GET', ctx.id, ctx.idHex, ctx.rinfo, ctx.otherPort, resend, ctx.proven || proven);
      } else {
        this.dtdC.dtdDontBothers++;
      }
      return;
    }
    const sending = this.sending.get(key);
    if (sending !== undefined) {
      this.sending.delete(key);
      if (decision === 'dont-bother') {
        this.dtdC.dtdDontBothers++;
        if (!sending.ob.socket.destroyed) {
          // What is still queued (in Node or in the kernel) is discarded: cut the connection. The client
          // closes its side too; answers queued behind on it are resent by their clients.
          this.dtdC.dtdAborted++;
          this.dropOutbound(sending.ob);
        }
      } else {
        this.dtdC.dtdLateDecisions++;
      }
      return;
    }
    const past = this.holds.decided(key);
    if (past !== undefined) {
      if (past.decision === 'proceed' && decision === 'proceed' && resend) {
        // Our body did not arrive: send it again, over TCP (it is an answer to a resend).
        this.dtdC.dtdRepeatedProceeds++;
        const ctx = past.ctx;
        this.sendAnswer(past.res, 'GET', ctx.id, ctx.idHex, ctx.rinfo, ctx.otherPort, true, ctx.proven || proven);
      } else {
        this.dtdC.dtdLateDecisions++;
      }
      return;
    }
    this.dtdC.dtdUnknownDecisions++;
  }

  /** Frames instead of a response when the answer is a 200 the mode can carry; false → answer normally. */
  private async startCatp(mode: CatpMode, req: HttpRequest, res: HttpResponse, id: Uint8Array, idHex: string, rinfo: dgram.RemoteInfo, memory: CatpMemory, sendToken: (() => void) | null): Promise<boolean> {
    if (res.status !== 200) return false;
    if (mode === 'catp') {
      const type = (getHeader(res.headers, 'content-type') ?? '').split(';')[0].trim().toLowerCase();
      if (type !== 'text/html') return false;
    }
    const etag = getHeader(res.headers, 'etag');
    const target = resolveTarget(req.target);
    // path + size + mtime (the ETag is "size-mtime"); the body length guards against a file that changed.
    const cacheKey = etag !== null && target.ok ? `${target.segments.join('/')}${target.trailingSlash ? '/' : ''}\0${etag}\0${res.body.length}` : null;
    return this.catp.startAsync({
      mode,
      id,
      idHex,
      address: rinfo.address,
      port: rinfo.port,
      rateHeader: getHeader(req.headers, 'catp-rate'),
      reuse: parseCatpReuse(getHeader(req.headers, 'catp-reuse')),
      cacheKey,
      body: res.body,
      // the encoding the file server labelled the page with (or, for a page too large to sniff unasked, the bytes')
      ...(mode === 'catp' ? { encoding: sniffHtmlEncoding(res.body, { contentType: getHeader(res.headers, 'content-type'), complete: true }).encoding } : {}),
      memory,
      ...(sendToken === null ? {} : { unproven: { budget: this.budget, sendToken } }),
    });
  }

  /** One datagram; to an unproven address only within its 3× budget (else dropped and counted). */
  private sendUdp(bytes: Uint8Array, rinfo: dgram.RemoteInfo, resend: boolean, proven = false): void {
    if (!proven) {
      if (!this.budget.allows(rinfo.address, bytes.length)) {
        this.c.amplificationDropped++;
        return;
      }
      this.budget.sent(rinfo.address, bytes.length);
    }
    try {
      this.udp.send(bytes, rinfo.port, rinfo.address, (err) => {
        if (err) {
          this.c.udpSendErrors++;
          return;
        }
        this.c.udpResponses++;
        this.chooser.sentUdp(resend, rinfo.address);
      });
    } catch {
      this.c.udpSendErrors++; // socket closed under us, or an address the kernel refuses
    }
  }

  // ------------------------------------------------ server-opened TCP (answers to UDP requests)

  private sendTcp(client: string, port: number, idHex: string, bytes: Uint8Array, onWritten?: () => void): Outbound | null {
    const key = `${client}|${port}`;
    let ob = this.pool.get(key);
    if (ob && !ob.socket.destroyed && ob.socket.writable) {
      this.c.tcpConnectsReused++;
      this.pool.delete(key); // move to the LRU tail
      this.pool.set(key, ob);
    } else {
      if (ob) this.dropOutbound(ob);
      ob = this.openOutbound(key, client, port);
    }
    if (ob.socket.writableLength + bytes.length > this.limits.outboundMaxQueued || !this.bodies.tryTake(client, bytes.length)) {
      this.c.tcpOutboundDropped++; // the client resends; its resend goes over TCP
      return null;
    }
    ob.socket.write(bytes, (err) => {
      this.bodies.give(client, bytes.length);
      onWritten?.();
      if (err) return; // connect failure or reset: counted there; the client will resend
      this.c.tcpResponses++;
      this.chooser.sentTcp(client, idHex);
    });
    return ob;
  }

  private openOutbound(key: string, client: string, port: number): Outbound {
    while (this.pool.size >= this.limits.poolMax) {
      const oldest = this.pool.values().next().value as Outbound;
      this.dropOutbound(oldest);
    }
    this.c.tcpConnectsOpened++;
    const socket = net.connect({ host: client, port, noDelay: true });
    const ob: Outbound = { key, socket, connected: false };
    this.pool.set(key, ob);
    socket.setTimeout(this.limits.connectTimeoutMs);
    socket.on('connect', () => {
      ob.connected = true;
      socket.setTimeout(this.limits.poolIdleMs);
    });
    socket.on('timeout', () => {
      if (!ob.connected) this.c.tcpConnectFailures++;
      this.dropOutbound(ob);
    });
    socket.on('error', () => {
      if (!ob.connected) this.c.tcpConnectFailures++;
      this.dropOutbound(ob);
    });
    socket.on('close', () => this.forget(ob));
    socket.on('end', () => this.dropOutbound(ob)); // the client closed its side: stop using it
    socket.on('data', () => {
      /* clients have nothing to say on this connection; discard */
    });
    return ob;
  }

  private forget(ob: Outbound): void {
    if (this.pool.get(ob.key) === ob) this.pool.delete(ob.key);
  }

  private dropOutbound(ob: Outbound): void {
    this.forget(ob);
    if (!ob.socket.destroyed) ob.socket.destroy();
  }

  // ------------------------------------------------ client-opened TCP

  private onConnection(sock: net.Socket): void {
    if (this.closed || this.inbound.size >= this.limits.maxConnections) {
      this.c.tcpConnectionsRejected++;
      sock.destroy();
      return;
    }
    const address = sock.remoteAddress ?? '';
    const open = this.inboundPerAddress.get(address) ?? 0;
    if (open >= this.limits.maxConnectionsPerAddress) {
      this.c.tcpConnectionsRejected++;
      this.c.tcpConnectionsRejectedPerAddress++;
      sock.destroy();
      return;
    }
    this.inboundPerAddress.set(address, open + 1);
    this.c.tcpConnectionsAccepted++;
    this.inbound.add(sock);
    sock.on('close', () => {
      this.inbound.delete(sock);
      const n = (this.inboundPerAddress.get(address) ?? 1) - 1;
      if (n <= 0) this.inboundPerAddress.delete(address);
      else this.inboundPerAddress.set(address, n);
    });
    sock.on('error', () => {
      /* resets are normal */
    });
    sock.setNoDelay(true);
    sock.setTimeout(this.limits.idleTimeoutMs, () => {
      this.c.tcpIdleTimeouts++;
      sock.destroy();
    });
    new InboundConnection(sock, this.files, this.coded, this.limits, this.dtdEnabled, this.dtdC, this.bodies, {
      malformed: (code) => {
        bump(this.c.tcpMalformed, code);
        if (code === 'DHTTP_ERR_BAD_PORT') this.c.refusedPorts++;
      },
      internalError: () => this.c.internalErrors++,
      headTimeout: () => this.c.tcpHeadTimeouts++,
      dhttpRequest: () => this.c.dhttpTcpRequests++,
      httpRequest: () => this.c.httpRequests++,
    });
  }

  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    this.catp.close();
    clearInterval(this.holdSweep);
    this.holds.clear();
    this.sending.clear();
    this.closing = new Promise<void>((resolve) => {
      let pending = 2;
      const done = () => {
        if (--pending === 0) resolve();
      };
      for (const ob of [...this.pool.values()]) this.dropOutbound(ob);
      for (const s of this.inbound) s.destroy();
      this.inbound.clear();
      this.tcp.close(() => done());
      try {
        this.udp.close(() => done());
      } catch {
        done();
      }
    });
    return this.closing;
  }
}

interface ConnHooks {
  malformed(code: string): void;
  internalError(): void;
  headTimeout(): void;
  dhttpRequest(): void;
  httpRequest(): void;
}

type Parsed =
  | { kind: 'dhttp'; id: Uint8Array; request: HttpRequest }
  | { kind: 'http'; request: HttpRequest }
  | { kind: 'bad-http'; code: string };

/** A request datagram is at most 1460 bytes anyway; this only keeps the parser's bounds explicit. */
const UDP_HTTP_LIMITS = { maxHeaderBytes: MAX_DATAGRAM_PAYLOAD, maxBodyBytes: MAX_DATAGRAM_PAYLOAD };

/** DTD bodies held at once on one client-opened DHTTP connection; more are sent at once. */
const HOLDS_PER_CONNECTION = 64;

/** Bodies are never accepted (GET/HEAD only), so a client-opened connection may buffer at most this much. */
const INBOUND_HTTP_LIMITS = { maxBodyBytes: 1024 * 1024 };

/**
 * One client-opened TCP connection: either a DHTTP request stream (first byte >= 0x80) or plain HTTP/1.1.
 * Requests are answered strictly in order. Parsed requests are pulled from the parser only while fewer
 * than `maxPipelined` wait, and reading pauses while that many wait or the socket's unsent output exceeds
 * `writeHighWater`, so neither the input nor the output side grows without bound.
 */
class InboundConnection {
  private dhttp: DhttpRequestStream | null = null;
  private http: RequestParser | null = null;
  private readonly queue: Parsed[] = [];
  private working = false;
  /** No more requests will be taken (error, Connection: close, or the client ended): close when drained. */
  private stopParsing = false;
  private ended = false;
  private paused = false;
  /**
   * DTD: bodies held for a PROCEED on this connection, by request ID (bounded like the pipeline); `taken`: the
   * bytes of the body budget the held body counts against (0 for a file, which stays on disk).
   */
  private readonly holds = new Map<string, { res: FileResponse; taken: number }>();
  private readonly out: BodyWriter;
  private readonly address: string;
  private readonly decided = new Set<string>();
  /** Runs from the first byte of a request until it is complete (limits.headTimeoutMs). */
  private headDeadline: NodeJS.Timeout | null = null;

  constructor(
    private readonly sock: net.Socket,
    private readonly files: FileServer,
    private readonly coded: CodedBodyCache,
    private readonly limits: ServerLimits,
    private readonly dtdEnabled: boolean,
    private readonly dtd: ReturnType<typeof newDtdCounters>,
    private readonly bodies: BodyBudget,
    private readonly hooks: ConnHooks,
  ) {
    this.address = sock.remoteAddress ?? '';
    this.out = new BodyWriter(sock, this.address, bodies, limits.writeHighWater);
    sock.on('data', (chunk: Buffer) => this.onData(chunk));
    sock.on('end', () => {
      // allowHalfOpen: answer what was asked, then close our side.
      this.ended = true;
      void this.pump();
    });
    sock.on('drain', () => this.flowControl());
    sock.on('close', () => {
      this.clearHeadDeadline();
      for (const h of this.holds.values()) this.bodies.give(this.address, h.taken);
      this.holds.clear();
    });
  }

  private armHeadDeadline(): void {
    this.headDeadline = setTimeout(() => {
      this.headDeadline = null;
      // Paused by us (answers not yet written, the pipeline full): the wait is ours, not the client's.
      if (this.paused) return this.armHeadDeadline();
      this.hooks.headTimeout();
      this.sock.destroy();
    }, this.limits.headTimeoutMs);
    this.headDeadline.unref();
  }

  private clearHeadDeadline(): void {
    if (this.headDeadline !== null) clearTimeout(this.headDeadline);
    this.headDeadline = null;
  }

  private onData(chunk: Buffer): void {
    if (this.stopParsing || chunk.length === 0) return;
    if (this.headDeadline === null) this.armHeadDeadline();
    if (!this.dhttp && !this.http) {
      if (isDhttpStreamStart(chunk[0])) this.dhttp = new DhttpRequestStream(INBOUND_HTTP_LIMITS);
      else this.http = new RequestParser(INBOUND_HTTP_LIMITS);
    }
    (this.dhttp ?? this.http)?.push(chunk);
    this.pull();
    void this.pump();
  }

  /** Moves complete requests from the parser to the queue while there is room. */
  private pull(): void {
    try {
      while (!this.stopParsing && this.queue.length < this.limits.maxPipelined) {
        if (this.dhttp) {
          const m = this.dhttp.next();
          if (!m) break;
          this.hooks.dhttpRequest();
          this.clearHeadDeadline();
          this.queue.push({ kind: 'dhttp', id: m.id, request: m.request });
        } else if (this.http) {
          const r = this.http.next();
          if (!r) break;
          this.hooks.httpRequest();
          this.clearHeadDeadline();
          this.queue.push({ kind: 'http', request: r });
          if (!keepAlive(r)) this.stopParsing = true;
        } else {
          break;
        }
      }
    } catch (e) {
      const code = errorCode(e);
      this.hooks.malformed(code);
      this.stopParsing = true;
      // Plain HTTP gets a 400 after the good requests before it; a broken DHTTP stream has no ID to
      // answer, so it is simply closed once the requests before the error are answered.
      if (this.http) this.queue.push({ kind: 'bad-http', code });
    }
    this.flowControl();
  }

  private flowControl(): void {
    const full = this.queue.length >= this.limits.maxPipelined || this.sock.writableLength > this.limits.writeHighWater;
    if (full && !this.paused) {
      this.paused = true;
      this.sock.pause();
    } else if (!full && this.paused) {
      this.paused = false;
      if (!this.stopParsing) this.sock.resume();
    }
  }

  private async pump(): Promise<void> {
    if (this.working) return;
    this.working = true;
    try {
      while (this.queue.length > 0 && !this.sock.destroyed) {
        const item = this.queue.shift() as Parsed;
        try {
          await this.answer(item);
        } catch {
          // Could not produce an answer (a bug, not the peer's fault): the stream cannot stay in order.
          this.hooks.internalError();
          this.queue.length = 0;
          this.sock.destroy();
          break;
        }
        this.pull();
      }
    } finally {
      this.working = false;
    }
    if (this.queue.length === 0 && (this.stopParsing || this.ended)) this.finish();
  }

  private async answer(item: Parsed): Promise<void> {
    if (item.kind === 'bad-http') {
      await this.out.write(serializeResponse(simpleResponse(400, [['Connection', 'close']])));
      this.queue.length = 0;
      return;
    }
    const req = item.request;
    if (item.kind === 'dhttp' && isDecisionRequest(req)) {
      await this.decision(item.id, req);
      return;
    }
    const dtdMode = item.kind === 'dhttp' && this.dtdEnabled ? readMode(req.headers, this.dtd) : null;
    const res = await this.files.handle(req, { reprDigest: dtdMode !== null, stream: true });
    const head = req.method === 'HEAD';
    if (item.kind === 'dhttp') {
      // On the client's own connection a body sent at once cannot be cut without cutting the requests behind
      // it, so only `hold` changes anything here; otherwise the answer (with its digest) goes as usual.
      const idHex = idToHex(item.id);
      // A held body counts against the body budget (a file stays on disk); no room: it goes at once.
      const taken = res.body.length;
      if (planFor(dtdMode, req.method, res) === 'hold' && this.holds.size < HOLDS_PER_CONNECTION && this.bodies.tryTake(this.address, taken)) {
        this.holds.set(idHex, { res, taken });
        this.dtd.dtdAnnounced++;
        this.dtd.dtdHeld++;
        await this.out.write(encodeResponse(item.id, serializeResponse(announcement(res, true))));
        return;
      }
      this.countPayload(res, req.method);
      await this.send(res, head, item.id);
      return;
    }
    // plain HTTP/1.1: compressed as real servers do (content-coding.ts); a file streamed from disk goes as it is
    const out: FileResponse = res.file === undefined ? codeResponse(res, getHeader(req.headers, 'accept-encoding'), this.coded) : res;
    this.countPayload(out, req.method);
    const headers = out.headers.filter(([n]) => n.toLowerCase() !== 'connection');
    headers.push(['Connection', keepAlive(req) ? 'keep-alive' : 'close']);
    await this.send({ ...out, headers }, head, null);
  }

  /** One answer: its head, then its body (from memory, or from disk a chunk at a time); `id`: DHTTP framing. */
  private async send(res: FileResponse, head: boolean, id: Uint8Array | null): Promise<void> {
    const file = res.file;
    const http = serializeResponse(res, file === undefined ? { head } : { bodyLength: file.size });
    await this.out.write(id === null ? http : encodeResponse(id, http));
    if (file !== undefined && !head && !(await this.out.writeFile(file))) this.hooks.internalError();
  }

  private countPayload(res: FileResponse, method: string): void {
    const n = bodyLength(res);
    if (method === 'HEAD' || n === 0) return;
    this.dtd.payloadBytesSent += n;
    this.dtd.payloadResponses++;
  }

  private async decision(id: Uint8Array, req: HttpRequest): Promise<void> {
    let decision;
    try {
      decision = parseDecision(req);
    } catch (e) {
      bumpCode(this.dtd.dtdBadDecisions, errorCode(e));
      return;
    }
    const idHex = idToHex(id);
    const hold = this.holds.get(idHex);
    if (hold === undefined) {
      if (this.decided.has(idHex)) this.dtd.dtdLateDecisions++;
      else this.dtd.dtdUnknownDecisions++;
      return;
    }
    this.holds.delete(idHex);
    this.bodies.give(this.address, hold.taken); // from here the writer charges what it queues
    this.decided.add(idHex);
    if (this.decided.size > 256) this.decided.delete(this.decided.values().next().value as string);
    if (decision === 'dont-bother') {
      this.dtd.dtdDontBothers++;
      return;
    }
    this.dtd.dtdProceeds++;
    this.countPayload(hold.res, 'GET');
    await this.send(hold.res, false, id);
  }

  private finish(): void {
    if (!this.sock.destroyed) this.sock.end();
  }
}

function keepAlive(r: HttpRequest): boolean {
  const conn = getHeader(r.headers, 'connection') ?? undefined;
  if (hasToken(conn, 'close')) return false;
  if (r.version === 'HTTP/1.0') return hasToken(conn, 'keep-alive');
  return true;
}

function bindUdp(sock: dgram.Socket, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      sock.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      sock.off('error', onError);
      resolve();
    };
    sock.once('error', onError);
    sock.once('listening', onListening);
    sock.bind({ port, address: host, exclusive: true });
  });
}

function listenTcp(srv: net.Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      srv.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      srv.off('error', onError);
      const a = srv.address();
      resolve(a && typeof a === 'object' ? a.port : port);
    };
    srv.once('error', onError);
    srv.once('listening', onListening);
    srv.listen({ port, host, exclusive: true });
  });
}

function closeTcp(srv: net.Server): Promise<void> {
  return new Promise((resolve) => srv.close(() => resolve()));
}

/**
 * Starts the server. TCP is bound first (port 0 = the kernel picks), then UDP on the same number; when the
 * port was picked by the kernel and UDP cannot have it, both are retried on a new number (up to 10 times).
 */
export async function startServer(opts: ServerOptions): Promise<DhttpServer> {
  // Both sockets must bind the same address family; a host name could resolve differently for each.
  const host = opts.host === undefined || opts.host === 'localhost' ? '127.0.0.1' : opts.host;
  if (net.isIP(host) === 0) throw new ServerError('SERVER_ERR_BAD_HOST', `host must be an IP address literal, not ${JSON.stringify(host)}`);
  const requested = opts.port ?? 0;
  const limits: ServerLimits = { ...DEFAULT_LIMITS };
  for (const [k, v] of Object.entries(opts.limits ?? {}) as [keyof ServerLimits, number | undefined][]) {
    if (v !== undefined) limits[k] = v;
  }
  resolveCatpOptions(opts.catp); // throws on bad options before anything is bound
  const files = await FileServer.create({ root: opts.root, ...(opts.serveDotfiles ? { serveDotfiles: true } : {}) });
  const now = opts.now ?? (() => performance.now());
  const chooser = new ChannelChooser(opts.channel, { now, rng: opts.rng ?? cryptoRng() });
  const type: dgram.SocketType = net.isIPv6(host) ? 'udp6' : 'udp4';

  const attempts = requested === 0 ? 10 : 1;
  let lastErr: unknown;
  for (let i = 0; i < attempts; i++) {
    const tcp = net.createServer({ allowHalfOpen: true });
    const port = await listenTcp(tcp, requested, host);
    const udp = dgram.createSocket({
      type,
      reuseAddr: false,
      recvBufferSize: limits.udpRecvBufferBytes > 0 ? limits.udpRecvBufferBytes : undefined,
    });
    try {
      await bindUdp(udp, port, host);
    } catch (e) {
      lastErr = e;
      try {
        udp.close();
      } catch {
        /* never bound */
      }
      await closeTcp(tcp);
      continue;
    }
    return new Server(files, chooser, limits, udp, tcp, host, port, opts.catp, opts.dtd, now);
  }
  throw lastErr instanceof Error ? lastErr : new ServerError('SERVER_ERR_BIND', 'could not bind UDP and TCP on the same port');
}
