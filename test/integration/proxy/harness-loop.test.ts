import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { hostHarnessHandler, hostHarnessesCleaned, liveChildren } from './host-harness.js';
import { haveTools } from '../../helpers/system-tools.js';

/**
 * The runtime's harness loop end to end with a real proxy on a real Unix socket, a real agent
 * process (stdlib Python, on the host) and the oracle replay backend answering its calls:
 * `llmCalling` while a call is at the engine, `acting` while the agent works, budgets, timeouts
 * and cancel. The same loop inside a bwrap sandbox is `harness-sandbox.test.ts`.
 */
const codec = new TestCodec();
let runtime: EmbeddedRuntime;
beforeAll(() => {
  runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: new MemorySandboxProvider(), handlers: [hostHarnessHandler()], retries: { max: 0 }, budgetMs: 20_000 });
});
afterAll(async () => {
  await runtime.close();
  await hostHarnessesCleaned();
});
afterEach(() => {
  expect(liveChildren.size).toBe(0);
});

const bash = (command: string) => ({ tool_calls: [{ name: 'bash', arguments: { command } }] });

/** Each turn's prompt + output is a prefix of `tokens[a, b)`: the record is token-exact there. */
function expectTokenExact(r: RolloutResult, a: number, b: number, turns: [number, number]): void {
  const seg = r.trajectory.tokens.slice(a, b);
  for (let t = turns[0]; t < turns[1]; t++) {
    const turn = r.trajectory.turns[t]!;
    expect(seg.slice(0, turn.promptIds.length)).toEqual(turn.promptIds);
    expect(seg.slice(turn.promptIds.length, turn.promptIds.length + turn.outputIds.length)).toEqual(turn.outputIds);
  }
  const mask = r.trajectory.lossMask.slice(a, b);
  const sampled = r.trajectory.turns.slice(...turns).reduce((n, t) => n + t.outputIds.length, 0);
  expect(mask.filter((m) => m === 1).length).toBe(sampled);
}

