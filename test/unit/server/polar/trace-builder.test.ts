import { describe, expect, it } from 'vitest';
import { buildTraces, callsOf, interstitial, type LlmCall } from '../../../../src/server/polar/trace-builder.js';
import type { Trajectory } from '../../../../src/protocol/trajectory.js';

const EOT = 9;
let n = 0;
/** A call; logprobs are -0.1 × the id so a test can tell which token a logprob belongs to. */
function call(prompt: number[], response: number[], finish = 'stop'): LlmCall {
  return {
    turn: n++,
    promptIds: prompt,
    responseIds: response,
    logprobs: response.map((t) => -t / 10),
    finishReason: finish,
    promptMessages: [],
    responseMessages: [],
    weightVersion: 1,
    backendId: 'b',
  };
}

describe('prefix_merging', () => {
  const table: { name: string; calls: () => LlmCall[]; traces: { prompt: number[]; response: number[]; mask: number[] }[] }[] = [
    {
      name: 'merges calls whose prompt extends the last prompt + response, the glue masked 0',
      calls: () => [call([1, 2], [3, EOT]), call([1, 2, 3, EOT, 5, 6], [7, EOT]), call([1, 2, 3, EOT, 5, 6, 7, EOT, 8], [4, EOT])],
      traces: [{ prompt: [1, 2], response: [3, EOT, 5, 6, 7, EOT, 8, 4, EOT], mask: [1, 1, 0, 0, 1, 1, 0, 1, 1] }],
    },
    {
      name: 'starts a new trace where the prompt does not extend any chain',
      calls: () => [call([1, 2], [3, EOT]), call([1, 7, 7], [4, EOT])],
      traces: [
        { prompt: [1, 2], response: [3, EOT], mask: [1, 1] },
        { prompt: [1, 7, 7], response: [4, EOT], mask: [1, 1] },
      ],
    },
    {
      name: 'routes interleaved sub-agents to their own chains',
      calls: () => [call([1], [2, EOT]), call([5], [6, EOT]), call([1, 2, EOT, 3], [4, EOT]), call([5, 6, EOT, 7], [8, EOT])],
      traces: [
        { prompt: [1], response: [2, EOT, 3, 4, EOT], mask: [1, 1, 0, 1, 1] },
        { prompt: [5], response: [6, EOT, 7, 8, EOT], mask: [1, 1, 0, 1, 1] },
      ],
    },
    {
      name: 'splits at the end-of-turn token when the next prompt re-tokenized the previous answer',
      // [3, 4] was sampled; the next prompt holds it as [34] then EOT: the glue is what follows EOT.
      calls: () => [call([1, 2], [3, 4, EOT]), call([1, 2, 34, EOT, 5], [6, EOT])],
      traces: [{ prompt: [1, 2], response: [3, 4, EOT, 5, 6, EOT], mask: [1, 1, 1, 0, 1, 1] }],
    },
    {
      name: 'keeps the end-of-turn token as glue after a truncated answer',
      calls: () => [call([1], [3, 4], 'length'), call([1, 34, EOT, 5], [6, EOT])],
      traces: [{ prompt: [1], response: [3, 4, EOT, 5, 6, EOT], mask: [1, 1, 0, 0, 1, 1] }],
    },
    {
      name: 'continues a broken prefix as a new trace instead of dropping the rest',
      // No end-of-turn token anywhere: the re-tokenized answer cannot be split off.
      calls: () => [call([1], [3, 4], 'length'), call([1, 34, 5], [6], 'length')],
      traces: [
        { prompt: [1], response: [3, 4], mask: [1, 1] },
        { prompt: [1, 34, 5], response: [6], mask: [1] },
      ],
    },
  ];
  for (const row of table) {
    it(row.name, () => {
      const traces = buildTraces(row.calls(), 'prefix_merging');
      expect(traces.map((t) => ({ prompt: t.prompt_ids, response: t.response_ids, mask: t.loss_mask }))).toEqual(row.traces);
      for (const t of traces) {
        expect(t.loss_mask).toHaveLength(t.response_ids.length);
        expect(t.response_logprobs).toHaveLength(t.response_ids.length);
        // Sampled tokens keep their logprobs; glue gets 0.
        t.response_ids.forEach((id, i) => expect(t.response_logprobs![i]).toBeCloseTo(t.loss_mask[i] ? -id / 10 : 0));
      }
    });
  }

  it('uses the configured end-of-turn token over the detected one', () => {
    const calls = [call([1], [3, 4, 7]), call([1, 34, 8, 5], [6, 7])];
    expect(buildTraces(calls, 'prefix_merging', { endOfTurnTokenId: 8 })[0]!.response_ids).toEqual([3, 4, 7, 8, 5, 6, 7]);
    expect(buildTraces(calls, 'prefix_merging')).toHaveLength(2);
  });

  it('collects the interstitial messages between the merged answers', () => {
    const sys = { role: 'user', content: 'task' };
    const a1 = { role: 'assistant', content: 'ls' };
    const tool = { role: 'tool', content: 'out' };
    const a2 = { role: 'assistant', content: 'done' };
    const c1 = { ...call([1], [2, EOT]), promptMessages: [sys], responseMessages: [a1] };
    const c2 = { ...call([1, 2, EOT, 3], [4, EOT]), promptMessages: [sys, a1, tool], responseMessages: [a2] };
    const [t] = buildTraces([c1, c2], 'prefix_merging');
    expect(t!.prompt_messages).toEqual([sys]);
    expect(t!.response_messages).toEqual([a1, tool, a2]);
    expect(t!.metadata['turns']).toEqual([c1.turn, c2.turn]);
  });
});

