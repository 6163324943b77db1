// Public API of the reference origin server.
export { startServer } from './server';
export type { DhttpServer, ServerOptions, ServerCounters } from './server';
export { DEFAULT_LIMITS } from './limits';
export type { ServerLimits } from './limits';
export { ChannelChooser, DEFAULT_CHANNEL_OPTIONS, RecentKeyRing } from './channel-choice';
export { seededRng } from '../protocol/random';
export type { Channel, ChannelOptions, ChannelCounters, ChannelDecision, ChannelDeps, ChoiceReason } from './channel-choice';
export { FileServer, resolveTarget, mimeType } from './files';
export type { FileRequest, FileResponse, FileServerOptions } from './files';
export { CatpSessions, EncodedPageCache, DEFAULT_CATP_OPTIONS, MIN_CATP_RATE, parseCatpMode, parseCatpReuse, pickRate, encodeForMode } from './catp';
export type { CatpMode, CatpOptions, CatpCounters } from './catp';
