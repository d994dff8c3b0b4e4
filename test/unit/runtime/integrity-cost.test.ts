import { describe, expect, it } from 'vitest';
import { TaskError } from '../../../src/errors.js';
import type { IntegrityAction, IntegrityViolation } from '../../../src/protocol/integrity.js';
import { integrityCost, integrityError, INTEGRITY_ERROR_CODE, maskTurnsAfter } from '../../../src/runtime/integrity-cost.js';
import { classifyEnd } from '../../../src/runtime/rollout-outcome.js';

const edit: IntegrityViolation = { kind: 'edit-protected', turn: 2, path: 'tests/test_calc.py', detail: 'sha256 changed' };
const conftest: IntegrityViolation = { kind: 'create-protected', turn: 1, path: 'conftest.py', detail: 'created' };

describe('integrityCost', () => {
  const table: [IntegrityAction, IntegrityViolation[], number | null, { reward: number | null; maskAfterTurn: number | null; fail: boolean; changed: boolean }][] = [
    ['flag', [], 1, { reward: 1, maskAfterTurn: null, fail: false, changed: false }],
    ['mask', [], 1, { reward: 1, maskAfterTurn: null, fail: false, changed: false }],
    ['zero', [], 1, { reward: 1, maskAfterTurn: null, fail: false, changed: false }],
    ['fail', [], 1, { reward: 1, maskAfterTurn: null, fail: false, changed: false }],
    ['flag', [edit], 1, { reward: 1, maskAfterTurn: null, fail: false, changed: false }],
    ['mask', [edit, conftest], 1, { reward: 1, maskAfterTurn: 1, fail: false, changed: true }],
    ['zero', [edit], 1, { reward: 0, maskAfterTurn: null, fail: false, changed: true }],
    ['zero', [edit], 0.5, { reward: 0, maskAfterTurn: null, fail: false, changed: true }],
    ['zero', [edit], null, { reward: null, maskAfterTurn: null, fail: false, changed: true }],
    ['fail', [edit], 1, { reward: null, maskAfterTurn: null, fail: true, changed: true }],
  ];
  it.each(table)('%s with %j and reward %s', (action, violations, reward, want) => {
    const c = integrityCost(action, violations, reward);
    expect({ reward: c.reward, maskAfterTurn: c.maskAfterTurn, fail: c.fail, changed: c.reason !== null }).toEqual(want);
  });

  it('names the first violation (by turn) in the reason', () => {
    expect(integrityCost('zero', [edit, conftest], 1).reason).toBe('reward set to 0: 2 integrity violations, first create-protected conftest.py at turn 1');
  });
});

describe('integrityError', () => {
  it('ends the rollout as a task error with integrity as the cause, never an infra error', () => {
    const err = integrityError([edit]);
    expect(err).toBeInstanceOf(TaskError);
    expect(err.code).toBe(INTEGRITY_ERROR_CODE);
    expect(err.retryable).toBe(false);
    expect(err.details).toEqual({ cause: 'integrity', violations: [edit] });
    const d = classifyEnd({ final: 'failed', finish: null, error: err, cancelReason: null, attempts: 1, maxRetries: 3, running: true });
    expect(d).toEqual({ outcome: 'task-error', error: err, retry: false });
  });
});

describe('maskTurnsAfter', () => {
  const turn = (n: number) => ({ outputIds: Array.from({ length: n }, () => 7) }) as never;
  // prompt(2) turn0(2) tool(1) turn1(3) tool(1) turn2(1)
  const traj = { turns: [turn(2), turn(3), turn(1)], lossMask: [0, 0, 1, 1, 0, 1, 1, 1, 0, 1] as (0 | 1)[] };

  it.each([
    [-1, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]],
    [0, [0, 0, 1, 1, 0, 0, 0, 0, 0, 0]],
    [1, [0, 0, 1, 1, 0, 1, 1, 1, 0, 0]],
    [2, [0, 0, 1, 1, 0, 1, 1, 1, 0, 1]],
  ])('after turn %i keeps the sampled tokens of the turns up to it', (t, want) => {
    expect(maskTurnsAfter(traj, t)).toEqual(want);
    expect(traj.lossMask).toEqual([0, 0, 1, 1, 0, 1, 1, 1, 0, 1]);
  });

  it('masks segment by segment in a harness trajectory', () => {
    const seg = {
      turns: [turn(1), turn(2), turn(1)],
      lossMask: [0, 1, 0, 1, 1, 0, 0, 1] as (0 | 1)[],
      segments: [
        { tokenStart: 0, tokenEnd: 5, turnStart: 0, turnEnd: 2, messageStart: 0, messageEnd: 3 },
        { tokenStart: 5, tokenEnd: 8, turnStart: 2, turnEnd: 3, messageStart: 3, messageEnd: 5 },
      ],
    };
    expect(maskTurnsAfter(seg, 0)).toEqual([0, 1, 0, 0, 0, 0, 0, 0]);
    expect(maskTurnsAfter(seg, 1)).toEqual([0, 1, 0, 1, 1, 0, 0, 0]);
  });
});
