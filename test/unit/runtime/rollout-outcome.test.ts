import { describe, expect, it } from 'vitest';
import {
  BackendError,
  CancelledError,
  InfraError,
  RolloutTimeoutError,
  SandboxError,
  StaleRolloutError,
  TaskError,
  ValidationError,
  type RolloutError,
} from '../../../src/errors.js';
import { buildResult, classifyEnd, resultFinish, retryDelayMs, type AttemptEnd } from '../../../src/runtime/rollout-outcome.js';
import { RolloutSession } from '../../../src/runtime/rollout-session.js';

const end = (over: Partial<AttemptEnd>): AttemptEnd => ({
  final: 'done',
  finish: 'finish_tool',
  error: null,
  cancelReason: null,
  attempts: 1,
  maxRetries: 2,
  running: true,
  ...over,
});

describe('classifyEnd', () => {
  const cases: [string, Partial<AttemptEnd>, { outcome: string; error: string | null; retry: boolean }][] = [
    ['done with finish_tool', { final: 'done', finish: 'finish_tool' }, { outcome: 'completed', error: null, retry: false }],
    ['done with no_tool_call', { final: 'done', finish: 'no_tool_call' }, { outcome: 'completed', error: null, retry: false }],
    ['done at max_iterations', { final: 'done', finish: 'max_iterations' }, { outcome: 'truncated', error: null, retry: false }],
    ['done with a full context', { final: 'done', finish: 'context_full' }, { outcome: 'truncated', error: null, retry: false }],
    ['cancelled', { final: 'cancelled', cancelReason: 'user' }, { outcome: 'cancelled', error: 'CancelledError', retry: false }],
    ['timed out with its error', { final: 'timedOut', error: new RolloutTimeoutError('x', { code: 'BUDGET' }) }, { outcome: 'timed-out', error: 'RolloutTimeoutError', retry: false }],
    ['timed out without an error', { final: 'timedOut' }, { outcome: 'timed-out', error: 'RolloutTimeoutError', retry: false }],
    ['failed on a task error', { final: 'failed', error: new TaskError('x') }, { outcome: 'task-error', error: 'TaskError', retry: false }],
    ['failed on a validation error', { final: 'failed', error: new ValidationError('x', []) }, { outcome: 'task-error', error: 'ValidationError', retry: false }],
    ['failed on a cancel', { final: 'failed', error: new CancelledError('x') }, { outcome: 'cancelled', error: 'CancelledError', retry: false }],
    ['failed on a timeout', { final: 'failed', error: new RolloutTimeoutError('x') }, { outcome: 'timed-out', error: 'RolloutTimeoutError', retry: false }],
    ['failed on a backend error within budget', { final: 'failed', error: new BackendError('x') }, { outcome: 'infra-error', error: 'BackendError', retry: true }],
    ['failed on a sandbox error before the last retry', { final: 'failed', error: new SandboxError('x'), attempts: 2 }, { outcome: 'infra-error', error: 'SandboxError', retry: true }],
    ['failed on an infra error past the budget', { final: 'failed', error: new InfraError('x'), attempts: 3 }, { outcome: 'infra-error', error: 'InfraError', retry: false }],
    ['failed on a stale rollout while closing', { final: 'failed', error: new StaleRolloutError('x'), running: false }, { outcome: 'infra-error', error: 'StaleRolloutError', retry: false }],
    ['failed without an error', { final: 'failed' }, { outcome: 'infra-error', error: 'InfraError', retry: true }],
  ];
  it.each(cases)('classifies an attempt %s', (_name, over, want) => {
    const d = classifyEnd(end(over));
    expect({ outcome: d.outcome, error: d.error?.name ?? null, retry: d.retry }).toEqual(want);
  });

  it('does not retry an infra error marked not retryable', () => {
    const e: RolloutError = new InfraError('x');
    Object.defineProperty(e, 'retryable', { value: false });
    expect(classifyEnd(end({ final: 'failed', error: e })).retry).toBe(false);
  });

  it('keeps the cancel reason in the error', () => {
    expect(classifyEnd(end({ final: 'cancelled', cancelReason: 'user pressed stop' })).error?.message).toBe('user pressed stop');
  });
});

describe('retryDelayMs', () => {
  it.each([
    [1, 100],
    [2, 200],
    [3, 400],
    [5, 1000],
  ])('waits attempt %i → %i ms (doubling from 100, capped at 1000)', (attempts, ms) => {
    expect(retryDelayMs({ backoffMs: 100, backoffMaxMs: 1000 }, attempts)).toBe(ms);
  });
});

describe('resultFinish', () => {
  it.each([
    ['completed', 'finish_tool', 'finish_tool'],
    ['truncated', 'max_iterations', 'max_iterations'],
    ['timed-out', 'finish_tool', 'timeout'],
    ['cancelled', null, 'cancelled'],
    ['infra-error', null, 'error'],
    ['task-error', 'no_tool_call', 'error'],
  ] as const)('reports %s with loop finish %s as %s', (outcome, loop, want) => {
    expect(resultFinish(outcome, loop)).toBe(want);
  });
});

describe('buildResult', () => {
  const session = () => {
    const s = new RolloutSession({ id: 'r1', instance: { data_source: 'scripted', instance_id: 'i1' } as never, sampling: {} as never, groupId: 'g1', submittedAt: 1_000, wallClockMs: 60_000, codec: {} as never });
    // The second attempt.
    s.begin({} as never);
    s.begin({} as never);
    s.stageTimed('init', 10);
    s.stageTimed('run', 100);
    s.stageTimed('eval', 20);
    return s;
  };

  it('counts queue time as the wall time outside the stages and has an empty trajectory without an attempt', () => {
    const r = buildResult(session(), null, 'cancelled', new CancelledError('stop'), 1_500);
    expect(r.timing).toEqual({ queueMs: 370, initMs: 10, runMs: 100, evalMs: 20, countedMs: 130, wallMs: 500, timeoutTriggered: false });
    expect(r).toMatchObject({ id: 'r1', instanceId: 'i1', groupId: 'g1', outcome: 'cancelled', finish: 'cancelled', reward: null, resolved: false, attempts: 2 });
    expect(r.error).toMatchObject({ name: 'CancelledError', message: 'stop' });
    expect(r.trajectory.turns).toEqual([]);
  });

  it('marks a timed-out result as triggered and never reports negative queue time', () => {
    const r = buildResult(session(), null, 'timed-out', new RolloutTimeoutError('late'), 1_050);
    expect(r.timing.timeoutTriggered).toBe(true);
    expect(r.timing.queueMs).toBe(0);
  });
});
