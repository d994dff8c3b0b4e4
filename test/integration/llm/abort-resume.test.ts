import { afterEach, describe, expect, it } from 'vitest';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { createTestHandler, MemorySandboxProvider } from '../../../src/testing/index.js';

const oracle = [
  { content: 'Writing the greeting file now, then I will read it back.', tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi > a.txt' } }] },
  { content: 'Reading it back to check the content is right.', tool_calls: [{ name: 'execute_bash', arguments: { command: 'cat a.txt' } }] },
  { tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] },
];
const instance = { data_source: 'scripted', instance_id: 'ar1', oracle };

let fake: FakeLlmServer | undefined;
let rt: EmbeddedRuntime | undefined;
let sandboxes: MemorySandboxProvider | undefined;
afterEach(async () => {
  await rt?.close();
  await fake?.close();
  expect(sandboxes?.live ?? 0).toBe(0);
  rt = fake = sandboxes = undefined;
});

async function setUp(): Promise<void> {
  const codec = createQwen3Codec();
  // 40 ms per token; the abort below lands at a held token (holdAtTokens), not at a guessed time.
  fake = await startFakeLlmServer({ tasks: [instance], protocol: 'sglang', perTokenMs: 40, weightVersion: 1, codec });
  sandboxes = new MemorySandboxProvider();
  rt = createRuntime({ backends: [`sglang+${fake.url}`], codec, sandboxes, handlers: [createTestHandler()], sandboxDriver: 'none' });
}

describe('abort and resume against fake-llm (SGLang protocol, real HTTP)', () => {
  it('keeps the partial output of an aborted generation and resumes it on the new weights: prefix + continuation, versions per token', async () => {
    await setUp();
    const reference = await rt!.submit(instance).result;
    expect(reference.outcome).toBe('completed');
    const sent = fake!.requests;

    // The trainer's update in `abort` mode: pause new calls, abort the engines' generations,
    // load the weights (version 2), resume.
    fake!.holdAtTokens = 3;
    const h = rt!.submit(instance);
    await expect.poll(() => fake!.held, { timeout: 30_000 }).toBe(1);
    fake!.holdAtTokens = null;
    rt!.pauseGeneration();
    const ab = await fetch(`${fake!.url}/abort_request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ abort_all: true }) });
    expect(((await ab.json()) as { aborted: number }).aborted).toBe(1);
    fake!.weightVersion = 2;
    rt!.setWeightVersion(2);
    rt!.resumeGeneration();
    const res = await h.result;

    expect(res.outcome).toBe('completed');
    expect(res.reward).toBe(reference.reward);
    // The resumed token sequence is exactly the one an uninterrupted run sampled.
    expect(res.trajectory.tokens).toEqual(reference.trajectory.tokens);
    expect(res.trajectory.turns[0]!.outputIds).toEqual(reference.trajectory.turns[0]!.outputIds);
    const runs = res.trajectory.weightVersions!;
    expect(runs[0]!.version).toBe(1);
    // Exactly the tokens sampled before the hold, then the rest on version 2.
    expect(runs[0]!.tokens).toBe(3);
    expect(reference.trajectory.turns[0]!.outputIds.length).toBeGreaterThan(3);
    expect(runs.slice(1).every((x) => x.version === 2)).toBe(true);
    expect(runs.reduce((a, x) => a + x.tokens, 0)).toBe(res.trajectory.lossMask.filter((m) => m === 1).length);
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([2, 2, 2]);
    expect(res.trajectory.diagnostics.weightVersionRegressed).toBeUndefined();
    // One more request than the uninterrupted run: the continuation. One sandbox per rollout.
    expect(fake!.requests - sent).toBe(reference.trajectory.turns.length + 1);
    expect(sandboxes!.created).toBe(2);
  }, 60_000);
});

describe('POST /v1/weights/abort (the service relays the abort to its engines)', () => {
  let service: RolloutService | undefined;
  afterEach(async () => {
    await service?.close();
    service = undefined;
  });

  const post = async (url: string, body?: unknown): Promise<any> => {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, body: await res.json() };
  };
  const resultOf = async (url: string, id: string): Promise<any> => {
    let result: unknown = null;
    await expect
      .poll(async () => (result = ((await (await fetch(`${url}/v1/rollouts/${id}`)).json()) as { result: unknown }).result) ?? null, { timeout: 30_000, interval: 10 })
      .not.toBeNull();
    return result;
  };

  it('pause → abort → update → resume: the aborted turn resumes on version 2 with its partial kept', async () => {
    const codec = createQwen3Codec();
    fake = await startFakeLlmServer({ tasks: [instance], protocol: 'sglang', perTokenMs: 40, weightVersion: 1, codec });
    const made: MemorySandboxProvider[] = [];
    service = createService(
      {
        createRuntime: serviceRuntimeFactory({
          codec,
          sandboxes: () => {
            const p = new MemorySandboxProvider();
            made.push(p);
            return p;
          },
          handlers: [createTestHandler()],
          runtime: { sandboxDriver: 'none' },
        }),
        backends: [{ address: `sglang+${fake.url}`, id: 'e1' }],
      },
      { port: 0, backendsIntervalMs: 0 },
    );
    const url = await service.listen();
    const ref = await resultOf(url, (await post(`${url}/v1/rollouts`, { instance })).body.id);
    fake.holdAtTokens = 3;
    const id = (await post(`${url}/v1/rollouts`, { instance })).body.id as string;
    await expect.poll(() => fake!.held, { timeout: 30_000 }).toBe(1);
    fake.holdAtTokens = null;
    expect((await post(`${url}/v1/weights/pause`)).body.paused).toBe(true);
    const ab = await post(`${url}/v1/weights/abort`);
    expect(ab.status).toBe(200);
    expect(ab.body.engines).toEqual([{ id: 'e1', aborted: 1 }]);
    fake.weightVersion = 2;
    expect((await post(`${url}/v1/weights`, { version: 2, trainer_version: 1 })).body.backends).toMatchObject([{ id: 'e1', weight_version: 2 }]);
    await post(`${url}/v1/weights/resume`);
    const res = await resultOf(url, id);
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.tokens).toEqual(ref.trajectory.tokens);
    expect(res.trajectory.weightVersions[0].version).toBe(1);
    expect(res.trajectory.weightVersions[0].tokens).toBe(3);
    expect(res.trajectory.maxWeightVersion).toBe(2);
    expect(res.trajectory.staleness).toBe(0);
    await service.close();
    service = undefined;
    expect(made.every((p) => p.live === 0)).toBe(true);
  }, 60_000);
});
