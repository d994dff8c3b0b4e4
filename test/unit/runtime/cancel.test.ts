import { afterEach, describe, expect, it } from 'vitest';
import { MemorySandboxProvider } from '../../../src/testing/index.js';
import { createRuntime, type SandboxProvider } from '../../../src/index.js';
import { createTestHandler, ManualClock, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';
import { rig, task, type Rig } from './helpers.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

/**
 * Puts rollout B in `state` (rollout A occupies a slot when B must wait for one) and returns
 * both handles.
 */
async function placeIn(state: string) {
  const waitFor: Record<string, { stages?: { init?: number; run?: number; eval?: number }; lat: Partial<Record<'create' | 'bash' | 'llm', number>>; evalMs?: number }> = {
    queued: { stages: { init: 1 }, lat: { create: 1_000 } },
    initializing: { lat: { create: 1_000 } },
    waitingRun: { stages: { run: 1 }, lat: { llm: 1_000 } },
    llmCalling: { lat: { llm: 1_000 } },
    acting: { lat: { bash: 1_000 } },
    waitingEval: { stages: { eval: 1 }, lat: {}, evalMs: 1_000 },
    evaluating: { lat: {}, evalMs: 1_000 },
  };
  const w = waitFor[state]!;
  r = rig({
    runtime: { stages: { init: 8, run: 8, ...w.stages } },
    llm: { latencyMs: w.lat.llm ?? 0 },
    sandbox: { latencyMs: (op) => (op === 'create' ? (w.lat.create ?? 0) : op === 'bash' ? (w.lat.bash ?? 0) : 0) },
    ...(w.evalMs ? { evalMs: w.evalMs } : {}),
  });
  const a = r.rt.submit(task());
  const b = r.rt.submit(task());
  await r.clock.advance(10);
  expect(r.rt.get(b.id)?.state).toBe(state);
  return { a, b };
}

describe('cancellation', () => {
  for (const state of ['queued', 'initializing', 'waitingRun', 'llmCalling', 'acting', 'waitingEval', 'evaluating']) {
    it(`cancels a rollout in ${state}, releasing its slots and closing its sandbox`, async () => {
      const { a, b } = await placeIn(state);
      await a.cancel();
      const p = b.cancel('test');
      await r!.clock.advance(1);
      await p;
      const res = await b.result;
      expect([res.outcome, res.finish, res.error?.code]).toEqual(['cancelled', 'cancelled', 'CANCELLED']);
      const st = r!.rt.status();
      expect([st.stages.init.active, st.stages.run.active, st.stages.eval.active, st.queued, st.live]).toEqual([0, 0, 0, 0, 0]);
      expect(r!.sandboxes.live).toBe(0);
    });
  }

  it('cancels by id and reports false for an unknown id', async () => {
    r = rig({ llm: { latencyMs: 1_000 } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    expect(await r.rt.cancel(h.id)).toBe(true);
    expect(await r.rt.cancel('nope')).toBe(false);
  });

  it('cancels a rollout waiting to retry without starting another attempt', async () => {
    r = rig({ llm: { fail: () => 'backend' }, runtime: { retries: { max: 3, backoffMs: 1_000, backoffMaxMs: 1_000 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(10);
    expect(r.rt.status().queued).toBe(1);
    await h.cancel();
    const res = await h.result;
    expect([res.outcome, res.attempts]).toEqual(['cancelled', 1]);
    expect(r.clock.pending).toBe(0);
  });

  it('closes a sandbox that finishes starting after its rollout was cancelled', async () => {
    const clock = new ManualClock();
    const inner = new MemorySandboxProvider({ clock });
    // A provider that ignores the abort signal: its sandbox arrives after the rollout ended.
    const slow: SandboxProvider = {
      create: async (spec, o) => {
        await new Promise<void>((res) => clock.setTimeout(res, 100));
        return inner.create(spec, { rolloutId: o.rolloutId });
      },
      close: () => inner.close(),
    };
    const rt = createRuntime({ clock, sandboxes: slow, handlers: [createTestHandler()] });
    const h = rt.submit(task());
    await clock.advance(10);
    const cancelled = h.cancel();
    await clock.advance(200);
    await cancelled;
    expect((await h.result).outcome).toBe('cancelled');
    expect(inner.created).toBe(1);
    expect(inner.live).toBe(0);
    await rt.close();
  });

  it('aborts the signal handlers and policies see when the rollout is cancelled', async () => {
    r = rig({ llm: { fail: () => 'hang' } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    expect(r.llm.inFlight).toBe(1);
    await h.cancel();
    await r.clock.settle();
    expect(r.llm.inFlight).toBe(0);
  });
});

describe('cancellation between attempts', () => {
  it('does not start the next attempt when cancelled while the old sandboxes are still closing', async () => {
    const clock = new ManualClock();
    const inner = new MemorySandboxProvider({ clock });
    // Sandboxes that take 50 ms to close, so the backoff can end before they are gone.
    const slowClose: SandboxProvider = {
      create: async (spec, o) => {
        const sb = await inner.create(spec, o);
        const close = sb.close.bind(sb);
        sb.close = () => new Promise<void>((res) => clock.setTimeout(() => void close().then(res), 50));
        return sb;
      },
      close: () => inner.close(),
    };
    const codec = new TestCodec();
    const llm = new ScriptedPolicy({ codec, clock, fail: () => 'backend' });
    const rt = createRuntime({ clock, codec, llm, sandboxes: slowClose, handlers: [createTestHandler()], retries: { max: 3, backoffMs: 10, backoffMaxMs: 10 } });
    const h = rt.submit(task());
    await clock.advance(20);
    const cancelled = h.cancel();
    await clock.advance(100);
    await cancelled;
    const res = await h.result;
    expect([res.outcome, res.attempts]).toEqual(['cancelled', 1]);
    expect(inner.created).toBe(1);
    await rt.close();
    expect(inner.live).toBe(0);
  });
});

describe('sandbox close', () => {
  it('resolves the result after closeTimeoutMs when a sandbox never finishes closing', async () => {
    const clock = new ManualClock();
    const inner = new MemorySandboxProvider({ clock });
    const hung: SandboxProvider = {
      create: async (spec, o) => {
        const sb = await inner.create(spec, o);
        sb.close = () => new Promise<void>(() => {});
        return sb;
      },
      close: async () => {},
    };
    const rt = createRuntime({ clock, sandboxes: hung, handlers: [createTestHandler()], closeTimeoutMs: 100, sweepIntervalMs: 10 });
    const h = rt.submit(task());
    let res: unknown = null;
    void h.result.then((r) => (res = r));
    await clock.advance(50);
    expect(res).toBeNull();
    expect(rt.status().stuckCloses).toBe(0);
    await clock.advance(60);
    expect((res as { outcome: string } | null)?.outcome).toBe('completed');
    expect(rt.status().stuckCloses).toBe(1);
    await rt.close();
    expect(clock.pending).toBe(0);
  });
});
