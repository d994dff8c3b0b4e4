import { describe, expect, it } from 'vitest';
import { toProrlResult } from '../../../src/server/prorl-result.js';
import type { Outcome, RolloutResult } from '../../../src/protocol/trajectory.js';
import { ProcessResponseSchema } from '../../../src/protocol/http.js';

function result(outcome: Outcome, over: Partial<RolloutResult> = {}): RolloutResult {
  const trainable = outcome === 'completed' || outcome === 'truncated';
  return {
    id: 'j1',
    instanceId: 'i1',
    trajectoryId: '0',
    groupId: null,
    dataSource: 'math',
    outcome,
    finish: trainable ? 'finish_tool' : 'error',
    reward: trainable ? 0 : null,
    resolved: false,
    evalDetails: null,
    error: trainable ? null : { name: 'SandboxError', code: 'SANDBOX', message: 'boom', retryable: true },
    attempts: 1,
    trajectory: { turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] } },
    timing: { queueMs: 250, initMs: 1000, runMs: 2000, evalMs: 500, countedMs: 3500, wallMs: 4000, timeoutTriggered: false },
    ...over,
  };
}

describe('toProrlResult', () => {
  it('keeps a completed rollout trainable with no critical error', () => {
    const r = toProrlResult(result('completed', { reward: 1, resolved: true }));
    expect(r).toMatchObject({ critical_error: null, filter: false, success: true, resolved: true, reward: 1, error: null });
  });

  it('keeps a truncated rollout trainable', () => {
    expect(toProrlResult(result('truncated'))).toMatchObject({ critical_error: null, filter: false, success: true });
  });

  it('marks an infra error with its stage and filters it', () => {
    const r = toProrlResult(result('infra-error', { error: { name: 'SandboxError', code: 'SANDBOX', message: 'boom', retryable: true, stage: 'init' } }));
    expect(r).toMatchObject({ critical_error: 'init', filter: true, success: false, resolved: false, error: 'SandboxError: boom' });
  });

  it('marks an infra error without a stage as a run failure', () => {
    expect(toProrlResult(result('infra-error')).critical_error).toBe('run');
  });

  it('marks a timed-out rollout as timeout and filters it', () => {
    const r = toProrlResult(result('timed-out', { timing: { queueMs: 0, initMs: 1, runMs: 2, evalMs: 0, countedMs: 3, wallMs: 3, timeoutTriggered: true } }));
    expect(r).toMatchObject({ critical_error: 'timeout', filter: true });
    expect(r.timing.timeout_triggered).toBe(true);
  });

  it('filters a cancelled rollout without a critical error', () => {
    expect(toProrlResult(result('cancelled'))).toMatchObject({ critical_error: null, filter: true, success: false });
  });

  it('filters a task error and names the stage it failed in', () => {
    expect(toProrlResult(result('task-error'))).toMatchObject({ critical_error: 'init', filter: true });
  });

  it('never reports resolved for a failed rollout even if the result says so', () => {
    expect(toProrlResult(result('infra-error', { resolved: true })).resolved).toBe(false);
  });

  it('converts stage timings to seconds and puts the rest in others_time', () => {
    expect(toProrlResult(result('completed')).timing).toEqual({ init_time: 1, run_time: 2, eval_time: 0.5, others_time: 0.5, counted_elapsed: 3.5, timeout_triggered: false });
  });

  it('takes git_patch from the evaluation details', () => {
    expect(toProrlResult(result('completed', { evalDetails: { git_patch: 'diff --git a b' } })).git_patch).toBe('diff --git a b');
  });

  it('answers a shape that its own response schema accepts', () => {
    expect(ProcessResponseSchema.safeParse(toProrlResult(result('completed'))).success).toBe(true);
  });
});
