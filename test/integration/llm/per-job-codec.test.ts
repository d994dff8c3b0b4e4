import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { codecFor, resolveTokenizerRef } from '../../../src/llm/codec-registry.js';
import type { HfChatCodec } from '../../../src/llm/hf-codec.js';
import { startLlmHttpServer, type EngineRequest, type LlmHttpServer } from '../../../src/llm/llm-http-server.js';
import type { Instance } from '../../../src/protocol/instance.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { MemorySandboxProvider } from '../../../src/testing/index.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { scriptedEngine } from '../../../src/testing/fake-llm-policies.js';
import { FAMILIES, GPT_OSS } from '../../fixtures/model-families.js';
import { post } from '../../unit/server/harness.js';

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const TASKS: Instance[] = [
  { data_source: 'math', instance_id: 'gauss', problem: 'What is the sum of the integers from 1 to 100?', answer: '5050', oracle: [{ content: 'Pairs of 101.', tool_calls: [{ name: 'finish', arguments: { message: 'The sum is \\boxed{5050}.' } }] }] } as Instance,
  { data_source: 'math', instance_id: 'pow', problem: 'Compute 2^10.', answer: '1024', oracle: [{ content: 'Doubling ten times.', tool_calls: [{ name: 'finish', arguments: { message: '\\boxed{1024}' } }] }] } as Instance,
];

/** An engine of one model: replays the oracle in its own vocabulary and logs the prompts it was given. */
async function engineOf(codec: HfChatCodec, prompts: number[][]): Promise<LlmHttpServer> {
  const scripted = scriptedEngine(codec, new Map(TASKS.map((t) => [t.instance_id!, t])));
  return startLlmHttpServer({
    engine: {
      ...scripted,
      generate: (req: EngineRequest) => {
        prompts.push(req.promptIds);
        return scripted.generate(req);
      },
      tokenize: (t) => codec.encode(t),
    },
  });
}

/**
 * One service (one runtime, Qwen3 by default) serving rollouts of three models at once: each
 * job picks its model with the reference's `sampling_params.custom_tokenizer`, is tokenized
 * with that model's tokenizer and template, and is sent only to backends of that model.
 */
