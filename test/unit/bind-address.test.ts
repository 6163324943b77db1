// The host's one bind-address rule (app/bind-address.ts), for its two uses.
import { bindAddressFor, isLoopback } from '../../app/bind-address';

test.each([
  // peer, DHTTP lane (servers connect back), outbound-only TCP
  ['127.0.0.1', '127.0.0.1', '127.0.0.1'],
  ['127.0.0.2', '127.0.0.1', '127.0.0.2'],
  ['::1', '::1', '::1'],
  ['10.0.0.1', '::', '0.0.0.0'],
  ['2001:db8::1', '::', '::'],
])('%s: a DHTTP lane binds %s, an outbound connection %s', (peer, dhttp, outbound) => {
  expect(bindAddressFor(peer, 'dhttp')).toBe(dhttp);
  expect(bindAddressFor(peer, 'outbound')).toBe(outbound);
});

test('loopback: 127/8 and ::1, nothing else', () => {
  expect(['127.0.0.1', '127.255.0.9', '::1'].every(isLoopback)).toBe(true);
  expect(['10.0.0.1', '::', '0.0.0.0', '::ffff:127.0.0.1', '128.0.0.1'].some(isLoopback)).toBe(false);
});
