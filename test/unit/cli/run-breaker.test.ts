import { describe, expect, it } from 'vitest';
import { RejectionBreaker } from '../../../src/cli/commands/run-breaker.js';

type R = Parameters<RejectionBreaker['observe']>[0];
const rejected = (message = 'backend b refused the request (400): unknown model'): R => ({
  outcome: 'task-error',
  error: { name: 'TaskError', code: 'BACKEND_REJECTED', message, retryable: false },
  trajectory: { turns: [] } as unknown as R['trajectory'],
});
const sampled = (): R => ({ outcome: 'completed', error: null, trajectory: { turns: [{}] } as unknown as R['trajectory'] });

describe('RejectionBreaker', () => {
  it('trips on the third rejection when nothing was answered, with the first rejection as the reason', () => {
    const b = new RejectionBreaker(3);
    expect([b.observe(rejected('first')), b.observe(rejected('second')), b.observe(rejected('third'))]).toEqual([false, false, true]);
    expect(b.reason).toBe("the backend rejected the first 3 rollouts' requests and answered none: first");
    expect(b.observe(rejected())).toBe(false);
  });

  it('counts a context-limit refusal as a rejection, but not a cancelled rollout', () => {
    const b = new RejectionBreaker(2);
    const ctx = rejected('the engine refused the call for its context length');
    ctx.error!.code = 'CONTEXT_LIMIT';
    ctx.outcome = 'infra-error';
    expect(b.observe({ outcome: 'cancelled', error: { name: 'CancelledError', code: 'CANCELLED', message: 'x', retryable: false }, trajectory: { turns: [] } as unknown as R['trajectory'] })).toBe(false);
    expect([b.observe(ctx), b.observe(rejected())]).toEqual([false, true]);
  });

  it('never trips once one rollout was answered, whatever follows', () => {
    const b = new RejectionBreaker(2);
    expect(b.observe(rejected())).toBe(false);
    expect(b.observe(sampled())).toBe(false);
    expect([b.observe(rejected()), b.observe(rejected()), b.observe(rejected())]).toEqual([false, false, false]);
    expect(b.reason).toBeNull();
  });

  it('is disarmed by a rollout that sampled turns before a later call was rejected, and by other errors', () => {
    const partial = rejected();
    partial.trajectory = { turns: [{}] } as unknown as R['trajectory'];
    const b = new RejectionBreaker(1);
    expect(b.observe(partial)).toBe(false);
    expect(b.observe(rejected())).toBe(false);
    const c = new RejectionBreaker(1);
    expect(c.observe({ outcome: 'infra-error', error: { name: 'SandboxError', code: 'SANDBOX', message: 'x', retryable: true }, trajectory: { turns: [] } as unknown as R['trajectory'] })).toBe(false);
    expect(c.observe(rejected())).toBe(false);
  });
});
