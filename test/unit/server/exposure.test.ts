import { describe, expect, it } from 'vitest';
import { checkExposure, isLoopbackHost, repeatWarning, type IntervalTimers } from '../../../src/server/exposure.js';

/** Hand-driven interval timers: `tick()` fires every armed interval once. */
function manualTimers(): IntervalTimers & { tick(): void; armed: number; everyMs: number[] } {
  const fns = new Map<number, () => void>();
  let next = 0;
  const t = {
    armed: 0,
    everyMs: [] as number[],
    setInterval(fn: () => void, ms: number) {
      fns.set(++next, fn);
      t.armed = fns.size;
      t.everyMs.push(ms);
      return next;
    },
    clearInterval(h: unknown) {
      fns.delete(h as number);
      t.armed = fns.size;
    },
    tick() {
      for (const fn of fns.values()) fn();
    },
  };
  return t;
}

describe('exposure of rollout serve (#9.6)', () => {
  it('takes 127.0.0.0/8, ::1 and localhost for loopback, and 0.0.0.0, :: and other names not', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]']) expect(isLoopbackHost(h)).toBe(true);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', 'example.com', '128.0.0.1']) expect(isLoopbackHost(h)).toBe(false);
  });

  it('refuses a non-loopback bind without a token and says why', () => {
    const d = checkExposure('0.0.0.0', undefined, false);
    expect(d.kind).toBe('refused');
    expect(d.kind === 'refused' && d.reason).toMatch(/--token/);
  });

  it('allows a non-loopback bind with a token, and loopback without one', () => {
    expect(checkExposure('0.0.0.0', 's3cret', false)).toEqual({ kind: 'ok' });
    expect(checkExposure('127.0.0.1', undefined, false)).toEqual({ kind: 'ok' });
  });

  it('allows it with --insecure and repeats the warning every minute until stopped', () => {
    const d = checkExposure('0.0.0.0', undefined, true);
    expect(d.kind).toBe('insecure');
    const lines: string[] = [];
    const timers = manualTimers();
    const stop = repeatWarning(d.kind === 'insecure' ? d.warning : '', (l) => lines.push(l), timers);
    expect(lines).toHaveLength(1);
    expect(timers.everyMs).toEqual([60_000]);
    timers.tick();
    timers.tick();
    expect(lines).toHaveLength(3);
    expect(lines[2]).toMatch(/WARNING: serving 0\.0\.0\.0 without a token/);
    stop();
    expect(timers.armed).toBe(0);
    timers.tick();
    expect(lines).toHaveLength(3);
  });
});
