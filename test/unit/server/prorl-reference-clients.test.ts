import { afterEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ProcessRequestSchema } from '../../../src/protocol/http.js';
import { parseJsonText } from '../../../src/server/body.js';
import { startHarness, post, get, task, heldTask, type Harness } from './harness.js';

// Issue #28 §2: what the reference's own clients (and NeMo Gym's ProRL agent) send and expect,
// run against the ProRL routes over real HTTP.

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** POSTs a raw JSON text, as Python's json.dumps writes it. */
async function postText(url: string, text: string): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
  const body = await res.text();
  return { status: res.status, body: body ? JSON.parse(body) : undefined };
}

describe('a body with Python json constants (item 4)', () => {
  it('accepts NaN from a pandas row as a missing value, as FastAPI does', async () => {
    h = await startHarness();
    const body = JSON.stringify({ instance: task({ hints_text: 'x' }), sampling_params: { temperature: 1 }, job_id: 'nan' })
      .replace('"hints_text":"x"', '"hints_text":NaN')
      .replace('"temperature":1', '"temperature":NaN');
    const r = await postText(`${h.url}/process`, body);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ job_id: 'nan', outcome: 'completed', reward: 1 });
  });

  it('reads NaN as null and ±Infinity as numbers outside strings only, and still refuses text that is not JSON', () => {
    expect(parseJsonText('{"a": NaN, "b": [Infinity, -Infinity], "c": "NaN Infinity", "d": -1}')).toEqual({ a: null, b: [Infinity, -Infinity], c: 'NaN Infinity', d: -1 });
    expect(() => parseJsonText('{"a": NaNa}')).toThrow(/malformed JSON/);
    expect(() => parseJsonText("{'a': 1}")).toThrow(/malformed JSON/);
  });

  it('names the field when a value must be finite (Infinity where a number in range is wanted)', async () => {
    h = await startHarness();
    const r = await postText(`${h.url}/process`, `{"instance": ${JSON.stringify(task())}, "sampling_params": {"temperature": Infinity}}`);
    expect(r.status).toBe(422);
    expect(JSON.stringify(r.body.detail)).toContain('temperature');
  });
});

describe('reward_model and job_id as the reference takes them (items 5, 6)', () => {
  it('takes reward_model as a JSON string or as an object, the same', () => {
    const asString = ProcessRequestSchema.parse({ instance: { data_source: 'deepcoder', reward_model: '{"ground_truth": "[1]", "style": "rule"}' } });
    const asObject = ProcessRequestSchema.parse({ instance: { data_source: 'deepcoder', reward_model: { ground_truth: '[1]', style: 'rule' } } });
    expect(asString.instance['reward_model']).toEqual({ ground_truth: '[1]', style: 'rule' });
    expect(asString).toEqual(asObject);
  });

  it('reads a null routing field (a pandas NaN) as unset', () => {
    const p = ProcessRequestSchema.parse({ instance: { data_source: null, instance_id: null, trajectory_id: null } });
    expect(p.instance.data_source).toBe('swebench');
    expect(p.instance.instance_id).toBeUndefined();
  });

  it('runs a /process with job_id null under its rollout id', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/process`, { instance: task(), job_id: null });
    expect(r.status).toBe(200);
    expect(r.body.job_id).toBe(r.body.rollout_id);
  });
});

describe('custom_tokenizer not in the local cache (item 7)', () => {
  const saved = process.env['HF_HUB_CACHE'];
  afterEach(() => {
    if (saved === undefined) delete process.env['HF_HUB_CACHE'];
    else process.env['HF_HUB_CACHE'] = saved;
  });

  it('says in the result metadata and on /status that the runtime tokenizer ran the job', async () => {
    const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'hf-empty-'));
    process.env['HF_HUB_CACHE'] = cache;
    try {
      h = await startHarness();
      const r = await post(`${h.url}/process`, { instance: task(), sampling_params: { custom_tokenizer: 'NoSuchOrg/NoSuchModel-1B' } });
      expect(r.status).toBe(200);
      const used = r.body.metadata.custom_tokenizer_fallback.used;
      expect(r.body.metadata.custom_tokenizer_fallback).toMatchObject({ custom_tokenizer: 'NoSuchOrg/NoSuchModel-1B', reason: expect.stringMatching(/not in the local Hugging Face cache/) });
      expect(typeof used).toBe('string');
      const st = await get(`${h.url}/status`);
      expect(st.body.custom_tokenizer_fallbacks).toEqual([expect.objectContaining({ custom_tokenizer: 'NoSuchOrg/NoSuchModel-1B', used, jobs: 1 })]);
      // A job without custom_tokenizer says nothing.
      expect((await post(`${h.url}/process`, { instance: task() })).body.metadata).toBeUndefined();
    } finally {
      fs.rmSync(cache, { recursive: true, force: true });
    }
  });
});

describe('error statuses as the reference answers them (item 8)', () => {
  it('answers /cancel while stopped with 503', async () => {
    h = await startHarness();
    await post(`${h.url}/stop`);
    const r = await post(`${h.url}/cancel`, { job_id: 'j' });
    expect(r.status).toBe(503);
    expect(typeof r.body.detail).toBe('string');
  });

  it('refuses /cancel with a number job_id with 422 naming the field, and still cancels by a string', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/cancel`, { job_id: 12 });
    expect(r.status).toBe(422);
    expect(r.body.detail[0].loc).toEqual(['body', 'job_id']);
    const pending = post(`${h.url}/process`, { instance: heldTask(), job_id: '12' });
    await h.until(() => h!.rt().list()[0]?.state === 'acting');
    expect(await post(`${h.url}/cancel`, { job_id: '12' })).toMatchObject({ status: 200, body: { cancelled: 1 } });
    expect((await pending).body.outcome).toBe('cancelled');
  });

  it('answers /process with no LLM server registered with 503, and runs it once one is added', async () => {
    h = await startHarness({}, { backends: [] });
    const r = await post(`${h.url}/process`, { instance: task() });
    expect(r.status).toBe(503);
    expect(r.body.detail).toMatch(/No LLM server/);
    expect(h.rt().list()).toEqual([]);
    expect((await post(`${h.url}/add_llm_server`, { address: 'oracle' })).status).toBe(200);
    expect((await post(`${h.url}/process`, { instance: task() })).body).toMatchObject({ outcome: 'completed' });
  });
});
