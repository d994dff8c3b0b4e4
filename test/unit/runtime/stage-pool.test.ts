import { describe, expect, it } from 'vitest';
import { StagePool } from '../../../src/runtime/stage-pool.js';

const micro = () => new Promise<void>((r) => queueMicrotask(r));

describe('StagePool', () => {
  it('grants at once while under the limit and queues beyond it', () => {
    const granted: string[] = [];
    const p = new StagePool('run', 2, (id) => granted.push(id));
    ['a', 'b', 'c'].forEach((id) => p.request(id));
    expect(granted).toEqual(['a', 'b']);
    expect([p.active, p.waiting]).toEqual([2, 1]);
  });

  it('hands a released slot to the oldest waiter on the next microtask', async () => {
    const granted: string[] = [];
    const p = new StagePool('run', 1, (id) => granted.push(id));
    ['a', 'b', 'c'].forEach((id) => p.request(id));
    p.release('a');
    expect(granted).toEqual(['a']);
    await micro();
    expect(granted).toEqual(['a', 'b']);
    expect(p.highWater).toBe(1);
  });

  it('lets a waiter withdraw without being granted later', async () => {
    const granted: string[] = [];
    const p = new StagePool('run', 1, (id) => granted.push(id));
    ['a', 'b', 'c'].forEach((id) => p.request(id));
    p.withdraw('b');
    p.release('a');
    await micro();
    expect(granted).toEqual(['a', 'c']);
  });

  it('ignores a release of a slot it does not hold and a repeated request', () => {
    const p = new StagePool('run', 1, () => {});
    p.request('a');
    p.request('a');
    p.release('x');
    expect([p.active, p.waiting]).toEqual([1, 0]);
  });

  it('forgets a rollout whether it holds or waits', () => {
    const p = new StagePool('run', 1, () => {});
    p.request('a');
    p.request('b');
    p.forget('b');
    p.forget('a');
    expect([p.active, p.waiting]).toEqual([0, 0]);
  });

  it('takes a free slot without queueing or calling back, and refuses when full or contended', () => {
    const granted: string[] = [];
    const p = new StagePool('eval', 1, (id) => granted.push(id));
    expect(p.tryTake('a')).toBe(true);
    expect(p.tryTake('b')).toBe(false);
    expect([p.active, p.waiting, granted.length]).toEqual([1, 0, 0]);
  });
});