describe('per_request', () => {
  it('makes one trace per call with every sampled token trainable', () => {
    const traces = buildTraces([call([1, 2], [3, EOT]), call([1, 2, 3, EOT, 5], [6, EOT])], 'per_request');
    expect(traces.map((t) => [t.prompt_ids, t.response_ids, t.loss_mask])).toEqual([
      [[1, 2], [3, EOT], [1, 1]],
      [[1, 2, 3, EOT, 5], [6, EOT], [1, 1]],
    ]);
  });
});

describe('interstitial', () => {
  it.each([
    { tail: [3, 9, 5], prev: [3, 9], eot: 9, glue: [5] },
    { tail: [34, 9, 5], prev: [3, 4, 9], eot: 9, glue: [5] },
    { tail: [34, 9, 5], prev: [3, 4], eot: 9, glue: [9, 5] },
    { tail: [34, 5], prev: [3, 4], eot: 9, glue: null },
    { tail: [34, 5], prev: [3, 4], eot: undefined, glue: null },
  ])('tail $tail after $prev (eot $eot) → $glue', ({ tail, prev, eot, glue }) => {
    expect(interstitial(tail, prev, eot)).toEqual(glue);
  });
});

describe('callsOf', () => {
  it('pairs each turn with its assistant message and the messages before it', () => {
    const t = {
      turns: [
        { promptIds: [1], outputIds: [2], logprobs: [-1], backendId: 'b', weightVersion: 3, finishReason: 'stop', latencyMs: 1 },
        { promptIds: [1, 2, 5], outputIds: [6], logprobs: [-1], backendId: 'b', weightVersion: 4, finishReason: 'stop', latencyMs: 1 },
      ],
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: '', tool_calls: [{ id: 'c1', name: 'bash', arguments: { command: 'ls' } }] },
        { role: 'tool', content: 'a', tool_call_id: 'c1' },
        { role: 'assistant', content: 'done' },
      ],
    } as unknown as Trajectory;
    const calls = callsOf(t);
    expect(calls.map((c) => [c.finishReason, c.promptMessages.length, c.weightVersion])).toEqual([
      ['tool_calls', 1, 3],
      ['stop', 3, 4],
    ]);
    expect(calls[0]!.responseMessages[0]).toEqual({ role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"command":"ls"}' } }] });
  });
});
