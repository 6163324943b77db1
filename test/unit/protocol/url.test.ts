import { LocalProtocolError } from '../../../protocol/errors';
import { hostLiteral, parseTarget, urlHost } from '../../../protocol/dhttp/url';
import { DhttpClient } from '../../../protocol/dhttp/client';

test.each([
  ['dhttp://example.com/a/b?q=1#frag', { scheme: 'dhttp', host: 'example.com', port: 80, path: '/a/b?q=1', origin: 'dhttp://example.com' }],
  ['dhttpt://Example.COM:8080', { scheme: 'dhttpt', host: 'example.com', port: 8080, path: '/', origin: 'dhttpt://example.com:8080' }],
  ['http://127.0.0.1:8080?x', { scheme: 'http', host: '127.0.0.1', port: 8080, path: '/?x', origin: 'http://127.0.0.1:8080' }],
  ['DHTTP://[::1]:9000/x', { scheme: 'dhttp', host: '[::1]', port: 9000, path: '/x', origin: 'dhttp://[::1]:9000' }],
  ['dhttp://[2001:DB8::1]/', { scheme: 'dhttp', host: '[2001:db8::1]', port: 80, path: '/', origin: 'dhttp://[2001:db8::1]' }],
  ['dhttp://h/caf\u00e9 x', { scheme: 'dhttp', host: 'h', port: 80, path: '/caf%C3%A9%20x', origin: 'dhttp://h' }],
  ['https://h/x', { scheme: 'https', host: 'h', port: 443, path: '/x', origin: 'https://h' }],
  ['https://h:80/', { scheme: 'https', host: 'h', port: 80, path: '/', origin: 'https://h:80' }],
])('%s', (url, want) => {
  expect(parseTarget(url)).toEqual(want);
});

test.each([
  ['ftp://h/', 'DHTTP_ERR_BAD_SCHEME'],
  ['gopher://h/', 'DHTTP_ERR_BAD_SCHEME'],
  ['/relative', 'DHTTP_ERR_BAD_URL'],
  ['dhttp:///x', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://user@h/', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://h:0/', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://h:70000/', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://h:x/', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://[::1/', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://[zz]/', 'DHTTP_ERR_BAD_URL'],
  ['dhttp://h o/', 'DHTTP_ERR_BAD_URL'],
])('%s -> %s', (url, code) => {
  expect(() => parseTarget(url)).toThrow(LocalProtocolError);
  expect(() => parseTarget(url)).toThrow(expect.objectContaining({ code }));
});

test('the DHTTP client refuses https:// (TLS is the host\'s: it never sends one in the clear)', () => {
  const c = new DhttpClient({ udpPort: 5000, tcpPort: 5001, randomBytes: (n) => new Uint8Array(n).fill(0x81) });
  expect(() => c.request({ url: 'https://127.0.0.1/x' }, 0)).toThrow(expect.objectContaining({ code: 'DHTTP_ERR_BAD_SCHEME' }));
});

test('hostLiteral and urlHost: a URL host and the address it names, IPv6 brackets off and on', () => {
  expect(hostLiteral('[::1]')).toBe('::1');
  expect(hostLiteral('127.0.0.1')).toBe('127.0.0.1');
  expect(hostLiteral('example.com')).toBe('example.com');
  expect(urlHost('::1')).toBe('[::1]');
  expect(urlHost('[::1]')).toBe('[::1]');
  expect(urlHost('10.0.0.1')).toBe('10.0.0.1');
  for (const h of ['[2001:db8::1]', '10.0.0.1', 'host']) expect(urlHost(hostLiteral(h))).toBe(h);
  expect(hostLiteral(parseTarget('dhttp://[::1]:9/').host)).toBe('::1');
});
