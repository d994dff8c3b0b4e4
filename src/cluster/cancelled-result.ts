import { serializeError, CancelledError, InfraError } from '../errors.js';
import type { ClusterJobData } from '../protocol/cluster.js';
import type { RolloutResult } from '../protocol/trajectory.js';

/** A result for a rollout that never ran on a worker: an empty trajectory and zero stage times. */
function emptyResult(id: string, data: ClusterJobData, now: number, outcome: 'cancelled' | 'infra-error', error: unknown): RolloutResult {
  const inst = data.instance as { instance_id?: unknown; trajectory_id?: unknown; data_source?: unknown };
  const wall = Math.max(0, now - data.submittedAt);
  return {
    id,
    instanceId: inst.instance_id === undefined ? null : String(inst.instance_id),
    trajectoryId: inst.trajectory_id === undefined ? null : String(inst.trajectory_id),
    groupId: data.groupId,
    dataSource: typeof inst.data_source === 'string' ? inst.data_source : 'unknown',
    outcome,
    finish: outcome === 'cancelled' ? 'cancelled' : 'error',
    reward: null,
    resolved: false,
    evalDetails: null,
    error: serializeError(error),
    attempts: 0,
    trajectory: { turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] } },
    timing: { queueMs: wall, initMs: 0, runMs: 0, evalMs: 0, countedMs: 0, wallMs: wall, timeoutTriggered: false },
  };
}

/** The result of a rollout cancelled while its job still waited in the queue. */
export function cancelledResult(id: string, data: ClusterJobData, reason: string, now: number): RolloutResult {
  return emptyResult(id, data, now, 'cancelled', new CancelledError(reason));
}

/**
 * The result of a job BullMQ gave up on (it stalled more than `maxStalledCount` times, or the
 * worker failed outside the rollout): an `infra-error`, so the trainer sees a critical error
 * rather than waiting forever.
 */
export function failedJobResult(id: string, data: ClusterJobData, message: string, attempts: number, now: number): RolloutResult {
  return { ...emptyResult(id, data, now, 'infra-error', new InfraError(message, { code: 'CLUSTER_JOB_FAILED' })), attempts };
}
