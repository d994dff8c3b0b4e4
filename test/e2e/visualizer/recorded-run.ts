import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChatCodec } from '../../../src/llm/chat-codec.js';
import type { RolloutEventInput } from '../../../src/protocol/events.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { openRunReplay, RUN_FILES } from '../../../src/server/run-replay.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { serveVisualizer } from '../../../src/server/visualizer-assets.js';

/** One rollout of a recorded run, as a test describes it. */
export interface RecordedRollout {
  id: string;
  dataSource: string;
  groupId: string | null;
  trajectoryId: string;
  /** When it was submitted and when it ended (runtime clock, epoch ms). */
  startTs: number;
  endTs: number;
  reward: number;
  /** Its token record; by default one turn of `responseTokens` sampled ids. */
  trajectory?: RolloutResult['trajectory'];
  responseTokens?: number;
  weightVersion?: number | string | null;
}

/** A one-turn trajectory of `n` sampled tokens at one weight version. */
function simpleTrajectory(n: number, weightVersion: number | string | null): RolloutResult['trajectory'] {
  const ids = Array.from({ length: n }, (_, i) => 1000 + i);
  return {
    turns: [{ promptIds: [], outputIds: ids, logprobs: ids.map(() => -0.1), backendId: 'b0', weightVersion, finishReason: 'stop', latencyMs: 5 }],
    tokens: ids,
    lossMask: ids.map(() => 1 as const),
    logprobs: ids.map(() => -0.1),
    messages: [],
    tools: [],
    diagnostics: { drift: [] },
    minWeightVersion: weightVersion,
    maxWeightVersion: weightVersion,
  };
}

/**
 * A two-turn trajectory in the codec's real tokens: the prompt (mask 0), the first answer
 * (sampled at weight version `v0`), a tool observation (mask 0), the second answer (at `v1`).
 * `logprobs` gives the sampled tokens' logprobs in order (cycled).
 */
export function twoTurnTrajectory(codec: ChatCodec, parts: { prompt: string; answer0: string; tool: string; answer1: string }, logprobs: number[], v0: number, v1: number): RolloutResult['trajectory'] {
  const p0 = codec.encode(parts.prompt);
  const o0 = codec.encode(parts.answer0);
  const tool = codec.encode(parts.tool);
  const o1 = codec.encode(parts.answer1);
  let k = 0;
  const lp = (ids: number[]) => ids.map(() => logprobs[k++ % logprobs.length]!);
  const lp0 = lp(o0);
  const lp1 = lp(o1);
  const p1 = [...p0, ...o0, ...tool];
  return {
    turns: [
      { promptIds: p0, outputIds: o0, logprobs: lp0, backendId: 'b0', weightVersion: v0, finishReason: 'stop', latencyMs: 5 },
      { promptIds: p1, outputIds: o1, logprobs: lp1, backendId: 'b1', weightVersion: v1, finishReason: 'stop', latencyMs: 5 },
    ],
    tokens: [...p1, ...o1],
    lossMask: [...p0.map(() => 0 as const), ...o0.map(() => 1 as const), ...tool.map(() => 0 as const), ...o1.map(() => 1 as const)],
    logprobs: [...p0.map(() => 0), ...lp0, ...tool.map(() => 0), ...lp1],
    messages: [],
    tools: [],
    diagnostics: { drift: [] },
    minWeightVersion: v0,
    maxWeightVersion: v1,
  };
}

/**
 * Writes a finished run's output directory as `rollout run` does (trajectories.jsonl and
 * events.jsonl: submitted, one LLM call, done, result per rollout) and serves it with the real
 * service over {@link openRunReplay} — what `rollout view DIR` runs — with the visualizer.
 */
export async function serveRecordedRun(rollouts: RecordedRollout[]): Promise<{ url: string; dir: string; close(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'viz-run-'));
  const results: RolloutResult[] = [];
  const events: Array<RolloutEventInput & { ts: number }> = [];
  for (const r of rollouts) {
    const trajectory = r.trajectory ?? simpleTrajectory(r.responseTokens ?? 10, r.weightVersion ?? null);
    const sampled = trajectory.turns.reduce((n, t) => n + t.outputIds.length, 0);
    results.push({
      id: r.id, instanceId: `inst-${r.id}`, trajectoryId: r.trajectoryId, groupId: r.groupId, dataSource: r.dataSource, outcome: 'completed', finish: 'finish_tool',
      reward: r.reward, resolved: r.reward > 0, evalDetails: null, error: null, attempts: 1, trajectory,
      timing: { queueMs: 0, initMs: 0, runMs: r.endTs - r.startTs, evalMs: 0, countedMs: r.endTs - r.startTs, wallMs: r.endTs - r.startTs, timeoutTriggered: false },
    });
    events.push({ type: 'rollout.submitted', rolloutId: r.id, ts: r.startTs, instanceId: `inst-${r.id}`, trajectoryId: r.trajectoryId, groupId: r.groupId, dataSource: r.dataSource, attempt: 1 });
    events.push({ type: 'llm.end', rolloutId: r.id, ts: r.endTs - 2, turn: 0, backendId: 'b0', promptTokens: 10, outputTokens: sampled, latencyMs: 5, finishReason: 'stop', content: '', toolCalls: [] });
    events.push({ type: 'rollout.state', rolloutId: r.id, ts: r.endTs, state: 'done', prev: 'evaluating', turn: trajectory.turns.length });
    events.push({
      type: 'rollout.result', rolloutId: r.id, ts: r.endTs, outcome: 'completed', finish: 'finish_tool', reward: r.reward, resolved: r.reward > 0, error: null,
      timing: results.at(-1)!.timing, tokens: trajectory.tokens.length, turns: trajectory.turns.length,
    });
  }
  events.sort((a, b) => a.ts - b.ts);
  const rseq = new Map<string, number>();
  const numbered = events.map((e, i) => {
    const n = (rseq.get(e.rolloutId) ?? 0) + 1;
    rseq.set(e.rolloutId, n);
    return { ...e, seq: i + 1, rseq: n };
  });
  await writeFile(join(dir, RUN_FILES.trajectories), results.map((r) => JSON.stringify(r)).join('\n') + '\n');
  await writeFile(join(dir, RUN_FILES.events), numbered.map((e) => JSON.stringify(e)).join('\n') + '\n');
  const replay = await openRunReplay(dir);
  const service: RolloutService = createService({ createRuntime: () => Promise.resolve(replay), visualizer: serveVisualizer }, { host: '127.0.0.1', port: 0 });
  let url: string;
  try {
    url = await service.listen();
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    url,
    dir,
    async close() {
      await service.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
