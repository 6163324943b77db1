// The server's byte budget for answers held in memory (server/body-budget.ts) and the DTD hold table that
// charges it (server/dtd.ts): every byte taken is given back once, a share is per address, waiters wake in
// order among those that fit, and one address over its share never holds up another.
import { BodyBudget, FLOOR_PIECE_BYTES } from '../../../server/body-budget';
import { HoldTable } from '../../../server/dtd';
import type { HttpResponse } from '../../../protocol/dhttp/http1';

const res = (n: number): HttpResponse => ({ status: 200, reason: 'OK', headers: [], body: new Uint8Array(n) });

describe('BodyBudget', () => {
  test('takes within the total and the per-address share; refusals are counted', () => {
    const M = 1024 * 1024;
    const b = new BodyBudget({ totalBytes: 100 * M, perAddressBytes: 60 * M });
    expect(b.tryTake('a', 50 * M)).toBe(true);
    expect(b.tryTake('a', 20 * M)).toBe(false); // a's share
    expect(b.tryTake('b', 50 * M)).toBe(true);
    expect(b.tryTake('c', 1 * M)).toBe(false); // the total
    expect(b.counters()).toMatchObject({ heldBytes: 100 * M, peakBytes: 100 * M, refused: 2, refusedBytes: 21 * M });
    b.give('a', 50 * M);
    b.give('b', 50 * M);
    expect(b.counters().heldBytes).toBe(0);
  });

  test('one piece larger than a share still goes when its address holds nothing, and only one', () => {
    const M = 1024 * 1024;
    const b = new BodyBudget({ totalBytes: 100 * M, perAddressBytes: 10 * M });
    expect(b.tryTake('a', 80 * M)).toBe(true);
    expect(b.tryTake('a', 1 * M)).toBe(false);
    expect(b.tryTake('b', 10 * M)).toBe(true);
    b.give('a', 80 * M);
    expect(b.tryTake('a', 200 * M)).toBe(false); // the total is not empty
    b.give('b', 10 * M);
    expect(b.tryTake('a', 200 * M)).toBe(true); // nothing held at all: it goes, or it never would
  });

  test('clients that fill the total cannot starve one that holds nothing: it may always have one floor piece', () => {
    const b = new BodyBudget({ totalBytes: 4 * FLOOR_PIECE_BYTES, perAddressBytes: 2 * FLOOR_PIECE_BYTES });
    expect(b.tryTake('a', 2 * FLOOR_PIECE_BYTES)).toBe(true);
    expect(b.tryTake('b', 2 * FLOOR_PIECE_BYTES)).toBe(true); // the total is full
    expect(b.tryTake('c', FLOOR_PIECE_BYTES + 1)).toBe(false);
    expect(b.tryTake('c', FLOOR_PIECE_BYTES)).toBe(true); // its floor
    expect(b.tryTake('c', 1)).toBe(false); // one, not more
    b.give('c', FLOOR_PIECE_BYTES);
    expect(b.tryTake('c', FLOOR_PIECE_BYTES)).toBe(true); // again once that one is gone
  });

  test('a waiter wakes when bytes come back; waiters over their share do not hold up another address', async () => {
    const b = new BodyBudget({ totalBytes: 100, perAddressBytes: 40 });
    expect(b.tryTake('a', 40)).toBe(true);
    const order: string[] = [];
    const a1 = b.take('a', 30).then(() => order.push('a1'));
    const a2 = b.take('a', 30).then(() => order.push('a2'));
    await b.take('b', 40); // fits now: at once, though a waits
    order.push('b');
    expect(order).toEqual(['b']);
    b.give('a', 40); // a1 fits; a2 (a's share) not yet
    await a1;
    await Promise.resolve();
    expect(order).toEqual(['b', 'a1']);
    b.give('a', 30);
    await a2;
    expect(order).toEqual(['b', 'a1', 'a2']);
    expect(b.counters()).toMatchObject({ heldBytes: 70, waits: 2, waiting: 0 });
  });

  test('a wait given up (its writer’s socket closed) takes nothing and leaves no waiter behind (fuzz s58)', async () => {
    const b = new BodyBudget({ totalBytes: 100, perAddressBytes: 40 });
    expect(b.tryTake('a', 40)).toBe(true);
    const closed = new AbortController();
    const gone = b.take('a', 30, closed.signal);
    const kept = b.take('a', 30);
    expect(b.counters()).toMatchObject({ waits: 2, waiting: 2 });
    closed.abort();
    expect(await gone).toBe(false);
    expect(b.counters()).toMatchObject({ heldBytes: 40, waiting: 1 });
    b.give('a', 40); // room for one: the waiter still there gets it, the one that gave up takes nothing
    expect(await kept).toBe(true);
    expect(b.counters()).toMatchObject({ heldBytes: 30, waiting: 0 });
    expect(await b.take('a', 5, closed.signal)).toBe(true); // it fits: taken at once, aborted or not
    expect(await b.take('a', 10, closed.signal)).toBe(false); // it would wait, and its writer is gone
    expect(b.counters()).toMatchObject({ heldBytes: 35, waiting: 0 });
  });

  test('refuses sizes that are not positive', () => {
    expect(() => new BodyBudget({ totalBytes: 0 })).toThrow(RangeError);
  });
});

