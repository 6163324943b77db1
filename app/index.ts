export { DhttpHost } from './dhttp-host';
export {
  channels,
  FIRST_CONTACT,
  type DhttpHostOptions,
  type FetchOptions,
  type FetchResult,
  type HostCounters,
  type LoadOptions,
  type LoadResult,
} from './host-api';
export { HostError } from './errors';
export type { Displayable, FrameRecord, StreamEvent, StreamMode } from '../protocol/catp';
export { BlockReuse, type BlockReuseOptions, type ReuseOutcome } from './block-reuse';
