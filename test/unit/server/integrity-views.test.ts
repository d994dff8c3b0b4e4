import { describe, expect, it } from 'vitest';
import { ProcessResponseSchema } from '../../../src/protocol/http.js';
import type { IntegrityReport } from '../../../src/protocol/integrity.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { ServiceMetrics } from '../../../src/server/metrics.js';
import { toProrlResult } from '../../../src/server/prorl-result.js';

const report: IntegrityReport = {
  violations: [
    { kind: 'edit-protected', turn: 1, path: 'tests/test_a.py', detail: 'sha256 a → b' },
    { kind: 'edit-protected', turn: 2, path: 'tests/test_b.py', detail: 'sha256 c → d' },
    { kind: 'create-protected', turn: 2, path: 'conftest.py', detail: 'created' },
  ],
  action: 'flag',
  mode: 'full',
  actions: 3,
  monitorMs: 1.5,
};

function result(over: Partial<RolloutResult> = {}): RolloutResult {
  return {
    id: 'r1',
    instanceId: 'i1',
    trajectoryId: '0',
    groupId: null,
    dataSource: 'swe',
    outcome: 'completed',
    finish: 'finish_tool',
    reward: 1,
    resolved: true,
    evalDetails: { git_patch: '' },
    error: null,
    attempts: 1,
    trajectory: { turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] } },
    timing: { queueMs: 0, initMs: 1, runMs: 1, evalMs: 1, countedMs: 3, wallMs: 3, timeoutTriggered: false },
    ...over,
  };
}

describe('integrity in the ProRL answer', () => {
  it("carries the monitor's report in metadata, valid against the response schema", () => {
    const out = ProcessResponseSchema.parse(toProrlResult(result({ integrity: report })));
    expect(out.metadata).toEqual({ integrity: report });
  });

  it('has no metadata when the rollout had no policy', () => {
    expect(toProrlResult(result())).not.toHaveProperty('metadata');
  });
});

describe('the integrity counter of /metrics', () => {
  it('counts violations by kind and data source from the result events', async () => {
    const m = new ServiceMetrics();
    const base = { seq: 1, rseq: 1, ts: 0, rolloutId: 'r1' };
    m.observe({ ...base, type: 'rollout.submitted', instanceId: 'i1', trajectoryId: null, groupId: null, dataSource: 'swebench', attempt: 1 });
    m.observe({ ...base, seq: 2, rseq: 2, type: 'rollout.result', outcome: 'completed', finish: 'finish_tool', reward: 1, resolved: true, error: null, timing: result().timing, tokens: 0, turns: 0, violations: { 'edit-protected': 2, 'create-protected': 1 } });
    const { body } = await m.text();
    expect(body).toContain('rollout_integrity_violations_total{kind="edit-protected",data_source="swebench"} 2');
    expect(body).toContain('rollout_integrity_violations_total{kind="create-protected",data_source="swebench"} 1');
  });
});
