import { z } from 'zod';
import { checkAligned, finiteLogprob, inferFinishReason, stopOf, type ProtocolAdapter } from './protocol.js';

const TokenIdString = /^token_id:(-?\d+)$/;

/** The parts of vLLM's `/v1/completions` answer we read. */
export const VllmResponseSchema = z.object({
  choices: z
    .array(
      z.object({
        text: z.string().optional(),
        /** Sampled ids (vLLM >= 0.10.2 with `return_token_ids`). */
        token_ids: z.array(z.number().int()).nullable().optional(),
        logprobs: z.object({
          /** `token_id:N` strings with `return_tokens_as_token_ids`. */
          tokens: z.array(z.string()),
          token_logprobs: z.array(z.number().nullable()),
        }),
        finish_reason: z.string().nullable().optional(),
      }),
    )
    .min(1),
});

/**
 * vLLM's OpenAI-style `POST /v1/completions` with a token-id prompt, `logprobs: 1`,
 * `return_tokens_as_token_ids` (tokens come back as `token_id:N`, so no text round trip) and
 * `return_token_ids`. The ids are read from `token_ids` when present, else from the
 * `token_id:N` strings; `skip_special_tokens: false` and `include_stop_str_in_output` keep the
 * end-of-turn token in the output.
 */
export const vllmProtocol: ProtocolAdapter = {
  name: 'vllm',
  generatePath: '/v1/completions',
  healthPath: '/health',
  modelsPath: '/v1/models',
  // vLLM V1 returns the model's logprobs before temperature / top-p unless started with
  // `--logprobs-mode processed_logprobs`; a spec can say so (`?logprobs=processed`).
  logprobSemantics: 'raw',
  body(req, model) {
    const s = req.sampling;
    return {
      model: model ?? 'default',
      prompt: req.promptIds,
      max_tokens: req.maxTokens,
      temperature: s.temperature ?? 1,
      top_p: s.top_p ?? 1,
      top_k: s.top_k ?? -1,
      ...(s.seed !== undefined ? { seed: s.seed } : {}),
      ...stopOf(s),
      logprobs: 1,
      return_tokens_as_token_ids: true,
      return_token_ids: true,
      skip_special_tokens: false,
      include_stop_str_in_output: true,
    };
  },
  parse(json, req) {
    const c = VllmResponseSchema.parse(json).choices[0]!;
    let ids = c.token_ids ?? null;
    if (!ids) {
      ids = c.logprobs.tokens.map((t) => {
        const m = TokenIdString.exec(t);
        if (!m) throw new Error(`logprobs token ${JSON.stringify(t)} is not token_id:N (start vLLM with return_tokens_as_token_ids)`);
        return Number(m[1]);
      });
    }
    const logprobs = c.logprobs.token_logprobs.map(finiteLogprob);
    checkAligned(ids, logprobs);
    const f = c.finish_reason;
    return { outputIds: ids, logprobs, finishReason: f === 'length' ? 'length' : f === 'abort' ? 'abort' : f === null || f === undefined ? inferFinishReason(ids, req) : 'stop' };
  },
};
