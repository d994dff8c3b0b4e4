import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { BackendLoadBoard } from '../../../src/cluster/backend-load-board.js';
import { ClusterKeys } from '../../../src/cluster/cluster-keys.js';
import { ClusterRuntime } from '../../../src/cluster/cluster-runtime.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { redisConnection } from '../../../src/cluster/redis-connection.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import type { Engine, EngineResult } from '../../../src/llm/llm-http-server.js';
import { startFakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { ROOT } from '../../e2e/service/harness.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

const hasRedis = redisServerPath() !== null;
const codec = createQwen3Codec();
const INTERVAL = 50;
const TTL = 600;

/** An engine that holds every call until released, counting what it received. */
function gate() {
  const held: (() => void)[] = [];
  const engine: Engine = {
    generate: () => new Promise<EngineResult>((resolve) => held.push(() => resolve({ outputIds: [11, 151645], logprobs: [-0.5, -0.1], finishReason: 'stop' }))),
  };
  return { engine, held, releaseAll: () => held.splice(0).forEach((r) => r()) };
}

function request(i: number): GenerateRequest {
  return { rolloutId: `r${i}`, instance: { data_source: 'test', instance_id: 'i' }, turn: 0, promptIds: [151644, 872, 198], maxTokens: 4, sampling: {}, signal: new AbortController().signal };
}

describe.skipIf(!hasRedis)('backend load shared between workers through Redis (install redis-server to run)', () => {
  let redis: TestRedis;
  let n = 0;
  const cleanups: (() => Promise<unknown> | unknown)[] = [];
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    n++;
  });
  afterAll(async () => {
    await redis?.stop();
  });

  function board(nodeId: string): BackendLoadBoard {
    const conn = redisConnection(redis.url);
    const b = new BackendLoadBoard({ redis: conn, keys: new ClusterKeys(`sl${n}`), nodeId, intervalMs: INTERVAL, ttlMs: TTL });
    cleanups.push(() => conn.quit());
    cleanups.push(() => b.close());
    return b;
  }
  async function backend(g: ReturnType<typeof gate>): Promise<string> {
    const s = await startFakeLlmServer({ policy: g.engine });
    cleanups.push(() => s.close());
    cleanups.push(() => g.releaseAll());
    return s.url;
  }

  it("sends a worker's calls to the backend another worker does not already load", async () => {
    const gx = gate();
    const gy = gate();
    const [x, y] = [await backend(gx), await backend(gy)];
    // Worker A drives backend x hard (its pool knows only x); worker B knows x (first) and y.
    const a = board('a');
    const poolA = new BackendPool({ probeIntervalMs: 0 }, { sharedLoad: a });
    cleanups.push(() => poolA.close());
    poolA.addBackend({ id: 'x', url: x, protocol: 'prorl' });
    const b = board('b');
    const poolB = new BackendPool({ probeIntervalMs: 0 }, { sharedLoad: b });
    cleanups.push(() => poolB.close());
    poolB.addBackend({ id: 'x', url: x, protocol: 'prorl' });
    poolB.addBackend({ id: 'y', url: y, protocol: 'prorl' });
    await a.start();
    await b.start();

    const callsA = Array.from({ length: 6 }, (_, i) => poolA.generate(request(i)));
    await vi.waitFor(() => expect(gx.held).toHaveLength(6));
    await expect.poll(() => b.remote('x'), { timeout: 5000, interval: 20 }).toBe(6);
    expect(a.remote('x')).toBe(0);

    // Locally B has nothing in flight, so without the shared load its first pick is x (registration order).
    const callsB = Array.from({ length: 3 }, (_, i) => poolB.generate(request(10 + i)));
    await vi.waitFor(() => expect(gy.held).toHaveLength(3));
    expect(gx.held).toHaveLength(6);
    // And A learns B's load on y in turn.
    await expect.poll(() => a.remote('y'), { timeout: 5000, interval: 20 }).toBe(3);

    gx.releaseAll();
    gy.releaseAll();
    expect((await Promise.all(callsB)).map((r) => r.backendId)).toEqual(['y', 'y', 'y']);
    await Promise.all(callsA);
    // Finished calls leave the board too.
    await expect.poll(() => b.remote('x'), { timeout: 5000, interval: 20 }).toBe(0);
  });

  it('wires the shared load through ClusterWorker: a second worker avoids the backend the first one fills', async () => {
    const gx = gate();
    const gy = gate();
    const [x, y] = [await backend(gx), await backend(gy)];
    const opts = { redis: redis.url, prefix: `sl${n}`, heartbeatMs: 200, loadShareMs: INTERVAL, loadTtlMs: TTL };
    const g = await ClusterRuntime.connect(opts);
    cleanups.push(() => g.close());
    const worker = async (): Promise<ClusterWorker> => {
      const w = await ClusterWorker.start(opts, {
        capacity: 4,
        createRuntime: ({ sharedLoad }) => serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider(), retainEvents: 0, pool: { probeIntervalMs: 0 }, sharedLoad })(),
      });
      cleanups.push(() => w.close());
      return w;
    };
    const instance = (i: number): Record<string, unknown> => ({ data_source: 'shell', instance_id: `w${i}`, prompt: 'go', eval_command: 'true' });
    // Worker A alone, with only x registered: its four rollouts all wait on x.
    g.addBackend({ id: 'x', url: x, protocol: 'prorl' });
    await g.flushed();
    await worker();
    const first = Array.from({ length: 4 }, (_, i) => g.submit(instance(i)));
    await vi.waitFor(() => expect(gx.held).toHaveLength(4), { timeout: 20_000 });
    // Then y, and worker B (A is full, so B takes what comes next). B's heap has x first.
    g.addBackend({ id: 'y', url: y, protocol: 'prorl' });
    await g.flushed();
    const c = new Redis(redis.url);
    cleanups.push(() => c.quit());
    await expect.poll(async () => Object.values(await c.hgetall(`sl${n}:load`)).join(), { timeout: 5000, interval: 20 }).toContain('"x":4');
    await worker();
    const second = Array.from({ length: 2 }, (_, i) => g.submit(instance(10 + i)));
    await vi.waitFor(() => expect(gy.held).toHaveLength(2), { timeout: 20_000 });
    expect(gx.held).toHaveLength(4);
    gx.releaseAll();
    gy.releaseAll();
    const results = await Promise.all([...first, ...second].map((h) => h.result));
    expect(results.map((r) => r.outcome === 'infra-error')).not.toContain(true);
  });

  it('piles onto the first backend without the shared load (the control case)', async () => {
    const gx = gate();
    const gy = gate();
    const [x, y] = [await backend(gx), await backend(gy)];
    const lone = new BackendPool({ probeIntervalMs: 0 });
    cleanups.push(() => lone.close());
    lone.addBackend({ id: 'x', url: x, protocol: 'prorl' });
    lone.addBackend({ id: 'y', url: y, protocol: 'prorl' });
    const call = lone.generate(request(0));
    await vi.waitFor(() => expect(gx.held).toHaveLength(1));
    gx.releaseAll();
    expect((await call).backendId).toBe('x');
  });

  it("forgets a SIGKILLed worker's load within its TTL and removes its entry", async () => {
    const b = board('b');
    await b.start();
    const prefix = `sl${n}`;
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/integration/cluster/fixtures/load-node.ts'), redis.url, prefix, 'doomed', 'x', '7', String(INTERVAL), String(TTL)], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((r) => child.once('exit', r));
    cleanups.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    let err = '';
    child.stderr!.on('data', (d) => (err += d));
    await new Promise<void>((res, rej) => {
      child.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && res());
      child.once('exit', (code) => rej(new Error(`load node exited ${code}: ${err}`)));
    });
    await expect.poll(() => b.remote('x'), { timeout: 5000, interval: 20 }).toBe(7);

    child.kill('SIGKILL');
    await exited;
    // Gone after at most the TTL plus one tick of the reader (and scheduling slack on a shared machine).
    await expect.poll(() => b.remote('x'), { timeout: TTL + 2 * INTERVAL + 2000, interval: 20 }).toBe(0);
    const c = new Redis(redis.url);
    try {
      expect(await c.hexists(`${prefix}:load`, 'doomed')).toBe(0);
    } finally {
      c.disconnect();
    }
  });
});
