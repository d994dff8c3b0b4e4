import { describe, expect, it } from 'vitest';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import { prorlProtocol, sglangProtocol, vllmProtocol } from '../../../src/llm/protocols/index.js';

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

  it('refuses logprob entries that name other ids than output_ids', () => {
    expect(() => sglangProtocol.parse({ output_ids: [5], meta_info: { output_token_logprobs: [[-0.2, 9, null]] } }, req)).toThrow(/names id 9/);
  });
});
