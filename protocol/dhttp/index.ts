// Public API of the sans-IO DHTTP layer. See protocol/README.md.
export { ProtocolError, LocalProtocolError, RemoteProtocolError, isProtocolError } from '../errors';
export { DhttpError, HttpParseError } from './errors';
export * from './wire';
export * from './http1';
export * from './stream';
export * from './url';
export * from './client';
export * from './client-api';
