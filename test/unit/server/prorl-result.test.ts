import { describe, expect, it } from 'vitest';
import { toProrlResult } from '../../../src/server/prorl-result.js';
import type { Outcome, RolloutResult } from '../../../src/protocol/trajectory.js';
import { ProcessResponseSchema } from '../../../src/protocol/http.js';
import type { Message } from '../../../src/protocol/messages.js';

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
    expect(ProcessResponseSchema.safeParse(toProrlResult(result('timed-out', { trajectory: conversation() }), { trajectoryId: 3 })).success).toBe(true);
  });
});

/** system, user, assistant (two calls, one malformed block), tool ×2, assistant (finish) — as the runtime records them. */
function conversation(): RolloutResult['trajectory'] {
  const messages: Message[] = [
    { role: 'system', content: 's' },
    { role: 'user', content: 'u' },
    { role: 'assistant', content: 'a1', tool_calls: [{ id: 'call_0_0', name: 'execute_bash', arguments: { command: 'ls' } }], input_ids: [1, 2, 3], token_ids: [4, 5], logprobs: [-1, -2] },
    { role: 'tool', content: 'bad call', name: 'invalid_tool_call', tool_call_id: 'malformed_0_0' },
    { role: 'tool', content: 'file', name: 'execute_bash', tool_call_id: 'call_0_0', token_ids: [6, 7] },
    { role: 'assistant', content: 'a2', tool_calls: [{ id: 'call_1_0', name: 'finish', arguments: {} }], input_ids: [1, 2, 3, 4, 5, 6, 7], token_ids: [8], logprobs: [-3] },
  ];
  return { turns: [], tokens: [1, 2, 3, 4, 5, 6, 7, 8], lossMask: [0, 0, 0, 1, 1, 0, 0, 1], logprobs: [0, 0, 0, -1, -2, 0, 0, -3], messages, tools: [], diagnostics: { drift: [] } };
}

describe('toProrlResult: the reference result shape (#10.5)', () => {
  it('answers finish as a bool and our reason as finish_reason', () => {
    const done = toProrlResult(result('completed', { finish: 'finish_tool' }));
    expect(done).toMatchObject({ finish: true, finish_reason: 'finish_tool', end_properly: true });
    const capped = toProrlResult(result('truncated', { finish: 'max_iterations' }));
    expect(capped).toMatchObject({ finish: false, finish_reason: 'max_iterations', end_properly: false });
    expect(toProrlResult(result('timed-out', { finish: null }))).toMatchObject({ finish: false, finish_reason: 'timeout', end_properly: false });
    expect(toProrlResult(result('cancelled', { finish: null }))).toMatchObject({ finish: false, finish_reason: 'cancelled' });
    expect(toProrlResult(result('infra-error', { finish: null })).finish_reason).toBe('error');
  });

  it('reports a last turn cut by the token limit as length, not as the policy choosing no tool call', () => {
    const turn = { promptIds: [1], outputIds: [2], logprobs: [-1], backendId: 'b', weightVersion: null, finishReason: 'length' as const, latencyMs: 1 };
    const r = toProrlResult(result('truncated', { finish: 'no_tool_call', trajectory: { ...conversation(), turns: [turn] } }));
    expect(r).toMatchObject({ finish: false, finish_reason: 'length', end_properly: false });
  });

  it('keeps the JSON type of trajectory_id as the client sent it', () => {
    expect(toProrlResult(result('completed'), { trajectoryId: 3 }).trajectory_id).toBe(3);
    expect(toProrlResult(result('completed'), { trajectoryId: '3' }).trajectory_id).toBe('3');
    expect(toProrlResult(result('completed', { trajectoryId: null })).trajectory_id).toBeNull();
  });

  it('gives git_patch as a string on SWE data sources and leaves it out elsewhere', () => {
    expect('git_patch' in toProrlResult(result('completed'))).toBe(false);
    expect(toProrlResult(result('completed', { dataSource: 'swebench' })).git_patch).toBe('');
    expect(toProrlResult(result('infra-error', { dataSource: 'swe' })).git_patch).toBe('');
  });

  it('writes tool calls as {name, arguments} with JSON-string arguments, and tool messages without tool_call_id, as the reference does (#28)', () => {
    const r = toProrlResult(result('completed', { trajectory: conversation() }));
    const a = r.messages[2]!;
    expect(a.tool_calls).toEqual([{ name: 'execute_bash', arguments: '{"command":"ls"}' }]);
    expect(JSON.parse(a.tool_calls![0]!.arguments)).toEqual({ command: 'ls' });
    for (const m of r.messages) {
      expect('tool_call_id' in m, JSON.stringify(m)).toBe(false);
      for (const c of m.tool_calls ?? []) expect(Object.keys(c).sort()).toEqual(['arguments', 'name']);
    }
    expect(r.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual(['bad call', 'file']);
  });

  it('puts token_ids on every message, the first prompt on its last message, so they concatenate to the tokens', () => {
    const r = toProrlResult(result('completed', { trajectory: conversation() }));
    expect(r.messages.map((m) => m.token_ids)).toEqual([[], [1, 2, 3], [4, 5], [], [6, 7], [8]]);
    expect(r.messages.flatMap((m) => m.token_ids)).toEqual(conversation().tokens);
  });

  it('trims every rollout to end with its last assistant message, or to nothing when the policy never spoke (#28)', () => {
    const t = conversation();
    t.messages.push({ role: 'tool', content: 'late', tool_call_id: 'call_1_0', token_ids: [9, 9] });
    for (const o of ['completed', 'truncated', 'timed-out', 'cancelled', 'infra-error'] as const) {
      const r = toProrlResult(result(o, { trajectory: t }));
      expect(r.messages.at(-1)!.role, o).toBe('assistant');
      expect(r.messages, o).toHaveLength(6);
    }
    // An iteration cap ends on the last tool output; the reference hands back up to the assistant turn.
    const capped = toProrlResult(result('truncated', { finish: 'max_iterations', trajectory: t }));
    expect(capped.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'tool', 'assistant']);
    expect(capped.messages.flatMap((m) => m.token_ids)).toEqual(conversation().tokens);
    // A prompt over the context: zero turns, so no assistant message and nothing to hand back.
    const noAssistant = { ...t, messages: t.messages.slice(0, 2) };
    expect(toProrlResult(result('truncated', { finish: 'context_full', trajectory: noAssistant })).messages).toEqual([]);
    expect(toProrlResult(result('task-error', { trajectory: noAssistant })).messages).toEqual([]);
  });

  it('does not change the result it maps', () => {
    const t = conversation();
    const before = JSON.stringify(t);
    toProrlResult(result('cancelled', { trajectory: t }));
    expect(JSON.stringify(t)).toBe(before);
  });
});
