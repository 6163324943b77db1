// The shared worker that holds the Chromium shell's socket (renderer/api-worker.ts): what it relays each way, and
// that either end going closes the other. Node's MessageChannel stands in for the page's port, a fake for the socket.
import { MessageChannel, type MessagePort as NodePort } from 'node:worker_threads';

import { servePort, type FromWorker, type Port, type Socket } from '../../../renderer/api-worker';

class FakeSocket {
  readyState = 0;
  sent: string[] = [];
  closed = false;
  onopen: (() => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: (() => void) | null = null;
  constructor(
    readonly url: string,
    readonly protocols: string[],
  ) {}
  send(m: string): void {
    this.sent.push(m);
  }
  close(): void {
    this.closed = true;
  }
  open(): void {
    this.readyState = 1;
    this.onopen?.();
  }
}

function rig(): { page: NodePort; got: FromWorker[]; sockets: FakeSocket[]; next(): Promise<void> } {
  const { port1: page, port2: worker } = new MessageChannel();
  const sockets: FakeSocket[] = [];
  // the worker side takes a port; Node's MessagePort has the same onmessage / postMessage / close
  servePort(worker as unknown as Port, (url, protocols) => {
    const s = new FakeSocket(url, protocols);
    sockets.push(s);
    return s;
  });
  const got: FromWorker[] = [];
  page.on('message', (m: FromWorker) => got.push(m));
  // a message posted on one port arrives on the other a turn of the event loop later
  const next = () => new Promise<void>((ok) => setTimeout(ok, 10));
  return { page, got, sockets, next };
}

test('opens the socket the page names, with its secret, and relays events and commands', async () => {
  const r = rig();
  r.page.postMessage('{"type":"early"}'); // before any socket: dropped (the page queues its commands until up)
  r.page.postMessage({ open: 'ws://127.0.0.1:9/__catp/ws', secret: 's3cret' });
  await r.next();
  expect(r.sockets).toHaveLength(1);
  expect(r.sockets[0].url).toBe('ws://127.0.0.1:9/__catp/ws');
  expect(r.sockets[0].protocols).toEqual(['catp.v1', 'catp-secret.s3cret']);
  r.sockets[0].open();
  await r.next();
  expect(r.got).toEqual([{ up: true }]);
  r.sockets[0].onmessage?.({ data: '{"type":"dom"}' });
  r.page.postMessage('{"type":"navigate"}');
  await r.next();
  expect(r.got).toEqual([{ up: true }, '{"type":"dom"}']);
  expect(r.sockets[0].sent).toEqual(['{"type":"navigate"}']);
  // a second open, and what is neither a command nor a known message, change nothing
  r.page.postMessage({ open: 'ws://elsewhere/', secret: 'x' });
  r.page.postMessage(42);
  r.page.postMessage(null);
  await r.next();
  expect(r.sockets).toHaveLength(1);
  r.page.close();
});

test('the socket closing tells the page once; the page going closes the socket', async () => {
  const r = rig();
  r.page.postMessage({ open: 'ws://127.0.0.1:9/__catp/ws', secret: 's' });
  await r.next();
  r.sockets[0].open();
  r.sockets[0].onclose?.();
  r.sockets[0].onclose?.();
  await r.next();
  expect(r.got).toEqual([{ up: true }, { down: true }]);

  const q = rig();
  q.page.postMessage({ open: 'ws://127.0.0.1:9/__catp/ws', secret: 's' });
  await q.next();
  q.page.postMessage({ close: true });
  await q.next();
  expect(q.sockets[0].closed).toBe(true);
  q.page.close();
});

test('a socket that cannot be made is reported down at once', async () => {
  const { port1: page, port2: worker } = new MessageChannel();
  servePort(worker as unknown as Port, (): Socket => {
    throw new Error('SyntaxError: bad URL');
  });
  const got: FromWorker[] = [];
  page.on('message', (m: FromWorker) => got.push(m));
  page.postMessage({ open: 'not a url', secret: 's' });
  await new Promise((ok) => setTimeout(ok, 10));
  expect(got).toEqual([{ down: true }]);
  page.close();
});
