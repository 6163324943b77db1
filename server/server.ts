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
import { randomBytes } from 'crypto';
import { AddressTokens, AmplificationBudget, TOKEN_ANSWER_BYTES, TOKEN_HEADER, datagramOverhead, type AmplificationCounters } from '../protocol/dhttp/address-validation';
import { ID_BYTES, MAX_DATAGRAM_PAYLOAD, MIN_CLIENT_PORT, decodePadding, decodeRequest, encodeResponse, idToHex, isPaddingDatagram } from '../protocol/dhttp/wire';
import { FirstContactPairs } from '../protocol/dhttp/first-contact-pairs';
import { getHeader, parseRequestDatagram, serializeResponse, type HttpRequest, type HttpResponse } from '../protocol/dhttp/http1';
import { CodedBodyCache } from './content-coding';
import { isCatpReport } from '../protocol/catp';
import { ChannelChooser, type ChannelOptions, type ChannelCounters } from './channel-choice';
import { FileServer, bodyLength } from './files';
import { BodyBudget, type BodyBudgetCounters } from './body-budget';
import { CatpSessions, parseCatpMode, resolveCatpOptions, type CatpCounters, type CatpMemory, type CatpMode, type CatpOptions } from './catp';
import { isDecisionRequest } from '../protocol/dtd/messages';
import { newDtdCounters, planFor, type DtdCounters, type DtdServerOptions } from './dtd';
import { DtdResponder } from './dtd-responder';
import { catpPage, readPageWhole } from './catp-page';
import { bindSamePort } from './bind';
import { ServerError, bumpCode, errorCode } from './errors';
import { InboundConnection, type InboundDtd } from './inbound-connection';
import { DEFAULT_LIMITS, type ServerLimits } from './limits';
import { OutboundPool, type OutboundCounters } from './outbound-pool';
import { retryOverTcpResponse, retryWithTokenResponse } from './retry-responses';
import { sha256 } from '../platform/sha256';

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

