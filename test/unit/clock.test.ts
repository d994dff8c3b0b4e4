import { describe, expect, it } from 'vitest';
import { every, ManualClock, sleep } from '../../src/clock.js';

describe('ManualClock', () => {
  it('fires timers in deadline order as time advances, including timers set by timers', async () => {
    const c = new ManualClock(0);
    const log: string[] = [];
    c.setTimeout(() => log.push(`b@${c.now()}`), 20);
    c.setTimeout(() => {
      log.push(`a@${c.now()}`);
      c.setTimeout(() => log.push(`c@${c.now()}`), 5);
    }, 10);
    await c.advance(30);
    expect(log).toEqual(['a@10', 'c@15', 'b@20']);
    expect(c.now()).toBe(30);
  });

  it('lets a cleared timer never fire', async () => {
    const c = new ManualClock(0);
    let fired = false;
    c.clearTimeout(c.setTimeout(() => (fired = true), 5));
    await c.advance(10);
    expect([fired, c.pending]).toEqual([false, 0]);
  });
});

describe('sleep', () => {
  it('resolves after the time on the given clock', async () => {
    const c = new ManualClock(0);
    let done = false;
    void sleep(c, 50).then(() => (done = true));
    await c.advance(49);
    expect(done).toBe(false);
    await c.advance(1);
    expect(done).toBe(true);
  });

  it('rejects with the abort reason and clears its timer when the signal aborts', async () => {
    const c = new ManualClock(0);
    const ac = new AbortController();
    const p = sleep(c, 50, ac.signal);
    ac.abort(new Error('stop'));
    await expect(p).rejects.toThrow('stop');
    expect(c.pending).toBe(0);
  });
});

describe('every', () => {
  it('calls back once per period on the clock, keeps going after a throw, and stops leaving no timer', async () => {
    const c = new ManualClock(0);
    const at: number[] = [];
    const stop = every(c, 10, () => {
      at.push(c.now());
      if (at.length === 2) throw new Error('one bad tick');
    });
    await c.advance(9);
    expect(at).toEqual([]);
    await c.advance(1);
    expect(at).toEqual([10]);
    await expect(c.advance(10)).rejects.toThrow('one bad tick');
    await c.advance(20);
    expect(at).toEqual([10, 20, 30, 40]);
    stop();
    expect(c.pending).toBe(0);
    await c.advance(100);
    expect(at).toHaveLength(4);
  });
});
