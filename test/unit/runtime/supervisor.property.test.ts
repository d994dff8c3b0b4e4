import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createRuntime, type AgentHandler } from '../../../src/index.js';
import { sleep } from '../../../src/clock.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';
import { threeTurns } from './helpers.js';

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('supervisor under random latencies, faults and cancels', () => {
  it('never exceeds a stage limit, gives every rollout exactly one outcome and leaks no slot or sandbox', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({ seed: fc.integer(), init: fc.integer({ min: 1, max: 3 }), run: fc.integer({ min: 1, max: 3 }), evalL: fc.integer({ min: 1, max: 3 }), n: fc.integer({ min: 2, max: 10 }) }),
        async ({ seed, init, run, evalL, n }) => {
          const rnd = mulberry32(seed);
          const clock = new ManualClock();
          const codec = new TestCodec();
          const lat = () => Math.floor(rnd() * 40);
          const sandboxes = new MemorySandboxProvider({
            clock,
            latencyMs: lat,
            fail: (op) => (op === 'bash' && rnd() < 0.05 ? new (class extends Error {})('sandbox lost') : undefined),
          });
          const policy = new ScriptedPolicy({ codec, clock, latencyMs: lat, fail: () => (rnd() < 0.08 ? 'backend' : undefined) });
          // Work counts as occupying its stage until it settles or the runtime aborts it (the
          // moment the runtime hands the slot to someone else).
          const occupy = <T>(signal: AbortSignal, counter: { now: number; max: number }, work: () => Promise<T>): Promise<T> => {
            let done = false;
            const leave = () => {
              if (!done) (done = true), counter.now--;
            };
            counter.max = Math.max(counter.max, ++counter.now);
            signal.addEventListener('abort', leave, { once: true });
            return work().finally(leave);
          };
          const runC = { now: 0, max: 0 };
          const initC = { now: 0, max: 0 };
          const evalC = { now: 0, max: 0 };
          const llm = { generate: (req: Parameters<ScriptedPolicy['generate']>[0]) => occupy(req.signal, runC, () => policy.generate(req)) };
          const base = createTestHandler();
          const handler: AgentHandler = {
            ...base,
            init: (ctx) => occupy(ctx.signal, initC, async () => (await sleep(clock, lat(), ctx.signal), base.init(ctx))),
            eval: (ctx) => occupy(ctx.signal, evalC, async () => (await sleep(clock, lat(), ctx.signal), base.eval(ctx))),
          };
          const rt = createRuntime({
            clock,
            codec,
            llm,
            sandboxes,
            handlers: [handler],
            stages: { init, run, eval: evalL },
            budgetMs: 400,
            sweepIntervalMs: 5,
            retries: { max: 1, backoffMs: 10, backoffMaxMs: 20 },
            events: { retain: 100_000 },
          });
          const hs = Array.from({ length: n }, () => rt.submit({ data_source: 'scripted', oracle: threeTurns }));
          const cancelAt = new Map(hs.filter(() => rnd() < 0.3).map((h) => [h.id, Math.floor(rnd() * 300)]));
          const settled = new Set<string>();
          for (const h of hs) void h.result.then(() => settled.add(h.id));
          for (let t = 0; t < 2_000 && settled.size < n; t++) {
            for (const [id, at] of cancelAt) if (at === t) void rt.cancel(id);
            await clock.advance(1);
            const s = rt.status();
            expect(s.stages.init.active).toBeLessThanOrEqual(init);
            expect(s.stages.run.active).toBeLessThanOrEqual(run);
            expect(s.stages.eval.active).toBeLessThanOrEqual(evalL);
          }
          expect(settled.size).toBe(n);
          expect(initC.max, 'init').toBeLessThanOrEqual(init);
          expect(runC.max, 'run').toBeLessThanOrEqual(run);
          expect(evalC.max, 'eval').toBeLessThanOrEqual(evalL);
          const events = [];
          const ac = new AbortController();
          const it = rt.events({ after: 0, signal: ac.signal })[Symbol.asyncIterator]();
          for (;;) {
            const x = await Promise.race([it.next(), new Promise<null>((res) => setImmediate(() => res(null)))]);
            if (!x || x.done) break;
            events.push(x.value);
          }
          ac.abort();
          for (const h of hs) expect(events.filter((e) => e.type === 'rollout.result' && e.rolloutId === h.id)).toHaveLength(1);
          const st = rt.status();
          expect([st.stages.init.active, st.stages.run.active, st.stages.eval.active, st.queued, st.live]).toEqual([0, 0, 0, 0, 0]);
          expect(sandboxes.live).toBe(0);
          await rt.close();
          expect(clock.pending).toBe(0);
        },
      ),
      // A fixed seed keeps CI deterministic; the 60 runs still draw 60 different latency/fault seeds.
      { numRuns: 60, seed: 20_260_318 },
    );
  });
});
