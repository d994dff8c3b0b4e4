import { z } from 'zod';
import { checkAligned, finiteLogprob, inferFinishReason, type ProtocolAdapter } from './protocol.js';

/** ProRL's `/generate` answer. `logprobs` is optional in the reference; we require it (RL needs it). */
export const ProrlResponseSchema = z.object({
  response_ids: z.array(z.number().int()),
  logprobs: z.array(z.number().nullable()),
  finish_reason: z.enum(['stop', 'length', 'abort']).optional(),
  weight_version: z.union([z.string(), z.number()]).nullable().optional(),
});

/**
 * The ProRL Agent Server's token contract: `POST /generate {prompt_ids, max_tokens, temperature,
 * top_p, top_k, seed, skip_special_tokens:false}` → `{response_ids, logprobs}`.
 */
export const prorlProtocol: ProtocolAdapter = {
  name: 'prorl',
  generatePath: '/generate',
  healthPath: '/health',
  logprobSemantics: 'unknown',
  body(req) {
    const s = req.sampling;
    return {
      prompt_ids: req.promptIds,
      max_tokens: req.maxTokens,
      temperature: s.temperature ?? 1,
      top_p: s.top_p ?? 1,
      top_k: s.top_k ?? -1,
      seed: s.seed ?? null,
      skip_special_tokens: false,
    };
  },
  parse(json, req) {
    const r = ProrlResponseSchema.parse(json);
    const logprobs = r.logprobs.map(finiteLogprob);
    checkAligned(r.response_ids, logprobs);
    return {
      outputIds: r.response_ids,
      logprobs,
      // The reference answer has no finish reason: the last sampled id decides (#28).
      finishReason: r.finish_reason ?? inferFinishReason(r.response_ids, req),
      weightVersion: r.weight_version,
    };
  },
};
