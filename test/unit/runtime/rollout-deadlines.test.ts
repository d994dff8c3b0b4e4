import { describe, expect, it } from 'vitest';
import { deadlineError, dueDeadline, nextDeadline } from '../../../src/runtime/rollout-deadlines.js';
import { Attempt } from '../../../src/runtime/attempt.js';
import { RolloutSession } from '../../../src/runtime/rollout-session.js';
import { ManualClock } from '../../../src/testing/index.js';

const limits = { wallClockMs: 10_000, budgetMs: 5_000, llmTimeoutMs: 1_000, actionTimeoutMs: 2_000, staleAfterMs: 3_000 };

/** What a case does to the attempt after it entered RUN at 0 and started an LLM call due at 1000. */
type Change = (att: Attempt) => void;
const callReturned: Change = (att) => att.callReturned();
const progressedAt =
  (t: number): Change =>
  (att) =>
    att.progressed(t);
const stageExited: Change = (att) => att.stageExited('run', 0);
const ended: Change = (att) => att.end();
const actionCall: Change = (att) => att.callStarted('action', 1_000);
const machineless = 'no machine' as const;

/** A session submitted at 0 with a live attempt in RUN: budget at 5000, call at 1000, progress at 0. */
function live(...changes: (Change | typeof machineless)[]): RolloutSession {
  const s = new RolloutSession({ id: 'r', instance: { data_source: 'x' } as never, sampling: {} as never, groupId: null, submittedAt: 0, wallClockMs: limits.wallClockMs, codec: {} as never });
  const att = new Attempt({ builder: {} as never, maxIterations: 10, maxOutputTokens: 10, maxModelLen: 10, rollout: { id: 'r', instance: {} as never, sampling: {} }, provider: {} as never, clock: new ManualClock(0) });
  if (!changes.includes(machineless)) att.machineStarted({} as never);
  att.stageEntered('run', 0, limits.budgetMs);
  att.callStarted('llm', 1_000);
  for (const c of changes) if (c !== machineless) c(att);
  s.begin(att);
  return s;
}

describe('rollout deadlines', () => {
  it.each([
    ['the call timeout', [], 1_000],
    ['the no-progress limit', [callReturned], 3_000],
    ['the budget', [callReturned, progressedAt(4_000)], 5_000],
    ['the wall clock', [stageExited], 10_000],
    ['the wall clock once the attempt ended', [ended], 10_000],
  ] as [string, Change[], number][])('looks next at %s', (_n, changes, at) => {
    expect(nextDeadline(live(...changes), limits.staleAfterMs)).toBe(at);
  });

  it.each([
    [999, 'the LLM call in flight', [], null],
    [1_000, 'the LLM call in flight', [], 'llm'],
    [2_000, 'an action in flight', [actionCall], 'action'],
    [3_000, 'the call returned', [callReturned], 'stale'],
    [5_000, 'the call returned and progress at 4500', [callReturned, progressedAt(4_500)], 'budget'],
    [5_000, 'the LLM call in flight', [], 'budget'],
    [10_000, 'the LLM call in flight', [], 'wall'],
    [10_000, 'no machine started', [machineless], 'wall'],
    [9_000, 'no machine started', [machineless], null],
    [9_000, 'the attempt ended', [ended], null],
  ] as [number, string, (Change | typeof machineless)[], string | null][])('at %i with %s finds due: %s', (now, _what, changes, kind) => {
    expect(dueDeadline(live(...changes), now, limits.staleAfterMs)).toBe(kind);
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
