/**
 * Async RL benchmark: one simulated GRPO training loop on `fake-llm` (SGLang protocol, real HTTP),
 * run both ways on the same prompts in one process.
 *
 * Rollouts are long-tailed: turns per rollout and tokens per turn are lognormal (seeded), the
 * engine takes `PER_TOKEN_MS` per token, and the fake optimizer step takes `TRAIN_MS`.
 * - **sync**: each step submits `BATCH` groups of `N`, waits for the slowest, trains, bumps the
 *   weight version (the backends idle while it trains; the trainer idles while the tail runs).
 * - **async**: a rollout buffer (`runtime.buffer`) keeps `B` = `BATCH × ETA` groups in flight;
 *   each step takes the `BATCH` oldest-version groups ready, trains while rollouts go on, then
 *   bumps the version (`setWeightVersion` + `setTrainerVersion`; running rollouts switch at their
 *   next call). `staleTokens {maxAge: ETA, action: restart}` restarts a straggler whose
 *   oldest token falls more than η behind before its next call, and the buffer's `maxStaleness`
 *   η drops a finished group that went staler while it waited: what is trained is at most η stale.
 *
 * Figures: steps per minute both ways (target async ≥ 2× sync), the fraction of wall time the
 * engine had no generation in flight, η, the mean and max staleness of the groups trained
 * (trainer version − oldest token version, at consumption), and the cost of one abort-and-resume
 * of a partial generation (`abortGeneration` mid-turn, paired against the same rollout
 * uninterrupted).
 *
 * Run: npx tsx bench/async.ts
 */
import { createRuntime, type EmbeddedRuntime } from '../src/index.js';
import { BackendPool } from '../src/llm/backend-pool.js';
import type { BackendInfo, BackendSpec, GenerateRequest, GenerateResult, ManagedLlmClient } from '../src/llm/llm-client.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import type { Instance } from '../src/protocol/instance.js';
import { xorshift32 } from '../src/rng.js';
import { startFakeLlmServer, type FakeLlmServer } from '../src/testing/fake-llm-server.js';
import { createTestHandler, MemorySandboxProvider } from '../src/testing/index.js';
import { median, report, round } from './stats.js';

const STEPS = 8;
const BATCH = 4;
const N = 4;
const ETA = 2;
const TRAIN_MS = 1_000;
const PER_TOKEN_MS = 4;
const ABORT_PAIRS = 5;

/** A standard normal draw (Box–Muller) from a uniform generator. */
function normal(rnd: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());
}

/** Prompts with lognormal turns (median 3, capped at 12) and lognormal words per turn (median 15, capped at 150). */
function prompts(count: number, seed: number): Instance[] {
  const rnd = xorshift32(seed);
  return Array.from({ length: count }, (_, i) => {
    const turns = Math.min(12, Math.max(1, Math.round(Math.exp(Math.log(3) + 0.7 * normal(rnd)))));
    const oracle = Array.from({ length: turns }, (_, t) => {
      const words = Math.min(150, Math.max(2, Math.round(Math.exp(Math.log(15) + 0.9 * normal(rnd)))));
      const content = Array.from({ length: words }, (_, w) => `w${(w * 7 + t) % 50}`).join(' ');
      return t === turns - 1 ? { content, tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] } : { content, tool_calls: [{ name: 'execute_bash', arguments: { command: 'true' } }] };
    });
    return { data_source: 'scripted', instance_id: `p${i}`, oracle } as Instance;
  });
}

/** The backend pool, counting the wall time during which no generation was in flight. */
class IdleMeter implements ManagedLlmClient {
  private inFlight = 0;
  private idleSince = performance.now();
  private idle = 0;
  private t0 = performance.now();
  constructor(readonly pool: BackendPool) {}
  reset(): void {
    this.t0 = performance.now();
    this.idle = 0;
    this.idleSince = this.t0;
  }
  /** Fraction of wall time since reset() with nothing in flight. */
  idleFraction(): number {
    const now = performance.now();
    const idle = this.idle + (this.inFlight === 0 ? now - this.idleSince : 0);
    return idle / (now - this.t0);
  }
  async generate(req: GenerateRequest): Promise<GenerateResult> {
    if (this.inFlight++ === 0) this.idle += performance.now() - this.idleSince;
    try {
      return await this.pool.generate(req);
    } finally {
      if (--this.inFlight === 0) this.idleSince = performance.now();
    }
  }
  addBackend = (spec: BackendSpec): BackendInfo => this.pool.addBackend(spec);
  drainBackend = (id: string): boolean => this.pool.drainBackend(id);
  removeBackend = (id: string): boolean => this.pool.removeBackend(id);
  listBackends = (): BackendInfo[] => this.pool.listBackends();
  setWeightVersion = (v: string | number, id?: string): void => this.pool.setWeightVersion(v, id);
}

interface Rig {
  rt: EmbeddedRuntime;
  meter: IdleMeter;
  close(): Promise<void>;
}

