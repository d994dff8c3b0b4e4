import { z } from 'zod';
import { IntegrityReportSchema } from './integrity.js';
import { MessageSchema, ToolSchemaSchema } from './messages.js';

/** How a rollout ended. Exactly one per rollout. */
export const OutcomeSchema = z.enum(['completed', 'truncated', 'timed-out', 'cancelled', 'infra-error', 'task-error']);
export type Outcome = z.infer<typeof OutcomeSchema>;

/** Why the agent loop stopped (the ProRL `finish` field): the finish tool, max turns, full context, ... */
/** `stale_tokens`: ended by the `staleTokens` bound with action `finish` (outcome truncated). */
/** `forked`: stopped at a fork (#26) with `continueParent: false`: its branches carry it on (outcome truncated, reward null). */
export const FinishReasonSchema = z.enum(['finish_tool', 'no_tool_call', 'max_iterations', 'context_full', 'length', 'error', 'timeout', 'cancelled', 'stale_tokens', 'forked']);
export type FinishReason = z.infer<typeof FinishReasonSchema>;

/** A policy / weight version: a step number or a label. */
export const WeightVersionSchema = z.union([z.string(), z.number()]);

/** One assistant turn as sampled. */
export const AssistantTurnSchema = z.object({
  /** The full prompt the model saw. */
  promptIds: z.array(z.number().int()),
  /** The ids it sampled. */
  outputIds: z.array(z.number().int()),
  /** One logprob per output id. */
  logprobs: z.array(z.number()),
  backendId: z.string(),
  /** The policy / weight version of the backend when it sampled. */
  weightVersion: z.union([z.string(), z.number()]).nullable(),
  finishReason: z.enum(['stop', 'length', 'abort']),
  latencyMs: z.number(),
  /** `engine`: ids and logprobs as the server sampled them; `retokenized`: the server sent text, tokenized here. */
  tokenSource: z.enum(['engine', 'retokenized']).optional(),
  /** What the logprobs mean: `raw` (before temperature, vLLM V1), `processed` (after, SGLang), `none` (the server gave none: 0 here), `unknown`. */
  logprobSemantics: z.enum(['raw', 'processed', 'none', 'unknown']).optional(),
});
export type AssistantTurn = z.infer<typeof AssistantTurnSchema>;

/** A drift detector finding: where the incremental ids differ from a full re-render. */
export const DriftSchema = z.object({ turn: z.number().int(), position: z.number().int(), expected: z.number().int().nullable(), actual: z.number().int().nullable() });

/**
 * Where a branch's trajectory starts (tree rollouts, #26): the shared prefix it continues,
 * stored once (`GET /v1/prefixes/{id}`, `rt.prefix(id)`), and how much of it there is — its
 * `tokens`, assistant `turns` and `messages`. The trajectory holding this reference carries only
 * what follows; `materializeTrajectory` joins the two into the full, token-exact one.
 */
export const TrajectoryPrefixRefSchema = z.object({ id: z.string(), tokens: z.number().int(), turns: z.number().int(), messages: z.number().int() });
export type TrajectoryPrefixRef = z.infer<typeof TrajectoryPrefixRefSchema>;

