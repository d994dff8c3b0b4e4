import { z } from 'zod';
import { finiteLogprob, stopOf, type ProtocolAdapter } from './protocol.js';

/** The parts of SGLang's native `/generate` answer we read. */
export const SglangResponseSchema = z.object({
  /** Not read: some SGLang versions put the prompt ids at its head. */
  output_ids: z.array(z.number().int()).optional(),
  meta_info: z.object({
    /** `[logprob, token_id, text|null]` per sampled token. */
    output_token_logprobs: z.array(z.tuple([z.number().nullable(), z.number().int()]).rest(z.unknown())),
    finish_reason: z.union([z.object({ type: z.string() }).passthrough(), z.string(), z.null()]).optional(),
    weight_version: z.union([z.string(), z.number()]).nullable().optional(),
  }),
});

/**
 * SGLang's native `POST /generate` with `input_ids`, `sampling_params` and `return_logprob`.
 * The sampled ids and their logprobs are read from `meta_info.output_token_logprobs`
 * (`[logprob, id, text]`), as slime and AReaL do: some SGLang versions put the prompt ids at the
 * head of `output_ids`. `no_stop_trim` keeps the end-of-turn token. `sampling_seed` is unknown to
 * older versions: dropped after a 400 naming it (see `optionalFields`). SGLang's logprobs are
 * after temperature unless the server runs with `SGLANG_RETURN_ORIGINAL_LOGPROB`.
 */
export const sglangProtocol: ProtocolAdapter = {
  name: 'sglang',
  generatePath: '/generate',
  healthPath: '/health',
  optionalFields: ['sampling_params.sampling_seed'],
  logprobSemantics: 'processed',
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
        ...stopOf(s),
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
    const outputIds = new Array<number>(lp.length);
    const logprobs = new Array<number>(lp.length);
    for (let i = 0; i < lp.length; i++) {
      outputIds[i] = lp[i]![1];
      logprobs[i] = finiteLogprob(lp[i]![0], i);
    }
    const fr = r.meta_info.finish_reason;
    const type = typeof fr === 'string' ? fr : fr?.type;
    return { outputIds, logprobs, finishReason: type === 'length' ? 'length' : type === 'abort' ? 'abort' : 'stop', weightVersion: r.meta_info.weight_version };
  },
};
