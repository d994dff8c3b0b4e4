import { describe, expect, it } from 'vitest';
import { TrajectoryBuilder } from '../../../src/llm/trajectory-builder.js';
import { TestCodec } from '../../../src/testing/index.js';

const codec = new TestCodec();
const msgs = [{ role: 'user' as const, content: 'hi' }];
const turn = (ids: number[], over: Record<string, unknown> = {}) => ({ outputIds: ids, logprobs: ids.map(() => -0.5), backendId: 'b', weightVersion: null, finishReason: 'stop' as const, latencyMs: 1, ...over });

describe('TrajectoryBuilder provenance of tokens', () => {
  it('marks the trajectory engine when every turn came from the engine, and records each turn\'s logprob semantics', () => {
    const b = new TrajectoryBuilder({ codec });
    b.start(msgs, [], codec.encodePrompt(msgs, []));
    b.addTurn(turn(codec.encodeAssistant({ content: 'a' }), { tokenSource: 'engine', logprobSemantics: 'raw' }), { role: 'assistant', content: 'a' });
    const t = b.build();
    expect(t.tokenSource).toBe('engine');
    expect(t.turns[0]).toMatchObject({ tokenSource: 'engine', logprobSemantics: 'raw' });
  });

  it('marks the trajectory retokenized when any turn was tokenized locally', () => {
    const b = new TrajectoryBuilder({ codec });
    b.start(msgs, [], codec.encodePrompt(msgs, []));
    const out = codec.encodeAssistant({ content: 'a' });
    b.addTurn(turn(out), { role: 'assistant', content: 'a' });
    const obs = [{ role: 'user' as const, content: 'more' }];
    b.addContinuation(obs, codec.encodeContinuation(obs, out));
    b.addTurn(turn(codec.encodeAssistant({ content: 'b' }), { tokenSource: 'retokenized', logprobSemantics: 'none' }), { role: 'assistant', content: 'b' });
    const t = b.build();
    expect(t.tokenSource).toBe('retokenized');
    expect(t.turns.map((x) => [x.tokenSource, x.logprobSemantics])).toEqual([
      ['engine', 'unknown'],
      ['retokenized', 'none'],
    ]);
  });

  it('records where the prompt a chat server reports differs from the append-only one, keeping ours', () => {
    const b = new TrajectoryBuilder({ codec });
    const prompt = codec.encodePrompt(msgs, []);
    b.start(msgs, [], prompt);
    const engine = [...prompt];
    engine[2] = 999;
    b.addTurn(turn(codec.encodeAssistant({ content: 'a' }), { enginePromptIds: engine }), { role: 'assistant', content: 'a' });
    const t = b.build();
    expect(t.diagnostics.drift).toEqual([{ turn: 0, position: 2, expected: 999, actual: prompt[2] }]);
    expect(t.turns[0]!.promptIds).toEqual(prompt);
  });

  it('offers the live conversation, tools and codec to chat backends', () => {
    const b = new TrajectoryBuilder({ codec });
    b.start(msgs, [], codec.encodePrompt(msgs, []));
    const chat = b.chat!;
    expect(chat.codec).toBe(codec);
    expect(chat.messages).toEqual(msgs);
    b.addTurn(turn(codec.encodeAssistant({ content: 'a' })), { role: 'assistant', content: 'a' });
    expect(chat.messages).toHaveLength(2);
    expect(b.lastFinishReason).toBe('stop');
  });
});
