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

  it('grants waiters highest priority first and FIFO within a priority', async () => {
    const granted: string[] = [];
    const p = new StagePool('init', 1, (id) => granted.push(id));
    p.request('holder', 0);
    p.request('low1', 0);
    p.request('high1', 50);
    p.request('low2', 0);
    p.request('high2', 50);
    p.request('top', 100);
    const order: string[] = [];
    for (const id of ['holder', 'top', 'high1', 'high2', 'low1', 'low2']) {
      p.release(id);
      await micro();
      order.push(granted[granted.length - 1]!);
    }
    expect(order.slice(0, 5)).toEqual(['top', 'high1', 'high2', 'low1', 'low2']);
  });

  it('never preempts a holder for a higher-priority waiter', async () => {
    const granted: string[] = [];
    const p = new StagePool('init', 1, (id) => granted.push(id));
    p.request('low', 0);
    p.request('high', 100);
    await micro();
    expect(granted).toEqual(['low']);
    expect([p.active, p.waiting]).toEqual([1, 1]);
  });

  it('withdraws a prioritised waiter and keeps the order of the rest', async () => {
    const granted: string[] = [];
    const p = new StagePool('init', 1, (id) => granted.push(id));
    p.request('a');
    p.request('b', 10);
    p.request('c', 10);
    p.request('d', 5);
    p.withdraw('b');
    p.forget('d');
    expect(p.waiting).toBe(1);
    p.release('a');
    await micro();
    expect(granted).toEqual(['a', 'c']);
  });
});
