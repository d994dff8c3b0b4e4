import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clusterRuntimeFactory } from '../../../src/cluster/gateway-factory.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { TestCodec } from '../../../src/testing/index.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

// Polar's runtime.image on a `--redis` gateway, which has no image store to check at submit:
// the task is admitted, the alias is applied at the gateway, and the worker's real sandbox
// provider (its own, empty, image store) fails each session at INIT with the task error
// IMAGE_NOT_FOUND — never retried, never run on the worker's host root — which the session's
// `error` reports naming runtime.image, the store's name, the node and the import command.
const hasRedis = redisServerPath() !== null;

describe.skipIf(!hasRedis)("Polar's runtime.image on a cluster gateway (install redis-server to run)", () => {
  let redis: TestRedis;
  let root: string;
  let service: RolloutService | null = null;
  let worker: ClusterWorker | null = null;
  const opts = { prefix: 'pimage', heartbeatMs: 200, lockDurationMs: 2000, stalledIntervalMs: 500 };

  beforeAll(async () => {
    redis = await startRedis();
    root = mkdtempSync(join(tmpdir(), 'cluster-polar-image-'));
  });
  afterEach(async () => {
    await worker?.close();
    worker = null;
    await service?.close();
    service = null;
  });
  afterAll(async () => {
    await redis?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it("fails each session whose image the worker's store lacks with IMAGE_NOT_FOUND naming runtime.image and the import command", async () => {
    service = createService(
      { createRuntime: clusterRuntimeFactory({ ...opts, redis: redis.url }), backends: [{ address: 'oracle' }] },
      { port: 0, backendsIntervalMs: 0, imageAliases: { 'python:3.11': 'py-test' } },
    );
    const url = await service.listen();
    const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
      const res = await fetch(url + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    };
    worker = await ClusterWorker.start(
      { ...opts, redis: redis.url },
      {
        nodeId: 'worker-a',
        capacity: 2,
        createRuntime: serviceRuntimeFactory({
          codec: new TestCodec(),
          // The real provider and harness handler; its image store is empty.
          sandboxes: () => createSandboxProvider({ stateDir: join(root, 'state'), imageStore: join(root, 'store'), hosts: 1 }),
          runtime: { retries: { max: 2, backoffMs: 0, backoffMaxMs: 0 } },
          retainEvents: 0,
        }),
      },
    );
    await expect.poll(async () => (await api('GET', '/nodes')).body.length, { timeout: 30_000 }).toBe(1);
    const task = { task_id: 'imgless', instruction: 'x', num_samples: 2, runtime: { image: 'docker.io/library/python:3.11' }, agent: { harness: 'shell', custom_shell: { command: 'true' } }, evaluator: { strategy: 'session_completed' } };
    // The gateway has no store: admitted.
    expect(await api('POST', '/rollout/task/submit', task)).toEqual({ status: 200, body: { task_id: 'imgless', status: 'running' } });
    let st: any;
    await expect.poll(async () => ((st = (await api('GET', '/rollout/task/imgless')).body), st.status), { timeout: 60_000 }).toBe('completed');
    expect(st.results).toHaveLength(2);
    for (const s of st.results) {
      expect(s.status).toBe('ERROR');
      expect(s.node_id).toBe('worker-a');
      expect(s.error).toBe(
        "TaskError IMAGE_NOT_FOUND: runtime.image 'docker.io/library/python:3.11' (image-store name 'py-test') is not in the image store of node worker-a; on that node, import it with `rollout image import PATH --name py-test` (PATH a `docker save` tarball or an OCI layout), or change the alias that maps runtime.image 'docker.io/library/python:3.11' onto it",
      );
      // A task error: tried once, whatever the retry budget; nothing of it trainable.
      expect(s.metadata).toMatchObject({ outcome: 'task-error', attempts: 1, image: 'py-test', runtime_image: 'docker.io/library/python:3.11', failure: { name: 'TaskError', code: 'IMAGE_NOT_FOUND', stage: 'init', retryable: false } });
      expect(s.trajectory.traces.every((t: any) => t.loss_mask.every((m: number) => m === 0))).toBe(true);
    }
  }, 120_000);
});
