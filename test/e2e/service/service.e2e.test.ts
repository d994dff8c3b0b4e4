import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { api, descendants, fakeLlmProcess, serve, shellInstances, SHELL_TASKS, until, watch, type Served } from './harness.js';

/** Real sandboxes unless the environment says otherwise (a machine without bwrap/unshare). */
const SANDBOX = process.env['ROLLOUT_E2E_SANDBOX'] ?? 'auto';

let llmA: FakeLlmServer;
let llmB: FakeLlmServer | null = null;
let server: Served | null = null;
/** Child fake-llm processes of the running test, killed in afterEach even when a test times out. */
const children: { kill(): Promise<void> }[] = [];

beforeAll(async () => {
  llmA = await startFakeLlmServer({ tasks: SHELL_TASKS, latencyMs: 5 });
});
afterAll(async () => {
  await llmA.close();
});
afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
  if (server) expect(await server.stop()).toBe(0);
  server = null;
  await llmB?.close();
  llmB = null;
});

const sampling = { max_iterations: 6 };

describe('rollout serve, end to end', () => {
  it('runs a 64-rollout batch in groups of 4 to completion with consistent tokens', async () => {
    server = await serve(['--backend', llmA.url, '--sandbox', SANDBOX]);
    const w = await watch(server.url);
    const instances = shellInstances();
    const batch = await api(server.url, 'POST', '/v1/batches', { instances: Array.from({ length: 16 }, (_, i) => instances[i % instances.length]), n: 4, sampling_params: sampling });
    expect(batch.status).toBe(202);
    expect(batch.body.rollout_ids).toHaveLength(64);
    await until(() => w.results().size === 64, 200_000);
    w.close();
    const outcomes = [...w.results().values()].map((e) => e.outcome);
    expect(new Set(outcomes)).toEqual(new Set(['completed']));
    // examples/shell.jsonl has one task whose oracle is wrong on purpose (`shell-logs-wrong`).
    const chosen = Array.from({ length: 16 }, (_, i) => instances[i % instances.length]!);
    const solvable = chosen.filter((inst) => !String(inst['instance_id']).endsWith('-wrong')).length;
    expect([...w.results().values()].filter((e) => e.resolved)).toHaveLength(4 * solvable);
    const metrics = async (): Promise<string> => (await fetch(`${server!.url}/metrics`)).text();
    await until(async () => /^rollout_outcomes_total\{outcome="completed"\} 64$/m.test(await metrics()), 10_000);
    const text = await metrics();
    expect(text).toMatch(/^rollout_action_seconds_count\{tool="execute_bash"\} [1-9]\d*$/m);
    expect(text).toMatch(/^rollout_tokens_total\{kind="output"\} [1-9]\d*$/m);
    expect(text).toMatch(/^rollout_backend_served\{backend="[^"]+"\} [1-9]\d*$/m);
    const one = await api(server.url, 'GET', `/v1/rollouts/${batch.body.rollout_ids[5]}`);
    const t = one.body.result.trajectory;
    const last = t.turns[t.turns.length - 1];
    expect([...last.promptIds, ...last.outputIds]).toEqual(t.tokens);
    expect(t.lossMask.filter((m: number) => m === 1).length).toBe(t.turns.reduce((n: number, x: { outputIds: number[] }) => n + x.outputIds.length, 0));
  }, 240_000);

  it('cancelling mid-run frees every slot and sandbox', async () => {
    llmB = await startFakeLlmServer({ tasks: SHELL_TASKS, latencyMs: 60_000 });
    server = await serve(['--backend', llmB.url, '--sandbox', SANDBOX]);
    const batch = await api(server.url, 'POST', '/v1/batches', { instances: shellInstances().slice(0, 2), n: 4, sampling_params: sampling });
    await until(async () => (await api(server!.url, 'GET', '/status')).body.run === 8);
    await Promise.all(batch.body.rollout_ids.map((id: string) => api(server!.url, 'POST', `/v1/rollouts/${id}/cancel`)));
    const st = (await api(server.url, 'GET', '/status')).body;
    expect({ live: st.pending_jobs, init: st.init, run: st.run, eval: st.eval }).toEqual({ live: 0, init: 0, run: 0, eval: 0 });
    const list = await api(server.url, 'GET', '/v1/rollouts?outcome=cancelled');
    expect(list.body.total).toBe(8);
    await until(() => descendants(server!.child.pid!).every((p) => p.comm !== 'bash' && p.comm !== 'bwrap'), 10_000);
  });

  it('/stop mid-run fails pending jobs and leaves no sandbox or process', async () => {
    llmB = await startFakeLlmServer({ tasks: SHELL_TASKS, latencyMs: 60_000 });
    server = await serve(['--backend', llmB.url, '--sandbox', SANDBOX]);
    const inst = shellInstances()[0]!;
    const pending = Array.from({ length: 4 }, (_, i) => api(server!.url, 'POST', '/process', { instance: { ...inst, trajectory_id: i }, sampling_params: sampling }));
    await until(async () => (await api(server!.url, 'GET', '/status')).body.run === 4);
    expect((await api(server.url, 'POST', '/stop')).body).toEqual({ status: 'stopped' });
    for (const r of await Promise.all(pending)) expect(r.body).toMatchObject({ filter: true, resolved: false });
    expect((await api(server.url, 'GET', '/status')).status).toBe(503);
    await until(() => descendants(server!.child.pid!).length === 0, 10_000);
  });

  it('finishes every rollout on the other backend when a rollout fake-llm process is killed mid-run', async () => {
    const victim = await fakeLlmProcess(['--tasks', SHELL_TASKS, '--latency-ms', '20']);
    children.push(victim);
    server = await serve(['--backend', llmA.url, '--backend', victim.url, '--sandbox', SANDBOX]);
    const w = await watch(server.url);
    const batch = await api(server.url, 'POST', '/v1/batches', { instances: shellInstances().slice(0, 4), n: 4, sampling_params: sampling });
    await until(() => w.events.some((e) => e.type === 'llm.end' && e.backendId === new URL(victim.url).host));
    await victim.kill();
    await until(() => w.results().size === 16, 200_000);
    w.close();
    expect([...w.results().values()].map((e) => e.outcome)).toEqual(Array(16).fill('completed'));
    expect(batch.body.rollout_ids).toHaveLength(16);
  }, 240_000);

  it('resumes the event stream after a reconnect from the cursor with no gap and no duplicate', async () => {
    server = await serve(['--backend', llmA.url, '--sandbox', SANDBOX]);
    const url = server.url.replace('http', 'ws') + '/v1/events';
    const seen: any[] = [];
    const first = new WebSocket(url);
    first.on('message', (d) => {
      const m = JSON.parse(d.toString());
      if (m.type === 'hello') first.send(JSON.stringify({ type: 'subscribe', after: 0 }));
      if (m.type === 'event') seen.push(m.event);
    });
    const batch = await api(server.url, 'POST', '/v1/batches', { instances: shellInstances().slice(0, 2), n: 4, sampling_params: sampling });
    await until(() => seen.length >= 20);
    first.terminate();
    const cursor = seen[seen.length - 1].seq;
    await until(async () => (await api(server!.url, 'GET', '/status')).body.pending_jobs === 0);
    const second = new WebSocket(url);
    second.on('message', (d) => {
      const m = JSON.parse(d.toString());
      if (m.type === 'hello') second.send(JSON.stringify({ type: 'subscribe', after: cursor }));
      if (m.type === 'event') seen.push(m.event);
      if (m.type === 'gap') seen.push(m);
    });
    await until(() => seen.filter((e) => e.type === 'rollout.result').length === 8);
    second.terminate();
    expect(seen.some((e) => e.type === 'gap')).toBe(false);
    expect(seen.map((e) => e.seq)).toEqual(Array.from({ length: seen.length }, (_, i) => i + 1));
    expect(new Set(seen.filter((e) => e.type === 'rollout.result').map((e) => e.rolloutId))).toEqual(new Set(batch.body.rollout_ids));
  }, 90_000);
});
