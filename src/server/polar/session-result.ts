import type { RolloutResult } from '../../protocol/trajectory.js';
import { redactHostPaths } from '../redact.js';
import type { BuilderName, EvaluatorName, PolarTrajectory, SessionResult, SessionStatus, Trace } from './polar-models.js';
import { importHint, type TaskImage } from './task-image.js';
import { harborReward } from './task-instance.js';
import { buildTraces, callsOf } from './trace-builder.js';

/** Why the Polar layer ended a session itself, beside what the runtime decided. */
export type EndedBy = 'agent_timeout' | 'task_timeout' | 'early_stop' | null;

/** What the mapping needs besides the rollout result. */
export interface SessionContext {
  sessionId: string;
  taskId: string;
  builder: BuilderName;
  builderConfig: Record<string, unknown>;
  evaluator: EvaluatorName | null;
  nodeId: string | null;
  endedBy: EndedBy;
  /** The task's `metadata`: its `group_id`, `policy_version`, `rollout_step` are copied to the trajectory's. */
  taskMetadata: Record<string, unknown>;
  /** The image the session was to run in (`runtime.image` after the server's policy and aliases). */
  image?: TaskImage | undefined;
  /** Time from INIT's end to RUN's start (the ready queue), when it was observed. */
  readyQueueMs: number;
  /** The clock, to time the trace build. */
  now: () => number;
}

const SCHEDULER_KEYS = ['group_id', 'policy_version', 'rollout_step'] as const;

/**
 * Maps one rollout result onto Polar's `SessionResult` (a pure function of its inputs):
 * - completed / truncated → COMPLETED: traces from the builder, each with the evaluator's reward
 *   (null with no evaluator); an evaluator that ran out of time (its command did not exit) keeps
 *   the trajectory, reward 0, `metadata.verifier_timeout: true`;
 * - timed out (the runtime's budget, `timeout_seconds` or `metadata.agent_timeout`) → TIMEOUT:
 *   the partial traces stay trainable (their loss mask kept), reward 0;
 * - anything else (infra or task error, cancelled, stopped early) → ERROR: traces kept for
 *   inspection with an all-zero loss mask, reward 0, `error` set.
 * Our failure taxonomy (outcome, error code, stage, retryable), the weight versions per trace
 * and the drift findings go in `metadata`, never in place of Polar's fields.
 */
