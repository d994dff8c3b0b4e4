import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clusterRuntimeFactory } from '../../../src/cluster/gateway-factory.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

// Polar's /nodes on a `--redis` gateway: each live worker of the cluster is a node (from its
// heartbeat in Redis), not the gateway; /health and /rollout/status count them.
const hasRedis = redisServerPath() !== null;
const codec = createQwen3Codec();

describe.skipIf(!hasRedis)("Polar's /nodes on a cluster gateway (install redis-server to run)", () => {
  let redis: TestRedis;
  let service: RolloutService | null = null;
  const workers: ClusterWorker[] = [];
  const opts = { prefix: 'pnodes', heartbeatMs: 200, lockDurationMs: 2000, stalledIntervalMs: 500 };

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
    await service?.close();
    service = null;
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('lists each worker with its stage limits and health, and counts them in /health and /rollout/status', async () => {
    service = createService({ createRuntime: clusterRuntimeFactory({ ...opts, redis: redis.url }) }, { port: 0, backendsIntervalMs: 0 });
    const url = await service.listen();
    const get = async (path: string): Promise<any> => (await fetch(url + path)).json();
    // No worker yet: no node (the gateway runs no rollout itself).
    expect(await get('/nodes')).toEqual([]);
    for (const [nodeId, capacity] of [['worker-a', 2], ['worker-b', 3]] as const) {
      workers.push(await ClusterWorker.start({ ...opts, redis: redis.url }, { nodeId, capacity, createRuntime: serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider(), retainEvents: 0 }) }));
    }
    let nodes: any[] = [];
    await expect.poll(async () => (nodes = await get('/nodes')).map((n: any) => n.node_id).sort(), { timeout: 30_000 }).toEqual(['worker-a', 'worker-b']);
    const byId = Object.fromEntries(nodes.map((n: any) => [n.node_id, n]));
    for (const [id, capacity] of [['worker-a', 2], ['worker-b', 3]] as const) {
      expect(byId[id]).toMatchObject({ healthy: true, draining: false, capacity, heartbeat_interval_seconds: 0.2, gateway_url: url, dispatch_reservations: 0 });
      expect(byId[id].max_run_workers).toBeGreaterThan(0);
      expect(Object.keys(byId[id].metrics).sort()).toEqual(['init_inflight', 'init_queue_depth', 'postrun_inflight', 'postrun_queue_depth', 'ready_depth', 'run_inflight']);
      expect(Number.isNaN(Date.parse(byId[id].last_heartbeat))).toBe(false);
    }
    expect(await get('/health')).toEqual({ status: 'ok', nodes: 2 });
    expect((await get('/rollout/status')).nodes).toEqual({ total: 2, healthy: 2 });
    // A worker that leaves drops out once its heartbeat is stale.
    await workers.shift()!.close();
    await expect.poll(async () => (await get('/nodes')).map((n: any) => n.node_id), { timeout: 30_000 }).toEqual(['worker-b']);
  }, 120_000);
});
