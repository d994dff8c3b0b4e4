import { afterEach, describe, expect, it } from 'vitest';
import type { InspectionEvent } from 'xstate';
import { createRuntime, QueueFullError, RuntimeClosedError, ValidationError, type BackendInfo, type ManagedLlmClient } from '../../../src/index.js';
import { ManualClock, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';
import { rig, task, type Rig } from './helpers.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

describe('options', () => {
  it('rejects a bad option with a ValidationError naming the field path', () => {
    let err: unknown;
    try {
      createRuntime({ stages: { init: 0 } });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues[0]!.path).toBe('stages.init');
  });

  it('rejects an unknown option', () => {
    expect(() => createRuntime({ stagez: 1 } as never)).toThrow(ValidationError);
  });

  it('rejects an llm that is not an LlmClient', () => {
    expect(() => createRuntime({ llm: {} as never })).toThrow(/llm/);
  });

  it('defaults the EVAL pool to the RUN limit and freezes the options', () => {
    r = rig({ runtime: { stages: { run: 7 } } });
    expect(r.rt.options.stages).toEqual({ init: 64, run: 7, eval: 7 });
    expect(Object.isFrozen(r.rt.options)).toBe(true);
    expect(r.rt.options.maxIterations).toBe(35);
    expect(r.rt.options.budgetMs).toBe(300_000);
  });
});

describe('submit', () => {
  it('rejects a bad instance with a ValidationError naming the field', () => {
    r = rig();
    expect(() => r!.rt.submit({ data_source: '' })).toThrow(/instance\.data_source/);
    expect(() => r!.rt.submit(task(), { max_iterations: -1 })).toThrow(/sampling\.max_iterations/);
  });

  it('uses a given id and refuses a duplicate live id', async () => {
    r = rig({ llm: { latencyMs: 100 } });
    const h = r.rt.submit(task(), {}, { id: 'job-1' });
    expect(h.id).toBe('job-1');
    expect(() => r!.rt.submit(task(), {}, { id: 'job-1' })).toThrow(ValidationError);
  });

  it('rejects with QueueFullError when maxQueued rollouts are already waiting', () => {
    r = rig({ runtime: { maxQueued: 2, stages: { init: 1 } }, sandbox: { latencyMs: 100 } });
    r.rt.submit(task());
    r.rt.submit(task());
    r.rt.submit(task());
    expect(r.rt.status().queued).toBe(2);
    expect(() => r!.rt.submit(task())).toThrow(QueueFullError);
  });

  it('admits a GRPO group whole or not at all', () => {
    r = rig({ runtime: { maxQueued: 2, stages: { init: 1 } }, sandbox: { latencyMs: 100 } });
    r.rt.submit(task());
    expect(() => r!.rt.submitGroup(task(), {}, 3)).toThrow(QueueFullError);
    expect(r.rt.status().live).toBe(1);
  });

  it('runs a GRPO group with trajectory ids 0..n-1 and results in order', async () => {
    r = rig();
    const g = r.rt.submitGroup(task(), {}, 4, { groupId: 'g' });
    await r.clock.advance(1);
    const res = await g.results;
    expect(res.map((x) => x.trajectoryId)).toEqual(['0', '1', '2', '3']);
    expect(res.every((x) => x.groupId === 'g' && x.outcome === 'completed')).toBe(true);
    expect(r.rt.list({ groupId: 'g' })).toHaveLength(4);
  });

  it('refuses new work once closing', async () => {
    r = rig();
    await r.rt.close();
    expect(() => r!.rt.submit(task())).toThrow(RuntimeClosedError);
  });
});

describe('status, get and list', () => {
  it('reports stage occupancy and waiters', async () => {
    r = rig({ runtime: { stages: { init: 1, run: 1 } }, llm: { latencyMs: 100 } });
    r.rt.submit(task());
    r.rt.submit(task());
    r.rt.submit(task());
    await r.clock.advance(1);
    const s = r.rt.status();
    expect(s.stages.run).toEqual({ active: 1, waiting: 2, limit: 1 });
    expect(s.stages.init.active).toBe(0);
    expect(s.live).toBe(3);
  });

  it('keeps finished rollouts for get and list up to retainResults', async () => {
    r = rig({ runtime: { retainResults: 2 } });
    const hs = [r.rt.submit(task()), r.rt.submit(task()), r.rt.submit(task())];
    await r.clock.advance(1);
    await Promise.all(hs.map((h) => h.result));
    expect(r.rt.get(hs[0]!.id)).toBeUndefined();
    expect(r.rt.get(hs[2]!.id)?.result?.outcome).toBe('completed');
    expect(r.rt.list({ outcome: 'completed' })).toHaveLength(2);
    expect(r.rt.status().outcomes).toEqual({ completed: 3 });
  });
});

describe('close', () => {
  it('cancels live rollouts and leaves no timer, actor or sandbox', async () => {
    r = rig({ llm: { latencyMs: 1_000 } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    await r.rt.close();
    expect((await h.result).outcome).toBe('cancelled');
    expect(r.clock.pending).toBe(0);
    expect(r.sandboxes.live).toBe(0);
    expect(r.rt.status()).toMatchObject({ state: 'closed', live: 0 });
  });

  it('drains live rollouts to their end with drain: true', async () => {
    r = rig({ llm: { latencyMs: 100 } });
    const h = r.rt.submit(task());
    const closed = r.rt.close({ drain: true });
    await r.clock.advance(1_000);
    await closed;
    expect((await h.result).outcome).toBe('completed');
  });

  it('closes the parts it created but not the ones passed in', async () => {
    const clock = new ManualClock();
    const codec = new TestCodec();
    const llm = new ScriptedPolicy({ codec, clock });
    const rt = createRuntime({ clock, codec, llm });
    await rt.close();
    expect(llm.closed).toBe(false);
  });
});

describe('fork pool counters', () => {
  it('are null with an injected provider that has no fork pools, and the provider\'s own sum when it has them', async () => {
    r = rig();
    expect(await r.rt.forkPoolStats()).toBeNull();
    const stats = { keys: 1, parked: 2, starting: 0, hits: 3, misses: 1, discarded: 0 };
    const rt = createRuntime({ codec: new TestCodec(), llm: new ScriptedPolicy({ codec: new TestCodec() }), sandboxes: { create: () => Promise.reject(new Error('unused')), close: async () => {}, forkPoolStats: async () => stats } });
    try {
      expect(await rt.forkPoolStats()).toEqual(stats);
    } finally {
      await rt.close();
    }
  });
});

describe('backends', () => {
  it('throws a clear TypeError when the LLM client is not a backend pool', () => {
    r = rig();
    expect(() => r!.rt.addBackend({ url: 'http://x', protocol: 'prorl' })).toThrow(/backend pool/);
    expect(r.rt.listBackends()).toEqual([]);
  });

  it('delegates backend management to a managed client', () => {
    const calls: string[] = [];
    const info: BackendInfo = { id: 'b1', url: 'http://x', protocol: 'prorl', state: 'healthy', inFlight: 0, served: 0, failures: 0, weightVersion: null, latencyMs: null };
    const llm: ManagedLlmClient = {
      generate: () => Promise.reject(new Error('unused')),
      addBackend: () => (calls.push('add'), info),
      drainBackend: () => (calls.push('drain'), true),
      removeBackend: () => (calls.push('remove'), true),
      listBackends: () => [info],
      setWeightVersion: (v) => void calls.push(`version:${v}`),
    };
    const rt = createRuntime({ llm, clock: new ManualClock() });
    rt.addBackend({ url: 'http://x', protocol: 'prorl' });
    rt.drainBackend('b1');
    rt.removeBackend('b1');
    rt.setWeightVersion(7);
    expect(calls).toEqual(['add', 'drain', 'remove', 'version:7']);
    expect(rt.listBackends()).toEqual([info]);
    return rt.close();
  });
});

describe('inspection', () => {
  it('passes inspect to every rollout actor', async () => {
    const seen = new Set<string>();
    const inspect = (ev: InspectionEvent) => {
      if (ev.type === '@xstate.actor') seen.add(ev.rootId);
    };
    r = rig({ runtime: { inspect } });
    const a = r.rt.submit(task());
    const b = r.rt.submit(task());
    await r.clock.advance(1);
    await Promise.all([a.result, b.result]);
    expect(seen.size).toBe(2);
  });
});
