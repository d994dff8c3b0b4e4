import { describe, expect, it } from 'vitest';
import { TrajectoryBuilder } from '../../../src/llm/trajectory-builder.js';
import { TestCodec } from '../../../src/testing/index.js';

const codec = new TestCodec();
const msgs = [{ role: 'user' as const, content: 'hi' }];

function twoTurns(b: TrajectoryBuilder) {
  const prompt = codec.encodePrompt(msgs, []);
  b.start(msgs, [], prompt);
  const out1 = codec.encodeAssistant({ content: 'a', tool_calls: [{ name: 'execute_bash', arguments: { command: 'ls' } }] });
  const parsed = codec.parseAssistant(out1);
  b.addTurn({ outputIds: out1, logprobs: out1.map(() => -0.5), backendId: 'b1', weightVersion: 1, finishReason: 'stop', latencyMs: 5 }, { role: 'assistant', content: parsed.content, tool_calls: parsed.toolCalls });
  const obs = [{ role: 'tool' as const, content: 'x' }];
  const cont = codec.encodeContinuation(obs, out1);
  b.addContinuation(obs, cont);
  const out2 = codec.encodeAssistant({ content: 'done' });
  b.addTurn({ outputIds: out2, logprobs: out2.map(() => -0.25), backendId: 'b2', weightVersion: 2, finishReason: 'stop', latencyMs: 7 }, { role: 'assistant', content: 'done' });
  return { prompt, out1, cont, out2 };
}

