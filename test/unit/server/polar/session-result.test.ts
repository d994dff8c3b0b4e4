import { describe, expect, it } from 'vitest';
import type { RolloutResult } from '../../../../src/protocol/trajectory.js';
import { isUsable, toSessionResult, type SessionContext } from '../../../../src/server/polar/session-result.js';

const turn = (promptIds: number[], outputIds: number[]) => ({ promptIds, outputIds, logprobs: outputIds.map(() => -0.5), backendId: 'b0', weightVersion: 3, finishReason: 'stop' as const, latencyMs: 1 });

function result(extra: Partial<RolloutResult> = {}): RolloutResult {
  return {
    id: 'sk-polar-1',
    instanceId: 't',
    trajectoryId: null,
    groupId: 'polar:t',
    dataSource: 'harness',
    outcome: 'completed',
    finish: 'no_tool_call',
    reward: 1,
    resolved: true,
    evalDetails: { exit_code: 0, timed_out: false, output: '' },
    error: null,
    attempts: 1,
    trajectory: {
      turns: [turn([1, 2], [3, 9]), turn([1, 2, 3, 9, 4], [5, 9])],
      tokens: [],
      lossMask: [],
      logprobs: [],
      messages: [],
      tools: [],
      diagnostics: { drift: [] },
    },
    timing: { queueMs: 5, initMs: 100, runMs: 200, evalMs: 30, countedMs: 330, wallMs: 340, timeoutTriggered: false },
    ...extra,
  };
}

const ctx = (extra: Partial<SessionContext> = {}): SessionContext => ({
  sessionId: 'sk-polar-1',
  taskId: 't',
  builder: 'prefix_merging',
  builderConfig: {},
  evaluator: 'session_completed',
  nodeId: 'n1',
  endedBy: null,
  taskMetadata: { group_id: 4, policy_version: 2, other: 'x' },
  readyQueueMs: 7,
  now: () => 0,
  ...extra,
});

