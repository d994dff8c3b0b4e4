import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clusterRuntimeFactory } from '../../../src/cluster/gateway-factory.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { ManualClock } from '../../../src/clock.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import type { ServiceRuntime } from '../../../src/server/service-runtime.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { createTestHandler, TestCodec } from '../../../src/testing/index.js';
import { startFakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

// Polar's /nodes on a `--redis` gateway: each live worker of the cluster is a node (from its
// heartbeat in Redis), not the gateway; /health and /rollout/status count them. A session's
// `node_id` is the worker that ran it, as /nodes names it. Polar's generation pause holds new
// LLM calls on every worker.
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
  it("names the worker that ran each session in its node_id, as /nodes lists it; a session no worker ran has none", async () => {
    service = createService({ createRuntime: clusterRuntimeFactory({ ...opts, redis: redis.url }), backends: [{ address: 'oracle' }] }, { port: 0, backendsIntervalMs: 0 });
    const url = await service.listen();
    const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
      const res = await fetch(url + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    };
    // Each worker runs one session at a time, and its sandbox's `sleep` waits on that worker's
    // own manual clock: both sessions of the task must be running, one per worker, before
    // either can end.
    const clocks = new Map<string, ManualClock>();
    const providers: MemorySandboxProvider[] = [];
    for (const nodeId of ['worker-a', 'worker-b']) {
      const clock = new ManualClock();
      clocks.set(nodeId, clock);
      workers.push(
        await ClusterWorker.start(
          { ...opts, redis: redis.url },
          {
            nodeId,
            capacity: 1,
            createRuntime: serviceRuntimeFactory({
              codec: new TestCodec(),
              sandboxes: () => {
                const p = new MemorySandboxProvider({ clock });
                providers.push(p);
                return p;
              },
              handlers: [createTestHandler({ name: 'harness', aliases: [] })],
              runtime: { sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } },
              retainEvents: 0,
            }),
          },
        ),
      );
    }
    await expect.poll(async () => (await api('GET', '/nodes')).body.length, { timeout: 30_000 }).toBe(2);
    const oracle = [
      { content: 'wait', tool_calls: [{ name: 'execute_bash', arguments: { command: 'sleep 1' } }] },
      { content: 'done', tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] },
    ];
    const task = (id: string, n: number) => ({ task_id: id, instruction: 'do it', num_samples: n, agent: { harness: 'shell', custom_shell: { command: 'agent {{INSTRUCTION}}' }, settings: { oracle } }, evaluator: { strategy: 'session_completed' } });
    expect((await api('POST', '/rollout/task/submit', task('two', 2))).status).toBe(200);
    // Both sessions asleep in their sandboxes, one on each worker.
    await expect.poll(() => [...clocks.values()].map((c) => c.pending > 0), { timeout: 30_000 }).toEqual([true, true]);
    expect(workers.map((w) => w.running)).toEqual([1, 1]);
    // A third session finds no free worker: cancelled while queued, no worker ran it.
    expect((await api('POST', '/rollout/task/submit', task('queued', 1))).status).toBe(200);
    expect((await api('DELETE', '/rollout/task/queued')).status).toBe(200);
    for (const c of clocks.values()) await c.advance(1000);

    let done: any;
    await expect.poll(async () => ((done = (await api('GET', '/rollout/task/two')).body), done.status), { timeout: 30_000 }).toBe('completed');
    expect(done.results.map((r: any) => r.status)).toEqual(['COMPLETED', 'COMPLETED']);
    const listed = (await api('GET', '/nodes')).body.map((n: any) => n.node_id).sort();
    expect(listed).toEqual(['worker-a', 'worker-b']);
    expect(done.results.map((r: any) => r.node_id).sort()).toEqual(listed);
    // The session listing says the same.
    expect((await api('GET', '/tasks/two/sessions')).body.sessions.map((r: any) => r.node_id).sort()).toEqual(listed);

    let queued: any;
    await expect.poll(async () => ((queued = (await api('GET', '/rollout/task/queued')).body), queued.status), { timeout: 30_000 }).toBe('cancelled');
    expect(queued.results).toHaveLength(1);
    expect(queued.results[0]).toMatchObject({ status: 'ERROR', node_id: null });
    await Promise.all(workers.splice(0).map((w) => w.close()));
    expect(providers.every((p) => p.live === 0)).toBe(true);
  }, 120_000);

  it('pauses LLM calls on every worker for /admin/inference/pause, a worker that joins later too, and resumes them', async () => {
    service = createService({ createRuntime: clusterRuntimeFactory({ ...opts, redis: redis.url }), backends: [{ address: 'oracle' }] }, { port: 0, backendsIntervalMs: 0 });
    const url = await service.listen();
    const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
      const res = await fetch(url + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    };
    // The workers' runtimes, to see what each applied.
    const runtimes: ServiceRuntime[] = [];
    const factory = serviceRuntimeFactory({ codec: new TestCodec(), sandboxes: () => new MemorySandboxProvider(), handlers: [createTestHandler({ name: 'harness', aliases: [] })], runtime: { sandboxDriver: 'none' }, retainEvents: 0 });
    const startWorker = async (nodeId: string): Promise<void> => {
      workers.push(
        await ClusterWorker.start({ ...opts, redis: redis.url }, {
          nodeId,
          capacity: 2,
          createRuntime: async () => {
            const rt = await factory();
            runtimes.push(rt);
            return rt;
          },
        }),
      );
    };
    await startWorker('worker-a');
    await startWorker('worker-b');
    await expect.poll(async () => (await api('GET', '/nodes')).body.length, { timeout: 30_000 }).toBe(2);

    // The answer comes once both workers said they hold new calls and none is in flight.
    const paused = await api('POST', '/admin/inference/pause?timeout_seconds=30');
    expect(paused).toEqual({ status: 200, body: { paused: true, drained: true, inflight: 0 } });
    expect(runtimes.map((r) => r.generationPaused)).toEqual([true, true]);
    // A worker that joins while paused starts paused (from the cluster's settings).
    await startWorker('worker-c');
    expect(runtimes[2]!.generationPaused).toBe(true);
    await expect.poll(async () => (await api('GET', '/nodes')).body.length, { timeout: 30_000 }).toBe(3);
    expect((await api('GET', '/admin/inference/status')).body).toEqual({ paused: true, drained: true, inflight: 0 });

    // A session submitted while paused runs once generation resumes.
    const oracle = [{ content: 'done', tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] }];
    expect((await api('POST', '/rollout/task/submit', { task_id: 'p', instruction: 'do it', agent: { harness: 'shell', custom_shell: { command: 'agent' }, settings: { oracle } } })).status).toBe(200);
    const resumed = await api('POST', '/admin/inference/resume');
    expect(resumed.body.paused).toBe(false);
    await expect.poll(() => runtimes.map((r) => r.generationPaused), { timeout: 30_000 }).toEqual([false, false, false]);
    await expect.poll(async () => (await api('GET', '/rollout/task/p')).body.status, { timeout: 30_000 }).toBe('completed');
  }, 120_000);

  it('answers the pause only once the LLM call a worker has in flight ended', async () => {
    // The engine answers after 1 s on a manual clock: its call stays in flight until the test moves it.
    const llmClock = new ManualClock();
    const llm = await startFakeLlmServer({ codec, latencyMs: 1000, clock: llmClock, maxModelLen: 1_000_000 });
    try {
      service = createService({ createRuntime: clusterRuntimeFactory({ ...opts, redis: redis.url }), backends: [{ address: llm.url }] }, { port: 0, backendsIntervalMs: 0 });
      const url = await service.listen();
      const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
        const res = await fetch(url + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
        return { status: res.status, body: await res.json() };
      };
      workers.push(
        await ClusterWorker.start({ ...opts, redis: redis.url }, {
          nodeId: 'worker-a',
          capacity: 1,
          createRuntime: serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider(), handlers: [createTestHandler({ name: 'harness', aliases: [] })], runtime: { sandboxDriver: 'none' }, retainEvents: 0 }),
        }),
      );
      await expect.poll(async () => (await api('GET', '/nodes')).body.length, { timeout: 30_000 }).toBe(1);
      expect((await api('POST', '/rollout/task/submit', { task_id: 'f', instruction: 'do it', agent: { harness: 'shell', custom_shell: { command: 'agent' } } })).status).toBe(200);
      await expect.poll(() => llm.requests, { timeout: 30_000 }).toBe(1);

      let answered = false;
      const pause = api('POST', '/admin/inference/pause?timeout_seconds=60').finally(() => (answered = true));
      // The worker acknowledged the pause with its one call still in flight: no answer yet.
      await expect.poll(async () => (await api('GET', '/admin/inference/status')).body, { timeout: 30_000 }).toEqual({ paused: true, drained: false, inflight: 1 });
      expect(answered).toBe(false);
      await llmClock.advance(1000);
      expect(await pause).toEqual({ status: 200, body: { paused: true, drained: true, inflight: 0 } });
      // Held: no new call reached the engine while paused.
      expect(llm.requests).toBe(1);
      expect((await api('POST', '/admin/inference/resume')).body.paused).toBe(false);
      expect((await api('DELETE', '/rollout/task/f')).status).toBe(200);
    } finally {
      await Promise.all(workers.splice(0).map((w) => w.close()));
      await llm.close();
    }
  }, 120_000);
});
