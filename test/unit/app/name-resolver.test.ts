// The host's name resolver: fetches that need one name at the same time share one lookup, an answer is kept, a
// failure is not (the next fetch asks again), and an IP literal is never looked up.
import { HostError } from '../../../app/errors';
import { NameResolver } from '../../../app/name-resolver';

/** A lookup the test answers by hand, counting the names it was asked. */
function manualLookup() {
  const asked: string[] = [];
  const waiting: Array<{ name: string; ok: (a: { address: string }) => void; fail: (e: Error) => void }> = [];
  const lookup = (name: string) =>
    new Promise<{ address: string }>((ok, fail) => {
      asked.push(name);
      waiting.push({ name, ok, fail });
    });
  return { lookup, asked, waiting };
}

test('twenty fetches of one name at once: one lookup, every one gets its address', async () => {
  const m = manualLookup();
  const r = new NameResolver(m.lookup);
  const all = Promise.all(Array.from({ length: 20 }, () => r.resolve('img.example.test')));
  await Promise.resolve();
  expect(m.asked).toEqual(['img.example.test']);
  m.waiting[0]!.ok({ address: '192.0.2.7' });
  expect(await all).toEqual(Array(20).fill('192.0.2.7'));
  // kept: the next fetch asks no one
  expect(await r.resolve('img.example.test')).toBe('192.0.2.7');
  expect(r.lookups).toBe(1);
});

test('a failed lookup fails every fetch that waited for it with HOST_ERR_DNS, and is not kept', async () => {
  const m = manualLookup();
  const r = new NameResolver(m.lookup);
  const all = Promise.allSettled(Array.from({ length: 5 }, () => r.resolve('nowhere.test')));
  await Promise.resolve();
  m.waiting[0]!.fail(Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.test'), { code: 'ENOTFOUND' }));
  const results = await all;
  expect(results.every((x) => x.status === 'rejected' && x.reason instanceof HostError && x.reason.code === 'HOST_ERR_DNS')).toBe(true);
  // asked again, once, by the next fetch
  const again = r.resolve('nowhere.test');
  await Promise.resolve();
  expect(m.asked).toEqual(['nowhere.test', 'nowhere.test']);
  m.waiting[1]!.ok({ address: '198.51.100.1' });
  expect(await again).toBe('198.51.100.1');
});

test('different names are looked up on their own; IP literals not at all', async () => {
  const m = manualLookup();
  const r = new NameResolver(m.lookup);
  const a = r.resolve('a.test');
  const b = r.resolve('b.test');
  expect(await r.resolve('127.0.0.1')).toBe('127.0.0.1');
  expect(await r.resolve('[::1]')).toBe('::1');
  await Promise.resolve();
  expect(m.asked).toEqual(['a.test', 'b.test']);
  m.waiting[1]!.ok({ address: '192.0.2.2' });
  m.waiting[0]!.ok({ address: '192.0.2.1' });
  expect([await a, await b]).toEqual(['192.0.2.1', '192.0.2.2']);
});
