import { describe, expect, it } from 'vitest';
import { DeadlineIndex } from '../../../src/runtime/deadline-index.js';

describe('DeadlineIndex', () => {
  it('pops every due entry earliest first and keeps the rest', () => {
    const d = new DeadlineIndex();
    for (const [at, id] of [[30, 'c'], [10, 'a'], [50, 'e'], [20, 'b']] as const) d.push({ at, rolloutId: id });
    expect(d.popDue(30).map((e) => e.rolloutId)).toEqual(['a', 'b', 'c']);
    expect(d.size).toBe(1);
    expect(d.peek()?.rolloutId).toBe('e');
  });

  it('compacts away entries the owner no longer wants', () => {
    const d = new DeadlineIndex();
    for (let i = 0; i < 100; i++) d.push({ at: i, rolloutId: String(i % 10) });
    d.compact((e) => e.at >= 90);
    expect(d.size).toBe(10);
    expect(d.popDue(1_000).map((e) => e.at)).toEqual([90, 91, 92, 93, 94, 95, 96, 97, 98, 99]);
  });
});
