import { afterEach, describe, expect, it } from 'vitest';
import { startHarness, post, get, mathInstance, waitFor, type Harness } from './harness.js';
import { ServiceMetrics } from '../../../src/server/metrics.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

describe('/metrics', () => {
  it('exposes queue depth, stage occupancy and outcomes in Prometheus text', async () => {
    h = await startHarness();
    await post(`${h.url}/process`, { instance: mathInstance() });
    await post(`${h.url}/v1/rollouts`, { instance: mathInstance({ fake: { hold: true } }) });
    await waitFor(() => h.service.lastSeq >= 4);
    const r = await get(`${h.url}/metrics`);
    expect(r.headers.get('content-type')).toMatch(/text\/plain/);
    expect(r.body).toMatch(/^rollout_queue_depth 1$/m);
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
