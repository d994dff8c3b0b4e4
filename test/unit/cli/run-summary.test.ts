import { describe, expect, it } from 'vitest';
import { formatSummary, passAtK, quantile, summarize as summarizeRows, toSummaryRow } from '../../../src/cli/commands/run-summary.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';

function result(over: Partial<RolloutResult> & { runMs?: number }): RolloutResult {
  return {
    id: 'r',
    instanceId: 't',
    trajectoryId: '0',
    groupId: null,
    dataSource: 'math',
    outcome: 'completed',
    finish: 'finish_tool',
    reward: 1,
    resolved: true,
    evalDetails: null,
    error: null,
    attempts: 1,
    trajectory: {
      turns: [{ promptIds: [1, 2], outputIds: [3, 4, 5], logprobs: [0, 0, 0], backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 1 }],
      tokens: [1, 2, 3, 4, 5],
      lossMask: [0, 0, 1, 1, 1],
      logprobs: [0, 0, 0, 0, 0],
      messages: [],
      tools: [],
      diagnostics: { drift: [] },
    },
    timing: { queueMs: 0, initMs: 1, runMs: over.runMs ?? 10, evalMs: 2, countedMs: 13, wallMs: 13, timeoutTriggered: false },
    ...over,
  };
}

const summarize = (rs: { taskKey: string; result: RolloutResult }[], n: number, ms: number, familyOf?: (d: string) => string) =>
  summarizeRows(rs.map((x) => toSummaryRow(x.taskKey, x.result)), n, ms, familyOf);

describe('passAtK', () => {
  it('is c/n for k = 1', () => {
    expect(passAtK(4, 1, 1)).toBeCloseTo(0.25, 12);
  });
  it('is 1 when fewer than k samples failed', () => {
    expect(passAtK(4, 2, 3)).toBe(1);
  });
  it('matches the closed form 1 - C(n-c,k)/C(n,k)', () => {
    // 1 - C(8,2)/C(10,2) = 1 - 28/45
    expect(passAtK(10, 2, 2)).toBeCloseTo(1 - 28 / 45, 12);
  });
  it('is 0 when no sample passed', () => {
    expect(passAtK(5, 0, 5)).toBe(0);
  });
  it('throws a RangeError when k exceeds n', () => {
    expect(() => passAtK(2, 1, 3)).toThrow(RangeError);
  });
});

describe('quantile', () => {
  it('returns the nearest-rank median', () => {
    expect(quantile([5, 1, 3, 2, 4], 0.5)).toBe(3);
  });
  it('returns null for no values', () => {
    expect(quantile([], 0.95)).toBeNull();
  });
});

describe('summarize', () => {
  const results = [
    { taskKey: '0', result: result({}) },
    { taskKey: '0', result: result({ resolved: false, reward: 0, runMs: 30 }) },
    { taskKey: '1', result: result({ resolved: false, reward: 0, dataSource: 'stem' }) },
    { taskKey: '1', result: result({ resolved: false, reward: null, outcome: 'infra-error', dataSource: 'stem' }) },
  ];
  const s = summarize(results, 2, 30_000);
  it('counts each outcome', () => {
    expect(s.outcomes).toEqual({ completed: 3, 'infra-error': 1 });
  });
  it('averages reward only over rollouts that have one', () => {
    expect(s.meanReward).toBeCloseTo(1 / 3, 12);
  });
  it('averages pass@1 and pass@n over tasks', () => {
    expect([s.passAt1, s.passAtN]).toEqual([0.25, 0.5]);
  });
  it('computes rollouts per minute from the elapsed time', () => {
    expect(s.rolloutsPerMinute).toBe(8);
  });
  it('sums sampled tokens from the turns', () => {
    expect(s.tokens).toEqual({ total: 20, sampled: 12, perRollout: 5 });
  });
  it('formats a table naming pass@n with the group size', () => {
    expect(formatSummary(s)).toContain('pass@2');
  });
});

describe('summarize by family', () => {
  it('reports aliases under the family familyOf names', () => {
    const s = summarize([{ taskKey: '0', result: result({ dataSource: 'deepscaler' }) }, { taskKey: '1', result: result({ dataSource: 'math' }) }], 1, 1000, () => 'math');
    expect(Object.keys(s.byDataSource)).toEqual(['math']);
  });
});

