/**
 * The Redis cluster (src/cluster): scaling over 1, 2, 4 worker processes, dispatch overhead and
 * failover.
 *
 * Scaling. Each worker is its own `rollout worker --redis URL --capacity C --state-dir DIR`
 * process (as a real node would be), with one sandbox host and real (bwrap) sandboxes; the
 * gateway is a `ClusterRuntime` in this process; the policy is a `rollout fake-llm` process that
 * answers each call after a fixed per-token delay (`--per-token-ms`). The work is chosen to be
 * latency-bound: a rollout is TURNS calls of a fixed length, so one worker finishes about
 * C / (TURNS × call time) rollouts a second and four of them need well under the two cores of
 * the development machine. The bench proves that with figures, not with a claim:
 * - cpu_per_rollout_ms: CPU of every process of the cluster (the worker trees with their sandbox
 *   hosts and sandboxes, redis-server, the fake LLM, this process) over the measured window,
 *   per rollout completed in it, from /proc;
 * - cluster_cores_4: that CPU over the window's wall time at 4 workers (cores the cluster used);
 * - busiest_core_util_4: the busiest core's utilisation over that window (/proc/stat, whole
 *   machine, other users included): below 1 means no core was saturated.
 *
 * Steady state. Workers join one at a time (1, then 2, then 4) and stay up, so no start-up is
 * measured. For W workers a warm-up batch of W × C rollouts runs first (each new node starts its
 * sandbox host; its median wall time is the cycle of a slot). Then the W × C slots are filled one
 * by one, a cycle / (W × C) apart, as rollouts arriving one by one would be, and the rest of a
 * batch of (WAVES + 2) × W × C is queued at once. Each slot runs back to back and keeps its
 * phase, so completions are evenly spread (not in bursts of every node at once, whose sandbox
 * starts would all want the cores at the same moment). The rate is the completions from the
 * W × C-th (every slot has finished a rollout) to the (WAVES + 1) × W × C-th (the queue runs
 * dry about there: the last job is taken; after it slots go idle one by one) over the time
 * between them.
 *
 * Figures:
 * - rollouts_per_s_{1,2,4}; scaling_efficiency_4 = rate(4) / (4 × rate(1)) (target ≥ 0.9);
 * - rollout_wall_p50_s_{1,2,4} and slot_use_{1,2,4} = rate × wall / slots: the cluster's own loss
 *   (dispatch, commit) apart from rollouts running slower (other load on a shared machine);
 * - dispatch_overhead_p50_ms: gateway submit → the worker's `rollout.submitted`, minus the same
 *   span of an embedded runtime in this run (sequential rollouts on an idle cluster; this worker
 *   runs in this process, as in earlier runs of this bench);
 * - failover_s: a worker process SIGKILLed → its first rollout started again on another worker.
 *
 * Knobs (env): CLUSTER_CAPACITY, CLUSTER_TURNS, CLUSTER_PER_TOKEN_MS, CLUSTER_WAVES,
 * CLUSTER_SCALING_ONLY=1 (skip dispatch and failover); for diagnostics CLUSTER_COUNTS=1 (only
 * those worker counts, progress lines only) and CLUSTER_WORKER_NODE_ARGS (node flags of the
 * workers, e.g. `--cpu-prof --cpu-prof-dir=DIR`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ClusterRuntime } from '../src/cluster/cluster-runtime.js';
import { ClusterWorker } from '../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import type { Instance } from '../src/protocol/instance.js';
import type { RolloutResult } from '../src/protocol/trajectory.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { serviceRuntimeFactory } from '../src/server/runtime-factory.js';
import { startFakeLlmServer } from '../src/testing/fake-llm-server.js';
import { startFakeLlmProcess, type ServerProcess } from '../test/helpers/server-process.js';
import { startRedis } from '../test/helpers/redis-server.js';
import { coreTimes, coreUtilisation, loadAverage1, treeCpuSeconds } from './_proc-cpu.js';
import { median, report, round } from './stats.js';

const envInt = (name: string, dflt: number): number => {
  const v = process.env[name];
  const n = v === undefined ? dflt : Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got '${v}'`);
  return n;
};
/** Rollouts a worker runs at once (its BullMQ concurrency and stage pools). */
const CAPACITY = envInt('CLUSTER_CAPACITY', 4);
/** LLM calls per rollout: TURNS − 1 shell commands, then `finish`. */
const TURNS = envInt('CLUSTER_TURNS', 3);
/** The fake LLM's delay per output token of the scaling runs. */
const PER_TOKEN_MS = envInt('CLUSTER_PER_TOKEN_MS', 120);
/** Measured rounds of the W × C slots (each slot runs about WAVES rollouts in the window). */
const WAVES = envInt('CLUSTER_WAVES', 3);
/** The in-process fake LLM of the dispatch and failover runs answers after this. */
const LATENCY_MS = 250;
const ROOT = resolve(import.meta.dirname, '..');
const codec = createQwen3Codec();
const dirs: string[] = [];
const children = new Set<ChildProcess>();