export interface ServerCounters extends CatpCounters, DtdCounters, OutboundCounters {
  udpDatagrams: number;
  udpRequests: number;
  /** Dropped datagrams by error code (DHTTP_ERR_..., HTTP_ERR_...). */
  udpMalformed: Record<string, number>;
  /** Padding datagrams of first contacts (wire.ts FLAG_PADDING), well-formed: counted toward their address's budget. */
  udpPadding: number;
  /** First contacts' second halves taken as padding: a copy whose request came (wire.ts FLAG_COPY), or a request behind its copy. */
  udpCopiesPaired: number;
  /** Copies that came before their request (or without it: it was lost) and were answered as the request. */
  udpCopiesAsRequests: number;
  /** Well-formed requests answered "resend over TCP" because maxUdpInFlight were being answered (overload). */
  udpOverload: number;
  /** UDP requests for a file too large to read whole, answered "resend over TCP" (the client's connection streams it). */
  fileAnswersToTcp: number;
  resentRequests: number;
  ignoredResends: number;
  udpResponses: number;
  udpSendErrors: number;
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
  /** Address validation: answers replaced by "ask again with this token", datagrams not sent for the address's budget (what it sent), tokens that did not check out. */
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
/** A request datagram is at most 1460 bytes anyway; this only keeps the parser's bounds explicit. */
const UDP_HTTP_LIMITS = { maxHeaderBytes: MAX_DATAGRAM_PAYLOAD, maxBodyBytes: MAX_DATAGRAM_PAYLOAD };

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

/**
 * Where a held body goes when the client says PROCEED: the request's source and announced TCP port. A hold is made
 * only for a request with a valid address token, so whatever answers it goes to a proven address.
 */
interface UdpHoldCtx {
  rinfo: dgram.RemoteInfo;
  otherPort: number;
  id: Uint8Array;
  idHex: string;
}

class Server implements DhttpServer {
  readonly port: number;
  readonly host: string;
  private readonly c: Omit<ServerCounters, 'highLossMode' | 'channel' | 'amplification' | 'bodies' | keyof CatpCounters | keyof DtdCounters | keyof OutboundCounters>;
  private readonly catp: CatpSessions;
  /** DTD counters, shared by the UDP path's responder and every client-opened connection's. */
  private readonly dtdC = newDtdCounters();
  /** What each client-opened connection's own DTD responder shares with the server. */
  private readonly inboundDtd: InboundDtd;
  /** DTD for UDP requests: holds keyed by (client address, ID), answered on the channel the chooser picks. */
  private readonly dtd: DtdResponder<UdpHoldCtx>;
  private readonly holdSweep: NodeJS.Timeout;
  /** Server-opened connections (answers to UDP requests over TCP). */
  private readonly outbound: OutboundPool;
  private readonly inbound = new Set<net.Socket>();
  /** Open client-opened connections per remote address. */
  private readonly inboundPerAddress = new Map<string, number>();
  /** Compressed bodies for plain HTTP/1.1 answers, per file version and coding. */
  private readonly coded = new CodedBodyCache();
  private udpInFlight = 0;
  /** Requests being answered (`address|ID` → copies in work), from their arrival until their answer went out. */
  private readonly unanswered = new Map<string, number>();
  /** Address validation: tokens that prove a source address, and what each unproven address may still get. */
  private readonly tokens = new AddressTokens({ key: randomBytes(32), sha256 });
  private readonly budget = new AmplificationBudget();
  private readonly pairs = new FirstContactPairs();
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
    this.outbound = new OutboundPool(limits, this.bodies, (client, idHex) => this.chooser.sentTcp(client, idHex));
    const dtdEnabled = dtd?.enabled ?? true;
    this.inboundDtd = { enabled: dtdEnabled, counters: this.dtdC, now };
    this.dtd = new DtdResponder({
      enabled: dtdEnabled,
      maxHolds: dtd?.maxHolds ?? 4096,
      holdTimeoutMs: dtd?.holdTimeoutMs ?? 30_000,
      recentMemory: dtd?.recentMemory ?? 4096,
      repeatProceeds: true, // a body sent after PROCEED can be lost with its datagram or connection
      counters: this.dtdC,
      budget: this.bodies,
      addressOf: (ctx) => ctx.rinfo.address,
      now,
    });
    this.holdSweep = setInterval(() => this.dtd.expire(), Math.max(100, Math.min(1000, this.dtd.holdTimeoutMs / 4)));
    this.holdSweep.unref();
    this.host = host;
    this.port = port;
    this.c = {
      udpDatagrams: 0,
      udpRequests: 0,
      udpMalformed: {},
      udpPadding: 0,
      udpCopiesPaired: 0,
      udpCopiesAsRequests: 0,
      udpOverload: 0,
      fileAnswersToTcp: 0,
      resentRequests: 0,
      ignoredResends: 0,
      udpResponses: 0,
      udpSendErrors: 0,
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
      ...this.outbound.counters(),
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
    if (isPaddingDatagram(msg)) {
      // A first contact's padding (wire.ts FLAG_PADDING): its bytes are counted above; a stream waiting on them
      // for its first flight goes on.
      let pad;
      try {
        pad = decodePadding(msg);
      } catch (e) {
        bumpCode(this.c.udpMalformed, errorCode(e));
        return;
      }
      this.c.udpPadding++;
      this.catp.onPadding(rinfo.address, idToHex(pad.id), msg.length, true);
      return;
    }
    let dreq;
    try {
      dreq = decodeRequest(msg);
    } catch (e) {
      const code = errorCode(e);
      bumpCode(this.c.udpMalformed, code);
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
      bumpCode(this.c.udpMalformed, errorCode(e));
      return;
    }
    // Proven: this request carries a token we handed out at this address (proof is per request, never
    // remembered per address: a spoofer of a client that once proved itself has no token).
    const token = getHeader(req.headers, 'catp-token');
    const proven = token !== null && this.tokens.check(token, rinfo.address, this.now());
    if (token !== null && !proven) this.c.badTokens++;
    if (isDecisionRequest(req)) {
      // DTD PROCEED / DON'T-BOTHER on the ID of a request answered before: not a request, not in the loss ratio.
      this.onDecision(req, dreq.id, dreq.resend, rinfo);
      return;
    }
    const idHex = idToHex(dreq.id);
    if (!proven && !dreq.resend) {
      // A first contact's request and its copy (wire.ts FLAG_COPY): the first to come is the request, the other its
      // padding (the pair's dispersion only when the copy came second, as it was sent).
      const copy = dreq.copy === true;
      if (this.pairs.arrive(CatpSessions.key(rinfo.address, idHex), copy) === 'partner') {
        this.c.udpCopiesPaired++;
        this.catp.onPadding(rinfo.address, idHex, msg.length, copy);
        return;
      }
      if (copy) this.c.udpCopiesAsRequests++;
    }
    if (this.udpInFlight >= this.limits.maxUdpInFlight) {
      // Overloaded: "resend over TCP" (DHTTP paper VI-B3), on the client's own connection, which TCP's own
      // handshake and our connection limits govern; a small answer, within the budget of an unproven address.
      this.c.udpOverload++;
      this.sendUdp(encodeResponse(dreq.id, serializeResponse(retryOverTcpResponse())), rinfo, dreq.resend, proven);
      return;
    }
    // Only well-formed requests reach the channel statistics, so garbage cannot push the server into
    // high-loss mode.
    this.c.udpRequests++;
    const client = rinfo.address;
    if (dreq.resend) this.c.resentRequests++;
    const requestKey = `${client}|${idHex}`;
    const admitted = this.chooser.admit(client, idHex, dreq.resend, this.unanswered.has(requestKey), dreq.resend ? this.catp.pathRttMs(client) : null);
    if (admitted === 'ignore') {
      this.c.ignoredResends++;
      return;
    }
    const id = dreq.id;
    const resend = dreq.resend;
    // Sent before our answer could have reached the client (channel-choice.ts): answered as if it were not a resend.
    const early = admitted === 'early';
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
      // first flight (what the address sent, after the token answer: its request pays for that, the copy or
      // padding behind it for the first frame), and the rest once a request with the token repeats this one
      // (address-validation.ts; protocol/README.md).
      if (proven && this.catp.prove(catpKey)) return;
      if (!proven) {
        if (this.catp.isUnproven(catpKey)) {
          this.refuseUnproven(id, rinfo, resend); // a repeat: our token answer may have been lost
          return;
        }
        if (this.budget.remaining(client) < TOKEN_ANSWER_BYTES + datagramOverhead(client) || !this.catp.canStartUnproven(client)) {
          this.refuseUnproven(id, rinfo, resend); // no room for the token answer, or too many waiting: the token alone
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
    const held = this.dtd.reannouncement(requestKey);
    if (held !== undefined) {
      this.sendAnswer(held.res, 'GET', id, idHex, rinfo, otherPort, resend, true, early);
      return;
    }
    const dtdMode = mode === null ? this.dtd.mode(req.headers) : null;

    this.udpInFlight++;
    this.unanswered.set(requestKey, (this.unanswered.get(requestKey) ?? 0) + 1);
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
        const res = answer.file !== undefined && mode !== null ? await readPageWhole(this.files, this.bodies, answer, client) : answer;
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
        if (plan === 'hold' && !proven) {
          // A hold keeps the body in memory, charged to the request's source address, until a decision or the hold's
          // timeout: a request from a forged source would fill that address's share and starve its real owner. So an
          // address proves itself first: the token goes back (the client repeats the request with it, mode and all).
          this.dtdC.dtdHoldsUnproven++;
          this.refuseUnproven(id, rinfo, resend);
          return;
        }
        if (plan === 'hold') {
          const ann = this.dtd.hold(requestKey, res, { rinfo, otherPort, id, idHex });
          if (ann !== null) {
            this.sendAnswer(ann, 'GET', id, idHex, rinfo, otherPort, resend, true);
            return;
          }
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
            const ann = encodeResponse(id, serializeResponse(this.dtd.announceSending(res)));
            const full = encodeResponse(id, http);
            const bytes = new Uint8Array(ann.length + full.length);
            bytes.set(ann, 0);
            bytes.set(full, ann.length);
            const ob = this.outbound.send(client, otherPort, idHex, bytes);
            if (ob === 'over-budget') {
              this.retryOverBudget(id, rinfo, resend, proven);
              return;
            }
            if (ob !== null) {
              // What is still queued (in Node or in the kernel) goes only with the connection; the client closes
              // its side too, and answers queued behind on it are resent by their clients.
              this.dtd.cutOnDontBother(requestKey, () => {
                if (ob.closed || ob.socket?.destroyed === true) return false;
                this.outbound.drop(ob);
                return true;
              });
            }
            return;
          }
          // One datagram: no announcement; the digest rides in the answer.
        }
        this.sendAnswer(res, req.method, id, idHex, rinfo, otherPort, resend, proven, early);
      })
      .catch(() => {
        this.c.internalErrors++;
      })
      .finally(() => {
        if (catpKey !== null) this.catp.abandon(catpKey);
        if (taken > 0) this.bodies.give(client, taken);
        this.udpInFlight--;
        const copies = (this.unanswered.get(requestKey) ?? 1) - 1;
        if (copies > 0) this.unanswered.set(requestKey, copies);
        else this.unanswered.delete(requestKey);
      });
  }

