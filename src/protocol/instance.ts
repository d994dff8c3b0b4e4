import { z } from 'zod';
import { OracleTurnSchema } from './messages.js';

/**
 * A task instance, as the ProRL server receives it. Only the routing fields are fixed;
 * everything else belongs to the handler named by `data_source`, which validates it itself.
 */
export const InstanceSchema = z
  .object({
    /** Picks the handler (`swebench`, `deepscaler`, `math`, `shell`, ...). */
    data_source: z.string().min(1).max(200),
    /** Names the task. */
    instance_id: z.union([z.string().max(1000), z.number()]).transform(String).optional(),
    /** Distinguishes the n samples of one GRPO group. */
    trajectory_id: z.union([z.string().max(1000), z.number()]).transform(String).optional(),
    /** Assistant turns for the scripted policy. */
    oracle: z.array(OracleTurnSchema).optional(),
  })
  .passthrough();
export type Instance = z.infer<typeof InstanceSchema>;

/**
 * Sampling settings and agent settings, as ProRL's `sampling_params`. Unknown keys pass
 * through to the handler.
 */
export const SamplingParamsSchema = z
  .object({
    /** Maximum assistant turns. The reference defaults to 2 (a trap); we default to 35. */
    max_iterations: z.number().int().positive().max(10_000).optional(),
    temperature: z.number().min(0).max(100).optional(),
    top_p: z.number().min(0).max(1).optional(),
    top_k: z.number().int().optional(),
    seed: z.number().int().optional(),
    /** Tokens per assistant turn at most; each turn asks for min(this, context left). */
    max_output_tokens: z.number().int().positive().optional(),
    /** The context window: prompt + output may not exceed it. */
    max_model_len: z.number().int().positive().optional(),
    token_level_generation: z.boolean().optional(),
    custom_tokenizer: z.string().optional(),
    enable_thinking: z.boolean().optional(),
  })
  .passthrough();
export type SamplingParams = z.infer<typeof SamplingParamsSchema>;