describe('one service serving several models, each job picking its codec (custom_tokenizer)', () => {
  let service: RolloutService;
  let url: string;
  const qwen = codecFor();
  const llama = codecFor({ tokenizer: FAMILIES.llama3_1.dir });
  const oss = codecFor({ tokenizer: GPT_OSS.dir });
  const seen = { qwen: [] as number[][], llama: [] as number[][], oss: [] as number[][] };
  const engines: LlmHttpServer[] = [];

  beforeAll(async () => {
    engines.push(await engineOf(qwen, seen.qwen), await engineOf(llama, seen.llama), await engineOf(oss, seen.oss));
    service = createService({ createRuntime: serviceRuntimeFactory({ codec: qwen, sandboxes: () => new MemorySandboxProvider(), runtime: { sandboxDriver: 'none' } }), backends: [] }, { port: 0, backendsIntervalMs: 0, pathRoots: [REPO_ROOT] });
    url = await service.listen();
    // The service's own model without a tokenizer; the others with theirs (each checked through /tokenize).
    expect((await post(`${url}/add_llm_server`, { address: engines[0]!.url })).status).toBe(200);
    expect((await post(`${url}/v1/backends`, { address: engines[1]!.url, id: 'llama', tokenizer: FAMILIES.llama3_1.dir })).status).toBe(201);
    expect((await post(`${url}/add_llm_server`, { address: engines[2]!.url, tokenizer: GPT_OSS.dir })).status).toBe(200);
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await Promise.all(engines.map((e) => e.close()));
  });

  const job = (t: Instance, sampling: Record<string, unknown>) => post(`${url}/process`, { instance: t, sampling_params: { max_iterations: 4, token_level_generation: true, ...sampling } });

  it('tokenizes each job with its model and routes it only to that model’s backend', async () => {
    const runs = await Promise.all(
      TASKS.flatMap((t) => [
        job(t, {}).then((r) => ['qwen', r] as const),
        job(t, { custom_tokenizer: FAMILIES.llama3_1.dir }).then((r) => ['llama', r] as const),
        job(t, { custom_tokenizer: GPT_OSS.dir }).then((r) => ['oss', r] as const),
      ]),
    );
    const codecs = { qwen, llama, oss };
    for (const [model, r] of runs) {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect([model, r.body.resolved]).toEqual([model, true]);
      const assistant = (r.body.messages as { role: string; token_ids?: number[]; input_ids?: number[] }[]).find((m) => m.role === 'assistant')!;
      // The prompt is that model's template, and exactly what that model's engine was given.
      const prompt = codecs[model].decode(assistant.input_ids!);
      expect(prompt).toMatch({ qwen: /^<\|im_start\|>system\n/, llama: /^<\|begin_of_text\|><\|start_header_id\|>system<\|end_header_id\|>/, oss: /^<\|start\|>system<\|message\|>You are ChatGPT/ }[model]);
      expect(seen[model].map((p) => p.join(','))).toContain(assistant.input_ids!.join(','));
      for (const other of (['qwen', 'llama', 'oss'] as const).filter((m) => m !== model)) expect(seen[other].map((p) => p.join(','))).not.toContain(assistant.input_ids!.join(','));
    }
    expect([seen.qwen.length, seen.llama.length, seen.oss.length]).toEqual([2, 2, 2]);
  }, 60_000);

  it('refuses a custom_tokenizer that is not a model directory, or lies outside the path roots, naming the field', async () => {
    const bad = await job(TASKS[0]!, { custom_tokenizer: join(REPO_ROOT, 'test/fixtures') });
    expect(bad.status).toBe(422);
    expect(JSON.stringify(bad.body)).toMatch(/custom_tokenizer.*tokenizer\.json: missing/);
    const outside = await job(TASKS[0]!, { custom_tokenizer: '/nonexistent/model' });
    expect([outside.status, JSON.stringify(outside.body)]).toEqual([400, expect.stringContaining('sampling_params.custom_tokenizer is outside the allowed path roots')]);
  });

  it('keeps the service’s model for a hub name it does not have locally (what reference clients send), with a warning', async () => {
    const r = await job(TASKS[1]!, { custom_tokenizer: 'Qwen/Qwen3-8B-not-cached' });
    expect([r.status, r.body.resolved]).toEqual([200, true]);
    expect(seen.qwen.length).toBe(3);
  });
});

describe('the embedded runtime: custom_tokenizer per job', () => {
  it('renders each job with its model, the oracle backend replaying in that vocabulary, and refuses a bad directory on the field', async () => {
    const rt = createRuntime({ sandboxes: new MemorySandboxProvider(), backends: ['oracle'] });
    try {
      const [a, b] = await Promise.all([rt.submit(TASKS[0], { custom_tokenizer: GPT_OSS.dir }).result, rt.submit(TASKS[0]).result]);
      expect([a.resolved, b.resolved]).toEqual([true, true]);
      const oss = codecFor({ tokenizer: GPT_OSS.dir });
      expect(oss.decode(a.trajectory.turns[0]!.outputIds)).toMatch(/^<\|channel\|>commentary<\|message\|>Pairs of 101\.<\|end\|><\|start\|>assistant<\|channel\|>commentary to=functions\.finish /);
      expect(codecFor().decode(b.trajectory.turns[0]!.outputIds)).toMatch(/<tool_call>/);
      // reasoning_effort (vLLM's field) sets harmony's `Reasoning:`; other models ignore it.
      const [hi, q] = await Promise.all([rt.submit(TASKS[1], { custom_tokenizer: GPT_OSS.dir, reasoning_effort: 'high' }).result, rt.submit(TASKS[1], { reasoning_effort: 'high' }).result]);
      expect(oss.decode(hi.trajectory.turns[0]!.promptIds)).toContain('\n\nReasoning: high\n\n');
      expect(oss.decode(a.trajectory.turns[0]!.promptIds)).toContain('\n\nReasoning: medium\n\n');
      expect(q.resolved).toBe(true);
      expect(() => rt.submit(TASKS[1], { reasoning_effort: 'max' })).toThrow(/sampling\.reasoning_effort/);
      let err: unknown;
      try {
        rt.submit(TASKS[0], { custom_tokenizer: join(REPO_ROOT, 'test/fixtures') });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).issues[0]).toMatchObject({ path: 'sampling.custom_tokenizer', message: expect.stringContaining('tokenizer.json: missing') });
    } finally {
      await rt.close();
    }
  });
});

