/**
 * Orchestration overhead of the rollout core.
 *
 * 1. `bare_xstate_per_s`: a bare XState machine of the same shape as the rollout machine (same
 *    states; init and eval promise actors and one loop actor for the RUN stage, told `STEP` on
 *    entering llmCalling / acting, all answering at once; 3 turns), one root actor per rollout,
 *    1,000 in flight: the baseline, measured first in the same process.
 *    `bare_promise_actors_per_s` is the shape the machine had until 1 Dec 2026 (a promise actor
 *    per llmCalling / acting state), kept as a second baseline: the ≥ 0.5 target was set against
 *    it, and the loop actor made the bare machine about twice as fast while the runtime's own work
 *    per rollout stayed the same, so `ratio_vs_bare` fell although every rollout got cheaper
 *    (docs/core.md).
 * 2. `rollouts_per_s`: the real runtime (supervisor, stage pools, deadline sweep, tool agent,
 *    trajectory builder, test codec) with 3-turn rollouts against a zero-latency scripted policy
 *    and a no-op sandbox, 1,000 in flight.
 * 3. `heap_bytes_per_live_rollout`: 10,000 rollouts parked in llmCalling (the policy never
 *    answers), heap after GC minus heap before, per rollout; `event_loop_delay_p99_ms` while
 *    they are admitted and parked.
 * Medians of 3 runs for throughput.
 *
 * `cpu_ratio_vs_bare` is the same ratio on CPU time (process.cpuUsage, user + system, all
 * threads, per rollout) instead of wall time: on a machine shared with other work, wall time
 * includes the time the process waited for a core, which the two paths do not suffer alike;
 * CPU time is what each path costs. `cpu_us_per_rollout_*` are those costs.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { assign, createActor, fromCallback, fromPromise, sendTo, setup, type AnyStateMachine } from 'xstate';
import { createRuntime } from '../src/index.js';
import { createTestHandler, ScriptedPolicy, TestCodec } from '../src/testing/index.js';
import { median, report, round } from './stats.js';
import { benchRuntime, benchTask, keepInFlight, noopProvider, oracle } from './fixtures.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const TOTAL = Number(process.env.ORCH_TOTAL ?? 5_000);
const IN_FLIGHT = 1_000;
const PARKED = 10_000;
const RUNS = 3;


/**
 * The states both baselines share around their `running` state, as the rollout machine has them
 * (slots granted at once); `id` is the machine's, for `running`'s `#<id>.waitingEval` target.
 */
function around(id: string) {
  return {
    queued: { always: 'initializing' },
    initializing: { invoke: { src: 'init', onDone: 'waitingRun' } },
    waitingRun: { always: 'running' },
    waitingEval: { id: `${id}.waitingEval`, always: 'evaluating' },
    evaluating: { invoke: { src: 'evaluate', onDone: 'done' } },
    done: { type: 'final' },
  } as const;
}

// ── the baseline: same shape, no runtime ──
type BareEvent = { type: 'LLM_DONE' } | { type: 'ACT_DONE'; output: { stop: boolean } };
const bare = setup({
  types: { context: {} as { turn: number }, events: {} as BareEvent },
  actors: {
    init: fromPromise(async () => {}),
    // As the runtime's runLoop: each STEP is a step that answers on a later microtask.
    loop: fromCallback<{ type: 'STEP'; kind: 'llm' | 'act'; turn: number }>(({ sendBack, receive }) => {
      receive((cmd) => {
        void Promise.resolve().then(() => sendBack(cmd.kind === 'llm' ? { type: 'LLM_DONE' } : { type: 'ACT_DONE', output: { stop: cmd.turn >= 3 } }));
      });
    }),
    evaluate: fromPromise(async () => {}),
  },
}).createMachine({
  context: { turn: 0 },
  initial: 'queued',
  states: {
    ...around('bare'),
    running: {
      invoke: { id: 'loop', src: 'loop' },
      initial: 'llmCalling',
      states: {
        llmCalling: {
          entry: sendTo('loop', ({ context }) => ({ type: 'STEP', kind: 'llm', turn: context.turn })),
          on: { LLM_DONE: { target: 'acting', actions: assign({ turn: ({ context }) => context.turn + 1 }) } },
        },
        acting: {
          entry: sendTo('loop', ({ context }) => ({ type: 'STEP', kind: 'act', turn: context.turn })),
          on: { ACT_DONE: [{ guard: ({ event }) => event.output.stop, target: '#bare.waitingEval' }, { target: 'llmCalling' }] },
        },
      },
    },
  },
  id: 'bare',
});


// ── the second baseline: the machine's earlier shape, a promise actor per state ──
const barePromise = setup({
  types: { context: {} as { turn: number } },
  actors: {
    init: fromPromise(async () => {}),
    llm: fromPromise(async () => {}),
    act: fromPromise(async ({ input }: { input: { turn: number } }) => ({ stop: input.turn >= 3 })),
    evaluate: fromPromise(async () => {}),
  },
}).createMachine({
  context: { turn: 0 },
  initial: 'queued',
  states: {
    ...around('barePromise'),
    running: {
      initial: 'llmCalling',
      states: {
        llmCalling: { invoke: { src: 'llm', onDone: { target: 'acting', actions: assign({ turn: ({ context }) => context.turn + 1 }) } } },
        acting: {
          invoke: {
            src: 'act',
            input: ({ context }) => ({ turn: context.turn }),
            onDone: [{ guard: ({ event }) => event.output.stop, target: '#barePromise.waitingEval' }, { target: 'llmCalling' }],
          },
        },
      },
    },
  },
  id: 'barePromise',
});

