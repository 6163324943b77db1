// The browser API between the renderer and the host: one typed contract, independent of the transport that
// carries it (a WebSocket for the Chromium-window shell, Electron IPC for the Electron shell, a direct call
// in tests) — VS Code's `base/parts/ipc` idea. Commands go renderer → host, events host → renderer.
//
// It lives in protocol/ (pure types, constants and a validator, no IO) so that both sides may import it: the
// renderer as types only; `isCommand` below is the host's gate for untrusted command objects.
import type { CatpAttr, DocumentMode } from '../catp/index-piece';

/** How a page is fetched and painted. */
export type Transport =
  /** dhttp:// HTML as CATP frames, painted out of order (default for dhttp://). */
  | 'catp'
  /** dhttp:// HTML as raw datagrams, painted up to the first gap (the in-order UDP baseline). */
  | 'inorder'
  /** http:// HTTP/1.1, painted as the bytes arrive in order. */
  | 'tcp'
  /** dhttpt:// and non-HTML: the whole response, shown when it is complete. */
  | 'whole';

export const TRANSPORTS: readonly Transport[] = ['catp', 'inorder', 'tcp', 'whole'];

/**
 * DOM operations, host → renderer, as one flat array of numbers and strings (compact to carry and to parse: no
 * per-node objects). The host's tree builder (protocol/catp/tree.ts) decides everything — where each node goes,
 * provisional ancestors, placeholders; the renderer only applies the operations, in order. Handles are positive
 * integers the host gives out in creation order; handle 0 is the page's document.
 *
 * A batch (one `dom` event's operations; [] for none) starts with the handle its first created node gets; each
 * operation that creates a node takes the next one in turn, so a created node's handle is not carried (a batch
 * the renderer could not read to the end costs no later batch its handles). Layouts (`…` = repeated):
 *
 *   RESET        0, mode (0 no-quirks, 1 quirks, 2 limited-quirks), fragment (0|1)   empty the document
 *   ELEMENT      1, tag, ns, attrs                 create (detached)
 *   TEXT         2, value
 *   COMMENT      3, data
 *   DOCTYPE      4, name, publicId, systemId
 *   CONTENT      5, template                      the template element's content fragment
 *   PLACEHOLDER  6, kind, ordinal                 a <catp-missing> element: kind 0, text to come for slot `ordinal`;
 *                                                kind 1, the piece of index frame `ordinal` to come
 *   INSERT       7, parent, h, before            insert h into parent before `before` (0: append)
 *   REMOVE       8, h                            detach h (and forget it)
 *   SET_TEXT     9, h, value
 *   SET_ATTRS   10, h, attrs                     (a provisional element's attributes)
 *   INSERT_TEXT 11, h, offset, text             insert text into h's data at offset (UTF-16 units): one part of a
 *                                               text whose parts arrive apart, in any order
 *   APPEND_NEW  12, parent                       append the node this batch created last (INSERT's commonest case)
 *
 * `ns` is 0 html, 1 svg, 2 mathml, or the namespace URI as a string. `attrs` is a count n, then n × (name, value)
 * when n ≥ 0, or −n × (name, value, attrNs, prefix) when n < 0 (some attribute has a namespace; '' for none).
 */
export type DomOps = Array<number | string>;
export const DOM_OP = {
  RESET: 0,
  ELEMENT: 1,
  TEXT: 2,
  COMMENT: 3,
  DOCTYPE: 4,
  CONTENT: 5,
  PLACEHOLDER: 6,
  INSERT: 7,
  REMOVE: 8,
  SET_TEXT: 9,
  SET_ATTRS: 10,
  INSERT_TEXT: 11,
  APPEND_NEW: 12,
} as const;


/** One arriving frame (or, for tcp, one arriving TCP chunk) as the renderer's timeline shows it. */
export interface WireFrame {
  /** Kernel receive time, epoch ms (CLOCK_REALTIME); falls back to the host's clock when unknown. */
  atEpochMs: number;
  seq: number | null;
  kind: 'index' | 'data' | 'raw' | 'tcp' | null;
  bytes: number;
  accepted: boolean;
  /** It made something new displayable (the network floor counts only these). */
  useful: boolean;
  /** Frames below the highest seq seen that have not arrived yet. */
  missing: number;
  /** Frames so far that arrived after a later one (filled a gap: a repair or a reordering). */
  repaired: number;
  received: number;
  code?: string;
}

