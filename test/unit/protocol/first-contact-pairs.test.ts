import { FirstContactPairs } from '../../../protocol/dhttp/first-contact-pairs';

test('whichever of request and copy comes first is the request, the other its padding; the same kind again is a repeat', () => {
  const p = new FirstContactPairs();
  expect(p.arrive('a|1', false)).toBe('first');
  expect(p.arrive('a|1', true)).toBe('partner');
  expect(p.arrive('a|1', true)).toBe('repeat'); // a network duplicate: a request, as a duplicate always was
  expect(p.arrive('a|1', false)).toBe('repeat');
  expect(p.arrive('a|2', true)).toBe('first'); // the request lost (or behind): the copy is the request
  expect(p.arrive('a|2', true)).toBe('repeat');
  expect(p.arrive('a|2', false)).toBe('partner');
  expect(p.arrive('b|2', false)).toBe('first'); // per address
  expect(p.arrive('a|3', false)).toBe('first');
  expect(p.arrive('a|3', false)).toBe('repeat');
});

test('bounded: the oldest keys go first, and a copy whose request was forgotten is a request again', () => {
  const p = new FirstContactPairs(3);
  for (let i = 0; i < 10; i++) p.arrive(`a|${i}`, false);
  expect(p.size).toBe(3);
  expect(p.arrive('a|9', true)).toBe('partner');
  expect(p.arrive('a|0', true)).toBe('first');
  expect(() => new FirstContactPairs(0)).toThrow(RangeError);
});
