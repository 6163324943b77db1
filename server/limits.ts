// The reference server's resource limits: connections, timeouts, queues and the body budget. Every one bounds
// what a peer can make the server hold or do; startServer's `limits` option overrides any of them.

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
  /**
   * A server-opened connection not connected this long after its last attempt began gets another attempt, up to
   * `connectAttempts` in all; the first to connect carries the answers, the others are closed (RFC 8305's
   * connection attempt delay, 250 ms). A lost SYN or SYN-ACK otherwise waits for the kernel's first SYN
   * retransmission, a second later.
   */
  connectRaceMs: number;
  connectAttempts: number;
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
  connectRaceMs: 250,
  connectAttempts: 3,
  writeHighWater: 1024 * 1024,
  outboundMaxQueued: 16 * 1024 * 1024,
  maxPipelined: 32,
  maxUdpInFlight: 1024,
  udpRecvBufferBytes: 4 * 1024 * 1024,
  bodyBudgetBytes: 128 * 1024 * 1024,
  bodyBudgetPerAddressBytes: 16 * 1024 * 1024,
});