function task(i: number | string, command = 'echo ok', turns = 2): Instance {
  return {
    data_source: 'shell',
    instance_id: `b-${i}`,
    prompt: 'run it',
    eval_command: 'true',
    oracle: [
      ...Array.from({ length: turns - 1 }, () => ({ tool_calls: [{ name: 'execute_bash', arguments: { command } }] })),
      { tool_calls: [{ name: 'finish', arguments: {} }] },
    ],
  } as Instance;
}

function runtimeFactory() {
  const stateDir = mkdtempSync(join(tmpdir(), 'rollout-bench-cluster-'));
  dirs.push(stateDir);
  return serviceRuntimeFactory({ codec, sandboxes: () => createSandboxProvider({ stateDir, timeouts: { hostStartMs: 120_000 } }), runtime: { stages: { init: CAPACITY, run: CAPACITY } }, retainEvents: 0 });
}

const redis = await startRedis();
const llm = await startFakeLlmServer({ policy: 'scripted', tasks: Array.from({ length: 2000 }, (_, i) => task(i)), latencyMs: LATENCY_MS });
let prefixN = 0;
const cluster = (extra: Record<string, unknown> = {}) => ({ redis: redis.url, prefix: `bench${prefixN}`, heartbeatMs: 500, ...extra });

/** Starts `rollout worker` as its own process (one sandbox host, its own state dir); resolves at `ready`. */
async function startWorkerProcess(prefix: string, extra: string[] = []): Promise<ChildProcess> {
  const stateDir = mkdtempSync(join(tmpdir(), 'rollout-bench-cluster-node-'));
  dirs.push(stateDir);
  const config = join(stateDir, 'worker-config.json');
  writeFileSync(config, JSON.stringify({ sandbox: { hosts: 1, timeouts: { hostStartMs: 120_000 } } }));
  const args = [join(ROOT, 'bin/rollout.js'), 'worker', '--redis', redis.url, '--prefix', prefix, '--capacity', String(CAPACITY), '--state-dir', stateDir, '--config', config, '--heartbeat-ms', '500', ...extra];
  // CLUSTER_WORKER_NODE_ARGS: e.g. `--cpu-prof --cpu-prof-dir=/tmp/x` to profile the workers.
  const nodeArgs = (process.env['CLUSTER_WORKER_NODE_ARGS'] ?? '').split(' ').filter(Boolean);
  const child = spawn(process.execPath, [...nodeArgs, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  await new Promise<void>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      if (/worker \S+ ready/.test(out)) res();
    });
    child.once('exit', (c) => rej(new Error(`worker exited ${c}`)));
  });
  child.stdout!.resume();
  return child;
}

/** SIGTERM (hands jobs back, kills its sandboxes) and waits for the exit. */
async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  children.delete(child);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  await gone;
}

interface ScalingRun {
  workers: number;
  rate: number;
  /** Rollouts completed in the measured window. */
  rollouts: number;
  windowS: number;
  cpuPerRolloutMs: number;
  /** Of which: the worker process trees (sandboxes included), redis-server, the fake LLM, this process (the gateway). */
  split: { workers: number; redis: number; llm: number; gateway: number };
  clusterCores: number;
  busiestCore: number;
  /** Median wall time of the measured rollouts (the same at 1 and 4 workers when nothing is contended). */
  wallP50S: number;
  load: number;
}

/**
 * Runs the scaling series on one cluster: workers join (1, then 2, then 4) and each count is
 * measured in steady state (see the file comment).
 */
