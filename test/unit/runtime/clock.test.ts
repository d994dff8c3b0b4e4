import { describe, expect, it } from 'vitest';
import { ManualClock, sleep } from '../../../src/runtime/clock.js';

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
