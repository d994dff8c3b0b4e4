import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock.js';
import { checkExposure, isLoopbackHost, repeatWarning } from '../../../src/server/exposure.js';

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

  it('allows it with --insecure and repeats the warning every minute until stopped', async () => {
    const d = checkExposure('0.0.0.0', undefined, true);
    expect(d.kind).toBe('insecure');
    const lines: string[] = [];
    const clock = new ManualClock();
    const stop = repeatWarning(d.kind === 'insecure' ? d.warning : '', (l) => lines.push(l), clock);
    expect(lines).toHaveLength(1);
    await clock.advance(59_999);
    expect(lines).toHaveLength(1);
    await clock.advance(1);
    await clock.advance(60_000);
    expect(lines).toHaveLength(3);
    expect(lines[2]).toMatch(/WARNING: serving 0\.0\.0\.0 without a token/);
    stop();
    expect(clock.pending).toBe(0);
    await clock.advance(120_000);
    expect(lines).toHaveLength(3);
  });
});