  /**
   * A full response (or an announcement) on the channel the chooser picks. To an unproven address (`proven`
   * false: the request had no valid token) it carries a token, and it goes only if it fits the address's budget
   * (what it sent) over UDP; else the answer is "ask again with this token" (address-validation.ts). `early`: a
   * resend sent before our earlier answer could have arrived: its channel is chosen as a fresh request's.
   */
  private sendAnswer(res: HttpResponse, method: string, id: Uint8Array, idHex: string, rinfo: dgram.RemoteInfo, otherPort: number, resend: boolean, proven: boolean, early = false): void {
    const withToken = proven ? res : { ...res, headers: [...res.headers, [TOKEN_HEADER, this.tokens.issue(rinfo.address, this.now())] as [string, string]] };
    const http = serializeResponse(withToken, { head: method === 'HEAD' });
    const decision = this.chooser.choose(ID_BYTES + http.length, resend && !early, rinfo.address);
    const bytes = encodeResponse(id, http);
    if (!proven && (decision.channel === 'tcp' || !this.budget.allows(rinfo.address, bytes.length))) {
      this.refuseUnproven(id, rinfo, resend);
      return;
    }
    this.dtd.countPayload(res, method);
    if (decision.channel === 'udp') {
      this.chooser.answeredUdp(rinfo.address, idHex);
      this.sendUdp(bytes, rinfo, resend, proven);
    }
    else if (this.outbound.send(rinfo.address, otherPort, idHex, bytes) === 'over-budget') this.retryOverBudget(id, rinfo, resend, proven);
  }

