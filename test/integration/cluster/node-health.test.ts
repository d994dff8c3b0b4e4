import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ClusterRuntime } from '../../../src/cluster/cluster-runtime.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';
import { testDriver } from '../sandbox/helpers.js';

/**
 * A worker whose sandboxes start failing at run time (its state dir became unreachable for the
 * sandbox uid) stops taking jobs, hands the failed job back so another node runs it, and takes
 * jobs again once a probe sandbox starts (#28 §4). Real redis-server, real sandboxes, as root
 * (the state-dir fault exists only for a sandbox uid other than this process's).
 */
const hasRedis = redisServerPath() !== null;
const isRoot = process.getuid?.() === 0;
const codec = createQwen3Codec();

function instance(id: string): Record<string, unknown> {
  return {
    data_source: 'shell',
    instance_id: id,
    prompt: 'say hi',
    eval_command: 'test "$(cat hi.txt)" = hi',
    oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi > hi.txt' } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
  };
}

describe.runIf(hasRedis && isRoot)('a worker whose sandboxes fail routes jobs around itself (install redis-server to run)', () => {
  let redis: TestRedis;
  const open: { close(): Promise<void> }[] = [];
  const dirs: string[] = [];
  const opts = { heartbeatMs: 200, lockDurationMs: 3000, stalledIntervalMs: 1000, prefix: 'health' };

  /** A node with a real sandbox provider under `<outer>/state`; `outer` can be locked (0700) later. */
  async function node(name: string): Promise<{ w: ClusterWorker; outer: string; logs: string[] }> {
    const outer = mkdtempSync(join(tmpdir(), `health-${name}-`));
    chmodSync(outer, 0o711);
    dirs.push(outer);
    let provider: SandboxProvider | null = null;
    const logs: string[] = [];
    const w = await ClusterWorker.start(
      { ...opts, redis: redis.url },
      {
        capacity: 2,
        nodeId: name,
        log: (l) => logs.push(l),
        healthProbeMs: 200,
        probeSandbox: async () => {
          const sb = await provider!.create({}, { rolloutId: `probe-${name}` });
          await sb.close();
        },
        createRuntime: serviceRuntimeFactory({
          codec,
          sandboxes: () => (provider = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir: join(outer, 'state') })),
          runtime: { retries: { max: 0 } } as never,
          retainEvents: 0,
        }),
      },
    );
    open.push(w);
    return { w, outer, logs };
  }

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((o) => o.close()));
    for (const d of dirs.splice(0)) {
      chmodSync(d, 0o711);
      rmSync(d, { recursive: true, force: true });
    }
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('stops taking jobs, hands the failed job to a healthy node, and takes jobs again once a probe sandbox starts', async () => {
    const g = await ClusterRuntime.connect({ ...opts, redis: redis.url });
    open.push(g);
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    const sick = await node('sick');
    // Healthy at start-up; then the sandbox uid loses its way to the state dir.
    chmodSync(sick.outer, 0o700);
    const first = g.submit(instance('first'));
    await expect.poll(() => sick.w.unhealthy, { timeout: 60_000 }).toMatch(/STATE_DIR_UNREACHABLE/);
    // Handed back, not failed: no result while the only node is unhealthy.
    expect(g.get(first.id)?.result ?? null).toBeNull();
    const second = g.submit(instance('second'));
    const well = await node('well');
    const [r1, r2] = await Promise.all([first.result, second.result]);
    expect([r1.outcome, r1.reward, r2.outcome, r2.reward]).toEqual(['completed', 1, 'completed', 1]);
    // The sick node said so in its heartbeat, and ran neither.
    const hb = JSON.parse((await redisHget(redis.url, 'health:nodes', 'sick')) ?? '{}');
    expect(hb.unhealthy).toMatch(/STATE_DIR_UNREACHABLE/);
    // It ran no rollout to the end; what it tried, it handed back (one try, maybe a second fetched
    // before its pause took effect — that one is handed back untried).
    expect(hb.outcomes?.completed ?? 0).toBe(0);
    expect(hb.outcomes?.['infra-error'] ?? 0).toBe(1);
    expect(sick.logs.filter((l) => /probe sandbox failed/.test(l))).toHaveLength(1);
    // Repaired: the next probe passes and the node takes jobs again (the healthy one leaves).
    chmodSync(sick.outer, 0o711);
    await expect.poll(() => sick.w.unhealthy, { timeout: 60_000 }).toBeNull();
    await well.w.close();
    const third = await g.submit(instance('third')).result;
    expect([third.outcome, third.reward]).toEqual(['completed', 1]);
    expect(sick.logs.some((l) => /healthy again/.test(l))).toBe(true);
  });

  it('a sandbox fault that is the job\'s own leaves the node healthy and commits the result', async () => {
    const g = await ClusterRuntime.connect({ ...opts, redis: redis.url });
    open.push(g);
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    const n = await node('solo');
    // An image the store does not have is the task's fault (not a sandbox fault): committed at once.
    const r = await g.submit({ ...instance('bad-image'), image: 'no-such-image:1' }).result;
    expect(r.outcome).not.toBe('completed');
    expect(n.w.unhealthy).toBeNull();
    const ok = await g.submit(instance('after')).result;
    expect(ok.outcome).toBe('completed');
  });
});

/** HGET over a short-lived connection (ioredis is a dependency already). */
async function redisHget(url: string, key: string, field: string): Promise<string | null> {
  const { Redis } = await import('ioredis');
  const c = new Redis(url);
  try {
    return await c.hget(key, field);
  } finally {
    c.disconnect();
  }
}
