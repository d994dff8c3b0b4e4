import { describe, expect, it } from 'vitest';
import { deadlineError, dueDeadline, nextDeadline } from '../../../src/runtime/rollout-deadlines.js';
import { Attempt, RolloutSession } from '../../../src/runtime/rollout-session.js';
import { ManualClock } from '../../../src/testing/index.js';

const limits = { wallClockMs: 10_000, budgetMs: 5_000, llmTimeoutMs: 1_000, actionTimeoutMs: 2_000, staleAfterMs: 3_000 };

/** A session submitted at 0 with a live attempt in RUN: budget at 5000, call at 1000, progress at 0. */
function live(over: Partial<Attempt> = {}): RolloutSession {
  const s = new RolloutSession('r', { data_source: 'x' } as never, {} as never, null, 0, limits.wallClockMs, {} as never);
  const att = new Attempt({} as never, 10, 10, 10, { provider: {} as never, rolloutId: 'r', clock: new ManualClock(0) });
  att.actor = {} as never;
  att.activeStage = 'run';
  att.budgetAt = 5_000;
  att.callAt = 1_000;
  att.callKind = 'llm';
  Object.assign(att, over);
  s.begin(att);
  return s;
}

describe('rollout deadlines', () => {
  it.each([
    ['the call timeout', {}, 1_000],
    ['the no-progress limit', { callAt: Infinity }, 3_000],
    ['the budget', { callAt: Infinity, lastProgress: 4_000 }, 5_000],
    ['the wall clock', { callAt: Infinity, budgetAt: Infinity, activeStage: null }, 10_000],
    ['the wall clock once the attempt ended', { ended: true }, 10_000],
  ] as [string, Partial<Attempt>, number][])('looks next at %s', (_n, over, at) => {
    expect(nextDeadline(live(over), limits.staleAfterMs)).toBe(at);
  });

  it.each([
    [999, {}, null],
    [1_000, {}, 'llm'],
    [2_000, { callKind: 'action' }, 'action'],
    [3_000, { callAt: Infinity }, 'stale'],
    [5_000, { callAt: Infinity, lastProgress: 4_500 }, 'budget'],
    [5_000, {}, 'budget'],
    [10_000, {}, 'wall'],
    [10_000, { actor: null }, 'wall'],
    [9_000, { actor: null }, null],
    [9_000, { ended: true }, null],
  ] as [number, Partial<Attempt>, string | null][])('at %i finds %j due: %s', (now, over, kind) => {
    expect(dueDeadline(live(over), now, limits.staleAfterMs)).toBe(kind);
  });

  it.each([
    ['wall', 'RolloutTimeoutError', 'WALL_CLOCK'],
    ['budget', 'RolloutTimeoutError', 'BUDGET'],
    ['llm', 'BackendError', 'LLM_TIMEOUT'],
    ['action', 'SandboxError', 'ACTION_TIMEOUT'],
    ['stale', 'StaleRolloutError', 'STALE'],
  ] as const)('ends a passed %s deadline with %s %s', (kind, name, code) => {
    const e = deadlineError(kind, live(), limits);
    expect({ name: e.name, code: e.code }).toEqual({ name, code });
  });
});
