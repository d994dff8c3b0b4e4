import { TaskError } from '../errors.js';
import type { IntegrityAction, IntegrityViolation } from '../protocol/integrity.js';
import type { Trajectory } from '../protocol/trajectory.js';

/** The error code of a rollout ended by `on_violation: fail` (a TaskError: outcome `task-error`, never retried). */
export const INTEGRITY_ERROR_CODE = 'INTEGRITY_VIOLATION';

/** What the violations of a rollout cost under its policy's action. */
export interface IntegrityCost {
  /** The reward after the policy: the graded reward, or 0 under `zero` (null stays null: nothing was graded). */
  reward: number | null;
  /** Under `mask`: the loss mask of the sampled tokens of every turn after this one is zeroed; null keeps the mask. */
  maskAfterTurn: number | null;
  /** Under `fail`: the rollout ends as `task-error` ({@link integrityError}) at the first violation. */
  fail: boolean;
  /** Why the reward or mask changed, for the result's details; null when nothing changed. */
  reason: string | null;
}

/**
 * Decides what `violations` cost under `action`. Pure. No violation costs nothing, whatever the
 * action. `flag` only records; `mask` keeps the reward and masks the turns after the first
 * violation (the violating turn itself stays trainable, so a trainer's penalty can reach it);
 * `zero` sets a graded reward to 0; `fail` ends the rollout (the reward is never graded).
 */
export function integrityCost(action: IntegrityAction, violations: readonly IntegrityViolation[], reward: number | null): IntegrityCost {
  if (violations.length === 0) return { reward, maskAfterTurn: null, fail: false, reason: null };
  const first = violations.reduce((a, v) => (v.turn < a.turn ? v : a));
  const why = `${violations.length} integrity violation${violations.length === 1 ? '' : 's'}, first ${describe(first)}`;
  switch (action) {
    case 'flag':
      return { reward, maskAfterTurn: null, fail: false, reason: null };
    case 'mask':
      return { reward, maskAfterTurn: first.turn, fail: false, reason: `loss mask zeroed after turn ${first.turn}: ${why}` };
    case 'zero':
      return { reward: reward === null ? null : 0, maskAfterTurn: null, fail: false, reason: `reward set to 0: ${why}` };
    case 'fail':
      return { reward: null, maskAfterTurn: null, fail: true, reason: `rollout failed: ${why}` };
  }
}

function describe(v: IntegrityViolation): string {
  return `${v.kind} ${v.path ?? v.argv?.join(' ') ?? ''} at turn ${v.turn}`.replace(/ +/g, ' ').trim();
}

/**
 * The TaskError that ends a rollout under `on_violation: fail`: outcome `task-error`, code
 * {@link INTEGRITY_ERROR_CODE}, `details.cause: 'integrity'` and the violations as evidence.
 */
export function integrityError(violations: readonly IntegrityViolation[]): TaskError {
  const cost = integrityCost('fail', violations, null);
  return new TaskError(cost.reason ?? 'integrity violation', { code: INTEGRITY_ERROR_CODE, stage: 'run', details: { cause: 'integrity', violations: [...violations] } });
}

/**
 * The loss mask with the sampled tokens of every turn after `turn` zeroed. Pure. The mask-1
 * tokens of a segment are its turns' output tokens in order (trajectory.ts), so the first
 * Σ outputIds.length of them (over the segment's turns up to `turn`) are kept and the rest
 * zeroed, segment by segment (a harness trajectory has several).
 */
export function maskTurnsAfter(traj: Pick<Trajectory, 'turns' | 'lossMask' | 'segments'>, turn: number): Trajectory['lossMask'] {
  const mask = traj.lossMask.slice();
  const segments = traj.segments ?? [{ tokenStart: 0, tokenEnd: mask.length, turnStart: 0, turnEnd: traj.turns.length }];
  for (const seg of segments) {
    let keep = 0;
    for (let t = seg.turnStart; t < Math.min(seg.turnEnd, turn + 1); t++) keep += traj.turns[t]?.outputIds.length ?? 0;
    for (let i = seg.tokenStart; i < seg.tokenEnd; i++) {
      if (mask[i] !== 1) continue;
      if (keep > 0) keep--;
      else mask[i] = 0;
    }
  }
  return mask;
}
