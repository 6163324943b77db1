// Public API of the reference origin server.
export { startServer, DEFAULT_LIMITS } from './server';
export type { DhttpServer, ServerOptions, ServerCounters, ServerLimits } from './server';
export { ChannelChooser, DEFAULT_CHANNEL_OPTIONS, RecentKeyRing } from './channel-choice';
export { seededRng } from '../protocol/random';
export type { Channel, ChannelOptions, ChannelCounters, ChannelDecision, ChannelDeps, ChoiceReason } from './channel-choice';
export { FileServer, resolveTarget, mimeType } from './files';
export type { FileRequest, FileResponse, FileServerOptions } from './files';
export { CatpSessions, EncodedPageCache, DEFAULT_CATP_OPTIONS, MIN_CATP_RATE, parseCatpMode, parseCatpReuse, pickRate, encodeForMode } from './catp';
export type { CatpMode, CatpOptions, CatpCounters } from './catp';
