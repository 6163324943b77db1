// What the app page and the agent frame (frame-agent.ts) say to each other over their MessagePort. The agent and the
// page frame it builds are on the shell's frame origin, another origin than the app page's: neither reaches the app
// page, its secret or its API — only this port, whose messages the app reads as untrusted (a click asks to
// navigate, as a user's click would; a stamp is a time).
import type { DomOps, DumpNode, VisibleUpdate } from '../protocol/browser/api';
import type { DocumentMode } from '../protocol/catp/index-piece';

/** App → frame. Every message of a load carries its loadId; the agent drops what belongs to an earlier load. */
export type ToFrame =
  /** A new load: an empty document at the page's /view/ URL (no navigation: a fresh document costs ~250 ms). */
  | { t: 'reset'; loadId: number; viewUrl: string }
  /** CATP: DOM operations (k: the dom event's index in the load); stamped when applied and when painted. */
  | { t: 'ops'; loadId: number; k: number; ops: DomOps; what: 'index' | 'blocks'; count: number }
  /** In-order / TCP: markup for the frame's own parser. */
  | { t: 'text'; loadId: number; text: string }
  /** A whole answer: HTML for the parser, or something shown as an image, text or a note. */
  | { t: 'whole'; loadId: number; html: boolean; text: string; contentType: string }
  /** The load is over: close the written document, let what is queued be applied, then say 'settled'. */
  | { t: 'finish'; loadId: number; complete: boolean }
  /** Before the first load: DOM operations to build in a document never shown (the agent's code compiles on them). */
  | { t: 'warm-up'; batches: DomOps[] }
  | { t: 'dump'; id: number; mode: DocumentMode | null }
  | { t: 'scroll-to'; id: string };

/** Frame → app. */
export type FromFrame =
  | { t: 'hello' }
  | { t: 'update'; loadId: number; update: VisibleUpdate }
  | { t: 'dom-applied'; loadId: number; k: number; atEpochMs: number }
  | { t: 'dom-painted'; loadId: number; k: number; atEpochMs: number }
  /** The warm-up ended (built WARM_UP_ROUNDS times, or given way to a page): the batches it built. */
  | { t: 'warmed-up'; batches: number }
  /** Everything of the load has been applied and painted. */
  | { t: 'settled'; loadId: number }
  | { t: 'stats'; loadId: number; stats: FrameStats }
  /** A link in the page was followed: its absolute URL (the app decides what it means). */
  | { t: 'click'; href: string }
  | { t: 'dump'; id: number; tree: DumpNode | null };

export interface FrameStats {
  /** CATP: placeholders in the document now, names the DOM refused, operations refused, the longest slice (ms). */
  placeholders: number;
  fallbacks: number;
  bad: number;
  longestSliceMs: number;
  /** The document's height (px), for tools that size a capture. */
  height: number;
}

/** The agent's hello to the app, and the app's answer that hands it the port (its one transfer). */
export const PORT_MESSAGE = 'catp-frame-port';
