// Public API of the sans-IO CATP layer. See protocol/README.md, section CATP.
export { CatpError, REJECT, CATP_ERR, LocalProtocolError, RemoteProtocolError, ProtocolError, isProtocolError } from './errors';
export type { CatpRejectCode } from './errors';
export * from './wire';
export * from './index-piece';
export * from './payload-codec';
export { TAG_NAMES } from './names';
export { encodePage, encodeTree, hidesText, CATP_SCRIPTING, CHECK_BYTES, DIGEST_BYTES, FIRST_FLIGHT, INLINE_WHITESPACE_MAX, CONTEXT_INLINE_MAX, ATTR_INLINE_MAX, COMMENT_INLINE_MAX } from './encoder';
export { ReuseGate } from './reuse-gate';
export type { ReuseOptions, ReuseStats } from './reuse-gate';
export type { EncodeOptions, EncodedPage, FirstFlight, Sha256 } from './encoder';
export { CatpAssembler, DEFAULT_ASSEMBLER_LIMITS, slotRefs } from './assembler';
export type { AssemblerOptions, AssemblerLimits, CatpEvent, RawEvent, RawAssemblerEvent, ReceiveResult, SlotFill } from './assembler';
export { RepairReceiver, RepairSender } from './repair';
export type { ReceiverOptions, SenderOptions, SenderStats } from './repair';
export { encodeRaw, RawAssembler, RAW_MAX_EXPANSION, RAW_META_BYTES } from './raw';
export type { EncodedRaw } from './raw';
export { StreamLoad, STREAM_TAIL_MS } from './stream-load';
export type { BlockSummary, Displayable, FrameRecord, ReceivedBlock, StreamEnd, StreamEvent, StreamLoadOptions, StreamMode, StreamStep, StreamSummary } from './stream-load';
export { CatpTreeBuilder, Parse5TreeBuilder, parse5Sink, parse5TreeBuilder, placeholderTitle } from './tree';
export type { CatpTreeSink } from './tree';

import type { EncodedPage } from './encoder';
import type { EncodedRaw } from './raw';
import { RepairSender, SenderOptions } from './repair';

/** Server side in one call: a paced, repairing sender for an encoded page (CATP or raw). */
export function createSender(page: EncodedPage | EncodedRaw, opts: SenderOptions): RepairSender {
  return new RepairSender(page.frames, 'indexFrames' in page ? page.indexFrames : 0, opts);
}