describe('summarize errors', () => {
  it('lists the most frequent errors first', () => {
    const err = (message: string) => ({ name: 'TaskError', code: 'TASK', message, retryable: false });
    const s = summarize(
      [
        { taskKey: '0', result: result({ outcome: 'task-error', reward: null, resolved: false, error: err('a') }) },
        { taskKey: '1', result: result({ outcome: 'task-error', reward: null, resolved: false, error: err('b') }) },
        { taskKey: '2', result: result({ outcome: 'task-error', reward: null, resolved: false, error: err('b') }) },
      ],
      1,
      1000,
    );
    expect(s.errors).toEqual([
      { error: 'TASK: b', count: 2 },
      { error: 'TASK: a', count: 1 },
    ]);
  });
});

describe('summarize: what an RL engineer reads first', () => {
  it('leaves cancelled samples out of pass@k and counts them apart', () => {
    const rows = [
      { taskKey: '0', result: result({ resolved: true, reward: 1 }) },
      { taskKey: '0', result: result({ outcome: 'cancelled', resolved: false, reward: null }) },
      { taskKey: '0', result: result({ outcome: 'cancelled', resolved: false, reward: null }) },
      { taskKey: '1', result: result({ resolved: false, reward: 0 }) },
      { taskKey: '1', result: result({ resolved: true, reward: 1 }) },
    ];
    const s = summarize(rows, 3, 1000);
    expect(s.cancelled).toBe(2);
    // task 0: 1 of 1 finished resolved; task 1: 1 of 2.
    expect(s.passAt1).toBeCloseTo((1 + 0.5) / 2, 12);
    expect(s.passAtN).toBe(1);
    expect(formatSummary(s)).toMatch(/cancelled\s+2 \(not finished: left out of pass@k, rates and timings\)/);
  });

  it('after an early Ctrl-C counts the tasks of the file and keeps cancelled rollouts out of rates, timings and families (#30)', () => {
    const rows = [
      { taskKey: '0', result: result({ resolved: true, reward: 1 }) },
      { taskKey: '1', result: result({ outcome: 'cancelled', resolved: false, reward: null }) },
      { taskKey: '2', result: result({ outcome: 'cancelled', resolved: false, reward: null }) },
    ];
    const s = summarizeRows(rows.map((r) => toSummaryRow(r.taskKey, r.result)), 1, 60_000, undefined, 20);
    expect([s.rollouts, s.finished, s.tasks, s.tasksInFile, s.cancelled, s.passAt1, s.rolloutsPerMinute]).toEqual([3, 1, 1, 20, 2, 1, 1]);
    expect(Object.values(s.byDataSource).map((d) => d.rollouts)).toEqual([1]);
    const text = formatSummary(s);
    expect(text).toContain('rollouts               1 finished (1 tasks of 20 in the file × n=1), 2 cancelled');
    expect(text).toContain('resolved               1/1');
  });

  it('counts GRPO groups whose finished rewards are all equal as having no signal', () => {
    const rows = [
      ...[1, 1, 1].map((reward) => ({ taskKey: 'flat', result: result({ reward }) })),
      ...[0, 1, 1].map((reward) => ({ taskKey: 'mixed', result: result({ reward, resolved: reward === 1 }) })),
    ];
    const s = summarize(rows, 3, 1000);
    expect(s.groups).toEqual({ total: 2, noSignal: 1 });
    expect(formatSummary(s)).toMatch(/groups with no signal\s+1\/2/);
  });

  it('bins rewards per task family and reports sampled tokens per turn and truncations', () => {
    const rows = [
      { taskKey: '0', result: result({ reward: 0 }) },
      { taskKey: '1', result: result({ reward: 0.55 }) },
      { taskKey: '2', result: result({ reward: 1, outcome: 'truncated', finish: 'length' as never }) },
      { taskKey: '3', result: result({ dataSource: 'code', reward: 1 }) },
    ];
    const s = summarize(rows, 1, 1000);
    expect(s.rewardHistogram['math']).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    expect(s.rewardHistogram['code']).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    expect(s.tokensPerTurn).toBe(3);
    expect(s.truncated).toBe(1);
    expect(s.groups.total).toBe(0);
    expect(formatSummary(s)).toContain('reward histogram');
  });
});
