import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { api } from '../../e2e/service/harness.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';
import { killSpawned, postRetrying, removeDir, shellInstance, startGateway, startWorker, type GatewayProcess, type WorkerProcess } from './cluster-harness.js';

const hasRedis = redisServerPath() !== null;

interface WsClient {
  hello: Promise<{ epoch: number; seq: number }>;
  events: any[];
  send(m: unknown): void;
  close(): void;
}

function connect(url: string): Promise<WsClient> {
  const ws = new WebSocket(url.replace('http', 'ws') + '/v1/events');
  const events: any[] = [];
  let helloResolve!: (h: { epoch: number; seq: number }) => void;
  const hello = new Promise<{ epoch: number; seq: number }>((r) => (helloResolve = r));
  ws.on('message', (d) => {
    const m = JSON.parse(d.toString());
    if (m.type === 'hello') helloResolve(m);
    if (m.type === 'event' || m.type === 'gap') events.push(m.type === 'event' ? m.event : m);
  });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ hello, events, send: (m) => ws.send(JSON.stringify(m)), close: () => ws.terminate() }));
    ws.once('error', reject);
  });
}

/** Two gateways and two workers on one Redis with AOF on: what crosses nodes. */
describe.skipIf(!hasRedis)('across cluster nodes (install redis-server to run)', () => {
  let redis: TestRedis;
  let a: GatewayProcess;
  let b: GatewayProcess;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    redis = await startRedis({ appendonly: true });
    const started = await Promise.all([
      startGateway(redis.url, ['--backend', 'oracle']),
      startGateway(redis.url),
      startWorker(redis.url, { capacity: 4 }),
      startWorker(redis.url, { capacity: 4 }),
    ]);
    a = started[0] as GatewayProcess;
    b = started[1] as GatewayProcess;
    workers.push(started[2] as WorkerProcess, started[3] as WorkerProcess);
  }, 600_000);

  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop(), ...workers.map((w) => w.stop())]);
    for (const w of workers) removeDir(w.stateDir);
    await killSpawned();
    await redis?.stop();
  }, 120_000);

  it('cancels through one gateway a rollout submitted through another, on the worker running it', async () => {
    const sub = await postRetrying(a.url, '/v1/rollouts', { id: 'slow-1', instance: shellInstance('slow', 'sleep 60') });
    expect(sub.status).toBe(202);
    // Gateway B never saw the submit: it looks the rollout up in Redis.
    await expect.poll(async () => (await api(b.url, 'GET', '/v1/rollouts/slow-1')).body?.state, { timeout: 120_000 }).toBe('acting');
    const c = await postRetrying(b.url, '/v1/rollouts/slow-1/cancel', {});
    expect(c.status).toBe(200);
    await expect.poll(async () => (await api(a.url, 'GET', '/v1/rollouts/slow-1')).body?.result?.outcome, { timeout: 60_000 }).toBe('cancelled');
    expect((await api(b.url, 'POST', '/v1/rollouts/slow-1/cancel', {})).status).toBe(404);
  }, 300_000);

  it('resumes a WebSocket on another gateway from the cursor it had, with no event lost or repeated', async () => {
    const first = await connect(a.url);
    const hello = await first.hello;
    first.send({ type: 'subscribe', sub: 's', rollout: 'steps-1' });
    const inst = {
      data_source: 'shell',
      instance_id: 'steps',
      prompt: 'three steps',
      eval_command: 'true',
      oracle: [1, 2, 3].map((i) => ({ tool_calls: [{ name: 'execute_bash', arguments: { command: `sleep 0.3; echo ${i}` } }] })).concat([{ tool_calls: [{ name: 'finish', arguments: {} }] }] as never),
    };
    expect((await postRetrying(a.url, '/v1/rollouts', { id: 'steps-1', instance: inst })).status).toBe(202);
    await expect.poll(() => first.events.length, { timeout: 120_000 }).toBeGreaterThanOrEqual(4);
    first.close();
    const before = first.events.slice();
    const cursor = before[before.length - 1].seq as number;

    const second = await connect(b.url);
    await second.hello;
    second.send({ type: 'subscribe', sub: 's', rollout: 'steps-1', after: cursor, epoch: hello.epoch });
    await expect.poll(() => second.events.some((e) => e.type === 'rollout.result'), { timeout: 120_000 }).toBe(true);
    second.close();
    const all = [...before, ...second.events];
    expect(all.filter((e) => e.type === 'gap')).toEqual([]);
    // One stream, one order: rseq runs 1..n without a hole or a repeat, seqs strictly increase.
    expect(all.map((e) => e.rseq)).toEqual(all.map((_, i) => i + 1));
    const seqs = all.map((e) => e.seq as number);
    expect(seqs).toEqual([...new Set(seqs)].sort((x, y) => x - y));
  }, 300_000);

  it('keeps every accepted rollout and result through a Redis restart with AOF on', async () => {
    const done = await postRetrying(a.url, '/v1/rollouts', { id: 'before-restart', instance: shellInstance('before', 'true') });
    expect(done.status).toBe(202);
    await expect.poll(async () => (await api(a.url, 'GET', '/v1/rollouts/before-restart')).body?.result?.outcome, { timeout: 120_000 }).toBe('completed');
    const ids = Array.from({ length: 6 }, (_, i) => `across-restart-${i}`);
    for (const id of ids) expect((await postRetrying(b.url, '/v1/rollouts', { id, instance: shellInstance(id, 'sleep 1') })).status).toBe(202);
    await redis.kill();
    await redis.restart();
    for (const id of ids) {
      await expect.poll(async () => (await api(a.url, 'GET', `/v1/rollouts/${id}`)).body?.result?.outcome, { timeout: 180_000, interval: 500 }).toBe('completed');
    }
    expect((await api(b.url, 'GET', '/v1/rollouts/before-restart')).body?.result?.outcome).toBe('completed');
  }, 600_000);
});
