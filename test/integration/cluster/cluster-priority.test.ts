import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bullPriority, ClusterRuntime } from '../../../src/cluster/cluster-runtime.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

// SubmitOptions.priority (Polar's dispatch_priority) through a real redis-server and BullMQ: jobs
// queued while no worker runs are taken, by a one-slot worker, higher priority first and FIFO
// within a priority — the embedded runtime's order.
const hasRedis = redisServerPath() !== null;
const codec = createQwen3Codec();

function instance(id: string): Record<string, unknown> {
  return {
    data_source: 'shell',
    instance_id: id,
    prompt: 'say hi',
    eval_command: 'true',
    oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi' } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
  };
}

describe('bullPriority', () => {
  it('maps higher-first priorities onto BullMQ\'s lower-first range, never 0 (no priority) nor past its limit', () => {
    expect(bullPriority(100)).toBeLessThan(bullPriority(50));
    expect(bullPriority(50)).toBeLessThan(bullPriority(0));
    expect(bullPriority(0)).toBeLessThan(bullPriority(-5));
    expect(bullPriority(1e12)).toBe(1);
    expect(bullPriority(-1e12)).toBe(2 ** 21 - 1);
    expect(bullPriority(Number.NaN)).toBe(bullPriority(0));
  });
});

describe.skipIf(!hasRedis)('cluster priority on a real redis-server (install redis-server to run)', () => {
  let redis: TestRedis;
  const open: { close(): Promise<void> }[] = [];
  const opts = { prefix: 'prio', heartbeatMs: 200, lockDurationMs: 2000, stalledIntervalMs: 500 };

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((o) => o.close()));
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('runs queued rollouts higher priority first, FIFO within a priority', async () => {
    const g = await ClusterRuntime.connect({ ...opts, redis: redis.url });
    open.push(g);
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    const order: string[] = [];
    const submitted: [string, number | undefined][] = [['low-a', 0], ['high', 100], ['low-b', 0], ['mid', 50], ['default', undefined], ['neg', -3], ['high-2', 100]];
    const handles = submitted.map(([id, priority]) => g.submit(instance(id), {}, { id, ...(priority === undefined ? {} : { priority }) }));
    await Promise.all(handles.map((h) => h.accepted));
    handles.forEach((h, i) => void h.result.then(() => order.push(submitted[i]![0])));
    // One slot: the worker takes the jobs one at a time, in the queue's order.
    const w = await ClusterWorker.start({ ...opts, redis: redis.url }, { capacity: 1, createRuntime: serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider(), retainEvents: 0 }) });
    open.push(w);
    const results = await Promise.all(handles.map((h) => h.result));
    expect(results.map((r) => r.outcome)).toEqual(submitted.map(() => 'completed'));
    await expect.poll(() => order.length).toBe(submitted.length);
    expect(order).toEqual(['high', 'high-2', 'mid', 'low-a', 'low-b', 'default', 'neg']);
  }, 120_000);
});