function runBare(machine: AnyStateMachine = bare): Promise<void> {
  return new Promise((resolve) => {
    const a = createActor(machine);
    a.subscribe({ complete: () => resolve() });
    a.start();
  });
}

async function runtimeThroughput(): Promise<number> {
  const rt = benchRuntime(IN_FLIGHT);
  const per = await keepInFlight(TOTAL, IN_FLIGHT, () => rt.submit(benchTask).result);
  const s = rt.status();
  if (s.outcomes.completed !== TOTAL) throw new Error(`expected ${TOTAL} completed, got ${JSON.stringify(s.outcomes)}`);
  await rt.close();
  return per;
}

async function parked(): Promise<{ bytes: number; p99: number; max: number }> {
  const codec = new TestCodec();
  const llm = new ScriptedPolicy({ codec, fail: () => 'hang' });
  const rt = createRuntime({
    codec,
    llm,
    sandboxes: noopProvider,
    handlers: [createTestHandler()],
    stages: { init: PARKED, run: PARKED },
    retainResults: 0,
  });
  const inst = { data_source: 'scripted', oracle };
  // Warm up code paths so the measurement is the rollouts, not JIT and lazy module state.
  const warm = rt.submit(inst);
  await new Promise((r) => setTimeout(r, 50));
  await warm.cancel();
  gc();
  await new Promise((r) => setTimeout(r, 20));
  gc();
  const before = process.memoryUsage().heapUsed;
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const handles = [];
  for (let i = 0; i < PARKED; i++) {
    handles.push(rt.submit(inst));
    if (i % 50 === 49) await new Promise((r) => setImmediate(r));
  }
  while (llm.inFlight < PARKED) await new Promise((r) => setTimeout(r, 5));
  h.disable();
  gc();
  await new Promise((r) => setTimeout(r, 20));
  gc();
  const after = process.memoryUsage().heapUsed;
  if (rt.status().stages.run.active !== PARKED) throw new Error('not all parked');
  await rt.close();
  return { bytes: (after - before) / PARKED, p99: h.percentile(99) / 1e6, max: h.max / 1e6 };
}

const bareRuns: number[] = [];
const barePromiseRuns: number[] = [];
const rtRuns: number[] = [];
const bareCpu: number[] = [];
const rtCpu: number[] = [];
/** Runs `run` (which returns rollouts/s) and records its CPU time per rollout in `cpu`. */
async function cpuTimed(cpu: number[], run: () => Promise<number>): Promise<number> {
  const c0 = process.cpuUsage();
  const perS = await run();
  const c = process.cpuUsage(c0);
  cpu.push((c.user + c.system) / TOTAL);
  return perS;
}
// Warm-up of both paths, not measured.
await keepInFlight(2_000, IN_FLIGHT, () => runBare());
await keepInFlight(2_000, IN_FLIGHT, () => runBare(barePromise));
await runtimeThroughput();
// Both paths are GC-bound (a third of their time), so each run starts from a collected heap,
// and the order alternates so neither always inherits the other's garbage.
for (let i = 0; i < RUNS; i++) {
  const bareRun = async () => {
    gc();
    bareRuns.push(await cpuTimed(bareCpu, () => keepInFlight(TOTAL, IN_FLIGHT, () => runBare())));
    gc();
    barePromiseRuns.push(await keepInFlight(TOTAL, IN_FLIGHT, () => runBare(barePromise)));
  };
  const rtRun = async () => {
    gc();
    rtRuns.push(await cpuTimed(rtCpu, runtimeThroughput));
  };
  if (i % 2 === 0) {
    await bareRun();
    await rtRun();
  } else {
    await rtRun();
    await bareRun();
  }
}
const park = await parked();
const bareMed = median(bareRuns);
const rtMed = median(rtRuns);
report('orchestration', {
  bare_xstate_per_s: round(bareMed, 0),
  rollouts_per_s: round(rtMed, 0),
  ratio_vs_bare: round(rtMed / bareMed, 3),
  cpu_us_per_rollout_bare: round(median(bareCpu), 1),
  cpu_us_per_rollout_runtime: round(median(rtCpu), 1),
  cpu_ratio_vs_bare: round(median(bareCpu) / median(rtCpu), 3),
  bare_promise_actors_per_s: round(median(barePromiseRuns), 0),
  ratio_vs_promise_actor_bare: round(rtMed / median(barePromiseRuns), 3),
  heap_bytes_per_live_rollout: round(park.bytes, 0),
  event_loop_delay_p99_ms: round(park.p99, 2),
  event_loop_delay_max_ms: round(park.max, 2),
  rollouts_total_per_run: TOTAL,
  in_flight: IN_FLIGHT,
  parked: PARKED,
});
