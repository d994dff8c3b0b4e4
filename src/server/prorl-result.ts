import type { RolloutResult } from '../protocol/trajectory.js';
import type { ProcessResponse } from '../protocol/http.js';

/**
 * Maps a rollout result onto the ProRL `/process` answer.
 *
 * The guarantee trainers rely on: only `completed` and `truncated` rollouts have `filter: false`.
 * Every other outcome is filtered, and every failure that is not the policy's own sets
 * `critical_error`, so an infrastructure fault never looks like a trainable `resolved: false`:
 * - `infra-error` → `critical_error` = the failing stage (`run` when unknown);
 * - `timed-out` → `critical_error: 'timeout'`;
 * - `task-error` → `critical_error` = its stage (default `init`: bad instance data is found there);
 * - `cancelled` → `critical_error: null`, `filter: true` (the client asked for it).
 */
export function toProrlResult(r: RolloutResult): ProcessResponse {
  let critical: ProcessResponse['critical_error'] = null;
  switch (r.outcome) {
    case 'infra-error':
      // An infra error without a stage happened outside the three stages (admission, the
      // supervisor itself); `run` is where a trainer looks for "the rollout broke".
      critical = r.error?.stage ?? 'run';
      break;
    case 'task-error':
      critical = r.error?.stage ?? 'init';
      break;
    case 'timed-out':
      critical = 'timeout';
      break;
    default:
      critical = null;
  }
  const trainable = r.outcome === 'completed' || r.outcome === 'truncated';
  const t = r.timing;
  const inStages = t.initMs + t.runMs + t.evalMs;
  const patch = r.evalDetails?.['git_patch'] ?? r.evalDetails?.['gitPatch'] ?? r.evalDetails?.['patch'];
  return {
    job_id: r.id,
    messages: r.trajectory.messages,
    tools: r.trajectory.tools,
    resolved: trainable ? r.resolved : false,
    reward: r.reward,
    critical_error: critical,
    filter: !trainable,
    finish: r.finish,
    success: trainable,
    error: r.error ? `${r.error.name}: ${r.error.message}` : null,
    git_patch: typeof patch === 'string' ? patch : null,
    instance_id: r.instanceId,
    trajectory_id: r.trajectoryId,
    timing: {
      init_time: t.initMs / 1000,
      run_time: t.runMs / 1000,
      eval_time: t.evalMs / 1000,
      // Time outside the three stages (queueing, retries' back-off, hand-offs), as ProRL reports it.
      others_time: Math.max(0, t.wallMs - inStages) / 1000,
      counted_elapsed: t.countedMs / 1000,
      timeout_triggered: t.timeoutTriggered,
    },
    outcome: r.outcome,
    attempts: r.attempts,
  };
}
