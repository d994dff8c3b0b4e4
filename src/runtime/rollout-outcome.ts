import type { FinalState } from '../../machines/rollout.machine.js';
import { CancelledError, InfraError, RolloutTimeoutError, TaskError, ValidationError, serializeError, type RolloutError } from '../errors.js';
import type { FinishReason, Outcome, RolloutResult, Trajectory } from '../protocol/trajectory.js';
import { staleness, type WeightVersion } from '../llm/weight-versions.js';
import { staleFlag } from './token-age.js';
import { withIntegrity } from './integrity-monitor.js';
import type { Attempt } from './attempt.js';
import type { RolloutSession } from './rollout-session.js';

/** What ended an attempt, as the decision needs it. */
export interface AttemptEnd {
  /** The machine's final state. */
  final: FinalState;
  /** Why the agent loop stopped, when it did. */
  finish: FinishReason | null;
  /** The error the attempt recorded, if any. */
  error: RolloutError | null;
  /** Why the rollout was cancelled, when it was. */
  cancelReason: string | null;
  /** Attempts made so far, this one included. */
  attempts: number;
  /** Retries allowed after the first attempt (`retries.max`). */
  maxRetries: number;
  /** Whether the runtime still starts attempts (false while closing). */
  running: boolean;
}

/** The outcome of an attempt: settle the rollout with `outcome` and `error`, or retry it. */
export interface EndDecision {
  outcome: Outcome;
  error: RolloutError | null;
  /** True when the rollout gets another attempt (a retryable infra error within the budget). */
  retry: boolean;
}

/**
 * The finish reason of an attempt that reached `done`: a last turn cut by the token limit, with
 * no other reason to stop, is an overlong sample (RL users filter them) — `length`, so the
 * outcome is `truncated`. `max_iterations`, `context_full` and `finish_tool` keep their reason.
 */
export function doneFinish(finish: FinishReason | null, lastTurnFinish: string | null | undefined): FinishReason | null {
  return lastTurnFinish === 'length' && (finish === 'no_tool_call' || finish === null) ? 'length' : finish;
}

/**
 * Decides the outcome of an ended attempt. Pure. A failed attempt is classified by its error:
 * task and validation errors are the task's fault, cancels and timeouts keep their outcome, and
 * everything else is infrastructure, retried while `retryable`, within budget and running.
 */
export function classifyEnd(e: AttemptEnd): EndDecision {
  switch (e.final) {
    case 'done':
      return { outcome: e.finish === 'max_iterations' || e.finish === 'context_full' || e.finish === 'length' || e.finish === 'stale_tokens' || e.finish === 'forked' ? 'truncated' : 'completed', error: null, retry: false };
    case 'cancelled':
      return { outcome: 'cancelled', error: new CancelledError(e.cancelReason ?? 'cancelled'), retry: false };
    case 'timedOut':
      return { outcome: 'timed-out', error: e.error ?? new RolloutTimeoutError('rollout timed out'), retry: false };
    case 'failed': {
      const error = e.error ?? new InfraError('rollout failed without an error');
      const outcome = failedOutcome(error);
      const retry = outcome === 'infra-error' && error.retryable && e.attempts <= e.maxRetries && e.running;
      return { outcome, error, retry };
    }
  }
}

function failedOutcome(error: RolloutError): Outcome {
  if (error instanceof TaskError || error instanceof ValidationError) return 'task-error';
  if (error instanceof CancelledError) return 'cancelled';
  if (error instanceof RolloutTimeoutError) return 'timed-out';
  return 'infra-error';
}

/** The backoff before attempt `attempts + 1`: doubling from `backoffMs`, capped at `backoffMaxMs`. */
export function retryDelayMs(retries: { backoffMs: number; backoffMaxMs: number }, attempts: number): number {
  return Math.min(retries.backoffMaxMs, retries.backoffMs * 2 ** (attempts - 1));
}

/** The result's `finish`: the loop's own reason for a graded outcome, else what cut it short. */
export function resultFinish(outcome: Outcome, loopFinish: FinishReason | null): FinishReason | null {
  switch (outcome) {
    case 'timed-out':
      return 'timeout';
    case 'cancelled':
      return 'cancelled';
    case 'infra-error':
    case 'task-error':
      return 'error';
    default:
      return loopFinish;
  }
}

const emptyTrajectory = (): Trajectory => ({ turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] }, weightVersions: [], minWeightVersion: null, maxWeightVersion: null });

/**
 * Builds the result of a settled rollout from its session and last attempt at `now`. Pure apart
 * from reading them. The reward counts only for a graded outcome (completed or truncated); the
 * queue time is the wall time not counted in any stage. `staleness` is measured against the
 * trainer's version as it is now, when the result is made.
 */
export function buildResult(s: RolloutSession, att: Attempt | null, outcome: Outcome, error: RolloutError | null, now: number, trainerVersion: WeightVersion | null = null): RolloutResult {
  const trajectory = att ? (att.harness?.traj.build() ?? att.builder.build()) : emptyTrajectory();
  trajectory.staleness = staleness(trainerVersion, trajectory.minWeightVersion ?? null);
  const flag = att ? staleFlag(att) : null;
  if (flag) trajectory.diagnostics.staleTokens = flag;
  const counted = s.timing.initMs + s.timing.runMs + s.timing.evalMs;
  const wallMs = now - s.submittedAt;
  const ev = outcome === 'completed' || outcome === 'truncated' ? (att?.evalResult ?? null) : null;
  const result: RolloutResult = {
    id: s.id,
    instanceId: s.instanceId,
    trajectoryId: s.trajectoryId,
    groupId: s.groupId,
    dataSource: s.dataSource,
    outcome,
    finish: resultFinish(outcome, att ? doneFinish(att.finish, att.builder.lastFinishReason) : null),
    reward: ev ? ev.reward : null,
    resolved: ev ? ev.resolved : false,
    evalDetails: ev?.details ?? null,
    error: error ? serializeError(error) : null,
    attempts: s.attempts,
    trajectory,
    timing: {
      queueMs: Math.max(0, wallMs - counted),
      initMs: s.timing.initMs,
      runMs: s.timing.runMs,
      evalMs: s.timing.evalMs,
      countedMs: counted,
      wallMs,
      timeoutTriggered: outcome === 'timed-out',
    },
  };
  return att?.integrity ? withIntegrity(result, att.integrity) : result;
}
