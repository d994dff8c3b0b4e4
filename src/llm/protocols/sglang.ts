import { z } from 'zod';
import { checkAligned, type ProtocolAdapter } from './protocol.js';

/** The parts of SGLang's native `/generate` answer we read. */
export const SglangResponseSchema = z.object({
  output_ids: z.array(z.number().int()),
  meta_info: z.object({
    /** `[logprob, token_id, text|null]` per sampled token. */
    output_token_logprobs: z.array(z.tuple([z.number().nullable(), z.number().int()]).rest(z.unknown())),
    finish_reason: z.union([z.object({ type: z.string() }).passthrough(), z.string(), z.null()]).optional(),
    weight_version: z.union([z.string(), z.number()]).nullable().optional(),
  }),
});

/**
 * SGLang's native `POST /generate` with `input_ids`, `sampling_params` and `return_logprob`
 * → `output_ids` + `meta_info.output_token_logprobs`. `no_stop_trim` keeps the end-of-turn token.
 */
export const sglangProtocol: ProtocolAdapter = {
  name: 'sglang',
  generatePath: '/generate',
  healthPath: '/health',
  body(req) {
    const s = req.sampling;
    return {
      input_ids: req.promptIds,
      sampling_params: {
        max_new_tokens: req.maxTokens,
        temperature: s.temperature ?? 1,
        top_p: s.top_p ?? 1,
        top_k: s.top_k ?? -1,
        ...(s.seed !== undefined ? { sampling_seed: s.seed } : {}),
        skip_special_tokens: false,
        no_stop_trim: true,
      },
      return_logprob: true,
      stream: false,
    };
  },
  parse(json) {
    const r = SglangResponseSchema.parse(json);
    const lp = r.meta_info.output_token_logprobs;
    const logprobs = lp.map((e) => e[0] ?? 0);
    checkAligned(r.output_ids, logprobs);
    for (let i = 0; i < lp.length; i++) {
      if (lp[i]![1] !== r.output_ids[i]) throw new Error(`output_token_logprobs[${i}] names id ${lp[i]![1]}, output_ids has ${r.output_ids[i]}`);
    }
    const fr = r.meta_info.finish_reason;
    const type = typeof fr === 'string' ? fr : fr?.type;
    return { outputIds: r.output_ids, logprobs, finishReason: type === 'length' ? 'length' : type === 'abort' ? 'abort' : 'stop', weightVersion: r.meta_info.weight_version };
  },
};
