export { DhttpHost, channels, type DhttpHostOptions, type FetchOptions, type FetchResult, type HostCounters } from './dhttp-host';
export { HostError } from './errors';
