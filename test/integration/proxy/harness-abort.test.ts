import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { startLlmServeProcess, stopServerProcesses } from '../../helpers/server-process.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { hostHarnessHandler, hostHarnessesCleaned, liveChildren } from './host-harness.js';
import { haveTools } from '../../helpers/system-tools.js';

/**
 * A weight update in `abort` mode while a harness's call is at the engine, against the real tiny
 * engine (`llm-serve --tiny`): the runtime resumes the aborted generation on prompt + partial ids
 * after the update, as it does for our own agent (llm-serve-abort.test.ts), so the harness gets
 * one ordinary completion and the record holds prefix + continuation with each token's version.
 */
let url: string;
let pool: BackendPool | undefined;
let rt: EmbeddedRuntime | undefined;

beforeAll(async () => {
  const model = ensureTinyGguf({ seed: 1 });
  url = (await startLlmServeProcess(['--model', model, '--port', '0', '--protocol', 'sglang', '--parallel', '1', '--weight-version', '1'])).url;
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await pool?.close();
  await hostHarnessesCleaned();
  await stopServerProcesses();
});

afterEach(() => {
  expect(liveChildren.size).toBe(0);
});

/** Tokens the engine has sampled so far for `instanceId`'s generation in flight (0 when none is). */
async function sampledSoFar(url: string, instanceId: string): Promise<number> {
  const { inflight } = (await (await fetch(`${url}/debug/inflight`)).json()) as { inflight: { instanceId: string | null; tokens: number }[] };
  return inflight.find((g) => g.instanceId === instanceId)?.tokens ?? 0;
}

// The harness agent is a python3 script on the host (host-harness.ts).
describe.skipIf(!haveTools('python3'))('a proxied generation aborted by a weight update', () => {
  it('is re-issued as the tool agent does: the harness sees one normal completion, the record prefix + continuation with versions per token', async () => {
    pool = new BackendPool({ probeIntervalMs: 0 });
    pool.addBackend({ id: 'tiny', url, protocol: 'sglang', weightVersion: '1' });
    rt = createRuntime({ llm: pool, codec: createQwen3Codec(), handlers: [hostHarnessHandler()], builtinHandlers: false, sandboxes: new MemorySandboxProvider(), retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    const h = rt.submit({ data_source: 'host-harness', instance_id: 'harness-abort-1', mode: 'once' }, { max_output_tokens: 300, temperature: 1, seed: 3 });
    // The harness's call is at the engine and has sampled some tokens (of 300): then the weights
    // are updated in `abort` mode, cutting it mid-way.
    await expect.poll(() => sampledSoFar(url, 'harness-abort-1'), { timeout: 60_000, interval: 20 }).toBeGreaterThanOrEqual(4);
    rt.pauseGeneration();
    const report = await rt.abortGeneration();
    expect(report).toEqual([{ id: 'tiny', aborted: 1 }]);
    const upd = await fetch(`${url}/update_weight_version`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ weight_version: 2 }) });
    expect(upd.status).toBe(200);
    rt.setWeightVersion(2);
    rt.resumeGeneration();
    const res = await h.result;

    expect([res.outcome, res.finish], JSON.stringify(res.error)).toEqual(['completed', 'no_tool_call']);
    const samples = ((await (await fetch(`${url}/debug/samples`)).json()) as { samples: LlamaSample[] }).samples.filter((s) => s.instanceId === 'harness-abort-1');
    // The continuation ends at the length limit, or earlier on an end token: the tiny model's
    // weights are random, and where the abort cut (so what the continuation samples) varies.
    expect(samples.map((s) => s.finishReason)).toEqual(['abort', expect.stringMatching(/^(length|stop)$/)]);
    const [partial, cont] = samples as [LlamaSample, LlamaSample];
    const total = partial.outputIds.length + cont.outputIds.length;
    if (cont.finishReason === 'length') expect(total).toBe(300);
    // The harness saw one answer of every token (all 300, cut by its length, unless the model
    // ended it), never `abort`.
    expect(res.evalDetails?.output).toBe(`once 200 ${cont.finishReason} ${total}\n`);
    expect(res.trajectory.turns).toHaveLength(1);
    const turn = res.trajectory.turns[0]!;
    expect(cont.promptIds).toEqual([...partial.promptIds, ...partial.outputIds]);
    expect(turn.promptIds).toEqual(partial.promptIds);
    expect(turn.outputIds).toEqual([...partial.outputIds, ...cont.outputIds]);
    expect(turn.logprobs).toEqual([...partial.logprobs, ...cont.logprobs]);
    expect(turn.finishReason).toBe(cont.finishReason);
    expect(res.trajectory.diagnostics.continuity).toBe('token-exact');
    const runs = res.trajectory.weightVersions!.filter((r) => r.tokens > 0);
    expect(partial.outputIds.length).toBeGreaterThanOrEqual(4);
    expect(runs).toEqual([{ version: '1', tokens: partial.outputIds.length }, { version: 2, tokens: cont.outputIds.length }]);
  }, 170_000);
});
