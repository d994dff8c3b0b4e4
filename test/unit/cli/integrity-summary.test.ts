import { describe, expect, it } from 'vitest';
import { formatSummary, summarize, toSummaryRow } from '../../../src/cli/commands/run-summary.js';
import type { IntegrityViolation } from '../../../src/protocol/integrity.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';

function result(id: string, violations: IntegrityViolation['kind'][] | null): RolloutResult {
  return {
    id,
    instanceId: id,
    trajectoryId: '0',
    groupId: null,
    dataSource: 'swe',
    outcome: 'completed',
    finish: 'finish_tool',
    reward: 1,
    resolved: true,
    evalDetails: null,
    error: null,
    attempts: 1,
    trajectory: { turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] } },
    timing: { queueMs: 0, initMs: 1, runMs: 1, evalMs: 1, countedMs: 3, wallMs: 3, timeoutTriggered: false },
    ...(violations ? { integrity: { violations: violations.map((kind, turn) => ({ kind, turn, path: 'p', detail: '' })), action: 'flag' as const, mode: 'full' as const } } : {}),
  };
}

describe("rollout run's summary of the integrity monitor", () => {
  it('counts flagged rollouts and, per kind, the rollouts that had one', () => {
    const rows = [result('a', ['edit-protected', 'edit-protected']), result('b', ['edit-protected', 'create-protected']), result('c', []), result('d', null)].map((r) => toSummaryRow(r.id, r));
    const s = summarize(rows, 1, 1000);
    expect(s.flagged).toEqual({ rollouts: 2, byKind: { 'edit-protected': 2, 'create-protected': 1 } });
    expect(formatSummary(s)).toContain('integrity              2 rollouts flagged: 2 edited protected files, 1 created protected files (conftest.py, sitecustomize.py...)');
  });

  it('says nothing when no rollout was flagged', () => {
    const s = summarize([toSummaryRow('c', result('c', []))], 1, 1000);
    expect(s.flagged).toBeUndefined();
    expect(formatSummary(s)).not.toContain('flagged');
  });
});