/** A JSON form of a DOM / parse5 tree, for --dump-dom (walked in the page, serialized by parse5 in the host). */
export type DumpNode =
  | { t: 'doc'; mode: DocumentMode; children: DumpNode[] }
  | { t: 'el'; tag: string; ns: string; attrs: CatpAttr[]; children: DumpNode[]; content?: DumpNode[] }
  | { t: 'text'; v: string }
  | { t: 'comment'; v: string }
  | { t: 'doctype'; name: string; publicId: string; systemId: string };

export interface VisibleUpdate {
  /** Epoch ms when the update reached the screen (the task after the frame that painted it). */
  atEpochMs: number;
  /** What it showed: 'skeleton', 'blocks' (count), 'bytes' (count), 'whole'. */
  what: string;
  count: number;
}

/**
 * What the payload store saved on one load: CATP blocks filled from it instead of the network, and DTD hits
 * (the page itself when fetched whole, its sub-resources). The time is an estimate: bytes saved divided by the
 * rate frames arrive at from that origin (measured on its CATP loads; before any, the pacing rate asked for or
 * 10 Mb/s), plus for DTD hits the DTD agent's own estimate (bytes / its measured bandwidth).
 */
export interface LoadSavings {
  /** CATP blocks of the page, and how many were filled from the store (never requested). */
  blocks: number;
  blocksReused: number;
  /** Responses answered from the store after a DTD announcement (DON'T-BOTHER). */
  dtdHits: number;
  /** Bytes the network did not carry: reused data frames (CATP header included) and DTD bodies. */
  bytesSaved: number;
  /** Estimated transfer time those bytes would have taken (ms). */
  savedMs: number;
  /** How the estimate was made, e.g. "21862 B / 2.33 MB/s measured from this origin's CATP frames". */
  estimate: string;
}

/** One load's silent-time record (DESIGN.md "Silent time"). Times are epoch ms unless named *Ms. */
export interface LoadRecord {
  version: 1;
  url: string;
  transport: Transport;
  loadId: number;
  requestAtEpochMs: number;
  updates: VisibleUpdate[];
  arrivals: WireFrame[];
  /** Longest gap between consecutive visible updates, the first starting at the request (ms). */
  silentTimeMs: number;
  /** Where the longest silent gap starts and ends (epoch ms). */
  silentGap: { from: number; to: number };
  /**
   * CATP: for each `dom` event in arrival order (one per frame that made something displayable), when the paint
   * that shows its content happened (epoch ms). Pairs with the useful frames of `arrivals`: receive-to-paint.
   */
  domPaintedAtEpochMs?: number[];
  /**
   * CATP, the same `dom` events: when the host sent each (its clock), when the renderer received it, and when its
   * operations were all in the document (epoch ms). They split receive-to-paint into host, queue + apply, paint.
   */
  domSentAtEpochMs?: number[];
  domReceivedAtEpochMs?: number[];
  domAppliedAtEpochMs?: number[];
  /** Longest gap between arrivals of useful frames, the first starting at the request (ms). */
  networkFloorMs: number;
  firstPaintMs: number | null;
  completeMs: number | null;
  /** Host-side completion (last frame / byte handed over), ms after the request. */
  hostCompleteMs: number | null;
  outcome: 'complete' | 'error' | 'stopped';
  error?: string;
  /** What the payload store saved (absent when the browser runs without a store). */
  savings?: LoadSavings;
}

/** Commands, renderer → host. */
export type BrowserCommand =
  | { type: 'navigate'; url: string; transport?: Transport }
  | { type: 'stop' }
  | { type: 'reload' }
  | { type: 'back' }
  | { type: 'forward' }
  /** The renderer's answer to `dump-request`. */
  | { type: 'dump-tree'; requestId: number; tree: DumpNode | null }
  /** The renderer finished a load (painted it all, or gave up) and hands over its record. */
  | { type: 'load-record'; record: LoadRecord }
  /** Save a record as JSON on the host (user action). */
  | { type: 'save-record'; record: LoadRecord }
  /** The renderer is ready for events (sent once per connection). */
  | { type: 'ready' }
  /** Open the current page in the side-by-side demo (`catp demo`), when the host offers it (hello.canCompare). */
  | { type: 'compare' };