async function scalingSeries(counts: readonly number[], llmProc: ServerProcess): Promise<ScalingRun[]> {
  prefixN++;
  const prefix = `bench${prefixN}`;
  const g = await ClusterRuntime.connect(cluster());
  const nodes: ChildProcess[] = [];
  const runs: ScalingRun[] = [];
  try {
    g.addBackend({ id: 'fake', url: llmProc.url, protocol: 'prorl' });
    await g.flushed();
    const inst = task('scale', 'echo ok', TURNS);
    const submitAll = (n: number): Promise<RolloutResult>[] => Array.from({ length: n }, () => g.submit(inst).result);
    for (const w of counts) {
      const joining = Array.from({ length: w - nodes.length }, () => startWorkerProcess(prefix));
      nodes.push(...(await Promise.all(joining)));
      // Warm-up: each new node starts its sandbox host; its wall time is the cycle of a slot.
      const warm = await Promise.all(submitAll(w * CAPACITY));
      const cycleMs = median(warm.map((r) => r.timing.wallMs));
      const slots = w * CAPACITY;
      // The window: from the completion that closes the first round of the slots to the one
      // where the queue runs dry (the last job taken); after it, slots go idle one by one.
      const first = slots;
      const last = (WAVES + 1) * slots;
      const n = last + slots;
      const roots = [...nodes.map((c) => c.pid!), redis.child.pid!, llmProc.child.pid!];
      let done = 0;
      let t1 = 0;
      let t2 = 0;
      const walls: number[] = [];
      let cpu1 = new Map<number, number>();
      let cpu2 = new Map<number, number>();
      let gw1 = process.cpuUsage();
      let gw = process.cpuUsage();
      let cores1 = coreTimes();
      let util: number[] = [];
      const t0 = performance.now();
      // Staggered fill: slot k starts k × cycle / slots after the first, as rollouts arriving one
      // by one would; each slot then runs back to back and keeps its phase, so completions (and
      // the CPU of sandbox starts) are spread evenly instead of bursting at once on every node.
      const submitted: Promise<RolloutResult>[] = [];
      for (let k = 0; k < slots; k++) {
        submitted.push(...submitAll(1));
        await new Promise((r) => setTimeout(r, cycleMs / slots));
      }
      submitted.push(...submitAll(n - slots));
      const results = await Promise.all(
        submitted.map((p) =>
          p.then((r) => {
            if (done >= first && done < last) walls.push(r.timing.wallMs);
            done++;
            if (done === first) {
              t1 = performance.now();
              cpu1 = treeCpuSeconds(roots);
              gw1 = process.cpuUsage();
              cores1 = coreTimes();
            } else if (done === last) {
              t2 = performance.now();
              cpu2 = treeCpuSeconds(roots);
              gw = process.cpuUsage(gw1);
              util = coreUtilisation(cores1, coreTimes());
            }
            return r;
          }),
        ),
      );
      const bad = results.filter((r) => r.outcome !== 'completed');
      if (bad.length) throw new Error(`scaling ${w}: ${bad.length} rollouts not completed, e.g. ${JSON.stringify(bad[0]).slice(0, 400)}`);
      const d = (pid: number): number => (cpu2.get(pid) ?? 0) - (cpu1.get(pid) ?? 0);
      const split = {
        workers: nodes.reduce((a, c) => a + d(c.pid!), 0),
        redis: d(redis.child.pid!),
        llm: d(llmProc.child.pid!),
        gateway: (gw.user + gw.system) / 1e6,
      };
      const cpu = split.workers + split.redis + split.llm + split.gateway;
      const rollouts = last - first;
      const windowS = (t2 - t1) / 1000;
      const run: ScalingRun = {
        workers: w,
        rate: rollouts / windowS,
        rollouts,
        windowS,
        cpuPerRolloutMs: (cpu / rollouts) * 1000,
        split: { workers: (split.workers / rollouts) * 1000, redis: (split.redis / rollouts) * 1000, llm: (split.llm / rollouts) * 1000, gateway: (split.gateway / rollouts) * 1000 },
        clusterCores: cpu / windowS,
        busiestCore: Math.max(...util),
        wallP50S: median(walls) / 1000,
        load: loadAverage1(),
      };
      step(`${w} worker(s): ${run.rate.toFixed(3)} rollouts/s (${rollouts} in ${windowS.toFixed(1)} s, of ${n}, from ${((t1 - t0) / 1000).toFixed(1)} s after the first submit; warm-up cycle ${(cycleMs / 1000).toFixed(2)} s); cpu/rollout ${run.cpuPerRolloutMs.toFixed(0)} ms (workers ${run.split.workers.toFixed(0)}, redis ${run.split.redis.toFixed(0)}, llm ${run.split.llm.toFixed(0)}, gateway ${run.split.gateway.toFixed(0)}); rollout wall p50 ${run.wallP50S.toFixed(2)} s; cluster ${run.clusterCores.toFixed(2)} cores; cores ${util.map((u) => u.toFixed(2)).join(' ')}; load ${run.load}`);
      runs.push(run);
    }
  } finally {
    await Promise.all(nodes.map((c) => stopChild(c)));
    await g.close();
  }
  return runs;
}

