import { z } from 'zod';
import { FinishReasonSchema, OutcomeSchema, SerializedErrorSchema, TimingSchema } from './trajectory.js';
import { ToolCallSchema } from './messages.js';

/** Fields every rollout event carries. */
const base = {
  /** Runtime-wide sequence number, strictly increasing: the resume cursor. */
  seq: z.number().int(),
  rolloutId: z.string(),
  /** Per-rollout sequence number, from 1, with no gaps within a rollout. */
  rseq: z.number().int(),
  /** Milliseconds since the epoch, from the runtime's clock. */
  ts: z.number(),
};

/** The machine states a rollout can be in (camelCase in code). */
export const RolloutStateSchema = z.enum([
  'queued',
  'initializing',
  'waitingRun',
  'llmCalling',
  'acting',
  'waitingEval',
  'evaluating',
  'done',
  'failed',
  'timedOut',
  'cancelled',
]);
export type RolloutState = z.infer<typeof RolloutStateSchema>;

/** Every event of a rollout, discriminated on `type`. */
export const RolloutEventSchema = z.discriminatedUnion('type', [
  z.object({
    ...base,
    type: z.literal('rollout.submitted'),
    instanceId: z.string().nullable(),
    trajectoryId: z.string().nullable(),
    groupId: z.string().nullable(),
    dataSource: z.string(),
    attempt: z.number().int(),
    /** A branch of a fork (#26): its parent rollout and the turn it was forked at. */
    parentId: z.string().nullable().optional(),
    branchTurn: z.number().int().nullable().optional(),
  }),
  /** A rollout was forked (#26) at turn boundary `turn` into the rollouts `branches`. */
  z.object({
    ...base,
    type: z.literal('rollout.forked'),
    turn: z.number().int(),
    branches: z.array(z.string()),
    prefixId: z.string(),
    /** Whether the forked rollout goes on (else it stopped at the fork, finish `forked`). */
    continued: z.boolean(),
    /** What the branches did not get from the parent (background processes, a REPL's heap). */
    lost: z.array(z.string()),
    frozenMs: z.number(),
    /** A tree's fork that failed (no branches; the rollout went on): why. */
    error: SerializedErrorSchema.optional(),
  }),
  z.object({ ...base, type: z.literal('rollout.state'), state: RolloutStateSchema, prev: RolloutStateSchema.nullable(), turn: z.number().int() }),
  z.object({ ...base, type: z.literal('llm.start'), turn: z.number().int(), promptTokens: z.number().int(), maxTokens: z.number().int() }),
  z.object({
    ...base,
    type: z.literal('llm.end'),
    turn: z.number().int(),
    backendId: z.string(),
    promptTokens: z.number().int(),
    outputTokens: z.number().int(),
    latencyMs: z.number(),
    finishReason: z.enum(['stop', 'length', 'abort']),
    /** The assistant text (clipped) and parsed tool calls, for watchers. */
    content: z.string(),
    toolCalls: z.array(ToolCallSchema),
  }),
  z.object({ ...base, type: z.literal('tool.call'), turn: z.number().int(), callId: z.string(), name: z.string(), arguments: z.record(z.string(), z.unknown()) }),
  z.object({
    ...base,
    type: z.literal('tool.result'),
    turn: z.number().int(),
    callId: z.string(),
    name: z.string(),
    /** The observation the model sees (clipped for the event stream). */
    output: z.string(),
    exitCode: z.number().int().nullable(),
    latencyMs: z.number(),
    /** True when the call failed (bad arguments, tool error, timeout). */
    error: z.boolean(),
  }),
  z.object({ ...base, type: z.literal('rollout.retry'), attempt: z.number().int(), delayMs: z.number(), error: SerializedErrorSchema }),
  z.object({
    ...base,
    type: z.literal('rollout.result'),
    outcome: OutcomeSchema,
    finish: FinishReasonSchema.nullable(),
    reward: z.number().nullable(),
    resolved: z.boolean(),
    error: SerializedErrorSchema.nullable(),
    timing: TimingSchema,
    tokens: z.number().int(),
    turns: z.number().int(),
    /** The integrity monitor's violations by kind (#27), when the rollout had a policy and any was found. */
    violations: z.record(z.string(), z.number().int()).optional(),
  }),
]);
export type RolloutEvent = z.infer<typeof RolloutEventSchema>;
export type RolloutEventType = RolloutEvent['type'];

/** Distributes `Omit` over the union, so each member keeps its own fields. */
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** An event before the runtime stamps `seq`, `rseq` and `ts` on it. */
export type RolloutEventInput = DistributiveOmit<RolloutEvent, 'seq' | 'rseq' | 'ts'>;
