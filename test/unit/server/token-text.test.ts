import { afterEach, describe, expect, it } from 'vitest';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { tokenTexts } from '../../../src/server/token-text.js';
import { TestCodec } from '../../../src/testing/index.js';
import { get, heldTask, post, startHarness, task, type Harness } from './harness.js';

// GET /v1/rollouts/:id/tokens: the text of each token of an ended rollout, for the visualizer's
// token view (#30 §4).

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe('tokenTexts', () => {
  it('gives each token its own decode, aligned with the ids', () => {
    const codec = codecFor({});
    const ids = codec.encode('def add(a, b):\n    return a + b\n');
    const texts = tokenTexts(codec, ids);
    expect(texts).toHaveLength(ids.length);
    expect(texts).toEqual(ids.map((id) => codec.decode([id])));
    expect(texts.join('')).toBe('def add(a, b):\n    return a + b\n');
  });

  it('gives a character split over byte-level tokens whole to its first token, so the texts join to the decode', () => {
    const codec = codecFor({});
    const text = '🦜🦜 ꙮ 𝔘𝔫𝔦 naïve';
    const ids = codec.encode(text);
    // The emoji takes several byte-level tokens, each of which alone decodes to U+FFFD.
    expect(ids.some((id) => codec.decode([id]).includes('\uFFFD'))).toBe(true);
    const texts = tokenTexts(codec, ids);
    expect(texts).toHaveLength(ids.length);
    expect(texts.join('')).toBe(text);
    expect(texts.some((t) => t.includes('\uFFFD'))).toBe(false);
    expect(texts).toContain('');
  });
});

describe('GET /v1/rollouts/:id/tokens', () => {
  it('answers the decoded tokens of an ended rollout with the runtime codec; 404 unknown, 409 while live', async () => {
    h = await startHarness();
    const sub = await post(`${h.url}/v1/rollouts`, { instance: task({ instance_id: 'tok' }) });
    expect(sub.status).toBe(202);
    const id = sub.body.id as string;
    await h.until(() => h!.rt().get(id)?.result !== undefined);
    const full = await get(`${h.url}/v1/rollouts/${id}`);
    const tokens = full.body.result.trajectory.tokens as number[];
    expect(tokens.length).toBeGreaterThan(10);
    const r = await get(`${h.url}/v1/rollouts/${id}/tokens`);
    expect(r.status).toBe(200);
    expect(r.body.codec).toBe('test');
    expect(r.body.assumed).toBe(false);
    const codec = new TestCodec();
    expect(r.body.text).toEqual(tokens.map((t) => codec.decode([t])));
    expect((r.body.text as string[]).join('')).toBe(codec.decode(tokens));

    expect((await get(`${h.url}/v1/rollouts/nope/tokens`)).status).toBe(404);
    const live = await post(`${h.url}/v1/rollouts`, { instance: heldTask({ instance_id: 'held' }) });
    const liveRes = await get(`${h.url}/v1/rollouts/${live.body.id as string}/tokens`);
    expect(liveRes.status).toBe(409);
    expect(liveRes.body.error.message).toContain('has not ended');
    await post(`${h.url}/v1/rollouts/${live.body.id as string}/cancel`, {});
    await h.until(() => h!.rt().get(live.body.id as string)?.result !== undefined);
  });

  // `rollout run` does not record its --tokenizer in summary.json yet, so `rollout view` decodes with
  // the default codec and says `assumed: true`; a rollout with its own custom_tokenizer is decoded
  // with the runtime's codec too.
  it.todo("rollout view decodes the token text with the run's own --tokenizer, and a job's custom_tokenizer with its own codec (#30)");

  it('lists each ended rollout with its sampled tokens and weight version', async () => {
    h = await startHarness({}, { backends: [{ address: 'oracle', weightVersion: 7 }] });
    const sub = await post(`${h.url}/v1/rollouts`, { instance: task({ instance_id: 'wv' }) });
    const id = sub.body.id as string;
    await h.until(() => h!.rt().get(id)?.result !== undefined);
    const result = (await get(`${h.url}/v1/rollouts/${id}`)).body.result;
    const sampled = (result.trajectory.lossMask as number[]).filter((m) => m === 1).length;
    expect(sampled).toBeGreaterThan(0);
    const listing = await get(`${h.url}/v1/rollouts`);
    const row = (listing.body.rollouts as Array<Record<string, unknown>>).find((r) => r.id === id)!;
    expect(row.response_tokens).toBe(sampled);
    expect(row.weight_version).toBe(7);
  });
});