async function dispatch(): Promise<{ cluster: number; embedded: number }> {
  prefixN++;
  const g = await ClusterRuntime.connect(cluster());
  g.addBackend({ id: 'fake', url: llm.url, protocol: 'prorl' });
  await g.flushed();
  const node = await ClusterWorker.start(cluster(), { capacity: CAPACITY, createRuntime: runtimeFactory() });
  const spans: number[] = [];
  const ac = new AbortController();
  const started = new Map<string, number>();
  const watcher = (async () => {
    for await (const e of g.events({ signal: ac.signal })) if (e.type === 'rollout.submitted') started.set(e.rolloutId, e.ts);
  })();
  for (let i = 0; i < 21; i++) {
    const at = Date.now();
    const h = g.submit(task(i));
    await h.result;
    const s = started.get(h.id);
    if (s !== undefined && i > 0) spans.push(s - at);
  }
  ac.abort();
  await watcher;
  await node.close();
  await g.close();
  // The embedded path: the same span inside one runtime.
  const rt = await runtimeFactory()();
  rt.addBackend?.({ id: 'fake', url: llm.url, protocol: 'prorl' });
  const local: number[] = [];
  const ac2 = new AbortController();
  const seen = new Map<string, number>();
  const w2 = (async () => {
    for await (const e of rt.events({ signal: ac2.signal })) if (e.type === 'rollout.submitted') seen.set(e.rolloutId, e.ts);
  })();
  for (let i = 0; i < 21; i++) {
    const at = Date.now();
    const h = rt.submit(task(i));
    await h.result;
    const s = seen.get(h.id);
    if (s !== undefined && i > 0) local.push(s - at);
  }
  ac2.abort();
  await w2;
  await rt.close();
  return { cluster: median(spans), embedded: median(local) };
}

async function failover(): Promise<number> {
  prefixN++;
  const opts = cluster({ lockDurationMs: 3000, stalledIntervalMs: 1000 });
  const g = await ClusterRuntime.connect(opts);
  g.addBackend({ id: 'fake', url: llm.url, protocol: 'prorl' });
  await g.flushed();
  const stateDir = mkdtempSync(join(tmpdir(), 'rollout-bench-cluster-child-'));
  dirs.push(stateDir);
  const root = resolve(import.meta.dirname, '..');
  const child = spawn(process.execPath, [join(root, 'bin/rollout.js'), 'worker', '--redis', redis.url, '--prefix', opts.prefix, '--capacity', String(CAPACITY), '--state-dir', stateDir, '--lock-ms', '3000', '--stalled-ms', '1000'], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  await new Promise<void>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      if (/ready/.test(out)) res();
    });
    child.once('exit', (c) => rej(new Error(`worker exited ${c}`)));
  });
  const exited = new Promise((r) => child.once('exit', r));
  // The child takes all of these (the survivor is not up yet); each runs long.
  const hs = Array.from({ length: CAPACITY }, (_, i) => g.submit(task(i, 'sleep 30')));
  const onChild = new Set<string>();
  const restartedAt = new Map<string, number>();
  const ac = new AbortController();
  const watcher = (async () => {
    for await (const e of g.events({ signal: ac.signal })) {
      if (e.type !== 'rollout.submitted') continue;
      if (!onChild.has(e.rolloutId)) onChild.add(e.rolloutId);
      else if (!restartedAt.has(e.rolloutId)) restartedAt.set(e.rolloutId, Date.now());
    }
  })();
  while (onChild.size < CAPACITY) await new Promise((r) => setTimeout(r, 50));
  const survivor = await ClusterWorker.start(opts, { capacity: CAPACITY, createRuntime: runtimeFactory() });
  const killedAt = Date.now();
  child.kill('SIGKILL');
  await exited;
  while (restartedAt.size === 0) await new Promise((r) => setTimeout(r, 50));
  const secs = (Math.min(...restartedAt.values()) - killedAt) / 1000;
  await Promise.all(hs.map((h) => g.cancel(h.id)));
  ac.abort();
  await watcher;
  await survivor.close();
  await g.close();
  return secs;
}