describe('a job of a model no backend serves', () => {
  it('fails as an infrastructure error saying no backend serves its model, and how to add one', async () => {
    const prompts: number[][] = [];
    const engine = await engineOf(codecFor(), prompts);
    const rt = createRuntime({ sandboxes: new MemorySandboxProvider(), backends: [engine.url], retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    try {
      const r = await rt.submit(TASKS[0], { custom_tokenizer: FAMILIES.llama3_1.dir }).result;
      expect(r.outcome).toBe('infra-error');
      expect(r.error?.message).toMatch(/no LLM backend serves this rollout's model \(hf:.*llama3_1\): register one with that tokenizer/);
      expect(prompts).toEqual([]);
      // The runtime's own model still goes to it.
      expect((await rt.submit(TASKS[0]).result).resolved).toBe(true);
    } finally {
      await rt.close();
      await engine.close();
    }
  });
});

describe('resolveTokenizerRef', () => {
  let cache: string;
  beforeAll(() => {
    cache = mkdtempSync(join(tmpdir(), 'hf-cache-'));
    const repo = join(cache, 'models--meta-llama--Llama-3.1-8B-Instruct');
    mkdirSync(join(repo, 'refs'), { recursive: true });
    mkdirSync(join(repo, 'snapshots'), { recursive: true });
    writeFileSync(join(repo, 'refs', 'main'), 'abc123\n');
    symlinkSync(join(REPO_ROOT, FAMILIES.llama3_1.dir.slice(REPO_ROOT.length)), join(repo, 'snapshots', 'abc123'));
  });
  afterAll(() => rmSync(cache, { recursive: true, force: true }));

  it('finds a hub name in the local Hugging Face cache as transformers does offline, and loads it', () => {
    const dir = resolveTokenizerRef('meta-llama/Llama-3.1-8B-Instruct', 'custom_tokenizer', { HF_HUB_CACHE: cache });
    expect(dir).toBe(join(cache, 'models--meta-llama--Llama-3.1-8B-Instruct', 'snapshots', 'abc123'));
    expect(codecFor({ tokenizer: dir }).name).toBe(codecFor({ tokenizer: FAMILIES.llama3_1.dir }).name);
    // HF_HOME/hub is where it looks without HF_HUB_CACHE: not there.
    expect(() => resolveTokenizerRef('meta-llama/Llama-3.1-8B-Instruct', 'custom_tokenizer', { HF_HOME: join(cache, 'nothing-here') })).toThrow(/nothing-here\/hub\/models--meta-llama--Llama-3\.1-8B-Instruct/);
  });

  it('passes paths through, and names the field and the cache for a hub name it lacks', () => {
    expect(resolveTokenizerRef('/models/x')).toBe('/models/x');
    expect(resolveTokenizerRef('./models/x')).toBe('./models/x');
    expect(() => resolveTokenizerRef('Qwen/Qwen3-8B', 'sampling.custom_tokenizer', { HF_HUB_CACHE: cache })).toThrow(ValidationError);
    expect(() => resolveTokenizerRef('Qwen/Qwen3-8B', 'sampling.custom_tokenizer', { HF_HUB_CACHE: cache })).toThrow(/^sampling\.custom_tokenizer: Qwen\/Qwen3-8B: not a directory, and not in the Hugging Face cache \(.*models--Qwen--Qwen3-8B\)/);
  });
});