  /**
   * "Resend over TCP" for an answer the body budget had no room for on a connection we open (outbound-pool.ts): on
   * the client's own connection it goes a piece at a time, an address that holds nothing always getting one
   * (body-budget.ts). Dropped, it was lost at every resend for as long as other addresses held the total (fuzz s58).
   */
  private retryOverBudget(id: Uint8Array, rinfo: dgram.RemoteInfo, resend: boolean, proven: boolean): void {
    this.sendUdp(encodeResponse(id, serializeResponse(retryOverTcpResponse())), rinfo, resend, proven);
  }

  /** "Ask again with this token": a small answer (≤ the padded request a client without a token sends). */
  private refuseUnproven(id: Uint8Array, rinfo: dgram.RemoteInfo, resend: boolean): void {
    this.c.tokenRetries++;
    this.sendUdp(encodeResponse(id, serializeResponse(retryWithTokenResponse(this.tokens.issue(rinfo.address, this.now())))), rinfo, resend, false);
  }

  /**
   * PROCEED / DON'T-BOTHER from a client (UDP), keyed like its hold by (address, ID); a held body goes on the
   * channel the chooser picks, to the address its request proved (UdpHoldCtx). Hostile ones are counted by reason
   * and dropped.
   */
  private onDecision(req: HttpRequest, id: Uint8Array, resend: boolean, rinfo: dgram.RemoteInfo): void {
    const proceed = this.dtd.decide(req, `${rinfo.address}|${idToHex(id)}`, resend);
    if (proceed === null) return;
    const ctx = proceed.ctx;
    this.sendAnswer(proceed.res, 'GET', ctx.id, ctx.idHex, ctx.rinfo, ctx.otherPort, proceed.resend, true);
  }

  /** Frames instead of a response when the answer is a 200 the mode can carry; false → answer normally. */
  private async startCatp(mode: CatpMode, req: HttpRequest, res: HttpResponse, id: Uint8Array, idHex: string, rinfo: dgram.RemoteInfo, memory: CatpMemory, sendToken: (() => void) | null): Promise<boolean> {
    const page = catpPage(mode, req, res);
    if (page === null) return false;
    return this.catp.startAsync({
      ...page,
      id,
      idHex,
      address: rinfo.address,
      port: rinfo.port,
      memory,
      ...(sendToken === null ? {} : { unproven: { budget: this.budget, sendToken } }),
    });
  }

  /** One datagram; to an unproven address only within its budget, what it sent (else dropped and counted). */
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
    new InboundConnection(sock, this.files, this.coded, this.limits, this.inboundDtd, this.bodies, {
      malformed: (code) => {
        bumpCode(this.c.tcpMalformed, code);
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
    this.dtd.close();
    this.closing = new Promise<void>((resolve) => {
      let pending = 2;
      const done = () => {
        if (--pending === 0) resolve();
      };
      this.outbound.close();
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

/** Starts the server: both sockets on one port number (bind.ts), then the Server on them. */
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
  const { udp, tcp, port } = await bindSamePort(host, requested, limits.udpRecvBufferBytes);
  return new Server(files, chooser, limits, udp, tcp, host, port, opts.catp, opts.dtd, now);
}
