import { afterEach, describe, expect, it } from 'vitest';
import { rig, task, statesOf, type Rig } from './helpers.js';
import { createRuntime, TaskError, type ChatCodec } from '../../../src/index.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

describe('createRuntime', () => {
  it('runs a three-turn rollout to completed with a reward and a token trajectory', async () => {
    r = rig({ runtime: { events: { retain: 1000 } } });
    const h = r.rt.submit(task({ expect: { path: 'a.txt', content: 'hi\n' } }));
    await r.clock.advance(1);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(res.finish).toBe('finish_tool');
    expect(res.reward).toBe(1);
    expect(res.resolved).toBe(true);
    expect(res.attempts).toBe(1);
    expect(res.trajectory.turns).toHaveLength(3);
    // With free slots the rollout never stops in waitingRun / waitingEval.
    expect(await statesOf(r.rt, h.id)).toEqual([
      'queued', 'initializing', 'llmCalling', 'acting', 'llmCalling', 'acting', 'llmCalling', 'acting', 'evaluating', 'done',
    ]);
  });

  it('closes every sandbox and leaves no timer after close', async () => {
    r = rig();
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    await h.result;
    await r.rt.close();
    expect(r.sandboxes.live).toBe(0);
    expect(r.clock.pending).toBe(0);
    expect(r.rt.status().state).toBe('closed');
  });

  it('records backend id and weight version per turn and asks for the same backend next turn', async () => {
    r = rig({ llm: { backendId: 'b7', weightVersion: 'v3' } });
    const seen: (string | undefined)[] = [];
    const generate = r.llm.generate.bind(r.llm);
    r.llm.generate = (req) => (seen.push(req.preferredBackendId), generate(req));
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    const res = await h.result;
    expect(res.trajectory.turns.map((t) => [t.backendId, t.weightVersion])).toEqual([['b7', 'v3'], ['b7', 'v3'], ['b7', 'v3']]);
    expect(seen).toEqual([undefined, 'b7', 'b7']);
  });

  it('ends infra-error CONTEXT_LIMIT naming the numbers, not retried, when the engine refuses a call for length our count had room for (#30)', async () => {
    for (const refusedTurn of [0, 1]) {
      r = rig();
      const generate = r.llm.generate.bind(r.llm);
      r.llm.generate = (req) => (req.turn === refusedTurn ? Promise.reject(new TaskError("This model's maximum context length is 2048 tokens", { code: 'CONTEXT_FULL' })) : generate(req));
      const h = r.rt.submit(task(), { max_tokens: 100_000 });
      await r.clock.advance(1);
      const res = await h.result;
      expect([res.outcome, res.reward, res.attempts, res.trajectory.turns.length]).toEqual(['infra-error', null, 1, refusedTurn]);
      expect(res.error).toMatchObject({ code: 'CONTEXT_LIMIT', retryable: false });
      expect(res.error?.message).toMatch(/^the engine refused the call for its context length \(the prompt is \d+ tokens, max_tokens \d+, this rollout's max_model_len 32768; engine: This model's maximum context length is 2048 tokens\)/);
      await r.rt.close();
    }
  });

  it('passes sampling.enable_thinking to the codec for the first prompt and every continuation', async () => {
    r = rig();
    const seen: unknown[] = [];
    const codec: ChatCodec = r.codec;
    const prompt = codec.encodePrompt.bind(codec);
    const cont = codec.encodeContinuation.bind(codec);
    codec.encodePrompt = (m, t, o) => (seen.push(['prompt', o]), prompt(m, t, o));
    codec.encodeContinuation = (m, ids, o) => (seen.push(['continuation', o]), cont(m, ids, o));
    const h = r.rt.submit(task(), { enable_thinking: false });
    await r.clock.advance(1);
    await h.result;
    expect(seen).toEqual([
      ['prompt', { enableThinking: false }],
      ['continuation', { enableThinking: false }],
      ['continuation', { enableThinking: false }],
    ]);
  });

  it('lists every data source its handlers serve, aliases and built-ins included', () => {
    r = rig();
    expect(r.rt.dataSources()).toEqual(expect.arrayContaining(['scripted', 'test', 'math', 'deepscaler', 'swebench', 'shell']));
    expect([...r.rt.dataSources()]).toEqual([...r.rt.dataSources()].sort());
  });

  it('finds no drift with an append-only codec when detectDrift is on', async () => {
    r = rig({ runtime: { detectDrift: true } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    const res = await h.result;
    expect(res.trajectory.diagnostics.drift).toEqual([]);
    expect(res.trajectory.lossMask.filter((m) => m === 1)).toHaveLength(res.trajectory.turns.reduce((n, t) => n + t.outputIds.length, 0));
  });

  it('records drift when the codec is not append-only', async () => {
    // A codec whose full render differs from its incremental ids at position 0.
    class Drifting extends TestCodec {
      override renderFull(...a: Parameters<TestCodec['renderFull']>): number[] {
        const ids = super.renderFull(...a);
        ids[0] = 0;
        return ids;
      }
    }
    const clock = new ManualClock();
    const codec = new Drifting();
    const rt = createRuntime({ clock, codec, llm: new ScriptedPolicy({ codec, clock }), sandboxes: new MemorySandboxProvider({ clock }), handlers: [createTestHandler()], detectDrift: true });
    const h = rt.submit(task());
    await clock.advance(1);
    const drift = (await h.result).trajectory.diagnostics.drift;
    await rt.close();
    expect(drift.length).toBeGreaterThan(0);
    expect(drift[0]).toMatchObject({ turn: 0, position: 0, expected: 0 });
  });
});
