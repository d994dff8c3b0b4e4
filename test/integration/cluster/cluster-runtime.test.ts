import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { ClusterKeys } from '../../../src/cluster/cluster-keys.js';
import { ClusterRuntime } from '../../../src/cluster/cluster-runtime.js';
import { ClusterWorker } from '../../../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import type { RolloutEvent } from '../../../src/protocol/events.js';
import type { ServiceRuntime } from '../../../src/server/service-runtime.js';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

const hasRedis = redisServerPath() !== null;
const codec = createQwen3Codec();

function instance(id: string, command = 'echo hi'): Record<string, unknown> {
  return {
    data_source: 'shell',
    instance_id: id,
    prompt: 'say hi',
    eval_command: 'true',
    oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
  };
}

describe.skipIf(!hasRedis)('ClusterRuntime + ClusterWorker in one process (install redis-server to run)', () => {
  let redis: TestRedis;
  let prefix = 0;
  const open: { close(): Promise<void> }[] = [];
  const opts = (): { redis: string; prefix: string; heartbeatMs: number; lockDurationMs: number; stalledIntervalMs: number } => ({
    redis: redis.url,
    prefix: `t${prefix}`,
    heartbeatMs: 200,
    lockDurationMs: 2000,
    stalledIntervalMs: 500,
  });

  async function gateway(): Promise<ClusterRuntime> {
    const g = await ClusterRuntime.connect(opts());
    open.push(g);
    return g;
  }
  /** Starts a worker; `runtimes`, when given, gets the runtime it makes (to see what it applied). */
  async function worker(capacity = 4, runtimes?: ServiceRuntime[]): Promise<ClusterWorker> {
    const factory = serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider(), retainEvents: 0 });
    const w = await ClusterWorker.start(opts(), {
      capacity,
      createRuntime: runtimes
        ? async () => {
            const rt = await factory();
            runtimes.push(rt);
            return rt;
          }
        : factory,
    });
    open.push(w);
    return w;
  }

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((o) => o.close()));
    prefix++;
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('runs a submitted rollout on a worker and returns its result to the gateway', async () => {
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    await worker();
    const h = g.submit(instance('a'));
    const r = await h.result;
    expect(r.outcome).toBe('completed');
    expect(r.id).toBe(h.id);
    expect(r.attempts).toBe(1);
    expect(g.get(h.id)?.result?.outcome).toBe('completed');
  });

  it('answers a resubmit of the same id with the one result (idempotent by id)', async () => {
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    await worker();
    const a = g.submit(instance('a'), {}, { id: 'same' });
    const b = g.submit(instance('a'), {}, { id: 'same' });
    const [ra, rb] = await Promise.all([a.result, b.result]);
    expect(ra).toBe(rb);
    const g2 = await gateway();
    const c = g2.submit(instance('a'), {}, { id: 'same' });
    expect((await c.result).timing).toEqual(ra.timing);
  });

  it('streams events with global seqs that a second gateway replays from a cursor', async () => {
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    await worker();
    const ac = new AbortController();
    const seen: RolloutEvent[] = [];
    const done = (async () => {
      for await (const e of g.events({ signal: ac.signal })) {
        if (e.type === 'gap') continue;
        seen.push(e);
        if (e.type === 'rollout.result') ac.abort();
      }
    })();
    const h = g.submit(instance('ev'));
    await h.result;
    await done;
    const seqs = seen.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    expect(seen.map((e) => e.rseq)).toEqual(seen.map((_, i) => i + 1));
    // Another gateway, resuming after the second event, gets exactly the rest.
    const g2 = await gateway();
    const ac2 = new AbortController();
    const replay: RolloutEvent[] = [];
    for await (const e of g2.events({ after: seen[1]!.seq, rolloutId: h.id, signal: ac2.signal })) {
      if (e.type === 'gap') continue;
      replay.push(e);
      if (e.type === 'rollout.result') ac2.abort();
    }
    expect(replay.map((e) => e.seq)).toEqual(seqs.slice(2));
  });

  it('cancels a running rollout on the worker that holds it', async () => {
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    const w = await worker();
    const h = g.submit(instance('slow', 'sleep 30'));
    await expect.poll(() => w.running).toBe(1);
    expect(await g.cancel(h.id, 'stop it')).toBe(true);
    const r = await h.result;
    expect(r.outcome).toBe('cancelled');
    expect(await g.cancel(h.id)).toBe(false);
  });

  it('cancels a rollout still waiting in the queue without any worker', async () => {
    const g = await gateway();
    const h = g.submit(instance('queued'));
    await (h as { accepted: Promise<void> }).accepted;
    expect(await g.cancel(h.id)).toBe(true);
    expect((await h.result).outcome).toBe('cancelled');
  });

  it('brings a weight version and a backend registered on the gateway to every worker', async () => {
    const g = await gateway();
    const workers = [await worker(2), await worker(2)];
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    g.setWeightVersion(7);
    await g.flushed();
    const hs = Array.from({ length: 6 }, (_, i) => g.submit(instance(`wv-${i}`, 'sleep 0.2')));
    const rs = await Promise.all(hs.map((h) => h.result));
    expect(rs.map((r) => r.outcome)).toEqual(rs.map(() => 'completed'));
    expect(new Set(rs.flatMap((r) => r.trajectory.turns.map((t) => t.weightVersion)))).toEqual(new Set([7]));
    expect(workers.every((w) => w.running === 0)).toBe(true);
  });

  it('a worker that joins later stamps each backend with the version the gateway lists for it, one set for that backend after a cluster-wide one too', async () => {
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    g.setWeightVersion(7);
    g.setWeightVersion(8, 'oracle');
    await g.flushed();
    const w = await worker();
    const versions = (bs: readonly { id: string; weightVersion: string | number | null }[]): Record<string, string | number | null> => Object.fromEntries(bs.map((b) => [b.id, b.weightVersion]));
    expect(versions(g.listBackends())).toEqual({ oracle: 8 });
    expect(versions(w.observed.listBackends?.() ?? [])).toEqual({ oracle: 8 });
    const r = await g.submit(instance('late-version')).result;
    expect(r.outcome).toBe('completed');
    expect(new Set(r.trajectory.turns.map((t) => t.weightVersion))).toEqual(new Set([8]));
  });

  it('holds new jobs on every worker while paused and runs them after resume', async () => {
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    const w = await worker();
    expect(w.paused).toBe(false);
    await g.pause();
    // The notice reached the worker: its queue consumer is paused before the job exists.
    await expect.poll(() => w.paused, { timeout: 30_000 }).toBe(true);
    const h = g.submit(instance('paused'));
    await (h as { accepted: Promise<void> }).accepted;
    expect(g.get(h.id)?.state).toBe('queued');
    expect(w.running).toBe(0);
    await g.resume();
    await expect.poll(() => w.paused, { timeout: 30_000 }).toBe(false);
    expect((await h.result).outcome).toBe('completed');
  });

  it('a resume whose notice overtakes a job\'s read of the pause setting does not leave the node paused: the job runs', async () => {
    // The race: a job is fetched while the cluster pause is set but its notice is still on its
    // way; its settings read goes out, the gateway resumes, and the resume notice (on the
    // subscriber connection) is handled before the read's answer, which still says paused.
    // Pausing on that answer used to outlast the resume for good: the job was handed back and no
    // node took it again. Here the read's answer is held until the notice has been handled.
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    const w = await worker();
    const node = w as unknown as { redis: Redis; onControl(raw: string): void };
    let resumeHandled!: () => void;
    const handled = new Promise<void>((r) => (resumeHandled = r));
    const onControl = node.onControl.bind(w);
    node.onControl = (raw) => {
      onControl(raw);
      if ((JSON.parse(raw) as { type: string }).type === 'resume') resumeHandled();
    };
    let readOut!: () => void;
    const reading = new Promise<void>((r) => (readOut = r));
    const hget = node.redis.hget.bind(node.redis) as (key: string, field: string) => Promise<string | null>;
    let held = false;
    (node.redis as unknown as { hget: (key: string, field: string) => Promise<string | null> }).hget = async (key, field) => {
      const v = await hget(key, field);
      if (field === 'paused' && !held) {
        held = true;
        readOut();
        await handled;
      }
      return v;
    };
    // The pause as the settings have it, its notice not yet sent.
    await node.redis.hset(new ClusterKeys(opts().prefix).settings, 'paused', '1');
    const h = g.submit(instance('overtaken'));
    await reading;
    await g.resume();
    await handled;
    expect((await h.result).outcome).toBe('completed');
    expect(w.paused).toBe(false);
  }, 30_000);

  /**
   * Starts a worker whose start-up read of the settings is held until it has handled a control
   * notice of type `notice`; `whileHeld` runs (and sends that notice) once the read is out.
   */
  async function workerWithOvertakenStartRead(notice: 'resume' | 'generation', whileHeld: () => Promise<void> | void, w: () => Promise<ClusterWorker> = worker): Promise<ClusterWorker> {
    const proto = ClusterWorker.prototype as unknown as { onControl(raw: string): void };
    const redisProto = Redis.prototype as unknown as { hgetall(key: string): Promise<Record<string, string>> };
    const { onControl } = proto;
    const { hgetall } = redisProto;
    let noticeHandled!: () => void;
    const handled = new Promise<void>((r) => (noticeHandled = r));
    let readOut!: () => void;
    const reading = new Promise<void>((r) => (readOut = r));
    const settingsKey = new ClusterKeys(opts().prefix).settings;
    let held = false;
    proto.onControl = function (this: ClusterWorker, raw: string) {
      onControl.call(this, raw);
      if ((JSON.parse(raw) as { type: string }).type === notice) noticeHandled();
    };
    redisProto.hgetall = async function (this: Redis, key: string) {
      const v = await hgetall.call(this, key);
      if (key === settingsKey && !held) {
        held = true;
        readOut();
        await handled;
      }
      return v;
    };
    try {
      const starting = w();
      await reading;
      await whileHeld();
      return await starting;
    } finally {
      proto.onControl = onControl;
      // ioredis defines its commands on a prototype further up: take the shadow away.
      delete (redisProto as { hgetall?: unknown }).hgetall;
    }
  }

  it('a worker whose start-up read of the settings a resume overtakes starts taking jobs', async () => {
    // The same race at start: the worker subscribes, then reads the settings (paused), and the
    // resume notice is handled before that read's answer. Applying the answer paused the new
    // node until the next resume.
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    await g.pause();
    await workerWithOvertakenStartRead('resume', () => g.resume());
    expect((await g.submit(instance('started')).result).outcome).toBe('completed');
  }, 30_000);

  it('a worker whose start-up read of the settings a generation resume overtakes acknowledges that resume and its LLM calls go', async () => {
    // The generation pause the same way: the read says paused (the first epoch), the resume's
    // notice (a second epoch) is handled first. Applying the answer held the node's LLM calls
    // under the stale epoch, which the gateway's drain never saw acknowledged.
    const g = await gateway();
    g.addBackend({ id: 'oracle', url: 'oracle:', protocol: 'prorl' });
    g.pauseGeneration();
    // The pause is in the settings (its send is not awaited) before the worker reads them.
    const reader = new Redis(redis.url);
    try {
      await expect.poll(async () => (JSON.parse((await reader.hget(new ClusterKeys(opts().prefix).settings, 'generation')) ?? '{}') as { paused?: boolean }).paused).toBe(true);
    } finally {
      reader.disconnect();
    }
    const runtimes: ServiceRuntime[] = [];
    await workerWithOvertakenStartRead('generation', () => g.resumeGeneration(), () => worker(4, runtimes));
    expect(runtimes.map((r) => r.generationPaused)).toEqual([false]);
    await expect.poll(() => g.generationDrain().acked, { timeout: 10_000 }).toBe(true);
    expect((await g.submit(instance('generation-started')).result).outcome).toBe('completed');
  }, 30_000);

  it('refuses a bad instance with a ValidationError naming the field, before anything reaches Redis', async () => {
    const g = await gateway();
    expect(() => g.submit({ data_source: 7, instance_id: 'x' })).toThrow(/invalid instance/);
    try {
      g.submit({ data_source: 7 });
    } catch (err) {
      expect((err as { issues: { path: string }[] }).issues[0]!.path).toBe('instance.data_source');
    }
  });
});

