import { z } from 'zod';
import { IntegrityPolicySchema } from './integrity.js';
import { OracleTurnSchema } from './messages.js';

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * A task instance, as the ProRL server receives it. Only the routing fields are fixed;
 * everything else belongs to the handler named by `data_source`, which validates it itself.
 */
export const InstanceSchema = z
  .object({
    /**
     * Picks the handler (`swebench`, `deepscaler`, `math`, `shell`, ...). Absent → `swebench`, as
     * the reference defaults (SWE-Gym rows carry none).
     */
    data_source: z.string().min(1).max(200).default('swebench'),
    /**
     * Names the task. Any text but control characters: a newline in an id is bad data, refused
     * at submit rather than found later in a log line or a header (#9.9).
     */
    instance_id: z
      .union([z.string().max(1000), z.number()])
      .transform(String)
      .refine((s) => !CONTROL.test(s), 'must not contain control characters (newline, tab, NUL...)')
      .optional(),
    /** Distinguishes the n samples of one GRPO group. */
    trajectory_id: z.union([z.string().max(1000), z.number()]).transform(String).optional(),
    /** Assistant turns for the scripted policy. */
    oracle: z.array(OracleTurnSchema).optional(),
    /** The reward-hack monitor's policy (#27): protected / secret paths, denied programs, what a violation costs. See docs/integrity.md. */
    integrity: IntegrityPolicySchema.optional(),
  })
  .passthrough()
  // A `harness` instance's `preset` is checked at submit, so an unknown one is a 400 naming the
  // known ones rather than a task-error found once a sandbox was made (the rest is the handler's).
  .superRefine((v, ctx) => {
    const preset = (v as { preset?: unknown }).preset;
    if (v.data_source === 'harness' && preset !== undefined && !(HARNESS_PRESET_NAMES as readonly unknown[]).includes(preset)) {
      ctx.addIssue({ code: 'custom', path: ['preset'], message: `unknown preset: known ones are ${HARNESS_PRESET_NAMES.join(', ')}` });
    }
  });

/** The agent CLIs a `harness` instance may name as `preset` (src/handlers/tasks/harness-presets/presets.ts). */
export const HARNESS_PRESET_NAMES = ['codex', 'claude-code', 'qwen-code', 'pi', 'gemini-cli', 'opencode'] as const;
export type Instance = z.infer<typeof InstanceSchema>;

/**
 * Sampling settings and agent settings, as ProRL's `sampling_params`. Unknown keys pass
 * through to the handler. The sampling fields are checked against what the engines accept
 * (vLLM, SGLang: temperature in [0, 2], top_p in (0, 1], top_k -1 or >= 1...) so a bad value is
 * refused at submit naming the field, not by the backend on every turn (#10.7).
 * `max_tokens` (the OpenAI / vLLM name) is the per-turn cap when `max_output_tokens` is absent.
 */
export const SamplingParamsSchema = z
  .object({
    /** Maximum assistant turns. The reference defaults to 2 (a trap); we default to 35. */
    max_iterations: z.number().int().positive().max(10_000).optional(),
    temperature: z.number().min(0, 'must be in [0, 2]').max(2, 'must be in [0, 2]').optional(),
    top_p: z.number().gt(0, 'must be in (0, 1]').max(1, 'must be in (0, 1]').optional(),
    top_k: z
      .number()
      .int()
      .refine((k) => k === -1 || k >= 1, 'must be -1 (off) or at least 1')
      .optional(),
    min_p: z.number().min(0, 'must be in [0, 1]').max(1, 'must be in [0, 1]').optional(),
    presence_penalty: z.number().min(-2, 'must be in [-2, 2]').max(2, 'must be in [-2, 2]').optional(),
    frequency_penalty: z.number().min(-2, 'must be in [-2, 2]').max(2, 'must be in [-2, 2]').optional(),
    repetition_penalty: z.number().gt(0, 'must be greater than 0').max(10, 'must be at most 10').optional(),
    seed: z.number().int().optional(),
    /** Tokens per assistant turn at most; each turn asks for min(this, context left). */
    max_output_tokens: z.number().int().positive().optional(),
    /** The OpenAI / vLLM name of `max_output_tokens`. */
    max_tokens: z.number().int().min(1, 'must be at least 1').optional(),
    /** The context window: prompt + output may not exceed it. */
    max_model_len: z.number().int().positive().optional(),
    token_level_generation: z.boolean().optional(),
    custom_tokenizer: z.string().optional(),
    enable_thinking: z.boolean().optional(),
    /** gpt-oss (harmony): `Reasoning:` in the system message, as vLLM's request field; other models ignore it. */
    reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
  })
  .passthrough()
  .transform((v) => (v.max_output_tokens === undefined && v.max_tokens !== undefined ? { ...v, max_output_tokens: v.max_tokens } : v));
export type SamplingParams = z.infer<typeof SamplingParamsSchema>;
