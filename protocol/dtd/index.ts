// Public API of DTD (duplicate transfer detection), sans-IO. See protocol/README.md, section DTD.
export * from './errors';
export * from './structured-fields';
export * from './digest-fields';
export * from './latency-model';
export * from './messages';
export * from './policy';