/** The whole rollout in tokens. `tokens`, `lossMask` and `logprobs` are aligned. */
export const TrajectorySchema = z.object({
  turns: z.array(AssistantTurnSchema),
  /** Last prompt + last output: every token of the conversation, in order. */
  tokens: z.array(z.number().int()),
  /** 1 on tokens the policy sampled, 0 on prompt, template and tool tokens. */
  lossMask: z.array(z.union([z.literal(0), z.literal(1)])),
  /** The sampled token's logprob where the mask is 1, 0 elsewhere. */
  logprobs: z.array(z.number()),
  messages: z.array(MessageSchema),
  tools: z.array(ToolSchemaSchema),
  diagnostics: z.object({ drift: z.array(DriftSchema) }).passthrough(),
  /** `retokenized` when any turn's ids were tokenized here from the server's text (a trainer may drop or re-score it), else `engine`. */
  tokenSource: z.enum(['engine', 'retokenized']).optional(),
  /** The sampled tokens' weight versions, run-length: `tokens` sum to the sampled (mask 1) tokens, in order. */
  weightVersions: z.array(z.object({ version: WeightVersionSchema.nullable(), tokens: z.number().int() })).optional(),
  /** The oldest / newest known version of a sampled token (numbers compare numerically, else as strings). */
  minWeightVersion: WeightVersionSchema.nullable().optional(),
  maxWeightVersion: WeightVersionSchema.nullable().optional(),
  /** The trainer's version (`setTrainerVersion`) minus `minWeightVersion` when the result was made; null when unknown or not numeric. */
  staleness: z.number().nullable().optional(),
  /**
   * Present only when the rollout's token record is not one sequence (a `harness` agent rewrote
   * its history): the flat lists are the segments one after another, and each entry says where
   * one is — `[tokenStart, tokenEnd)` in `tokens` / `lossMask` / `logprobs`, `[turnStart,
   * turnEnd)` in `turns`, `[messageStart, messageEnd)` in `messages`. Each segment is token-exact
   * on its own; train on each separately, never on the concatenation. See docs/proxy.md.
   */
  segments: z.array(z.object({ tokenStart: z.number().int(), tokenEnd: z.number().int(), turnStart: z.number().int(), turnEnd: z.number().int(), messageStart: z.number().int(), messageEnd: z.number().int() })).optional(),
  /**
   * Present on a branch of a fork (#26): the lists above hold only what follows the shared
   * prefix this names (turns, tokens, mask, logprobs and messages after it; each turn's
   * `promptIds` stays its full prompt). See {@link TrajectoryPrefixRefSchema}.
   */
  prefix: TrajectoryPrefixRefSchema.optional(),
});
export type Trajectory = z.infer<typeof TrajectorySchema>;

/** Milliseconds spent in each stage; `countedMs` is what the time budget counts. */
export const TimingSchema = z.object({
  queueMs: z.number(),
  initMs: z.number(),
  runMs: z.number(),
  evalMs: z.number(),
  countedMs: z.number(),
  wallMs: z.number(),
  timeoutTriggered: z.boolean(),
});
export type Timing = z.infer<typeof TimingSchema>;

export const SerializedErrorSchema: z.ZodType<import('../errors.js').SerializedError> = z.lazy(() =>
  z.object({
    name: z.string(),
    code: z.string(),
    message: z.string(),
    retryable: z.boolean(),
    stage: z.enum(['init', 'run', 'eval']).optional(),
    details: z.record(z.string(), z.unknown()).optional(),
    cause: SerializedErrorSchema.optional(),
  }),
);

/** The result of one rollout. */
export const RolloutResultSchema = z.object({
  id: z.string(),
  instanceId: z.string().nullable(),
  trajectoryId: z.string().nullable(),
  groupId: z.string().nullable(),
  dataSource: z.string(),
  outcome: OutcomeSchema,
  finish: FinishReasonSchema.nullable(),
  reward: z.number().nullable(),
  resolved: z.boolean(),
  /** The handler's evaluation details (test output, parsed answer, ...). */
  evalDetails: z.record(z.string(), z.unknown()).nullable(),
  error: SerializedErrorSchema.nullable(),
  /** Attempts made: 1 plus the retries. */
  attempts: z.number().int(),
  trajectory: TrajectorySchema,
  timing: TimingSchema,
  /** The reward-hack monitor's report (#27), present when the instance or its family has an integrity policy. */
  integrity: IntegrityReportSchema.optional(),
  /** A branch of a fork (#26): the rollout it was forked from, else absent or null. */
  parentId: z.string().nullable().optional(),
  /** A branch: the turn boundary it was forked at (assistant turns sampled before it), else absent or null. */
  branchTurn: z.number().int().nullable().optional(),
  /** The `--redis` cluster worker that ran it (its heartbeat's `nodeId`), stamped by that worker; absent on a single node. */
  nodeId: z.string().optional(),
});
export type RolloutResult = z.infer<typeof RolloutResultSchema>;
