// Which local address the host's sockets bind, by what they are for. One rule, two uses:
//
// - 'dhttp': a lane's UDP socket and the TCP listener servers connect back to. A loopback server gets the loopback
//   address of its family (one lane serves every loopback server and nothing outside can reach it); any other
//   server the dual-stack wildcard '::', because that server must be able to open a connection back to us.
// - 'outbound': a TCP connection we open and nobody connects back to (plain HTTP). A loopback server gets its own
//   address as our source (127.0.0.2 talks to 127.0.0.2, as the kernel would pick); any other server the
//   wildcard of its family, the kernel choosing the source.

export function isLoopback(address: string): boolean {
  return address === '::1' || address.startsWith('127.');
}

export function bindAddressFor(peer: string, use: 'dhttp' | 'outbound'): string {
  const v6 = peer.includes(':');
  if (isLoopback(peer)) return use === 'dhttp' ? (v6 ? '::1' : '127.0.0.1') : peer;
  return use === 'dhttp' ? '::' : v6 ? '::' : '0.0.0.0';
}
