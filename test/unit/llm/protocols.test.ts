import { describe, expect, it } from 'vitest';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import { memberSeed } from '../../../src/llm/member-seed.js';
import { openaiProtocol, prorlProtocol, sglangProtocol, vllmProtocol } from '../../../src/llm/protocols/index.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';

const req: GenerateRequest = {
  rolloutId: 'r1',
  instance: { data_source: 'math', instance_id: 'i1' },
  turn: 0,
  promptIds: [1, 2, 3],
  maxTokens: 4,
  sampling: { temperature: 0.7, top_p: 0.9, top_k: 20, seed: 5 },
  signal: new AbortController().signal,
};

describe('prorl protocol', () => {
  it('sends the reference field names with skip_special_tokens false', () => {
    expect(prorlProtocol.body(req, undefined)).toEqual({ prompt_ids: [1, 2, 3], max_tokens: 4, temperature: 0.7, top_p: 0.9, top_k: 20, seed: 5, skip_special_tokens: false });
  });

  it('reads a turn that used its whole budget without a finish reason as cut by length', () => {
    expect(prorlProtocol.parse({ response_ids: [7, 8, 9, 10], logprobs: [-1, -1, -1, -1] }, req).finishReason).toBe('length');
  });

  it('refuses an answer whose logprobs do not line up with the ids', () => {
    expect(() => prorlProtocol.parse({ response_ids: [7, 8], logprobs: [-1] }, req)).toThrow(/2 output ids but 1 logprobs/);
  });

  describe('without a finish reason (the reference format), the stop token decides', () => {
    const qwen = createQwen3Codec();
    const withCodec: GenerateRequest = { ...req, chat: { messages: [], tools: [], codec: qwen } };
    const eot = qwen.endOfTurnId;
    const eos = [...qwen.stopIds].find((id) => id !== eot)!;
    it.each([
      ['stops on its last allowed token: the end-of-turn id', [7, 8, 9, eot], 'stop'],
      ['stops on its last allowed token: another stop id', [7, 8, 9, eos], 'stop'],
      ['uses the whole budget on ordinary tokens', [7, 8, 9, 10], 'length'],
      ['ends early on the end-of-turn id', [7, eot], 'stop'],
      ['ends early without a stop id (a stop string)', [7, 8], 'stop'],
      ['samples nothing', [], 'stop'],
    ] as const)('%s → %s', (_name, ids, finish) => {
      expect(prorlProtocol.parse({ response_ids: ids, logprobs: ids.map(() => -1) }, withCodec).finishReason).toBe(finish);
    });

    it('keeps a finish reason the server did send', () => {
      expect(prorlProtocol.parse({ response_ids: [7, 8, 9, eot], logprobs: [-1, -1, -1, -1], finish_reason: 'length' }, withCodec).finishReason).toBe('length');
    });

    it('reads a vLLM answer with finish_reason null the same way', () => {
      const ans = (ids: number[]) => ({ choices: [{ token_ids: ids, logprobs: { tokens: ids.map((i) => `token_id:${i}`), token_logprobs: ids.map(() => -1) }, finish_reason: null }] });
      expect(vllmProtocol.parse(ans([7, 8, 9, eot]), withCodec).finishReason).toBe('stop');
      expect(vllmProtocol.parse(ans([7, 8, 9, 10]), withCodec).finishReason).toBe('length');
    });
  });
});

describe('vllm protocol', () => {
  it('sends a token-id prompt asking for logprobs and token ids', () => {
    expect(vllmProtocol.body(req, 'm')).toMatchObject({ model: 'm', prompt: [1, 2, 3], max_tokens: 4, logprobs: 1, return_tokens_as_token_ids: true, skip_special_tokens: false });
  });

  it('reads the ids from token_id:N strings when token_ids is absent', () => {
    const r = vllmProtocol.parse({ choices: [{ text: 'x', logprobs: { tokens: ['token_id:7', 'token_id:151645'], token_logprobs: [-0.5, -0.1] }, finish_reason: 'stop' }] }, req);
    expect(r).toMatchObject({ outputIds: [7, 151645], logprobs: [-0.5, -0.1], finishReason: 'stop' });
  });

  it('refuses token strings that are not token ids', () => {
    expect(() => vllmProtocol.parse({ choices: [{ logprobs: { tokens: ['hello'], token_logprobs: [-1] } }] }, req)).toThrow(/token_id:N/);
  });
});

describe('sglang protocol', () => {
  it('sends input_ids with sampling_params and return_logprob', () => {
    expect(sglangProtocol.body(req, undefined)).toMatchObject({ input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 4, temperature: 0.7, sampling_seed: 5, no_stop_trim: true }, return_logprob: true });
  });

  it('reads output ids, logprobs, the finish type and the weight version', () => {
    const r = sglangProtocol.parse({ output_ids: [5, 6], meta_info: { output_token_logprobs: [[-0.2, 5, null], [-0.3, 6, null]], finish_reason: { type: 'length', length: 2 }, weight_version: 'v3' } }, req);
    expect(r).toEqual({ outputIds: [5, 6], logprobs: [-0.2, -0.3], finishReason: 'length', weightVersion: 'v3' });
  });

  it('reads the sampled ids from output_token_logprobs, not from output_ids with the prompt at its head', () => {
    const r = sglangProtocol.parse({ output_ids: [1, 2, 3, 5, 6], meta_info: { output_token_logprobs: [[-0.2, 5, null], [-0.3, 6, null]], finish_reason: { type: 'stop' } } }, req);
    expect(r.outputIds).toEqual([5, 6]);
  });

  it('lists sampling_seed as a field an older server may refuse', () => {
    expect(sglangProtocol.optionalFields).toContain('sampling_params.sampling_seed');
  });

  it('says its logprobs are processed (after temperature) and vLLM says raw', () => {
    expect(sglangProtocol.logprobSemantics).toBe('processed');
    expect(vllmProtocol.logprobSemantics).toBe('raw');
  });
});

