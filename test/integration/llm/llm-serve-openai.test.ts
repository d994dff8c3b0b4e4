import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { parseBackendAddress } from '../../../src/llm/backend-address.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { startLlmServeProcess, stopServerProcesses } from '../../helpers/server-process.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';

const codec = createQwen3Codec();

/** One user message per turn and never a stop. */
const talker: AgentHandler = {
  name: 'talk',
  async init() {
    return { messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say something.' }], tools: [] };
  },
  async act(ctx) {
    return { messages: [{ role: 'user', content: `Turn ${ctx.turn + 1} done; go on.` }], observations: [], stop: null };
  },
  async eval() {
    return { reward: 0, resolved: false };
  },
};

describe('llm-serve --tiny over OpenAI chat completions and as a GRPO sampler', () => {
  let url = '';
  let pool: BackendPool;
  let rt: EmbeddedRuntime;

  beforeAll(async () => {
    ensureTinyGguf({ seed: 1 });
    url = (await startLlmServeProcess(['--tiny', '--port', '0', '--parallel', '4'])).url;
  }, 120_000);

  afterAll(async () => {
    await rt?.close();
    await pool?.close();
    await stopServerProcesses();
  });

  async function samples(): Promise<LlamaSample[]> {
    return ((await (await fetch(`${url}/debug/samples`)).json()) as { samples: LlamaSample[] }).samples;
  }

  it('runs a rollout through the /v1 address with the ids and logprobs the engine sampled', async () => {
    pool = new BackendPool({ probeIntervalMs: 0 });
    pool.addBackend(parseBackendAddress(`${url}/v1`));
    rt = createRuntime({ llm: pool, codec, handlers: [talker], retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    const r = await rt.submit({ data_source: 'talk', instance_id: 'oa-talk' }, { max_iterations: 2, max_output_tokens: 5, temperature: 1, seed: 3 }).result;
    expect(r.outcome).toBe('truncated');
    expect(r.trajectory.tokenSource).toBe('engine');
    const mine = (await samples()).filter((s) => s.instanceId === 'oa-talk');
    expect(mine).toHaveLength(2);
    r.trajectory.turns.forEach((t, i) => {
      expect(t.outputIds).toEqual(mine[i]!.outputIds);
      expect(t.logprobs).toEqual(mine[i]!.logprobs);
      expect(t.tokenSource).toBe('engine');
    });
    // The first prompt is the server's render of the same messages.
    expect(r.trajectory.turns[0]!.promptIds).toEqual(mine[0]!.promptIds);
    await rt.close();
    await pool.close();
  }, 120_000);

  it('keeps the end-of-turn token the model samples and reports the stop as stop', async () => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      // A large bias makes <|im_end|> the sampled token: a natural stop on the first step.
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, logit_bias: { [codec.endOfTurnId]: 100 }, logprobs: true, return_token_ids: true }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: { token_ids: number[]; finish_reason: string; logprobs: { content: { logprob: number }[] } }[] };
    const c = body.choices[0]!;
    expect(c.finish_reason).toBe('stop');
    expect(c.token_ids).toEqual([codec.endOfTurnId]);
    expect(c.logprobs.content).toHaveLength(1);
  });

  it('gives the n members of a GRPO group submitted with one seed n distinct trajectories', async () => {
    pool = new BackendPool({ probeIntervalMs: 0 });
    pool.addBackend({ id: 'tiny', url, protocol: 'prorl' });
    rt = createRuntime({ llm: pool, codec, handlers: [talker], retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    const sampling = { max_iterations: 1, max_output_tokens: 6, temperature: 1, seed: 7 };
    const run = async () => (await rt.submitGroup({ data_source: 'talk', instance_id: 'grpo' }, sampling, 4).results).map((r) => r.trajectory.turns[0]!.outputIds.join(','));
    const first = await run();
    expect(new Set(first).size).toBe(4);
    // Not asserted: the same group again giving the same 4. llama.cpp samples co-scheduled
    // sequences in one batch, so a seeded sequence depends on what it was batched with.
    await rt.close();
    await pool.close();
  }, 120_000);
});
