import { afterEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import { createService } from '../../../src/server/service.js';
import { ManualClock } from '../../../src/clock.js';
import { startHarness, harnessRuntimeFactory, post, get, task, heldTask, evalFaultTask, type Harness } from './harness.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

describe('ProRL routes', () => {
  it('answers /process with the ProRL result shape when the rollout completes', async () => {
    h = await startHarness();
    // Two seconds of (manual-clock) work in the sandbox, then finish.
    const pending = post(`${h.url}/process`, { instance: task({}, 2_000), sampling_params: { max_iterations: 5 }, job_id: 'job-1' });
    await h.until(() => h.rt().list()[0]?.state === 'acting');
    await h.clock.advance(2_000);
    const r = await pending;
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ job_id: 'job-1', resolved: true, reward: 1, critical_error: null, filter: false, success: true, instance_id: 'm1' });
    const assistant = r.body.messages.filter((m: { role: string }) => m.role === 'assistant');
    expect(assistant).toHaveLength(2);
    for (const m of assistant) {
      expect(m.input_ids.length).toBeGreaterThan(0);
      expect(m.logprobs).toHaveLength(m.token_ids.length);
    }
    // Turn 2's prompt is turn 1's prompt + its sampled ids + the observation: never re-tokenized.
    expect(assistant[1].input_ids.slice(0, assistant[0].input_ids.length + assistant[0].token_ids.length)).toEqual([...assistant[0].input_ids, ...assistant[0].token_ids]);
    expect(r.body.timing).toMatchObject({ init_time: 0, run_time: 2, eval_time: 0, timeout_triggered: false });
  });

  it('treats null sampling params as unset, as Python trainers send them', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/process`, { instance: task(), sampling_params: { top_k: null, temperature: 1, seed: null } });
    expect(r).toMatchObject({ status: 200, body: { outcome: 'completed' } });
  });

  it('answers an infra failure as a filtered critical error, not a trainable sample', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/process`, { instance: evalFaultTask() });
    expect(r.body).toMatchObject({ critical_error: 'eval', filter: true, resolved: false, success: false });
  });

  it('cancels a held /process job through /cancel and answers it as filtered', async () => {
    h = await startHarness();
    const pending = post(`${h.url}/process`, { instance: heldTask(), job_id: 'held' });
    await h.until(() => h.rt().list()[0]?.state === 'acting');
    const c = await post(`${h.url}/cancel`, { job_id: 'held' });
    expect(c).toMatchObject({ status: 200, body: { status: 'cancelled' } });
    expect((await pending).body).toMatchObject({ outcome: 'cancelled', filter: true, critical_error: null });
  });

  it('ignores unknown top-level keys and logs each name once (#10.4)', async () => {
    const warnings: string[] = [];
    h = await startHarness({}, { warn: (m) => warnings.push(m) });
    for (let i = 0; i < 3; i++) {
      const r = await post(`${h.url}/process`, { instance: task(), job_id: 'j', extra_info: { i }, timeout: 300 });
      expect(r.status).toBe(200);
    }
    expect(warnings).toHaveLength(2);
    expect(warnings.join('\n')).toMatch(/'extra_info'.*ignored/);
  });

  it('runs two live /process calls with one job_id as separate rollouts and cancels both by it (#10.4)', async () => {
    h = await startHarness();
    const body = { instance: heldTask(), job_id: 'owner/repo#1 x' };
    const a = post(`${h.url}/process`, body);
    const b = post(`${h.url}/process`, body);
    await h.until(() => h.rt().list({ state: 'acting' }).length === 2);
    const st = await get(`${h.url}/status`);
    expect(st.body).toMatchObject({ status: 'running', pending_jobs: 2, jobs: ['owner/repo#1 x', 'owner/repo#1 x'], init: 0, run: 2, eval: 0 });
    expect(await post(`${h.url}/cancel`, { job_id: 'owner/repo#1 x' })).toMatchObject({ status: 200, body: { cancelled: 2 } });
    const [ra, rb] = await Promise.all([a, b]);
    expect([ra.body.outcome, rb.body.outcome]).toEqual(['cancelled', 'cancelled']);
    expect(ra.body.job_id).toBe('owner/repo#1 x');
    expect(ra.body.rollout_id).not.toBe(rb.body.rollout_id);
  });

  it('answers 200 to /cancel of an unknown job, as the reference does', async () => {
    h = await startHarness();
    expect(await post(`${h.url}/cancel`, { job_id: 'nope' })).toMatchObject({ status: 200, body: { status: 'not running', cancelled: 0 } });
  });

  it('cancels the rollout of a client that disconnects from /process', async () => {
    h = await startHarness();
    const req = http.request(`${h.url}/process`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    req.on('error', () => undefined);
    req.end(JSON.stringify({ instance: heldTask(), job_id: 'gone' }));
    await h.until(() => h.rt().list()[0]?.state === 'acting');
    const id = h.rt().list()[0]!.id;
    req.destroy();
    await h.until(() => h.rt().get(id)?.result?.outcome === 'cancelled');
    expect(h.rt().get(id)?.state).toBe('cancelled');
    expect(h.sandboxes[0]!.live).toBe(0);
  });

  it('answers 503 on /status after /stop and 200 after /start', async () => {
    h = await startHarness();
    expect((await get(`${h.url}/status`)).body).toMatchObject({ status: 'running', pending_jobs: 0 });
    expect((await post(`${h.url}/stop`)).body).toEqual({ status: 'stopped' });
    expect((await get(`${h.url}/status`)).status).toBe(503);
    expect((await post(`${h.url}/start`)).body).toEqual({ status: 'started' });
    expect((await get(`${h.url}/status`)).status).toBe(200);
  });

  it('answers /start on a running service with already running', async () => {
    h = await startHarness();
    expect(await post(`${h.url}/start`)).toMatchObject({ status: 200, body: { status: 'already running' } });
  });

  it('fails pending jobs on /stop by closing the runtime without draining', async () => {
    h = await startHarness();
    const pending = post(`${h.url}/process`, { instance: heldTask(), job_id: 'p1' });
    await h.until(() => h.rt().list()[0]?.state === 'acting');
    await post(`${h.url}/stop`);
    expect((await pending).body).toMatchObject({ filter: true, outcome: 'cancelled' });
    expect(h.closes).toEqual([{ drain: false }]);
    expect(h.sandboxes[0]).toMatchObject({ closed: true, live: 0 });
  });

  it('refuses /process with 503 while stopped', async () => {
    h = await startHarness({}, { startStopped: true });
    expect((await post(`${h.url}/process`, { instance: task() })).status).toBe(503);
  });

  it('buffers /add_llm_server while stopped and applies it at /start', async () => {
    h = await startHarness({}, { startStopped: true, backends: [] });
    expect((await post(`${h.url}/add_llm_server`, { address: 'http://127.0.0.1:9001' })).body).toEqual({ status: 'buffered' });
    await post(`${h.url}/start`);
    expect(h.rt().listBackends().map((b) => b.url)).toEqual(['http://127.0.0.1:9001']);
  });

  it('keeps registered backends across /stop and /start', async () => {
    h = await startHarness({}, { backends: [{ address: 'vllm+http://127.0.0.1:9002' }] });
    await post(`${h.url}/stop`);
    await post(`${h.url}/start`);
    expect(h.rt().listBackends()).toMatchObject([{ url: 'http://127.0.0.1:9002', protocol: 'vllm' }]);
  });

  it('treats a second /add_llm_server of the same address as a no-op', async () => {
    h = await startHarness({}, { backends: [] });
    const a = await post(`${h.url}/add_llm_server`, { address: 'http://127.0.0.1:9001' });
    const b = await post(`${h.url}/add_llm_server`, { address: 'http://127.0.0.1:9001' });
    expect(a.body).toEqual(b.body);
    expect(h.rt().listBackends()).toHaveLength(1);
  });

  it('removes every backend on /clear_llm_server', async () => {
    h = await startHarness({}, { backends: [{ address: 'http://127.0.0.1:9001' }] });
    await post(`${h.url}/add_llm_server`, { address: 'sglang+http://127.0.0.1:9003' });
    expect((await post(`${h.url}/clear_llm_server`)).body).toMatchObject({ status: 'cleared', removed: 2 });
    expect(h.rt().listBackends()).toEqual([]);
  });

  it('closes the runtime it started when the port is already taken', async () => {
    h = await startHarness();
    const made = { runtimes: [], closes: [], sandboxes: [] } as Pick<Harness, 'runtimes' | 'closes' | 'sandboxes'>;
    const second = createService({ createRuntime: harnessRuntimeFactory(new ManualClock(), made) }, { port: Number(new URL(h.url).port), backendsIntervalMs: 0 });
    await expect(second.listen()).rejects.toThrow(/EADDRINUSE/);
    expect(made.runtimes).toHaveLength(1);
    expect(made.runtimes[0]!.status().state).toBe('closed');
    expect(made.sandboxes[0]!.closed).toBe(true);
    expect(second.runtime).toBeNull();
  });

  it('refuses a malformed backend address with 422 naming the field (400 on /v1)', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/add_llm_server`, { address: 'ftp://x' });
    expect(r.status).toBe(422);
    expect(r.body.detail[0].loc).toEqual(['body', 'address']);
    expect(r.body.error.issues[0].path).toBe('address');
    const v = await post(`${h.url}/v1/backends`, { address: 'ftp://x' });
    expect(v.status).toBe(400);
    expect(v.body.error.issues[0].path).toBe('address');
  });
});