describe('a null or non-finite logprob', () => {
  it('is an error on the turn for every protocol, never a 0', () => {
    expect(() => prorlProtocol.parse({ response_ids: [7], logprobs: [null] }, req)).toThrow(/logprob 0 is null/);
    expect(() => vllmProtocol.parse({ choices: [{ token_ids: [7, 8], logprobs: { tokens: ['token_id:7', 'token_id:8'], token_logprobs: [-0.1, null] } }] }, req)).toThrow(/logprob 1 is null/);
    expect(() => sglangProtocol.parse({ meta_info: { output_token_logprobs: [[null, 5, null]] } }, req)).toThrow(/logprob 0/);
    const chat = { messages: [{ role: 'user' as const, content: 'hi' }], tools: [], codec: createQwen3Codec() };
    expect(() => openaiProtocol.parse({ choices: [{ message: { content: 'x' }, token_ids: [7], logprobs: { content: [{ token: 'x', logprob: null }] } }] }, { ...req, chat })).toThrow(/logprob 0 is null/);
  });
});

describe('openai protocol', () => {
  const codec = createQwen3Codec();
  const chat = {
    messages: [
      { role: 'system' as const, content: 'sys' },
      { role: 'user' as const, content: 'go' },
      { role: 'assistant' as const, content: 'Listing.', tool_calls: [{ id: 'call_0_0', name: 'bash', arguments: { cmd: 'ls' } }] },
      { role: 'tool' as const, content: 'a b', name: 'bash', tool_call_id: 'call_0_0' },
    ],
    tools: [{ type: 'function' as const, function: { name: 'bash', description: 'run', parameters: { type: 'object' } } }],
    codec,
  };
  const creq = { ...req, sampling: { ...req.sampling, stop: ['</x>'] }, chat };

  it('sends the conversation as OpenAI messages with JSON-string tool-call arguments, the tools, and the sampling fields', () => {
    const body = openaiProtocol.body(creq, 'm');
    expect(body).toMatchObject({ model: 'm', max_tokens: 4, temperature: 0.7, top_p: 0.9, top_k: 20, seed: 5, stop: ['</x>'], logprobs: true, return_token_ids: true, tools: chat.tools });
    expect(body.messages).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'go' },
      { role: 'assistant', content: 'Listing.', tool_calls: [{ id: 'call_0_0', type: 'function', function: { name: 'bash', arguments: '{"cmd":"ls"}' } }] },
      { role: 'tool', content: 'a b', name: 'bash', tool_call_id: 'call_0_0' },
    ]);
  });

  it('refuses to build a request without the conversation', () => {
    expect(() => openaiProtocol.body(req, 'm')).toThrow(/needs the conversation/);
  });

  it('takes the ids and logprobs the engine returned, and its prompt ids for the drift check', () => {
    const r = openaiProtocol.parse({ prompt_token_ids: [1, 2], choices: [{ message: { content: 'x' }, finish_reason: 'stop', token_ids: [7, 8], logprobs: { content: [{ token: 'x', logprob: -0.1 }, { token: '', logprob: -0.2 }] } }] }, creq);
    expect(r).toEqual({ outputIds: [7, 8], logprobs: [-0.1, -0.2], finishReason: 'stop', tokenSource: 'engine', logprobSemantics: 'raw', enginePromptIds: [1, 2] });
  });

  it('re-tokenizes a reply without ids with the rollout codec, tool calls included, and marks it', () => {
    const r = openaiProtocol.parse({ choices: [{ message: { content: 'Listing.', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"cmd":"ls"}' } }] }, finish_reason: 'tool_calls' }] }, creq);
    expect(r.tokenSource).toBe('retokenized');
    expect(r.outputIds).toEqual(codec.encodeAssistant({ content: 'Listing.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] }));
    expect(r.finishReason).toBe('stop');
    expect(r.logprobSemantics).toBe('none');
    expect(codec.parseAssistant(r.outputIds).toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'ls' } }]);
  });

  it('leaves the end-of-turn token off a re-tokenized reply cut by length', () => {
    const r = openaiProtocol.parse({ choices: [{ message: { content: 'Listing' }, finish_reason: 'length' }] }, creq);
    expect(r.finishReason).toBe('length');
    expect(r.outputIds).toEqual(codec.encodeAssistant({ content: 'Listing' }).slice(0, -1));
  });

  it('keeps a tool call whose arguments are not JSON as a malformed block the policy is told about', () => {
    const r = openaiProtocol.parse({ choices: [{ message: { content: '', tool_calls: [{ function: { name: 'bash', arguments: '{cmd: ls' } }] }, finish_reason: 'tool_calls' }] }, creq);
    expect(codec.parseAssistant(r.outputIds).malformed).toHaveLength(1);
  });
});

describe('memberSeed', () => {
  it('gives every member of a group its own seed, member 0 the group seed, and the same member the same seed', () => {
    const seeds = Array.from({ length: 4096 }, (_, i) => memberSeed(42, i));
    expect(new Set(seeds).size).toBe(4096);
    expect(seeds[0]).toBe(42);
    expect(memberSeed(42, 7)).toBe(seeds[7]);
    expect(seeds.every((s) => Number.isInteger(s) && s >= 0 && s < 2 ** 31)).toBe(true);
    expect(memberSeed(-1, 0)).toBe(2 ** 31 - 1);
  });
});