export function toSessionResult(r: RolloutResult, ctx: SessionContext): SessionResult {
  const t0 = ctx.now();
  const eot = ctx.builderConfig['end_of_turn_token_id'];
  const built = buildTraces(callsOf(r.trajectory), ctx.builder, { endOfTurnTokenId: typeof eot === 'number' ? eot : undefined, tools: r.trajectory.tools as unknown as Record<string, unknown>[] });
  const buildMs = ctx.now() - t0;

  const details = r.evalDetails ?? {};
  const verifierTimeout = details['timed_out'] === true;
  let status: SessionStatus;
  let reward: number | null;
  let error: string | null = null;
  const completed = r.outcome === 'completed' || r.outcome === 'truncated';
  if (completed && ctx.endedBy === null) {
    status = 'COMPLETED';
    reward = evaluatorReward(r, ctx.evaluator, verifierTimeout);
  } else if (r.outcome === 'timed-out' || ctx.endedBy === 'agent_timeout' || ctx.endedBy === 'task_timeout') {
    status = 'TIMEOUT';
    reward = 0;
    error = ctx.endedBy === 'agent_timeout' ? 'agent timed out (metadata.agent_timeout)' : 'session timed out';
  } else {
    status = 'ERROR';
    reward = 0;
    error = ctx.endedBy === 'early_stop' ? 'cancelled: the task stopped early (early_stop_min_usable_sessions reached)' : r.error ? redactHostPaths(`${r.error.name}: ${r.error.message}`) : `rollout ${r.outcome}`;
    if (r.error?.code === 'IMAGE_NOT_FOUND' && ctx.image?.ref) error = imageNotFound(ctx.image, ctx.nodeId);
  }
  const traces: Trace[] = built.map((t) => ({
    ...t,
    loss_mask: status === 'ERROR' ? t.loss_mask.map(() => 0 as const) : t.loss_mask,
    reward,
    reward_components: reward === null ? {} : { [ctx.evaluator ?? 'session_completed']: reward },
    // The reward-hack monitor's evidence (#27), on every trace: a trainer reads traces, not sessions.
    ...(r.integrity ? { metadata: { ...t.metadata, integrity: r.integrity } } : {}),
  }));

  const scheduler: Record<string, unknown> = {};
  for (const k of SCHEDULER_KEYS) if (k in ctx.taskMetadata) scheduler[k] = ctx.taskMetadata[k];
  const trajectory: PolarTrajectory = {
    status,
    metadata: {
      builder: ctx.builder,
      session_id: ctx.sessionId,
      task_id: ctx.taskId,
      record_count: r.trajectory.turns.length,
      trace_count: traces.length,
      task_metadata: ctx.taskMetadata,
      ...scheduler,
      token_source: r.trajectory.tokenSource ?? 'engine',
      min_weight_version: r.trajectory.minWeightVersion ?? null,
      max_weight_version: r.trajectory.maxWeightVersion ?? null,
      staleness: r.trajectory.staleness ?? null,
      drift: r.trajectory.diagnostics.drift,
      ...(r.integrity ? { integrity: r.integrity } : {}),
    },
    traces,
    error,
  };
  const t = r.timing;
  const metadata: Record<string, unknown> = {
    outcome: r.outcome,
    finish_reason: r.finish,
    resolved: r.resolved,
    attempts: r.attempts,
    rollout_id: r.id,
    // The image the session ran in (an image-store name; null: the default root) and what the trainer named.
    ...(ctx.image ? { image: ctx.image.ref, runtime_image: ctx.image.requested } : {}),
    ...(verifierTimeout && status === 'COMPLETED' ? { verifier_timeout: true } : {}),
    ...(ctx.endedBy ? { ended_by: ctx.endedBy } : {}),
    ...(ctx.endedBy === 'early_stop' ? { early_stopped: true } : {}),
    ...(r.error ? { failure: { name: r.error.name, code: r.error.code, stage: r.error.stage ?? null, retryable: r.error.retryable, message: redactHostPaths(r.error.message) } } : {}),
  };
  return {
    session_id: ctx.sessionId,
    task_id: ctx.taskId,
    status,
    trajectory,
    timing: {
      register_to_init_queue_ms: t.queueMs,
      init_ms: t.initMs,
      ready_queue_ms: ctx.readyQueueMs,
      run_ms: t.runMs,
      postrun_ms: t.evalMs + buildMs,
      // The sandbox comes up inside INIT, and INIT is little else here.
      container_start_ms: t.initMs,
      agent_exec_ms: t.runMs,
      build_ms: buildMs,
      eval_ms: t.evalMs,
      e2e_ms: t.wallMs + buildMs,
    },
    node_id: ctx.nodeId,
    error,
    metadata,
  };
}

/** A session whose image the node's store lacks (a `--redis` worker: the gateway has no store to check at submit). */
function imageNotFound(image: TaskImage, nodeId: string | null): string {
  const named = image.ref === image.requested ? `'${image.ref!.slice(0, 200)}'` : `'${image.requested!.slice(0, 200)}' (image-store name '${image.ref!.slice(0, 200)}')`;
  return `TaskError IMAGE_NOT_FOUND: runtime.image ${named} is not in the image store of ${nodeId ? `node ${nodeId}` : 'the node that ran it'}; on that node, ${importHint(image)}`;
}

function evaluatorReward(r: RolloutResult, evaluator: EvaluatorName | null, verifierTimeout: boolean): number | null {
  if (verifierTimeout) return 0;
  if (evaluator === null) return null;
  if (evaluator === 'harbor') {
    const out = r.evalDetails?.['output'];
    return typeof out === 'string' ? (harborReward(out) ?? 0) : 0;
  }
  return r.reward ?? 0;
}

/** A session that counts toward `early_stop_min_usable_sessions`: COMPLETED with a trainable token. */
export function isUsable(s: SessionResult): boolean {
  return s.status === 'COMPLETED' && s.trajectory.traces.some((t) => t.loss_mask.includes(1));
}
