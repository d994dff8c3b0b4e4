import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { startLlmServeProcess, stopServerProcesses } from '../../helpers/server-process.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';

/**
 * Abort and resume of a partial rollout against the real tiny engine (`llm-serve --tiny`,
 * node-llama-cpp), through the embedded runtime's `abortGeneration()`: the engine ends the
 * generation in flight with what it sampled (finish `abort`), the runtime resumes it on
 * prompt + partial ids after the weight update, and the turn is exactly the engine's prefix +
 * continuation with each token's version. (A sampled engine's continuation is not the
 * uninterrupted run's — that exact equality is tested against fake-llm in abort-resume.test.ts.)
 */

let url: string;
let pool: BackendPool | undefined;
let rt: EmbeddedRuntime | undefined;

const talker: AgentHandler = {
  name: 'talk',
  async init() {
    return { messages: [{ role: 'system', content: 'You are verbose.' }, { role: 'user', content: 'Tell a long story.' }], tools: [] };
  },
  async act() {
    return { messages: [{ role: 'user', content: 'Go on.' }], observations: [], stop: null };
  },
  async eval() {
    return { reward: 0, resolved: false };
  },
};

beforeAll(async () => {
  const model = ensureTinyGguf({ seed: 1 });
  url = (await startLlmServeProcess(['--model', model, '--port', '0', '--protocol', 'sglang', '--parallel', '1', '--weight-version', '1'])).url;
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await pool?.close();
  await stopServerProcesses();
});

/** Tokens the engine has sampled so far for `instanceId`'s generation in flight (0 when none is). */
async function sampledSoFar(url: string, instanceId: string): Promise<number> {
  const { inflight } = (await (await fetch(`${url}/debug/inflight`)).json()) as { inflight: { instanceId: string | null; tokens: number }[] };
  return inflight.find((g) => g.instanceId === instanceId)?.tokens ?? 0;
}

describe('abort and resume against llm-serve --tiny', () => {
  it('ends the generation in flight with its partial output and resumes it on the new weights: prefix + continuation, versions per token', async () => {
    pool = new BackendPool({ probeIntervalMs: 0 });
    pool.addBackend({ id: 'tiny', url, protocol: 'sglang', weightVersion: '1' });
    rt = createRuntime({ llm: pool, codec: createQwen3Codec(), handlers: [talker], builtinHandlers: false, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    const h = rt.submit({ data_source: 'talk', instance_id: 'abort-1' }, { max_iterations: 1, max_output_tokens: 300, temperature: 1, seed: 3 });
    // The generation is at the engine and has sampled some tokens (of 300): the abort cuts it mid-way.
    await expect.poll(() => sampledSoFar(url, 'abort-1'), { timeout: 60_000, interval: 20 }).toBeGreaterThanOrEqual(4);

    // The trainer's `abort`-mode update: pause, abort, load the weights (version 2), resume.
    rt.pauseGeneration();
    const report = await rt.abortGeneration();
    expect(report).toEqual([{ id: 'tiny', aborted: 1 }]);
    const upd = await fetch(`${url}/update_weight_version`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ weight_version: 2 }) });
    expect(upd.status).toBe(200);
    rt.setWeightVersion(2);
    rt.resumeGeneration();
    const res = await h.result;

    const samples = ((await (await fetch(`${url}/debug/samples`)).json()) as { samples: LlamaSample[] }).samples.filter((s) => s.instanceId === 'abort-1');
    // The continuation ends at the length limit, or earlier on an end token: the tiny model's
    // weights are random, and where the abort cut (so what the continuation samples) varies.
    expect(samples.map((s) => s.finishReason)).toEqual(['abort', expect.stringMatching(/^(length|stop)$/)]);
    const [partial, cont] = samples as [LlamaSample, LlamaSample];
    if (cont.finishReason === 'length') expect(res.outcome, JSON.stringify(res.error)).toBe('truncated');
    else expect(res.error, JSON.stringify(res.error)).toBeNull();
    const turn = res.trajectory.turns[0]!;
    // The continuation was asked for on the prompt + the partial ids, for the tokens left.
    expect(cont.promptIds).toEqual([...partial.promptIds, ...partial.outputIds]);
    expect(turn.promptIds).toEqual(partial.promptIds);
    expect(turn.outputIds).toEqual([...partial.outputIds, ...cont.outputIds]);
    expect(turn.logprobs).toEqual([...partial.logprobs, ...cont.logprobs]);
    expect(turn.outputIds).toHaveLength(cont.finishReason === 'length' ? 300 : partial.outputIds.length + cont.outputIds.length);
    expect(turn.finishReason).toBe(cont.finishReason);
    expect(turn.weightVersion).toBe(2);
    const runs = res.trajectory.weightVersions!.filter((r) => r.tokens > 0);
    expect(partial.outputIds.length).toBeGreaterThanOrEqual(4);
    expect(runs).toEqual([{ version: '1', tokens: partial.outputIds.length }, { version: 2, tokens: cont.outputIds.length }]);
    expect(res.trajectory.diagnostics.weightVersionRegressed).toBeUndefined();
  }, 170_000);

  it('reports an engine without an abort route instead of throwing', async () => {
    const p = new BackendPool({ probeIntervalMs: 0 });
    p.addBackend({ id: 'gone', url: 'http://127.0.0.1:9', protocol: 'sglang' });
    const r2 = createRuntime({ llm: p, codec: createQwen3Codec(), handlers: [talker], builtinHandlers: false });
    try {
      const report = await r2.abortGeneration();
      expect(report).toHaveLength(1);
      expect(report[0]).toMatchObject({ id: 'gone', aborted: null });
      // Its abort route was tried (an sglang backend has one) and the connection refused.
      expect(report[0]!.error).toMatch(/fetch failed|ECONNREFUSED/);
    } finally {
      await r2.close();
      await p.close();
    }
  });
});