describe('HoldTable charges its bodies to their address', () => {
  const table = (b: BodyBudget, maxHolds = 10, recent = 2) =>
    new HoldTable<{ address: string }>(maxHolds, 1000, recent, { budget: b, addressOf: (c) => c.address });

  test('held: charged; DON’T-BOTHER: given back; PROCEED: kept (it may be asked for again) until forgotten', () => {
    const b = new BodyBudget({ totalBytes: 1000, perAddressBytes: 500 });
    const t = table(b);
    expect(t.add('a|1', res(100), { address: 'a' }, 0)).toBe(true);
    expect(t.add('a|2', res(100), { address: 'a' }, 0)).toBe(true);
    expect(b.counters().heldBytes).toBe(200);
    t.decide('a|1', 'dont-bother');
    expect(b.counters().heldBytes).toBe(100);
    expect(t.decided('a|1')?.decision).toBe('dont-bother');
    t.decide('a|2', 'proceed');
    expect(b.counters().heldBytes).toBe(100);
    expect(t.decided('a|2')?.res.body.length).toBe(100);
    // two more decided ones push a|1 and a|2 out of the recent memory (2)
    t.add('a|3', res(10), { address: 'a' }, 0);
    t.add('a|4', res(10), { address: 'a' }, 0);
    t.decide('a|3', 'proceed');
    t.decide('a|4', 'proceed');
    expect(t.decided('a|2')).toBeUndefined();
    expect(b.counters().heldBytes).toBe(20);
    t.clear();
    expect(b.counters().heldBytes).toBe(0);
  });

  test("a body over its address's share is not held (the caller sends it at once); another address is", () => {
    const b = new BodyBudget({ totalBytes: 1000, perAddressBytes: 150 });
    const t = table(b);
    expect(t.add('a|1', res(100), { address: 'a' }, 0)).toBe(true);
    expect(t.add('a|2', res(100), { address: 'a' }, 0)).toBe(false);
    expect(t.add('b|1', res(100), { address: 'b' }, 0)).toBe(true);
    expect(t.size).toBe(2);
  });

  test('expired holds give their bytes back', () => {
    const b = new BodyBudget({ totalBytes: 1000, perAddressBytes: 500 });
    const t = table(b);
    t.add('a|1', res(100), { address: 'a' }, 0);
    t.add('a|2', res(50), { address: 'a' }, 900);
    expect(t.expire(1000)).toBe(1);
    expect(b.counters().heldBytes).toBe(50);
  });
});