// The harness agent is a python3 script on the host (host-harness.ts).
describe.skipIf(!haveTools('python3'))('the harness loop', () => {
  it('answers an agent\'s calls from the oracle and keeps one token-exact sequence', async () => {
    const states: string[] = [];
    const h = runtime.submit({ data_source: 'host-harness', instance_id: 'tools', mode: 'tools', oracle: [bash('echo one'), bash('echo two'), { content: 'All done.' }] });
    const events = (async () => {
      for await (const ev of runtime.events({ rolloutId: h.id })) {
        if (ev.type === 'rollout.state') states.push(ev.state);
        if (ev.type === 'rollout.result') break;
      }
    })();
    const r = await h.result;
    await events;
    expect([r.outcome, r.finish, r.reward]).toEqual(['completed', 'no_tool_call', 1]);
    expect(r.evalDetails?.output).toMatch(/done after 3/);
    expect(r.trajectory.turns).toHaveLength(3);
    expect(r.trajectory.segments).toBeUndefined();
    expect(r.trajectory.diagnostics.continuity).toBe('token-exact');
    expectTokenExact(r, 0, r.trajectory.tokens.length, [0, 3]);
    // The agent's tool output went back to the model as a tool message, mask 0.
    expect(r.trajectory.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual(['one\n', 'two\n']);
    expect(states.filter((s) => s === 'llmCalling' || s === 'acting')).toEqual(['llmCalling', 'acting', 'llmCalling', 'acting', 'llmCalling', 'acting']);
  });

  it('serves a streaming agent the same answers', async () => {
    const r = await runtime.submit({ data_source: 'host-harness', instance_id: 'stream', mode: 'stream', oracle: [bash('echo s'), { content: 'fin' }] }).result;
    expect([r.outcome, r.reward, r.trajectory.turns.length, r.trajectory.diagnostics.continuity]).toEqual(['completed', 1, 2, 'token-exact']);
  });

  it('starts a new segment when the agent rewrites its history, and says where', async () => {
    const oracle = [bash('echo 1'), bash('echo 2'), bash('echo 3'), bash('echo 4'), { content: 'end' }];
    const r = await runtime.submit({ data_source: 'host-harness', instance_id: 'rewrite', mode: 'rewrite', oracle }).result;
    expect([r.outcome, r.reward]).toEqual(['completed', 1]);
    const segs = r.trajectory.segments!;
    // Rewrites after answered calls 2 and 4: calls 1-2, 3-4, 5.
    expect(segs.map((s) => [s.turnStart, s.turnEnd])).toEqual([[0, 2], [2, 4], [4, 5]]);
    expect(r.trajectory.diagnostics.continuity).toBe('segmented');
    expect((r.trajectory.diagnostics.rewrites as unknown[]).length).toBe(2);
    for (const s of segs) expectTokenExact(r, s.tokenStart, s.tokenEnd, [s.turnStart, s.turnEnd]);
    expect(segs.at(-1)!.tokenEnd).toBe(r.trajectory.tokens.length);
  });

  it('ends the loop at max_llm_calls with a 429 to the agent and finish max_iterations', async () => {
    const r = await runtime.submit({ data_source: 'host-harness', instance_id: 'calls', mode: 'greedy', max_llm_calls: 2, oracle: Array.from({ length: 10 }, () => bash('true')) }).result;
    expect([r.outcome, r.finish, r.trajectory.turns.length]).toEqual(['truncated', 'max_iterations', 2]);
    expect(r.evalDetails?.proxy_ended).toBe(true);
    // Two answers, then the third request refused with the budget's 429.
    expect(r.evalDetails?.statuses).toEqual({ 200: 2, 429: 1 });
  });

  it('ends the loop at max_tokens_total with finish length', async () => {
    const r = await runtime.submit({ data_source: 'host-harness', instance_id: 'tokens', mode: 'greedy', max_tokens_total: 200, oracle: Array.from({ length: 20 }, () => bash('echo ' + 'x'.repeat(40))) }).result;
    expect([r.outcome, r.finish]).toEqual(['truncated', 'length']);
    expect((r.evalDetails?.statuses as Record<string, number>)[429]).toBe(1);
    expect(r.trajectory.tokens.length).toBeLessThanOrEqual(200 + 200);
  });

  it('times out an agent that never calls the model and never exits, and kills it', async () => {
    const rt = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: new MemorySandboxProvider(), handlers: [hostHarnessHandler()], retries: { max: 0 }, budgetMs: 1_500 });
    try {
      const r = await rt.submit({ data_source: 'host-harness', instance_id: 'silent', mode: 'silent' }).result;
      expect([r.outcome, r.finish, r.error?.name]).toEqual(['timed-out', 'timeout', 'RolloutTimeoutError']);
    } finally {
      await rt.close();
    }
    // The killed agent's exit is the thing to wait for (afterEach then finds no live child).
    await expect.poll(() => liveChildren.size).toBe(0);
  });

  it('cancels a working agent and kills its process group', async () => {
    const h = runtime.submit({ data_source: 'host-harness', instance_id: 'cancel', mode: 'silent' });
    await expect.poll(() => runtime.get(h.id)?.state, { timeout: 20_000 }).toBe('llmCalling');
    expect(liveChildren.size).toBe(1);
    await h.cancel('test');
    const r = await h.result;
    expect(r.outcome).toBe('cancelled');
    await expect.poll(() => liveChildren.size).toBe(0);
  });

  it('answers a generation still cut by an abort (a chat backend cannot continue it) as finish_reason length, and records abort', async () => {
    const oracle = new OracleBackend({ codec });
    // A chat backend's abort: it rendered its own prompt (enginePromptIds), so the partial reply is kept as it is.
    const chatAbort = { generate: async (req: Parameters<OracleBackend['generate']>[0]) => ({ ...(await oracle.generate(req)), finishReason: 'abort' as const, enginePromptIds: req.promptIds }) };
    const rt = createRuntime({ codec, llm: chatAbort, sandboxes: new MemorySandboxProvider(), handlers: [hostHarnessHandler()], retries: { max: 0 }, budgetMs: 20_000 });
    try {
      const r = await rt.submit({ data_source: 'host-harness', instance_id: 'chat-abort', mode: 'once', oracle: [{ content: 'A partial story' }] }).result;
      expect([r.outcome, r.trajectory.turns.length]).toEqual(['completed', 1]);
      expect(r.evalDetails?.output).toBe(`once 200 length ${r.trajectory.turns[0]!.outputIds.length}\n`);
      expect(r.trajectory.turns[0]!.finishReason).toBe('abort');
    } finally {
      await rt.close();
    }
  });
});