describe('toSessionResult', () => {
  const table: { name: string; r: Partial<RolloutResult>; c: Partial<SessionContext>; status: string; reward: number | null; trainable: boolean; meta?: Record<string, unknown> }[] = [
    { name: 'a completed session', r: {}, c: {}, status: 'COMPLETED', reward: 1, trainable: true },
    { name: 'a completed session without an evaluator', r: {}, c: { evaluator: null }, status: 'COMPLETED', reward: null, trainable: true },
    { name: 'a truncated session', r: { outcome: 'truncated', finish: 'max_iterations' }, c: {}, status: 'COMPLETED', reward: 1, trainable: true },
    { name: 'a verifier that timed out', r: { reward: 0, resolved: false, evalDetails: { timed_out: true } }, c: {}, status: 'COMPLETED', reward: 0, trainable: true, meta: { verifier_timeout: true } },
    { name: 'the runtime timing a session out', r: { outcome: 'timed-out', reward: null }, c: {}, status: 'TIMEOUT', reward: 0, trainable: true },
    { name: 'the agent timeout', r: { outcome: 'cancelled', reward: null }, c: { endedBy: 'agent_timeout' }, status: 'TIMEOUT', reward: 0, trainable: true, meta: { ended_by: 'agent_timeout' } },
    { name: 'an infra error', r: { outcome: 'infra-error', reward: null, error: { name: 'SandboxError', code: 'SANDBOX_LOST', message: 'lost /tmp/x', retryable: true, stage: 'run' } }, c: {}, status: 'ERROR', reward: 0, trainable: false, meta: { failure: { name: 'SandboxError', code: 'SANDBOX_LOST', stage: 'run', retryable: true, message: 'lost <host>/x' } } },
    { name: 'a task error', r: { outcome: 'task-error', reward: null, error: { name: 'TaskError', code: 'BAD', message: 'bad', retryable: false, stage: 'init' } }, c: {}, status: 'ERROR', reward: 0, trainable: false },
    { name: 'early stop', r: { outcome: 'cancelled', reward: null }, c: { endedBy: 'early_stop' }, status: 'ERROR', reward: 0, trainable: false, meta: { early_stopped: true } },
    { name: 'a cancel by DELETE', r: { outcome: 'cancelled', reward: null }, c: {}, status: 'ERROR', reward: 0, trainable: false },
  ];
  for (const row of table) {
    it(`maps ${row.name} to ${row.status}, reward ${row.reward}, ${row.trainable ? 'trainable' : 'an all-zero mask'}`, () => {
      const s = toSessionResult(result(row.r), ctx(row.c));
      expect(s.status).toBe(row.status);
      expect(s.trajectory.status).toBe(row.status);
      expect(s.trajectory.traces).toHaveLength(1);
      for (const t of s.trajectory.traces) {
        expect(t.reward).toBe(row.reward);
        expect(t.loss_mask.includes(1)).toBe(row.trainable);
        expect(t.loss_mask).toHaveLength(t.response_ids.length);
      }
      expect(isUsable(s)).toBe(row.status === 'COMPLETED');
      expect(s.error === null).toBe(row.status === 'COMPLETED');
      if (row.meta) expect(s.metadata).toMatchObject(row.meta);
    });
  }

  it('carries timing in ms, the scheduler metadata and our extras in metadata', () => {
    const s = toSessionResult(result(), ctx());
    expect(s.timing).toEqual({ register_to_init_queue_ms: 5, init_ms: 100, ready_queue_ms: 7, run_ms: 200, postrun_ms: 30, container_start_ms: 100, agent_exec_ms: 200, build_ms: 0, eval_ms: 30, e2e_ms: 340 });
    expect(s.trajectory.metadata).toMatchObject({ group_id: 4, policy_version: 2, builder: 'prefix_merging', record_count: 2, trace_count: 1 });
    expect(s.trajectory.metadata).not.toHaveProperty('other');
    expect(s.trajectory.traces[0]!.metadata['weight_versions']).toEqual([
      { turn: 0, version: 3, tokens: 2 },
      { turn: 1, version: 3, tokens: 2 },
    ]);
    expect(s.node_id).toBe('n1');
  });

  it("carries the integrity report (#27) on the trajectory's and every trace's metadata, and nothing without one", () => {
    const integrity = { violations: [{ kind: 'read-secret' as const, turn: 1, path: '.git/HEAD', detail: '1 secret path opened' }], action: 'flag' as const, mode: 'full' as const };
    const s = toSessionResult(result({ integrity }), ctx({ builder: 'per_request' }));
    expect(s.trajectory.metadata.integrity).toEqual(integrity);
    expect(s.trajectory.traces).toHaveLength(2);
    for (const t of s.trajectory.traces) expect(t.metadata).toMatchObject({ builder: 'per_request', integrity });
    const plain = toSessionResult(result(), ctx({ builder: 'per_request' }));
    expect(plain.trajectory.metadata).not.toHaveProperty('integrity');
    for (const t of plain.trajectory.traces) expect(t.metadata).not.toHaveProperty('integrity');
  });

  it('builds one trace per call with per_request', () => {
    expect(toSessionResult(result(), ctx({ builder: 'per_request' })).trajectory.traces).toHaveLength(2);
  });

  it("says which runtime.image a node's store lacked and how to import it, keeping the runtime's error in metadata.failure", () => {
    const missing = { name: 'TaskError', code: 'IMAGE_NOT_FOUND', message: "image 'py-test': not in the image store /tmp/store (import it with: rollout image import PATH --name py-test)", retryable: false, stage: 'init' as const };
    const image = { requested: 'docker.io/library/python:3.11', ref: 'py-test', aliased: true };
    const s = toSessionResult(result({ outcome: 'task-error', reward: null, error: missing, trajectory: { ...result().trajectory, turns: [] } }), ctx({ image, nodeId: 'worker-b' }));
    expect(s.status).toBe('ERROR');
    expect(s.error).toBe(
      "TaskError IMAGE_NOT_FOUND: runtime.image 'docker.io/library/python:3.11' (image-store name 'py-test') is not in the image store of node worker-b; on that node, import it with `rollout image import PATH --name py-test` (PATH a `docker save` tarball or an OCI layout), or change the alias that maps runtime.image 'docker.io/library/python:3.11' onto it",
    );
    expect(s.trajectory.error).toBe(s.error);
    expect(s.metadata).toMatchObject({ image: 'py-test', runtime_image: 'docker.io/library/python:3.11', failure: { code: 'IMAGE_NOT_FOUND', name: 'TaskError', message: "image 'py-test': not in the image store <host>/store (import it with: rollout image import PATH --name py-test)" } });
    // Without an image of the task's, the runtime's own words stand.
    expect(toSessionResult(result({ outcome: 'task-error', reward: null, error: missing }), ctx()).error).toBe("TaskError: image 'py-test': not in the image store <host>/store (import it with: rollout image import PATH --name py-test)");
  });

  it('reads the Harbor reward from the eval output', () => {
    const s = toSessionResult(result({ reward: 0, evalDetails: { timed_out: false, output: 'x\nPOLAR_HARBOR_REWARD_TXT=0.25\nPOLAR_HARBOR_REWARD_JSON=\n' } }), ctx({ evaluator: 'harbor' }));
    expect(s.trajectory.traces[0]!.reward).toBe(0.25);
    expect(s.trajectory.traces[0]!.reward_components).toEqual({ harbor: 0.25 });
  });
});
