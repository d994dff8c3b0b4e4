import { BackendError, RolloutTimeoutError, SandboxError, StaleRolloutError, type RolloutError } from '../errors.js';
import type { DeadlineKind } from './deadline-index.js';
import type { RolloutSession } from './rollout-session.js';

/** The limits a rollout's deadlines come from (a subset of the runtime options). */
export interface DeadlineLimits {
  wallClockMs: number;
  budgetMs: number;
  llmTimeoutMs: number;
  actionTimeoutMs: number;
  staleAfterMs: number;
}

/**
 * The earliest time something about `s` may fall due: its wall-clock cap and, while an attempt
 * is live, its stage budget, its call timeout and its no-progress limit. Pure: reads the
 * deadlines the session and its attempt hold as data.
 */
export function nextDeadline(s: RolloutSession, staleAfterMs: number): number {
  const att = s.attempt;
  let at = s.wallAt;
  if (att && !att.ended) {
    if (att.budgetAt < at) at = att.budgetAt;
    if (att.callAt < at) at = att.callAt;
    if (att.activeStage !== null) {
      const stale = att.lastProgress + staleAfterMs;
      if (stale < at) at = stale;
    }
  }
  return at;
}

/**
 * Which deadline of `s` has passed at `now`, most decisive first (wall clock, budget, call,
 * staleness), or null. The wall clock counts even between attempts (a backoff); the others only
 * while an attempt's actor runs.
 */
export function dueDeadline(s: RolloutSession, now: number, staleAfterMs: number): DeadlineKind | null {
  if (now >= s.wallAt) return 'wall';
  const att = s.attempt;
  if (!att || att.ended || !att.machine) return null;
  if (now >= att.budgetAt) return 'budget';
  if (now >= att.callAt) return att.callKind;
  if (att.activeStage !== null && now >= att.lastProgress + staleAfterMs) return 'stale';
  return null;
}

/**
 * The error a passed deadline ends the attempt with. `wall` and `budget` time the rollout out
 * (the machine's `TIMEOUT`); the others fail it (`FAIL`), and an infra failure may be retried.
 */
export function deadlineError(kind: DeadlineKind, s: RolloutSession, limits: DeadlineLimits): RolloutError {
  switch (kind) {
    case 'wall':
      return new RolloutTimeoutError(`wall-clock cap of ${limits.wallClockMs} ms reached`, { code: 'WALL_CLOCK' });
    case 'budget':
      return new RolloutTimeoutError(`time budget of ${limits.budgetMs} ms used up`, { code: 'BUDGET', stage: s.attempt?.activeStage ?? 'run' });
    case 'llm':
      return new BackendError(`LLM call exceeded llmTimeoutMs=${limits.llmTimeoutMs}`, { code: 'LLM_TIMEOUT', stage: 'run' });
    case 'action':
      return new SandboxError(`action exceeded actionTimeoutMs=${limits.actionTimeoutMs}`, { code: 'ACTION_TIMEOUT', stage: 'run' });
    case 'stale':
      return new StaleRolloutError(`no progress for ${limits.staleAfterMs} ms in ${s.state}`, { stage: s.attempt?.activeStage ?? 'run' });
  }
}
