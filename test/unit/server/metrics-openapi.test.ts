import { afterEach, describe, expect, it } from 'vitest';
import { startHarness, post, get, task, heldTask, type Harness } from './harness.js';
import { ServiceMetrics } from '../../../src/server/metrics.js';
import type { ServiceRuntime } from '../../../src/server/service-runtime.js';
import type { ForkPoolStats } from '../../../src/protocol/sandbox.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

describe('/metrics', () => {
  it('exposes queue depth, stage occupancy and outcomes in Prometheus text', async () => {
    h = await startHarness();
    // One rollout with two seconds of sandbox work on the manual clock, one held in `acting`.
    const done = post(`${h.url}/process`, { instance: task({}, 2_000) });
    await h.until(() => h.rt().list()[0]?.state === 'acting');
    await h.clock.advance(2_000);
    expect((await done).body.outcome).toBe('completed');
    await post(`${h.url}/v1/rollouts`, { instance: heldTask(), id: 'held' });
    await h.until(() => h.rt().get('held')?.state === 'acting');
    const r = await get(`${h.url}/metrics`);
    expect(r.headers.get('content-type')).toMatch(/text\/plain/);
    expect(r.body).toMatch(/^rollout_queue_depth 0$/m);
    expect(r.body).toMatch(/^rollout_stage_occupancy\{stage="run",kind="active"\} 1$/m);
    expect(r.body).toMatch(/^rollout_stage_occupancy\{stage="run",kind="limit"\} 64$/m);
    expect(r.body).toMatch(/^rollout_outcomes_total\{outcome="completed"\} 1$/m);
    expect(r.body).toMatch(/^rollout_stage_seconds_sum\{stage="run"\} 2$/m);
  });

  it('counts LLM latency, tokens and tool latency from events', async () => {
    const m = new ServiceMetrics();
    m.observe({ type: 'llm.end', seq: 1, rseq: 1, ts: 0, rolloutId: 'r', turn: 0, backendId: 'b1', promptTokens: 10, outputTokens: 5, latencyMs: 250, finishReason: 'stop', content: '', toolCalls: [] });
    m.observe({ type: 'tool.result', seq: 2, rseq: 2, ts: 0, rolloutId: 'r', turn: 0, callId: 'c', name: 'execute_bash', output: '', exitCode: 0, latencyMs: 40, error: false });
    const text = (await m.text()).body;
    expect(text).toMatch(/^rollout_tokens_total\{kind="output"\} 5$/m);
    expect(text).toMatch(/^rollout_llm_seconds_sum\{backend="b1"\} 0.25$/m);
    expect(text).toMatch(/^rollout_action_seconds_count\{tool="execute_bash"\} 1$/m);
  });

  it('counts rewards by data source, groups without signal, tokens per turn and truncations', async () => {
    const m = new ServiceMetrics();
    let seq = 0;
    const timing = { queueMs: 0, initMs: 0, runMs: 0, evalMs: 0, countedMs: 0, wallMs: 0, timeoutTriggered: false };
    const submit = (id: string, dataSource: string, groupId: string | null) =>
      m.observe({ type: 'rollout.submitted', seq: ++seq, rseq: 1, ts: 0, rolloutId: id, instanceId: 'i', trajectoryId: '0', groupId, dataSource, attempt: 1 });
    const end = (id: string, reward: number | null, outcome: 'completed' | 'truncated' = 'completed', finish: 'finish_tool' | 'max_iterations' = 'finish_tool') =>
      m.observe({ type: 'rollout.result', seq: ++seq, rseq: 9, ts: 0, rolloutId: id, outcome, finish, reward, resolved: reward === 1, error: null, timing, tokens: 10, turns: 1 });
    for (const id of ['f0', 'f1', 'f2']) submit(id, 'math', 'flat');
    for (const id of ['m0', 'm1']) submit(id, 'math', 'mixed');
    submit('c0', 'code', null);
    for (const id of ['f0', 'f1']) end(id, 1);
    m.observe({ type: 'llm.end', seq: ++seq, rseq: 2, ts: 0, rolloutId: 'c0', turn: 0, backendId: 'b', promptTokens: 10, outputTokens: 100, latencyMs: 1, finishReason: 'stop', content: '', toolCalls: [] });
    let text = (await m.text()).body;
    // The flat group has a member still running: not counted yet.
    expect(text).not.toMatch(/^rollout_groups_total/m);
    end('f2', 1);
    end('m0', 0);
    end('m1', 1, 'truncated', 'max_iterations');
    end('c0', 0.5);
    text = (await m.text()).body;
    expect(text).toMatch(/^rollout_groups_total\{signal="none"\} 1$/m);
    expect(text).toMatch(/^rollout_groups_total\{signal="some"\} 1$/m);
    expect(text).toMatch(/^rollout_reward_count\{data_source="math"\} 5$/m);
    expect(text).toMatch(/^rollout_reward_sum\{data_source="math"\} 4$/m);
    expect(text).toMatch(/^rollout_reward_bucket\{le="0.5",data_source="code"\} 1$/m);
    expect(text).toMatch(/^rollout_tokens_per_turn_bucket\{le="128"\} 1$/m);
    expect(text).toMatch(/^rollout_truncations_total\{finish="max_iterations"\} 1$/m);
  });

  it("reads the sandbox hosts' fork pools once per scrape, and shows no pool series when the runtime has none or cannot tell", async () => {
    const m = new ServiceMetrics();
    let calls = 0;
    let answer: () => Promise<ForkPoolStats | null> = async () => ({ keys: 2, parked: 5, starting: 1, hits: 7, misses: 3, discarded: 1 });
    const stage = { active: 0, waiting: 0, limit: 1 };
    m.setRuntime({
      status: () => ({ queued: 0, live: 0, stages: { init: stage, run: stage, eval: stage } }),
      forkPoolStats: () => {
        calls++;
        return answer();
      },
    } as unknown as ServiceRuntime);
    let text = (await m.text()).body;
    expect(calls).toBe(1);
    expect(text).toMatch(/^rollout_fork_pool_branches\{state="parked"\} 5$/m);
    expect(text).toMatch(/^rollout_fork_pool_branches\{state="starting"\} 1$/m);
    expect(text).toMatch(/^rollout_fork_pool_takes_total\{result="hit"\} 7$/m);
    expect(text).toMatch(/^rollout_fork_pool_takes_total\{result="miss"\} 3$/m);
    expect(text).toMatch(/^rollout_fork_pool_discarded_total 1$/m);
    // Two scrapes at once share one round of host requests, and their counts do not add up.
    const both = await Promise.all([m.text(), m.text()]);
    for (const t of both) expect(t.body).toMatch(/^rollout_fork_pool_takes_total\{result="hit"\} 7$/m);
    expect(calls).toBe(2);
    // The next scrape asks again (the host's counters moved).
    answer = async () => ({ keys: 2, parked: 4, starting: 0, hits: 8, misses: 3, discarded: 1 });
    text = (await m.text()).body;
    expect(calls).toBe(3);
    expect(text).toMatch(/^rollout_fork_pool_takes_total\{result="hit"\} 8$/m);
    // A runtime without pools (null) or whose provider failed: no labelled sample, and the scrape still answers.
    for (const a of [async () => null, () => Promise.reject(new Error('host gone'))]) {
      answer = a;
      text = (await m.text()).body;
      expect(text).toMatch(/^rollout_queue_depth 0$/m);
      expect(text).not.toMatch(/^rollout_fork_pool_branches\{/m);
      expect(text).not.toMatch(/^rollout_fork_pool_takes_total\{/m);
      expect(text).toMatch(/^rollout_fork_pool_discarded_total 0$/m);
    }
    expect(calls).toBe(5);
  });
});

describe('/v1/openapi.json', () => {
  it('documents every route with bodies generated from the schemas', async () => {
    h = await startHarness();
    const doc = (await get(`${h.url}/v1/openapi.json`)).body;
    expect(doc.openapi).toBe('3.0.3');
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/process', '/v1/rollouts/{id}', '/v1/batches', '/healthz']));
    const proc = doc.paths['/process'].post;
    expect(proc.requestBody.content['application/json'].schema.required).toEqual(['instance']);
    expect(proc.responses['200'].content['application/json'].schema.properties.critical_error).toBeDefined();
  });

  it('marks /healthz as open and the rest as needing the bearer token', async () => {
    h = await startHarness();
    const doc = (await get(`${h.url}/v1/openapi.json`)).body;
    expect(doc.paths['/healthz'].get.security).toEqual([]);
    expect(doc.security).toEqual([{ bearer: [] }]);
  });
});
