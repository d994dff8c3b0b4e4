import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { api, watch } from '../../e2e/service/harness.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';
import { killSpawned, postRetrying, leftoverSandboxes, pidsMentioning, removeDir, shellInstance, startGateway, startWorker, type GatewayProcess, type WorkerProcess } from './cluster-harness.js';

const hasRedis = redisServerPath() !== null;
/** 300 as the issue asks; ROLLOUT_CLUSTER_ROLLOUTS lowers it on a machine too loaded to run them in time. */
const N = Number(process.env['ROLLOUT_CLUSTER_ROLLOUTS'] ?? 300);

/**
 * The scenario, as separate processes on one machine: Redis, a gateway, three workers
 * each with its own state dir and real sandboxes. A worker is SIGKILLed halfway through 300
 * rollouts and the gateway is restarted; every rollout must end with exactly one result.
 */
describe.skipIf(!hasRedis)('a cluster of a gateway and three workers (install redis-server to run)', () => {
  let redis: TestRedis;
  const workers: WorkerProcess[] = [];
  const gateways: GatewayProcess[] = [];
  const dirs: string[] = [];

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.kill9()));
    await Promise.all(gateways.map((g) => g.stop()));
    await killSpawned();
    await redis?.stop();
    for (const d of dirs) removeDir(d);
  });

  it('loses no rollout and delivers exactly one result each when a worker is killed and the gateway restarted', async () => {
    const t0 = Date.now();
    const log = (m: string): void => console.log(`[failover +${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
    // Started together: on a loaded machine each process takes long to load.
    const [first, ...nodes] = await Promise.all([
      startGateway(redis.url, ['--backend', 'oracle']),
      startWorker(redis.url, { capacity: 8 }),
      startWorker(redis.url, { capacity: 8 }),
      startWorker(redis.url, { capacity: 8 }),
    ]);
    let gw = first as GatewayProcess;
    gateways.push(gw);
    for (const w of nodes as WorkerProcess[]) {
      workers.push(w);
      dirs.push(w.stateDir);
    }
    log('cluster up');
    const ws = await watch(gw.url);

    // Five trainer calls held open on /process across the gateway restart.
    const held = Array.from({ length: 5 }, (_, i) =>
      api(gw.url, 'POST', '/process', { instance: shellInstance(`held-${i}`, 'sleep 4'), job_id: `p-${i}` }).then(
        (r) => ({ status: r.status }),
        (err: Error) => ({ status: 0, error: err.message }),
      ),
    );
    // One batch request: 202 only once every job is in Redis.
    const batch = await api(gw.url, 'POST', '/v1/batches', { instances: Array.from({ length: N }, (_, i) => shellInstance(`r-${i}`, 'sleep 0.2; echo ok')), n: 1 });
    expect(batch.status).toBe(202);
    const ids = batch.body.rollout_ids as string[];
    expect(ids).toHaveLength(N);

    log('submitted');
    // Halfway: one worker vanishes, then the gateway restarts.
    await expect.poll(() => ws.results().size, { timeout: 600_000, interval: 100 }).toBeGreaterThanOrEqual(N / 2);
    log(`halfway: ${ws.results().size} results`);
    const victim = workers[1]!;
    await victim.kill9();
    log('worker killed');
    // A replacement node on the dead one's state dir (it reaps what that left) loads meanwhile:
    // starting a Node process is the slowest step here, so it overlaps the gateway restart.
    const replacing = startWorker(redis.url, { capacity: 8, stateDir: victim.stateDir });
    replacing.catch(() => undefined); // awaited below; a failed start fails the test there
    ws.close();
    await gw.stop();
    log('gateway stopped');
    const heldAnswers = await Promise.all(held);
    // In-flight /process calls fail cleanly: a 503 or a closed connection, never a fake result.
    for (const a of heldAnswers) expect(a.status === 503 || a.status === 0 || a.status === 200).toBe(true);
    // A new gateway, started only after the old one is gone.
    const [gw2, replacement] = await Promise.all([startGateway(redis.url), replacing]);
    gw = gw2;
    log('gateway and replacement up');
    gateways.push(gw);
    workers.push(replacement);

    // The trainer retries its /process calls. A ProRL job_id is a label (as the reference's), so a
    // retry is a new rollout; the first ones, still running on their workers, end on their own.
    const retried = await Promise.all(Array.from({ length: 5 }, (_, i) => postRetrying(gw.url, '/process', { instance: shellInstance(`held-${i}`, 'sleep 4'), job_id: `p-${i}` })));
    for (const r of retried) {
      expect(r.status).toBe(200);
      expect(`${r.body.outcome} ${r.body.error ?? ''}`.trim()).toBe('completed');
    }
    const retriedIds = retried.map((r) => r.body.rollout_id as string);
    expect(new Set(retriedIds).size).toBe(5);

    log('held /process calls answered after retry');
    const results = new Map<string, any>();
    await expect
      .poll(
        async () => {
          const missing = ids.filter((id) => !results.has(id));
          const got = await Promise.all(missing.slice(0, 100).map((id) => api(gw.url, 'GET', `/v1/rollouts/${id}`)));
          got.forEach((r, i) => r.status === 200 && r.body.result && results.set(missing[i]!, r.body.result));
          return results.size;
        },
        { timeout: 600_000, interval: 250 },
      )
      .toBe(N);
    expect([...results.values()].filter((r) => r.outcome !== 'completed').map((r) => `${r.id}: ${r.outcome} ${r.error?.message}`)).toEqual([]);
    log('all results');
    // The killed node's rollouts ran again elsewhere, as a counted new attempt.
    expect([...results.values()].some((r) => r.attempts >= 2)).toBe(true);

    // Exactly one committed result per rollout: one result event each in the stream.
    const c = new Redis(redis.url);
    try {
      const entries = await c.xrange('rollout:events', '-', '+');
      const perId = new Map<string, number>();
      for (const [, f] of entries) {
        const e = JSON.parse(f[f.indexOf('e') + 1]!) as { type: string; rolloutId: string };
        if (e.type === 'rollout.result') perId.set(e.rolloutId, (perId.get(e.rolloutId) ?? 0) + 1);
      }
      for (const id of [...ids, ...retriedIds]) expect(perId.get(id), id).toBe(1);
      // And no rollout at all (the first /process calls' included) has a second result.
      expect([...perId.entries()].filter(([, n]) => n !== 1)).toEqual([]);
      expect(perId.size).toBeGreaterThanOrEqual(N + 5);
    } finally {
      c.disconnect();
    }

    // Nothing left: every node stops cleanly, no process or sandbox of any state dir remains.
    expect(await Promise.all(workers.filter((w) => w !== victim).map((w) => w.stop()))).toEqual([0, 0, 0]);
    for (const d of dirs) {
      await expect.poll(() => pidsMentioning(d)).toEqual([]);
      expect(leftoverSandboxes(d)).toEqual([]);
    }
  }, 900_000);
});
