import { z } from 'zod';

/**
 * Messages of the Redis cluster (`rollout serve --redis` / `rollout worker --redis`). Everything a
 * node reads back from Redis crosses a process boundary and is validated with these schemas.
 */

/** A BullMQ job's data: one rollout. The job id is the rollout id. */
export const ClusterJobDataSchema = z.object({
  /** The validated instance, as the gateway accepted it. */
  instance: z.record(z.string(), z.unknown()),
  sampling: z.record(z.string(), z.unknown()),
  groupId: z.string().nullable(),
  /** Gateway wall clock at submit (ms since the epoch), for dispatch latency. */
  submittedAt: z.number(),
});
export type ClusterJobData = z.infer<typeof ClusterJobDataSchema>;

/** A backend as registered in the cluster's registry hash (field = backend id). */
export const ClusterBackendSchema = z.object({
  id: z.string(),
  url: z.string(),
  protocol: z.enum(['prorl', 'vllm', 'sglang', 'openai']),
  model: z.string().optional(),
  weightVersion: z.union([z.string(), z.number()]).nullable().optional(),
  /** `draining`: no new calls on any worker. */
  state: z.enum(['active', 'draining']),
});
export type ClusterBackend = z.infer<typeof ClusterBackendSchema>;

/** What goes over the cluster's control channel (Redis pub/sub) to every worker. */
export const ClusterControlSchema = z.discriminatedUnion('type', [
  /** Cancel a rollout wherever it runs (also sent when its result was committed elsewhere). */
  z.object({ type: z.literal('cancel'), id: z.string(), reason: z.string() }),
  /** The backend registry changed: re-read it. */
  z.object({ type: z.literal('backends') }),
  /** The weight version changed (all backends, or one). */
  z.object({ type: z.literal('weight-version'), version: z.union([z.string(), z.number()]), backendId: z.string().optional() }),
  /** Stop / restart taking new jobs on every worker (rollouts already running go on). */
  z.object({ type: z.literal('pause') }),
  z.object({ type: z.literal('resume') }),
  /** Hold / release new LLM calls on every worker (calls in flight finish); `epoch` names this change in the heartbeats. */
  z.object({ type: z.literal('generation'), paused: z.boolean(), epoch: z.string() }),
]);
export type ClusterControl = z.infer<typeof ClusterControlSchema>;

/** A worker's in-flight LLM calls per backend id, as published in the load hash. */
export const ClusterBackendLoadSchema = z.record(z.string(), z.number().int().nonnegative());
export type ClusterBackendLoad = z.infer<typeof ClusterBackendLoadSchema>;

const stage = z.object({ active: z.number().int(), waiting: z.number().int(), limit: z.number().int() });

/** A worker's heartbeat in the node hash. */
export const ClusterNodeStatusSchema = z.object({
  nodeId: z.string(),
  pid: z.number().int(),
  capacity: z.number().int(),
  /** Rollouts this node runs now. */
  running: z.number().int(),
  queued: z.number().int(),
  stages: z.object({ init: stage, run: stage, eval: stage }),
  completed: z.number().int(),
  outcomes: z.record(z.string(), z.number()),
  /** Set while the node takes no jobs because its sandboxes fail (why); absent while healthy. */
  unhealthy: z.string().optional(),
  /** The generation pause the node applied last (its `epoch`, '' for none) and its LLM calls in flight now; absent where the runtime cannot pause generation. */
  generation: z.object({ paused: z.boolean(), epoch: z.string(), inflight: z.number().int() }).optional(),
  /** Wall clock of the heartbeat (ms since the epoch). */
  at: z.number(),
});
export type ClusterNodeStatus = z.infer<typeof ClusterNodeStatusSchema>;
