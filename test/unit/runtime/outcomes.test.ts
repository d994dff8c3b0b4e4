import { afterEach, describe, expect, it } from 'vitest';
import { rig, task, retained, type Rig } from './helpers.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  expect(r?.sandboxes.live ?? 0).toBe(0);
  expect(r?.clock.pending ?? 0).toBe(0);
  r = undefined;
});

const bashTurn = (cmd: string) => ({ content: '', tool_calls: [{ name: 'execute_bash', arguments: { command: cmd } }] });

describe('outcomes', () => {
  it('ends completed when the agent calls finish, with the reward from eval', async () => {
    r = rig();
    const h = r.rt.submit(task({ expect: { path: 'a.txt', content: 'hi\n' } }));
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.finish, res.reward, res.resolved, res.error]).toEqual(['completed', 'finish_tool', 1, true, null]);
  });

  it('ends completed with finish no_tool_call when a turn has no tool call', async () => {
    r = rig();
    const h = r.rt.submit(task({ oracle: [bashTurn('true')] }));
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.finish, res.trajectory.turns.length]).toEqual(['completed', 'no_tool_call', 2]);
  });

  it('ends truncated at max_iterations (default 35) and still evaluates', async () => {
    r = rig();
    const h = r.rt.submit(task({ oracle: Array.from({ length: 40 }, () => bashTurn('true')) }));
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.finish, res.trajectory.turns.length, res.reward]).toEqual(['truncated', 'max_iterations', 35, 0]);
  });

  it('honours sampling.max_iterations', async () => {
    r = rig();
    const h = r.rt.submit(task({ oracle: Array.from({ length: 5 }, () => bashTurn('true')) }), { max_iterations: 2 });
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.finish, res.trajectory.turns.length]).toEqual(['truncated', 'max_iterations', 2]);
  });

  it('ends truncated with context_full when the next observation does not fit max_model_len', async () => {
    r = rig();
    const inst = task({ oracle: Array.from({ length: 5 }, () => bashTurn('echo a long line of output')) });
    const probe = r.rt.submit(inst, { max_iterations: 1 });
    await r.clock.advance(1);
    const first = (await probe.result).trajectory.turns[0]!;
    // Room for the first prompt and turn, not for the observation after it.
    const limit = first.promptIds.length + first.outputIds.length + 5;
    const h = r.rt.submit(inst, { max_model_len: limit });
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.finish, res.trajectory.turns.length]).toEqual(['truncated', 'context_full', 1]);
    expect(res.trajectory.tokens.length).toBeLessThanOrEqual(limit);
  });

  it('ends infra-error CONTEXT_LIMIT, not retried and not scored, when the first prompt alone fills the context (#30: never a silent 0)', async () => {
    r = rig();
    const h = r.rt.submit(task(), { max_model_len: 10 });
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.reward, res.attempts, res.trajectory.turns.length, r.llm.calls]).toEqual(['infra-error', null, 1, 0, 0]);
    expect(res.error).toMatchObject({ code: 'CONTEXT_LIMIT', retryable: false });
    expect(res.error?.message).toMatch(/^the first prompt does not fit the context before anything was sampled \(the prompt is \d+ tokens, max_tokens \d+, this rollout's max_model_len 10\)/);
  });

  it('asks for min(max_output_tokens, context left) and keeps a turn cut by max_tokens', async () => {
    r = rig();
    const h = r.rt.submit(task({ oracle: [bashTurn('true')] }), { max_output_tokens: 10, max_iterations: 1 });
    await r.clock.advance(1);
    const res = await h.result;
    expect(res.trajectory.turns[0]!.outputIds).toHaveLength(10);
    expect(res.trajectory.turns[0]!.finishReason).toBe('length');
    // The loop stopped on a turn cut by the token limit: an overlong sample (#10.7).
    expect(res.outcome).toBe('truncated');
    expect(res.finish).toBe('length');
  });

  it('ends task-error for an unknown data_source, naming it and the known ones, without retrying', async () => {
    r = rig();
    const h = r.rt.submit({ data_source: 'nope' });
    await r.clock.advance(1);
    const res = await h.result;
    expect(res.outcome).toBe('task-error');
    expect(res.error?.code).toBe('UNKNOWN_DATA_SOURCE');
    expect(res.error?.message).toMatch(/'nope'.*scripted/);
    expect(res.attempts).toBe(1);
  });

  it('ends task-error, not retried, when the policy call fails with a TaskError', async () => {
    r = rig({ llm: { fail: () => 'task' } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    const res = await h.result;
    expect([res.outcome, res.attempts, res.reward]).toEqual(['task-error', 1, null]);
  });

  it('ends infra-error after the retry budget, never as reward 0', async () => {
    r = rig({ llm: { fail: () => 'backend' }, runtime: { retries: { max: 2, backoffMs: 10, backoffMaxMs: 10 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(100);
    const res = await h.result;
    expect([res.outcome, res.attempts, res.reward, res.error?.code]).toEqual(['infra-error', 3, null, 'BACKEND']);
    expect(r.sandboxes.created).toBe(3);
  });

  it('retries an infra-error in a fresh attempt with a fresh sandbox and succeeds', async () => {
    r = rig({ llm: { fail: (_q, n) => (n === 2 ? 'backend' : undefined) }, runtime: { retries: { max: 1, backoffMs: 50, backoffMaxMs: 50 }, events: { retain: 1000 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(49);
    expect(r.rt.get(h.id)?.attempt).toBe(1);
    await r.clock.advance(10);
    const res = await h.result;
    expect([res.outcome, res.attempts, res.trajectory.turns.length]).toEqual(['completed', 2, 3]);
    expect(r.sandboxes.created).toBe(2);
    const retries = (await retained(r.rt, h.id)).filter((e) => e.type === 'rollout.retry');
    expect(retries.map((e) => [e.attempt, e.delayMs])).toEqual([[2, 50]]);
  });

  it('backs off exponentially up to the cap between attempts', async () => {
    r = rig({ llm: { fail: () => 'backend' }, runtime: { retries: { max: 4, backoffMs: 100, backoffMaxMs: 250 }, events: { retain: 1000 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(2_000);
    await h.result;
    const retries = (await retained(r.rt, h.id)).filter((e) => e.type === 'rollout.retry');
    expect(retries.map((e) => e.delayMs)).toEqual([100, 200, 250, 250]);
  });

  it('does not retry when retries.max is 0', async () => {
    r = rig({ llm: { fail: () => 'backend' }, runtime: { retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    expect((await h.result).attempts).toBe(1);
  });
});

describe('time budget and timeouts', () => {
  it('times out when the time inside stages exceeds budgetMs, keeping the partial trajectory', async () => {
    r = rig({ llm: { latencyMs: 80 }, runtime: { budgetMs: 200, sweepIntervalMs: 10 } });
    const h = r.rt.submit(task());
    await r.clock.advance(400);
    const res = await h.result;
    expect([res.outcome, res.finish, res.error?.code, res.timing.timeoutTriggered]).toEqual(['timed-out', 'timeout', 'BUDGET', true]);
    expect(res.trajectory.turns).toHaveLength(2);
    expect(res.timing.countedMs).toBeGreaterThanOrEqual(200);
  });

  it('does not count time waiting for a stage slot against the budget', async () => {
    r = rig({ llm: { latencyMs: 40 }, runtime: { budgetMs: 200, sweepIntervalMs: 10, stages: { run: 1 } } });
    const a = r.rt.submit(task());
    const b = r.rt.submit(task());
    await r.clock.advance(500);
    const [ra, rb] = await Promise.all([a.result, b.result]);
    expect([ra.outcome, rb.outcome]).toEqual(['completed', 'completed']);
    expect(rb.timing.wallMs).toBeGreaterThan(200);
    expect(rb.timing.countedMs).toBe(120);
    expect(rb.timing.queueMs).toBe(120);
  });

  it('times out at the wall-clock cap even while waiting in the queue', async () => {
    r = rig({ sandbox: { latencyMs: (op) => (op === 'create' ? 1_000 : 0) }, runtime: { wallClockMs: 100, sweepIntervalMs: 10, stages: { init: 1 } } });
    r.rt.submit(task());
    const b = r.rt.submit(task());
    await r.clock.advance(50);
    expect(r.rt.get(b.id)?.state).toBe('queued');
    await r.clock.advance(100);
    const res = await b.result;
    expect([res.outcome, res.error?.code]).toEqual(['timed-out', 'WALL_CLOCK']);
  });

  it('fails an LLM call longer than llmTimeoutMs as a retryable backend error and frees the RUN slot', async () => {
    r = rig({ llm: { fail: () => 'hang' }, runtime: { llmTimeoutMs: 100, sweepIntervalMs: 10, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(50);
    expect(r.rt.status().stages.run.active).toBe(1);
    await r.clock.advance(100);
    const res = await h.result;
    expect([res.outcome, res.error?.code, res.error?.retryable]).toEqual(['infra-error', 'LLM_TIMEOUT', true]);
    expect(r.rt.status().stages.run.active).toBe(0);
  });

  it('fails an action longer than actionTimeoutMs as a retryable sandbox error', async () => {
    r = rig({ sandbox: { latencyMs: (op) => (op === 'bash' ? 10_000 : 0) }, runtime: { actionTimeoutMs: 100, sweepIntervalMs: 10, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(200);
    const res = await h.result;
    expect([res.outcome, res.error?.code]).toEqual(['infra-error', 'ACTION_TIMEOUT']);
  });

  it('fails a rollout with no progress for staleAfterMs as infra-error STALE and releases everything', async () => {
    r = rig({ sandbox: { fail: (op) => (op === 'bash' ? 'hang' : undefined) }, runtime: { staleAfterMs: 100, sweepIntervalMs: 10, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(50);
    expect(r.rt.get(h.id)?.state).toBe('acting');
    await r.clock.advance(100);
    const res = await h.result;
    expect([res.outcome, res.error?.code]).toEqual(['infra-error', 'STALE']);
    expect(r.rt.status().stages.run.active).toBe(0);
    expect(r.sandboxes.live).toBe(0);
  });

  it('retries a stale rollout like any infra-error', async () => {
    r = rig({ sandbox: { fail: (op, n) => (op === 'bash' && n === 1 ? 'hang' : undefined) }, runtime: { staleAfterMs: 100, sweepIntervalMs: 10, retries: { max: 1, backoffMs: 10, backoffMaxMs: 10 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(300);
    const res = await h.result;
    expect([res.outcome, res.attempts]).toEqual(['completed', 2]);
  });
});
