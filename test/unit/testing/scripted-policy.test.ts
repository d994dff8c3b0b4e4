import { describe, expect, it } from 'vitest';
import { BackendError, CancelledError, TaskError } from '../../../src/errors.js';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import { ManualClock, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';

const codec = new TestCodec();
const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  rolloutId: 'r',
  instance: { data_source: 'x', oracle: [{ content: 'one' }, { content: 'two' }] },
  turn: 0,
  promptIds: [1],
  maxTokens: 100,
  sampling: {},
  signal: new AbortController().signal,
  ...over,
});

describe('ScriptedPolicy', () => {
  it('replays the oracle turn for the requested turn with one logprob per id', async () => {
    const p = new ScriptedPolicy({ codec, backendId: 'b', weightVersion: 3 });
    const r = await p.generate(req({ turn: 1 }));
    expect(codec.parseAssistant(r.outputIds).content).toBe('two');
    expect(r.logprobs).toHaveLength(r.outputIds.length);
    expect([r.backendId, r.weightVersion, r.finishReason]).toEqual(['b', 3, 'stop']);
  });

  it('answers with a plain text turn once the oracle runs out', async () => {
    const r = await new ScriptedPolicy({ codec }).generate(req({ turn: 5 }));
    expect(codec.parseAssistant(r.outputIds)).toMatchObject({ content: 'Done.', toolCalls: [] });
  });

  it('cuts at maxTokens with finishReason length', async () => {
    const r = await new ScriptedPolicy({ codec }).generate(req({ maxTokens: 2 }));
    expect([r.outputIds.length, r.finishReason]).toEqual([2, 'length']);
  });

  it('waits its latency on the injected clock', async () => {
    const clock = new ManualClock();
    const p = new ScriptedPolicy({ codec, clock, latencyMs: 30 });
    let done = false;
    void p.generate(req()).then(() => (done = true));
    await clock.advance(29);
    expect(done).toBe(false);
    await clock.advance(1);
    expect(done).toBe(true);
  });

  it('injects backend and task failures by call number', async () => {
    const p = new ScriptedPolicy({ codec, fail: (_r, n) => (n === 1 ? 'backend' : n === 2 ? 'task' : undefined) });
    await expect(p.generate(req())).rejects.toBeInstanceOf(BackendError);
    await expect(p.generate(req())).rejects.toBeInstanceOf(TaskError);
    await expect(p.generate(req())).resolves.toMatchObject({ outputIds: expect.any(Array), finishReason: expect.any(String) });
  });

  it('hangs until the signal aborts when told to', async () => {
    const ac = new AbortController();
    const p = new ScriptedPolicy({ codec, fail: () => 'hang' });
    const call = p.generate(req({ signal: ac.signal }));
    expect(p.inFlight).toBe(1);
    ac.abort();
    await expect(call).rejects.toBeInstanceOf(CancelledError);
    expect(p.inFlight).toBe(0);
  });
});