function rig(fake: FakeLlmServer, extra: Parameters<typeof createRuntime>[0] = {}): Rig {
  const pool = new BackendPool({ probeIntervalMs: 0 });
  pool.addBackend({ id: 'fake', url: fake.url, protocol: 'sglang', weightVersion: 0 });
  const meter = new IdleMeter(pool);
  const rt = createRuntime({ llm: meter, codec: createQwen3Codec(), sandboxes: new MemorySandboxProvider(), handlers: [createTestHandler()], builtinHandlers: false, stages: { init: 256, run: 256 }, ...extra });
  rt.setTrainerVersion(0);
  return {
    rt,
    meter,
    close: async () => {
      await rt.close();
      await pool.close();
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runSync(fake: FakeLlmServer, tasks: Instance[]): Promise<{ stepsPerMin: number; idle: number }> {
  const { rt, meter, close } = rig(fake);
  meter.reset();
  const t0 = performance.now();
  for (let step = 0; step < STEPS; step++) {
    const groups = tasks.slice(step * BATCH, (step + 1) * BATCH).map((t) => rt.submitGroup(t, {}, N));
    await Promise.all(groups.map((g) => g.results));
    await sleep(TRAIN_MS);
    rt.setWeightVersion(step + 1);
    rt.setTrainerVersion(step + 1);
  }
  const wall = performance.now() - t0;
  const idle = meter.idleFraction();
  await close();
  return { stepsPerMin: (STEPS / wall) * 60_000, idle };
}

async function runAsync(fake: FakeLlmServer, tasks: Instance[]): Promise<{ stepsPerMin: number; idle: number; staleness: number[]; restarts: number; dropped: number }> {
  const { rt, meter, close } = rig(fake, { staleTokens: { maxAge: ETA, action: 'restart' }, retries: { max: 20, backoffMs: 0, backoffMaxMs: 0 } });
  meter.reset();
  const t0 = performance.now();
  const buf = rt.buffer({ groups: BATCH * ETA, n: N, order: 'oldest-version', maxStaleness: ETA });
  buf.add(tasks);
  const staleness: number[] = [];
  let restarts = 0;
  for (let step = 0; step < STEPS; step++) {
    const batch = [];
    while (batch.length < BATCH) batch.push(...(await buf.take(BATCH - batch.length)));
    for (const g of batch) {
      staleness.push(step - (g.minWeightVersion as number));
      restarts += g.results.reduce((a, r) => a + r.attempts - 1, 0);
    }
    await sleep(TRAIN_MS);
    rt.setWeightVersion(step + 1);
    rt.setTrainerVersion(step + 1);
  }
  const wall = performance.now() - t0;
  const idle = meter.idleFraction();
  await buf.close();
  await close();
  const dropped = buf.stats().stale;
  return { stepsPerMin: (STEPS / wall) * 60_000, idle, staleness, restarts, dropped };
}

/** Wall time of one rollout, uninterrupted and with an abort-and-resume mid-way through its first turn; the paired difference. */
async function abortOverhead(fake: FakeLlmServer, task: Instance): Promise<number> {
  const { rt, close } = rig(fake);
  const diffs: number[] = [];
  for (let i = 0; i < ABORT_PAIRS; i++) {
    let t = performance.now();
    await rt.submit(task).result;
    const plain = performance.now() - t;
    t = performance.now();
    const h = rt.submit(task);
    while (rt.get(h.id)?.state !== 'llmCalling') await sleep(1);
    await sleep(30);
    rt.pauseGeneration();
    const [r] = await rt.abortGeneration();
    rt.resumeGeneration();
    const res = await h.result;
    const aborted = performance.now() - t;
    if (r?.aborted === 1 && res.trajectory.weightVersions!.length >= 1) diffs.push(aborted - plain);
  }
  await close();
  return median(diffs);
}

const tasks = prompts(STEPS * BATCH + BATCH * ETA + 8, 1313);
const fake = await startFakeLlmServer({ tasks, protocol: 'sglang', perTokenMs: PER_TOKEN_MS, weightVersion: null });
try {
  const sync = await runSync(fake, tasks);
  const asy = await runAsync(fake, tasks);
  // A long first turn, so the abort lands mid-generation.
  const long = { data_source: 'scripted', instance_id: 'abort', oracle: [{ content: Array.from({ length: 200 }, (_, w) => `w${w % 50}`).join(' '), tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] }] } as Instance;
  const abortFake = await startFakeLlmServer({ tasks: [long], protocol: 'sglang', perTokenMs: 1, weightVersion: null });
  const overhead = await abortOverhead(abortFake, long).finally(() => abortFake.close());
  report('async', {
    sync_steps_per_min: round(sync.stepsPerMin, 2),
    async_steps_per_min: round(asy.stepsPerMin, 2),
    async_over_sync: round(asy.stepsPerMin / sync.stepsPerMin, 2),
    backend_idle_fraction_sync: round(sync.idle, 3),
    backend_idle_fraction_async: round(asy.idle, 3),
    eta: ETA,
    mean_staleness: round(asy.staleness.reduce((a, x) => a + x, 0) / asy.staleness.length, 3),
    max_staleness: Math.max(...asy.staleness),
    async_restarts: asy.restarts,
    async_stale_groups_dropped: asy.dropped,
    abort_resume_overhead_ms: round(overhead, 2),
  });
} finally {
  await fake.close();
}
