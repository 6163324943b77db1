// The incremental HTTP/1.1 body reader of the tcp transport: bodies come out as they arrive, whatever the
// framing, and bad input ends the stream with a named error.
import { StreamingResponseDecoder, HttpStreamError } from '../../app/browser/http-stream';

function run(chunks: string[], end = false) {
  const out: string[] = [];
  let head: { status: number } | null = null;
  let ended = false;
  const d = new StreamingResponseDecoder({ onHead: (h) => (head = h), onData: (b) => out.push(Buffer.from(b).toString()), onEnd: () => (ended = true) }, 1000);
  for (const c of chunks) d.push(Buffer.from(c), 1n);
  if (end) d.end();
  return { out, head: head as { status: number } | null, ended };
}

test('content-length body is delivered chunk by chunk', () => {
  const r = run(['HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc', 'defg', 'hij']);
  expect(r.head?.status).toBe(200);
  expect(r.out).toEqual(['abc', 'defg', 'hij']);
  expect(r.ended).toBe(true);
});

test('chunked, split anywhere, and close-delimited bodies', () => {
  const whole = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: v\r\n\r\n';
  for (let cut = 1; cut < whole.length; cut += 7) {
    const r = run([whole.slice(0, cut), whole.slice(cut)]);
    expect(r.out.join('')).toBe('hello world');
    expect(r.ended).toBe(true);
  }
  const e = run(['HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nab', 'c'], true);
  expect(e.out.join('')).toBe('abc');
  expect(e.ended).toBe(true);
});

test('bad input is refused with a named error', () => {
  const codes = (chunks: string[], end = false) => {
    try {
      run(chunks, end);
      return 'none';
    } catch (e) {
      return (e as HttpStreamError).code;
    }
  };
  expect(codes(['HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n'])).toBe('HTTP_ERR_CL_TE_CONFLICT');
  expect(codes(['HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab'], true)).toBe('HTTP_ERR_TRUNCATED');
  expect(codes(['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'])).toBe('HTTP_ERR_BAD_CHUNK');
  expect(codes(['HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n' + 'x'.repeat(1001)])).toBe('HTTP_ERR_BODY_TOO_LARGE');
  expect(codes(['HTTP/1.1 200 OK\r\n' + 'X: y\r\n'.repeat(3000)])).toBe('HTTP_ERR_HEADER_TOO_LARGE');
  expect(codes(['HTTP/1.1 2000 OK\r\n\r\n'])).toBe('HTTP_ERR_BAD_STATUS_LINE');
  expect(codes(['HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n'])).toBe('HTTP_ERR_BAD_HEADER');
  expect(codes(['HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc'])).toBe('HTTP_ERR_TRAILING_DATA');
  expect(codes([], true)).toBe('HTTP_ERR_TRUNCATED');
});
