import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, ROOT, serve, until, watch, type Served } from './harness.js';

/**
 * What the reference system's real clients do, replayed as plain HTTP requests (issue #10,
 * REFERENCE.md §5): its test scripts' aiohttp session (bodiless octet-stream POSTs), NeMo Gym's
 * ProRL client (repeated `job_id = instance_id`, SWE rows without `data_source`, numeric
 * `trajectory_id`), its batch profiler (256 concurrent `/process` calls, retried on a non-200 and
 * re-queued on empty `messages`), and the result keys they read.
 */

const SANDBOX = process.env['ROLLOUT_E2E_SANDBOX'] ?? 'auto';

function jsonl(name: string): Record<string, unknown>[] {
  return readFileSync(join(ROOT, 'examples', name), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A POST as old aiohttp sends `session.post(url)`: no body, `Content-Type: application/octet-stream`. */
function aiohttpPost(url: string, path: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request({ host: u.hostname, port: u.port, method: 'POST', path, headers: { 'content-type': 'application/octet-stream', 'content-length': '0' } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The result keys the reference's clients read, read the way they read them. */
function readLikeTheReference(r: any): { finished: boolean; patch: string; turns: number } {
  // `if r['finish']` — a bool; `r.get('git_patch', '')`; `len(r['messages'])`; `json.loads(tool_call['arguments'])`.
  expect(typeof r.finish).toBe('boolean');
  expect(typeof r.end_properly).toBe('boolean');
  for (const m of r.messages) {
    expect(Array.isArray(m.token_ids)).toBe(true);
    for (const c of m.tool_calls ?? []) {
      expect(typeof c.arguments).toBe('string');
      expect(typeof JSON.parse(c.arguments)).toBe('object');
    }
    // NeMo Gym's ProRL agent pairs tool outputs by its own numbering and uses any id it is given:
    // the reference's messages carry none (#28).
    expect('tool_call_id' in m).toBe(false);
  }
  // The reference trims to the last assistant message (its scripts assert it).
  if (r.messages.length > 0) expect(r.messages.at(-1).role).toBe('assistant');
  return { finished: r.finish === true, patch: r.git_patch ?? '', turns: r.messages.length };
}

describe('ProRL clients, unchanged', { timeout: 120_000 }, () => {
  let s: Served;
  beforeAll(async () => {
    s = await serve(['--sandbox', 'none', '--stopped']);
  }, 90_000);
  afterAll(async () => {
    await s.stop();
  });

  it('takes the aiohttp session of the reference test scripts: bodiless octet-stream POSTs', async () => {
    expect(await aiohttpPost(s.url, '/start')).toMatchObject({ status: 200, body: { status: 'started' } });
    // A trainer's unconditional /start on a running service must not fail.
    expect(await aiohttpPost(s.url, '/start')).toMatchObject({ status: 200, body: { status: 'already running' } });
    expect((await aiohttpPost(s.url, '/clear_llm_server')).status).toBe(200);
    expect(await api(s.url, 'POST', '/add_llm_server', { address: 'oracle' })).toMatchObject({ status: 200 });
    const st = await api(s.url, 'GET', '/status');
    expect(st.status).toBe(200);
    expect(st.body).toMatchObject({ status: 'running', pending_jobs: 0, jobs: [] });
    for (const k of ['init', 'run', 'eval']) expect(Number.isInteger(st.body[k])).toBe(true);
  });

  it('runs a profiler-style batch of 256 /process calls, retrying as the profiler does', async () => {
    await aiohttpPost(s.url, '/start');
    await api(s.url, 'POST', '/add_llm_server', { address: 'oracle' });
    const rows = jsonl('math.jsonl');
    let retries = 0;
    const one = async (i: number): Promise<any> => {
      const body = { instance: { ...rows[i % rows.length], trajectory_id: i }, sampling_params: { temperature: 1.0, top_p: 1.0, max_iterations: 6 }, job_id: `prof-${i}` };
      // The profiler retries up to 2 times on a non-200 and re-queues a result with no messages.
      for (let attempt = 0; ; attempt++) {
        const r = await api(s.url, 'POST', '/process', body);
        if (r.status === 200 && r.body.messages.length > 0) return r.body;
        if (attempt >= 2) return r.body;
        retries++;
      }
    };
    const results = await Promise.all(Array.from({ length: 256 }, (_, i) => one(i)));
    expect(results.filter((r) => r.outcome !== 'completed').map((r) => [r.outcome, r.error])).toEqual([]);
    expect(retries).toBe(0);
    results.forEach((r, i) => {
      const read = readLikeTheReference(r);
      expect(read.finished).toBe(r.finish_reason === 'finish_tool');
      expect(read.turns).toBeGreaterThan(0);
      expect(r.trajectory_id).toBe(i);
      expect('git_patch' in r).toBe(false);
      expect(r.end_properly).toBe(r.finish_reason === 'finish_tool' || r.finish_reason === 'no_tool_call');
    });
    expect(results.some((r) => r.finish === true)).toBe(true);
    expect(new Set(results.map((r) => r.rollout_id)).size).toBe(256);
  }, 360_000);

  it('runs two live jobs with one job_id as two rollouts, and /cancel of it reaches both', async () => {
    const label = 'owner/repo#1 x';
    const inst = { data_source: 'shell', instance_id: 'hold', prompt: 'wait', eval_command: 'true', oracle: [{ content: 'waiting', tool_calls: [{ name: 'execute_bash', arguments: { command: 'sleep 60', timeout: 120 } }] }] };
    const a = api(s.url, 'POST', '/process', { instance: inst, job_id: label });
    const b = api(s.url, 'POST', '/process', { instance: inst, job_id: label });
    await until(async () => (await api(s.url, 'GET', '/status')).body.jobs.filter((j: string) => j === label).length === 2);
    // Both at their `sleep 60` (real sandboxes take a moment to start), so each has said something.
    await until(async () => (await api(s.url, 'GET', '/v1/rollouts?state=acting')).body.rollouts.length === 2);
    expect(await api(s.url, 'POST', '/cancel', { job_id: label })).toMatchObject({ status: 200, body: { status: 'cancelled', cancelled: 2 } });
    const [ra, rb] = await Promise.all([a, b]);
    for (const r of [ra, rb]) {
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ job_id: label, outcome: 'cancelled', finish: false, finish_reason: 'cancelled', filter: true });
      // Trimmed to end with what the policy said last.
      expect(r.body.messages.at(-1).role).toBe('assistant');
    }
    expect(ra.body.rollout_id).not.toBe(rb.body.rollout_id);
    // Cancelling it again, or a job never seen, is not an error.
    expect(await api(s.url, 'POST', '/cancel', { job_id: label })).toMatchObject({ status: 200, body: { cancelled: 0 } });
  });

  it('ignores unknown top-level keys, answers a malformed body 422 with detail, and refuses bad sampling values naming the field', async () => {
    const row = jsonl('math.jsonl')[0]!;
    const ok = await api(s.url, 'POST', '/process', { instance: row, sampling_params: { max_iterations: 4 }, job_id: 'x', timeout: 300, extra_info: { split: 'train' } });
    expect(ok).toMatchObject({ status: 200, body: { outcome: 'completed' } });
    const bad = await api(s.url, 'POST', '/process', { sampling_params: {} });
    expect(bad.status).toBe(422);
    expect(bad.body.detail[0]).toMatchObject({ loc: ['body', 'instance'] });
    const hot = await api(s.url, 'POST', '/process', { instance: row, sampling_params: { temperature: 2.5 } });
    expect(hot.status).toBe(422);
    expect(hot.body.detail[0].loc).toEqual(['body', 'sampling_params', 'temperature']);
    const v1 = await api(s.url, 'POST', '/v1/rollouts', { instance: row, sampling_params: { top_p: 0, top_k: 0 } });
    expect(v1.status).toBe(400);
    expect(v1.body.error.issues.map((i: { path: string }) => i.path).sort()).toEqual(['sampling_params.top_k', 'sampling_params.top_p']);
    // /v1 stays strict.
    expect((await api(s.url, 'POST', '/v1/rollouts', { instance: row, extra_info: {} })).status).toBe(400);
  });

  it('honours sampling_params.max_tokens as the per-turn cap', async () => {
    const w = await watch(s.url);
    try {
      const row = jsonl('math.jsonl')[0]!;
      const r = await api(s.url, 'POST', '/process', { instance: row, sampling_params: { max_tokens: 77, max_iterations: 4 } });
      expect(r.status).toBe(200);
      await until(() => w.events.some((e) => e.type === 'llm.start' && e.rolloutId === r.body.rollout_id));
      const starts = w.events.filter((e) => e.type === 'llm.start' && e.rolloutId === r.body.rollout_id);
      expect(starts.every((e) => e.maxTokens <= 77)).toBe(true);
      expect(starts[0].maxTokens).toBe(77);
    } finally {
      w.close();
    }
  });
});

describe('NeMo Gym-style SWE run (real sandboxes)', () => {
  let s: Served;
  beforeAll(async () => {
    s = await serve(['--sandbox', SANDBOX, '--backend', 'oracle']);
  }, 90_000);
  afterAll(async () => {
    await s.stop();
  });

  it('routes rows without data_source to swebench, runs repeats of one job_id, and reads like the reference', async () => {
    const rows = jsonl('swe.jsonl').slice(0, 2);
    const calls = rows.flatMap((row) => {
      const { data_source: _dropped, ...inst } = row;
      // NeMo Gym reuses job_id = instance_id for every repeat of a row.
      return [0, 1].map((k) => api(s.url, 'POST', '/process', { instance: { ...inst, trajectory_id: k }, sampling_params: { max_iterations: 35, temperature: 1.0 }, job_id: inst['instance_id'] }));
    });
    const results = await Promise.all(calls);
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(r.body.critical_error).toBeNull();
      const read = readLikeTheReference(r.body);
      expect(read.turns).toBeGreaterThan(0);
      expect(typeof r.body.git_patch).toBe('string');
      expect(read.patch.length).toBeGreaterThan(0);
      expect(r.body.job_id).toBe(r.body.instance_id);
      expect(typeof r.body.trajectory_id).toBe('number');
    }
    expect(new Set(results.map((r) => r.body.rollout_id)).size).toBe(results.length);
    expect(results.some((r) => r.body.finish === true && r.body.resolved === true)).toBe(true);
  }, 180_000);
});