describe('TrajectoryBuilder', () => {
  it('keeps tokens, loss mask and logprobs aligned with 1 only on sampled ids', () => {
    const b = new TrajectoryBuilder();
    const { prompt, out1, cont, out2 } = twoTurns(b);
    const t = b.build();
    expect(t.tokens).toEqual([...prompt, ...out1, ...cont, ...out2]);
    expect(t.lossMask).toEqual([...prompt.map(() => 0), ...out1.map(() => 1), ...cont.map(() => 0), ...out2.map(() => 1)]);
    expect(t.logprobs).toEqual([...prompt.map(() => 0), ...out1.map(() => -0.5), ...cont.map(() => 0), ...out2.map(() => -0.25)]);
  });

  it('records per turn the prompt it saw, its output, logprobs, backend and weight version', () => {
    const b = new TrajectoryBuilder();
    const { prompt, out1, cont, out2 } = twoTurns(b);
    const [t1, t2] = b.build().turns;
    expect(t1).toMatchObject({ promptIds: prompt, outputIds: out1, backendId: 'b1', weightVersion: 1, latencyMs: 5 });
    expect(t2!.promptIds).toEqual([...prompt, ...out1, ...cont]);
    expect(t2!.outputIds).toEqual(out2);
  });

  it('puts input_ids, token_ids and logprobs on assistant messages and the templated ids on observations', () => {
    const b = new TrajectoryBuilder();
    const { prompt, out1, cont } = twoTurns(b);
    const m = b.build().messages;
    expect(m.map((x) => x.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(m[1]).toMatchObject({ input_ids: prompt, token_ids: out1 });
    expect(m[1]!.logprobs).toHaveLength(out1.length);
    expect(m[2]!.token_ids).toEqual(cont);
  });

  it('refuses a turn whose logprobs do not align with its ids', () => {
    const b = new TrajectoryBuilder();
    b.start(msgs, [], [1, 2]);
    expect(() => b.addTurn({ outputIds: [3, 4], logprobs: [0], backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 0 }, { role: 'assistant', content: '' })).toThrow(/align/);
  });

  it('finds no drift when the codec is append-only', () => {
    const b = new TrajectoryBuilder({ codec, detectDrift: true });
    twoTurns(b);
    expect(b.build().diagnostics.drift).toEqual([]);
  });

  it('records where incremental ids differ from a full re-render', () => {
    const b = new TrajectoryBuilder({ codec, detectDrift: true });
    const prompt = codec.encodePrompt(msgs, []);
    prompt[3] = 99;
    b.start(msgs, [], prompt);
    expect(b.build().diagnostics.drift).toEqual([{ turn: 0, position: 3, expected: codec.encodePrompt(msgs, [])[3], actual: 99 }]);
  });

  it('serializes the lazily sliced per-turn ids like plain fields', () => {
    const b = new TrajectoryBuilder();
    const { prompt, out1 } = twoTurns(b);
    const t = JSON.parse(JSON.stringify(b.build()));
    expect(t.turns[0].promptIds).toEqual(prompt);
    expect(t.messages[1].token_ids).toEqual(out1);
    expect(structuredClone(b.build()).turns[0]!.outputIds).toEqual(out1);
  });

  it('slices per-turn prompts of a large trajectory only when read', () => {
    const b = new TrajectoryBuilder();
    b.start(msgs, [], Array.from({ length: 40_000 }, (_, i) => i % 100));
    for (let k = 0; k < 2; k++) {
      b.addTurn({ outputIds: [7, 8], logprobs: [-1, -2], backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 0 }, { role: 'assistant', content: '' });
      b.addContinuation([{ role: 'tool', content: '' }], [9]);
    }
    const t = b.build();
    expect(typeof Object.getOwnPropertyDescriptor(t.turns[1]!, 'promptIds')!.get).toBe('function');
    expect(t.turns[1]!.promptIds).toHaveLength(40_003);
    expect(JSON.parse(JSON.stringify(t.turns[1])).outputIds).toEqual([7, 8]);
  });

  it('hands each turn the prompt its request read, which later appends leave as it was', () => {
    const b = new TrajectoryBuilder();
    const prompt = codec.encodePrompt(msgs, []);
    b.start(msgs, [], prompt);
    const read1 = b.promptIds;
    const out1 = codec.encodeAssistant({ content: 'a' });
    b.addTurn({ outputIds: out1, logprobs: out1.map(() => -1), backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 0 }, { role: 'assistant', content: 'a' });
    expect(read1).toEqual(prompt);
    const obs = [{ role: 'tool' as const, content: 'x' }];
    const cont = codec.encodeContinuation(obs, out1);
    b.addContinuation(obs, cont);
    const read2 = b.promptIds;
    // Made once per append, not per read.
    expect(b.promptIds).toBe(read2);
    expect(read2).toEqual([...prompt, ...out1, ...cont]);
    const out2 = codec.encodeAssistant({ content: 'b' });
    b.addTurn({ outputIds: out2, logprobs: out2.map(() => -1), backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 0 }, { role: 'assistant', content: 'b' });
    expect(read2).toHaveLength(prompt.length + out1.length + cont.length);
    const t = b.build();
    expect(t.turns[0]!.promptIds).toBe(read1);
    expect(t.turns[1]!.promptIds).toBe(read2);
    expect(t.messages[2]!.token_ids).toBe(cont);
    expect(t.tokens).toEqual([...read2, ...out2]);
  });

  it('grows a long record in place once the kept per-turn prompts pass their limit, with the same trajectory', () => {
    const b = new TrajectoryBuilder();
    b.start(msgs, [], Array.from({ length: 6000 }, (_, i) => i % 97));
    const reads: (readonly number[])[] = [];
    for (let k = 0; k < 4; k++) {
      reads.push(b.promptIds);
      b.addTurn({ outputIds: [7, 8], logprobs: [-1, -2], backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 0 }, { role: 'assistant', content: '' });
      b.addContinuation([{ role: 'tool', content: '' }], [9]);
    }
    // Turns 0 and 1 (6,000 + 6,003 ids) are kept as read; turn 2 would pass 16,384: from then on
    // the record grows in place and a read is a live view of it.
    expect(reads[1]).toHaveLength(6003);
    expect(reads[2]).toHaveLength(6006);
    expect(reads[3]).toHaveLength(6012);
    const t = b.build();
    expect(t.tokens).toBe(reads[3]);
    expect(t.turns[0]!.promptIds).toBe(reads[0]);
    expect(t.turns[1]!.promptIds).toBe(reads[1]);
    expect(t.turns[2]!.promptIds).toEqual(t.tokens.slice(0, 6006));
    expect(t.turns[3]!.promptIds).toEqual(t.tokens.slice(0, 6009));
    expect(t.tokens.slice(6009)).toEqual([7, 8, 9]);
    expect(t.lossMask.slice(6006)).toEqual([1, 1, 0, 1, 1, 0]);
  });

  it('grows a fork and its parent apart from their shared record', () => {
    const parent = new TrajectoryBuilder();
    const { prompt, out1, cont, out2 } = twoTurns(parent);
    const child = parent.fork();
    parent.addContinuation([{ role: 'tool', content: 'p' }], [1, 2]);
    child.addContinuation([{ role: 'tool', content: 'c' }], [3]);
    expect(parent.promptIds).toEqual([...prompt, ...out1, ...cont, ...out2, 1, 2]);
    expect(child.promptIds).toEqual([...prompt, ...out1, ...cont, ...out2, 3]);
    expect(child.build().turns[1]!.promptIds).toEqual([...prompt, ...out1, ...cont]);
    expect(parent.build().tokens).toHaveLength(prompt.length + out1.length + cont.length + out2.length + 2);
  });

  it('gives a fork of a record grown in place its own copy', () => {
    const parent = new TrajectoryBuilder();
    parent.start(msgs, [], Array.from({ length: 9000 }, () => 5));
    for (let k = 0; k < 2; k++) {
      parent.addTurn({ outputIds: [7], logprobs: [-1], backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 0 }, { role: 'assistant', content: '' });
      parent.addContinuation([{ role: 'tool', content: '' }], [9]);
    }
    const child = parent.fork();
    parent.addContinuation([{ role: 'tool', content: 'p' }], [1]);
    child.addContinuation([{ role: 'tool', content: 'c' }], [2, 3]);
    expect(parent.promptIds.slice(9004)).toEqual([1]);
    expect(child.promptIds.slice(9004)).toEqual([2, 3]);
  });

  it('refuses appends once built', () => {
    const b = new TrajectoryBuilder();
    twoTurns(b);
    b.build();
    expect(() => b.addContinuation([], [1])).toThrow(/final/);
  });
});