export interface HistoryState {
  canBack: boolean;
  canForward: boolean;
}

/** Events, host → renderer. Every load event carries the load's id; a renderer ignores stale ids. */
export type BrowserEvent =
  | { type: 'hello'; hostEpochMs: number; version: 1; defaultTransport: Transport; shell: string; canCompare?: boolean }
  | {
      type: 'load-started';
      loadId: number;
      url: string;
      transport: Transport;
      /** The request's send time, epoch ms (CLOCK_REALTIME). */
      requestAtEpochMs: number;
      /** The URL the page frame loads (an empty document whose base URL resolves sub-resources via the host). */
      viewUrl: string;
      history: HistoryState;
      /** This load follows redirects from these URLs (first first); `url` is where they led. */
      redirectedFrom?: string[];
    }
  /**
   * CATP: part of the page's tree, as DOM operations (see DomOps). `pieces` index pieces and `blocks` data blocks
   * became displayable with it (what the paint that shows it counts as a visible update).
   */
  | {
      type: 'dom';
      loadId: number;
      /** When the host sent it (epoch ms, the host's clock). */
      atEpochMs: number;
      ops: DomOps;
      pieces: number;
      blocks: number;
      /** The blocks whose content these operations show (numbers), and the page's block count once known (else -1). */
      filled: number[];
      blockCount: number;
    }
  /** In-order text (inorder / tcp): the next decoded characters of the page. */
  | { type: 'text'; loadId: number; text: string; offset: number; total: number | null }
  /** The record of one arriving frame (after the content events it caused, if any). */
  | { type: 'frame'; loadId: number; frame: WireFrame }
  /** A whole response (dhttpt://, non-HTML, or a server that answered without streaming). */
  | { type: 'whole'; loadId: number; status: number; contentType: string; text: string; html: boolean; atEpochMs: number }
  /** The payload store saved something on this load (sent again whenever the figures grow). */
  | { type: 'savings'; loadId: number; savings: LoadSavings }
  | { type: 'complete'; loadId: number; atEpochMs: number; counters: Record<string, number> }
  | { type: 'error'; loadId: number; code: string; message: string; url: string }
  | { type: 'stopped'; loadId: number }
  | { type: 'dump-request'; requestId: number }
  | { type: 'record-saved'; path: string }
  /** What became of a `compare` command. */
  | { type: 'compare-opened'; url: string; message: string }
  /**
   * Before the first load: the host's warm-up page as DOM operations, batch by batch. The renderer builds them in a
   * document that is never shown, so that a fresh renderer's code is compiled before a page's operations need it.
   */
  | { type: 'warm-up'; batches: DomOps[] };

/** The object a shell hands to the renderer (the preload's `window.catp`, or the WebSocket client). */
export interface BrowserApi {
  send(command: BrowserCommand): void;
  onEvent(listener: (event: BrowserEvent) => void): () => void;
}

/** Electron IPC channel names all start with this; the preload refuses anything else. */
export const IPC_PREFIX = 'catp:';
export const IPC_COMMAND = 'catp:command';
export const IPC_EVENT = 'catp:event';

const MAX_URL = 8192;

/** The host's gate for a command from the renderer: shape-checked, bounded; anything else is refused. */
export function isCommand(value: unknown): value is BrowserCommand {
  if (typeof value !== 'object' || value === null) return false;
  const c = value as Record<string, unknown>;
  switch (c.type) {
    case 'navigate':
      return typeof c.url === 'string' && c.url.length <= MAX_URL &&
        (c.transport === undefined || (typeof c.transport === 'string' && (TRANSPORTS as readonly string[]).includes(c.transport)));
    case 'stop':
    case 'reload':
    case 'back':
    case 'forward':
    case 'ready':
    case 'compare':
      return true;
    case 'dump-tree':
      return typeof c.requestId === 'number' && (c.tree === null || typeof c.tree === 'object');
    case 'load-record':
    case 'save-record':
      return typeof c.record === 'object' && c.record !== null;
    default:
      return false;
  }
}
