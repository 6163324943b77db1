// The phases of one DHTTP request in the client (client.ts) and the one table of moves between them.
/**
 * Where a request stands: one field, moved only by `DhttpClient.moveTo`, which checks the move against `TRANSITIONS`
 * (h11's way: every legal move is in one table; a move not in it is our bug, never the peer's).
 *
 * - `new`: not sent yet.
 * - `udp`: its datagram is out; the resend timer runs.
 * - `udp-streaming`: stream datagrams arrive (RequestInit.streamed): the stream's own repair drives it, no timer.
 * - `tcp`: sent on our own DHTTP-over-TCP connection (`conn`).
 * - `{udp,tcp}-dtd-held`: the server announced the answer and holds the body: waiting for `dtdDecide`.
 * - `{udp,tcp}-dtd-sending`: announced, the body on its way. `{udp,tcp}-dtd-proceeded`: our PROCEED is out.
 *   (The prefix is where the request went, not where the announcement came from.)
 * - `http-queued` / `http-sent`: plain HTTP/1.1, waiting for the origin's connection / on it (`conn`).
 * - `done`: answered, failed or cancelled. A plain HTTP answer still on the wire is read and dropped.
 *
 * Beside the phase, `inbound` names a connection the server opened that is delivering its answer (or the body of
 * its DTD announcement), whatever the phase: bytes on it keep the request alive, and its close asks again.
 */
export type Phase =
  | 'new'
  | 'udp'
  | 'udp-streaming'
  | 'tcp'
  | 'udp-dtd-held'
  | 'udp-dtd-sending'
  | 'udp-dtd-proceeded'
  | 'tcp-dtd-held'
  | 'tcp-dtd-sending'
  | 'tcp-dtd-proceeded'
  | 'http-queued'
  | 'http-sent'
  | 'done';

/** Every legal move (staying put is always allowed). Any phase may end (`done`); every DHTTP phase may fall back to plain HTTP. */
export const TRANSITIONS: Readonly<Record<Phase, readonly Phase[]>> = {
  new: ['udp', 'tcp', 'http-queued', 'done'],
  udp: ['udp-streaming', 'tcp', 'udp-dtd-held', 'udp-dtd-sending', 'http-queued', 'done'],
  'udp-streaming': ['tcp', 'http-queued', 'done'],
  tcp: ['tcp-dtd-held', 'tcp-dtd-sending', 'http-queued', 'done'],
  'udp-dtd-held': ['udp-dtd-proceeded', 'tcp-dtd-held', 'http-queued', 'done'],
  'udp-dtd-sending': ['udp-dtd-proceeded', 'udp', 'tcp-dtd-sending', 'http-queued', 'done'],
  'udp-dtd-proceeded': ['tcp-dtd-proceeded', 'http-queued', 'done'],
  'tcp-dtd-held': ['tcp-dtd-proceeded', 'http-queued', 'done'],
  'tcp-dtd-sending': ['tcp-dtd-proceeded', 'tcp', 'http-queued', 'done'],
  'tcp-dtd-proceeded': ['http-queued', 'done'],
  'http-queued': ['http-sent', 'done'],
  'http-sent': ['http-queued', 'done'],
  done: [],
};

/** The channel a request travels on in this phase. */
export function channelOf(phase: Phase): 'udp' | 'tcp' | 'http' | null {
  if (phase === 'new' || phase === 'done') return null;
  return phase.startsWith('udp') ? 'udp' : phase.startsWith('tcp') ? 'tcp' : 'http';
}

/** Where the DTD exchange stands in this phase, or null when none is under way. */
export function dtdOf(phase: Phase): 'held' | 'sending' | 'proceeded' | null {
  const m = /-dtd-(held|sending|proceeded)$/.exec(phase);
  return m === null ? null : (m[1] as 'held' | 'sending' | 'proceeded');
}

/** The same phase on our own TCP connection (a DTD exchange under way carries over). */
export function overTcp(phase: Phase): Phase {
  const dtd = dtdOf(phase);
  return dtd === null ? 'tcp' : `tcp-dtd-${dtd}`;
}
