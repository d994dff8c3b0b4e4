import { afterEach, describe, expect, it } from 'vitest';
import type { EngineRequest, EngineResult } from '../../../src/llm/llm-http-server.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { createTestHandler } from '../../../src/testing/index.js';

// Engines that report no weight version with their answer (vLLM's completions, OpenAI chat):
// the pool stamps the version. It must be the one in force when the call was sent, not the one
// current when the answer arrives (#28). No sleeps: the engine holds each answer until the test
// releases it, so "the update lands mid-turn" is an ordering the test makes, not a timing.

const codec = createQwen3Codec();
const word = codec.encode('a')[0]!;
/** n sampled ids: n − 1 ordinary tokens, then the end-of-turn token when `stop`. */
const ids = (n: number, stop: boolean): number[] => [...new Array<number>(stop ? n - 1 : n).fill(word), ...(stop ? [codec.endOfTurnId] : [])];

interface Held {
  req: EngineRequest;
  answer(r: EngineResult): void;
}

/** An engine whose every generation waits for the test: `next()` resolves with the next call as it arrives. */
function heldEngine() {
  const arrived: Held[] = [];
  const waiters: ((h: Held) => void)[] = [];
  return {
    engine: {
      generate(req: EngineRequest): Promise<EngineResult> {
        return new Promise<EngineResult>((resolve) => {
          const h: Held = { req, answer: resolve };
          const w = waiters.shift();
          if (w) w(h);
          else arrived.push(h);
        });
      },
    },
    next(): Promise<Held> {
      const h = arrived.shift();
      return h ? Promise.resolve(h) : new Promise((resolve) => waiters.push(resolve));
    },
  };
}

const answer = (outputIds: number[], finishReason: EngineResult['finishReason']): EngineResult => ({ outputIds, logprobs: outputIds.map(() => -0.5), finishReason });

let fake: FakeLlmServer | undefined;
let rt: EmbeddedRuntime | undefined;
afterEach(async () => {
  await rt?.close();
  await fake?.close();
  rt = fake = undefined;
});

async function setUp(protocol: 'vllm' | 'openai') {
  const held = heldEngine();
  fake = await startFakeLlmServer({ protocol, policy: held.engine, codec });
  const address = protocol === 'vllm' ? `vllm+${fake.url}` : `${fake.url}/v1`;
  rt = createRuntime({ backends: [address], codec, handlers: [createTestHandler()], sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
  rt.setWeightVersion(1);
  rt.setTrainerVersion(1);
  return held;
}

const instance = { data_source: 'scripted', instance_id: 'stamp', no_sandbox: true };

describe('weight versions are stamped when the call is sent (engines that report none)', () => {
  it.each(['vllm', 'openai'] as const)('%s: a 300-token turn whose update landed while it was generating is version 1, staleness 1', async (protocol) => {
    const held = await setUp(protocol);
    const h = rt!.submit(instance, { max_iterations: 1 });
    const call = await held.next();
    // The trainer publishes version 2 while the engine is still sampling the v1 call.
    rt!.setWeightVersion(2);
    rt!.setTrainerVersion(2);
    call.answer(answer(ids(300, true), 'stop'));
    const r = await h.result;
    expect(r.trajectory.turns).toHaveLength(1);
    expect(r.trajectory.turns[0]!.outputIds).toHaveLength(300);
    expect(r.trajectory.weightVersions).toEqual([{ version: 1, tokens: 300 }]);
    expect(r.trajectory.turns[0]!.weightVersion).toBe(1);
    expect(r.trajectory.minWeightVersion).toBe(1);
    expect(r.trajectory.staleness).toBe(1);
  }, 60_000);

  it('an aborted turn answered after the update, resumed on the new version, reads [v1:80, v2:220]', async () => {
    const held = await setUp('vllm');
    const h = rt!.submit(instance, { max_iterations: 1, max_output_tokens: 1000 });
    const first = await held.next();
    // The trainer's abort-mode update: pause, (abort), publish version 2 — and the engine's
    // answer to the aborted call, 80 tokens sampled by v1, arrives only after that.
    rt!.pauseGeneration();
    rt!.setWeightVersion(2);
    rt!.setTrainerVersion(2);
    first.answer(answer(ids(80, false), 'abort'));
    rt!.resumeGeneration();
    const cont = await held.next();
    // The continuation is asked on prompt + the 80 partial ids.
    expect(cont.req.promptIds.slice(first.req.promptIds.length)).toEqual(ids(80, false));
    cont.answer(answer(ids(220, true), 'stop'));
    const r = await h.result;
    expect(r.trajectory.turns[0]!.outputIds).toHaveLength(300);
    expect(r.trajectory.weightVersions).toEqual([
      { version: 1, tokens: 80 },
      { version: 2, tokens: 220 },
    ]);
    expect(r.trajectory.minWeightVersion).toBe(1);
    expect(r.trajectory.maxWeightVersion).toBe(2);
    expect(r.trajectory.staleness).toBe(1);
  }, 60_000);

  it('a call sent after the update is stamped with the new version', async () => {
    const held = await setUp('vllm');
    rt!.setWeightVersion(3);
    const h = rt!.submit(instance, { max_iterations: 1 });
    const call = await held.next();
    call.answer(answer(ids(5, true), 'stop'));
    const r = await h.result;
    expect(r.trajectory.weightVersions).toEqual([{ version: 3, tokens: 5 }]);
  }, 60_000);
});
