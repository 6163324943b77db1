// Types for jsdom's encoding libraries (they ship none; the calls protocol/html-encoding.ts makes).
declare module 'html-encoding-sniffer' {
  function sniff(bytes: Uint8Array, opts?: { transportLayerEncodingLabel?: string; defaultEncoding?: string }): string;
  export = sniff;
}
declare module 'whatwg-encoding' {
  /** The WHATWG encoding name for a label, or null when the label names none. */
  export function labelToName(label: string): string | null;
}
