/**
 * The Redis cluster (src/cluster): a gateway and 1, 2, 4 workers on one Redis, each worker with
 * the same capacity, real sandboxes, and a fake LLM with a fixed latency per call so that the
 * work is latency-bound (cores are not the bottleneck; on this machine they are shared).
 *
 * Figures:
 * - rollouts_per_s_{1,2,4}: a batch of 3 × capacity × workers rollouts, first submit → last result;
 * - scaling_efficiency_4 = rate(4) / (4 × rate(1)) (target ≥ 0.9);
 * - dispatch_overhead_p50_ms: gateway submit → the worker's `rollout.submitted`, minus the same
 *   span of an embedded runtime in this run (sequential rollouts on an idle cluster);
 * - failover_s: a worker process SIGKILLed → its first rollout started again on another worker.
 *
 * The workers of the scaling runs share this process (one event loop, separate runtimes and
 * sandbox providers): a lower bound on what separate machines give. The failover run uses a
 * real `rollout worker` child process, since it has to be killed.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ClusterRuntime } from '../src/cluster/cluster-runtime.js';
import { ClusterWorker } from '../src/cluster/cluster-worker.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import type { Instance } from '../src/protocol/instance.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { serviceRuntimeFactory } from '../src/server/runtime-factory.js';
import { startFakeLlmServer } from '../src/testing/fake-llm-server.js';
import { startRedis } from '../test/helpers/redis-server.js';
import { median, report, round } from './stats.js';

const CAPACITY = 8;
const LATENCY_MS = 250;
const codec = createQwen3Codec();
const dirs: string[] = [];

function task(i: number, command = 'echo ok'): Instance {
  return {
    data_source: 'shell',
    instance_id: `b-${i}`,
    prompt: 'run it',
    eval_command: 'true',
    oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
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

async function scaling(workers: number): Promise<number> {
  prefixN++;
  const g = await ClusterRuntime.connect(cluster());
  g.addBackend({ id: 'fake', url: llm.url, protocol: 'prorl' });
  await g.flushed();
  const nodes = await Promise.all(Array.from({ length: workers }, () => ClusterWorker.start(cluster(), { capacity: CAPACITY, createRuntime: runtimeFactory() })));
  // Warm-up: one rollout per node (sandbox hosts start, tokenizer loads).
  await Promise.all(Array.from({ length: workers * 2 }, (_, i) => g.submit(task(i)).result));
  const n = 3 * CAPACITY * workers;
  const t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: n }, (_, i) => g.submit(task(i)).result));
  const secs = (performance.now() - t0) / 1000;
  const bad = rs.filter((r) => r.outcome !== 'completed').length;
  if (bad) console.error(`scaling ${workers}: ${bad} rollouts not completed`);
  await Promise.all(nodes.map((w) => w.close()));
  await g.close();
  return n / secs;
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
const t0 = performance.now();
const step = (m: string): void => void process.stderr.write(`[cluster bench +${((performance.now() - t0) / 1000).toFixed(1)}s] ${m}\n`);
try {
  const r1 = await scaling(1);
  step(`1 worker: ${r1.toFixed(2)} rollouts/s`);
  const r2 = await scaling(2);
  step(`2 workers: ${r2.toFixed(2)} rollouts/s`);
  const r4 = await scaling(4);
  step(`4 workers: ${r4.toFixed(2)} rollouts/s`);
  const d = await dispatch();
  step(`dispatch p50: cluster ${d.cluster.toFixed(1)} ms, embedded ${d.embedded.toFixed(1)} ms`);
  const f = await failover();
  step(`failover ${f.toFixed(2)} s`);
  report('cluster', {
    capacity_per_worker: CAPACITY,
    llm_latency_ms: LATENCY_MS,
    rollouts_per_s_1: round(r1, 2),
    rollouts_per_s_2: round(r2, 2),
    rollouts_per_s_4: round(r4, 2),
    scaling_efficiency_2: round(r2 / (2 * r1), 3),
    scaling_efficiency_4: round(r4 / (4 * r1), 3),
    dispatch_cluster_p50_ms: round(d.cluster, 1),
    dispatch_embedded_p50_ms: round(d.embedded, 1),
    dispatch_overhead_p50_ms: round(d.cluster - d.embedded, 1),
    failover_s: round(f, 2),
  });
} finally {
  await llm.close();
  await redis.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
