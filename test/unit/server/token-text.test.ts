import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ChatCodec } from '../../../src/llm/chat-codec.js';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { RolloutResultSchema, type RolloutResult } from '../../../src/protocol/trajectory.js';
import { openRunReplay, runCodecRecord } from '../../../src/server/run-replay.js';
import { createService } from '../../../src/server/service.js';
import { tokenTexts } from '../../../src/server/token-text.js';
import { FAMILIES } from '../../fixtures/model-families.js';
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

  it("decodes a job's tokens with the codec its custom_tokenizer named, not the runtime's", async () => {
    // A tokenizer directory is a host path: the service must list its root (`--path-root`).
    h = await startHarness({ pathRoots: [dirname(FAMILIES.llama3_1.dir)] });
    const llama = codecFor({ tokenizer: FAMILIES.llama3_1.dir });
    const sub = await post(`${h.url}/v1/rollouts`, { instance: task({ instance_id: 'own' }), sampling_params: { custom_tokenizer: FAMILIES.llama3_1.dir } });
    expect(sub.status).toBe(202);
    const id = sub.body.id as string;
    await h.until(() => h!.rt().get(id)?.result !== undefined);
    const tokens = (await get(`${h.url}/v1/rollouts/${id}`)).body.result.trajectory.tokens as number[];
    const r = await get(`${h.url}/v1/rollouts/${id}/tokens`);
    expect(r.status).toBe(200);
    expect(r.body.codec).toBe(llama.name);
    expect(r.body.codec).not.toBe('test');
    expect(r.body.assumed).toBe(false);
    expect((r.body.text as string[]).join('')).toBe(llama.decode(tokens));
  });
});

describe('rollout view: the token text of a recorded run', () => {
  const dirs: string[] = [];
  /** A real ended rollout's result, whose tokens each run below replaces with its codec's. */
  let ended: RolloutResult | undefined;
  beforeAll(async () => {
    const one = await startHarness();
    try {
      const id = (await post(`${one.url}/v1/rollouts`, { instance: task({ instance_id: 'rec' }) })).body.id as string;
      await one.until(() => one.rt().get(id)?.result !== undefined);
      ended = one.rt().get(id)!.result!;
    } finally {
      await one.close();
    }
  });
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  /** A run directory holding one ended rollout tokenized with `codec`, and `summary` as its summary.json (none when undefined). */
  function recordedRun(codec: ChatCodec, summary: Record<string, unknown> | undefined): { dir: string; id: string; ids: number[] } {
    const dir = mkdtempSync(join(tmpdir(), 'rr-view-'));
    dirs.push(dir);
    const ids = codec.encode('Hello, world! naïve 🦜');
    const t = ended!.trajectory;
    const parsed = RolloutResultSchema.safeParse({ ...ended, trajectory: { ...t, tokens: ids, logprobs: ids.map(() => -0.5), lossMask: ids.map(() => 1) } });
    if (!parsed.success) throw new Error(`the fixture is not a RolloutResult: ${parsed.error.message}`);
    writeFileSync(join(dir, 'trajectories.jsonl'), `${JSON.stringify(parsed.data)}\n`);
    if (summary) writeFileSync(join(dir, 'summary.json'), JSON.stringify(summary));
    return { dir, id: parsed.data.id, ids };
  }

  async function tokensOf(dir: string, id: string, warn: (m: string) => void = () => undefined): Promise<Record<string, unknown>> {
    const replay = await openRunReplay(dir, { warn });
    const service = createService({ createRuntime: () => Promise.resolve(replay) }, { port: 0 });
    try {
      const url = await service.listen();
      const r = await get(`${url}/v1/rollouts/${id}/tokens`);
      expect(r.status).toBe(200);
      return r.body as Record<string, unknown>;
    } finally {
      await service.close();
    }
  }

  it("decodes with the run's own --tokenizer as summary.json records it", async () => {
    const llama = codecFor({ tokenizer: FAMILIES.llama3_1.dir });
    const run = recordedRun(llama, { ...runCodecRecord(FAMILIES.llama3_1.dir, undefined), rollouts: 1 });
    const body = await tokensOf(run.dir, run.id);
    expect(body.codec).toBe(llama.name);
    expect(body.assumed).toBe(false);
    expect((body.text as string[]).join('')).toBe(llama.decode(run.ids));
  });

  it('a run on the default tokenizer is decoded with it, not assumed', async () => {
    const qwen = codecFor({});
    const run = recordedRun(qwen, { ...runCodecRecord(undefined, undefined), rollouts: 1 });
    const body = await tokensOf(run.dir, run.id);
    expect(body.codec).toBe(qwen.name);
    expect(body.assumed).toBe(false);
  });

  it('assumes the default, and says so, for a run that does not record its tokenizer or whose tokenizer is gone', async () => {
    const old = recordedRun(codecFor({}), { rollouts: 1 });
    expect((await tokensOf(old.dir, old.id)).assumed).toBe(true);
    const gone = recordedRun(codecFor({}), { tokenizer: join(tmpdir(), 'rr-no-such-model-dir'), tool_parser: null });
    const warnings: string[] = [];
    const body = await tokensOf(gone.dir, gone.id, (m) => warnings.push(m));
    expect(body.assumed).toBe(true);
    expect(warnings.join('\n')).toContain('rr-no-such-model-dir');
  });

  it('records a tokenizer directory as an absolute path, a hub name as given, and the default as null', () => {
    const rel = relative(process.cwd(), FAMILIES.llama3_1.dir);
    expect(runCodecRecord(rel, 'hermes')).toEqual({ tokenizer: FAMILIES.llama3_1.dir, tool_parser: 'hermes' });
    expect(runCodecRecord('Qwen/Qwen3-8B', undefined)).toEqual({ tokenizer: 'Qwen/Qwen3-8B', tool_parser: null });
    expect(runCodecRecord(undefined, undefined)).toEqual({ tokenizer: null, tool_parser: null });
  });
});

describe('GET /v1/rollouts (token listing)', () => {
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