/** Progress on stderr (the figures alone go to stdout). */
const tStart = performance.now();
function step(m: string): void {
  process.stderr.write(`[cluster bench +${((performance.now() - tStart) / 1000).toFixed(1)}s] ${m}\n`);
}
let llmProc: ServerProcess | null = null;
// run-all's time limit (SIGTERM) or ^C: no worker, Redis or temp dir outlives the bench.
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void cleanUp().finally(() => process.exit(130)));
const tasksDir = mkdtempSync(join(tmpdir(), 'rollout-bench-cluster-tasks-'));
dirs.push(tasksDir);
try {
  const tasksFile = join(tasksDir, 'tasks.jsonl');
  writeFileSync(tasksFile, JSON.stringify(task('scale', 'echo ok', TURNS)) + '\n');
  llmProc = await startFakeLlmProcess(['--protocol', 'prorl', '--tasks', tasksFile, '--per-token-ms', String(PER_TOKEN_MS)]);
  step(`load ${loadAverage1()} at start`);
  // CLUSTER_COUNTS=1 (say, with CLUSTER_WORKER_NODE_ARGS): diagnostics, the progress lines only.
  const diagnostic = process.env['CLUSTER_COUNTS']?.split(',').map(Number);
  const [s1, s2, s4] = await scalingSeries(diagnostic ?? [1, 2, 4], llmProc);
  if (diagnostic) throw new Error('diagnostic run (CLUSTER_COUNTS): no figures');
  const figures: Record<string, number | string | boolean> = {
    capacity_per_worker: CAPACITY,
    llm_calls_per_rollout: TURNS,
    llm_per_token_ms: PER_TOKEN_MS,
    measured_rollouts_1_2_4: `${s1!.rollouts} / ${s2!.rollouts} / ${s4!.rollouts}`,
    rollouts_per_s_1: round(s1!.rate, 3),
    rollouts_per_s_2: round(s2!.rate, 3),
    rollouts_per_s_4: round(s4!.rate, 3),
    scaling_efficiency_2: round(s2!.rate / (2 * s1!.rate), 3),
    scaling_efficiency_4: round(s4!.rate / (4 * s1!.rate), 3),
    cpu_per_rollout_ms: round(median([s1!, s2!, s4!].map((s) => s.cpuPerRolloutMs)), 0),
    cpu_per_rollout_ms_4_workers_redis_llm_gateway: `${round(s4!.split.workers, 0)} / ${round(s4!.split.redis, 0)} / ${round(s4!.split.llm, 0)} / ${round(s4!.split.gateway, 0)}`,
    cluster_cores_4: round(s4!.clusterCores, 2),
    busiest_core_util_1_2_4: `${round(s1!.busiestCore, 2)} / ${round(s2!.busiestCore, 2)} / ${round(s4!.busiestCore, 2)}`,
    busiest_core_util_4: round(s4!.busiestCore, 2),
    rollout_wall_p50_s_1_2_4: `${round(s1!.wallP50S, 2)} / ${round(s2!.wallP50S, 2)} / ${round(s4!.wallP50S, 2)}`,
    // rate × wall / slots: the share of the slots' time that became completed rollouts (1 when
    // taking, dispatching and committing jobs costs nothing). scaling_efficiency_4 is
    // slot_use_4 / slot_use_1 × wall(1) / wall(4): the second factor is how much slower each
    // rollout ran (other load on the machine, or the cluster's own contention).
    slot_use_1_2_4: [s1!, s2!, s4!].map((s) => round((s.rate * s.wallP50S) / (s.workers * CAPACITY), 3)).join(' / '),
    load_1_2_4: `${s1!.load} / ${s2!.load} / ${s4!.load}`,
  };
  if (process.env['CLUSTER_SCALING_ONLY'] !== '1') {
    const d = await dispatch();
    step(`dispatch p50: cluster ${d.cluster.toFixed(1)} ms, embedded ${d.embedded.toFixed(1)} ms`);
    const f = await failover();
    step(`failover ${f.toFixed(2)} s`);
    Object.assign(figures, {
      dispatch_cluster_p50_ms: round(d.cluster, 1),
      dispatch_embedded_p50_ms: round(d.embedded, 1),
      dispatch_overhead_p50_ms: round(d.cluster - d.embedded, 1),
      failover_s: round(f, 2),
    });
  }
  report('cluster', figures);
} finally {
  await cleanUp();
}

/** Everything this bench started goes: the child processes, Redis, the temp dirs. */
async function cleanUp(): Promise<void> {
  await Promise.all([...children].map((c) => stopChild(c, 'SIGKILL')));
  await llmProc?.stop();
  await llm.close();
  await redis.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
