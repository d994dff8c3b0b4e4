/**
 * Backend pool benchmark.
 *
 * 1. Throughput of the three selection policies over 4 in-process fake servers whose service
 *    times are 1×, 1×, 2×, 4× a base, with 256 concurrent rollouts × 5 turns each (a rollout
 *    keeps its backend across turns when the policy allows). Each server serves at most
 *    `SLOTS` requests at once (an engine's batch) and queues the rest. (With unbounded
 *    parallelism and these latencies the run is CPU-bound on 2 cores and measures the HTTP
 *    stack, not the policy, so that model is not reported.)
 * 2. Pool overhead: a sequential call through the pool minus the same call straight to the fake
 *    server over the same keep-alive connection and protocol code (medians of interleaved runs).
 *
 * Run: npx tsx bench/backends.ts
 */
import { BackendPool } from '../src/llm/backend-pool.js';
import { HttpBackend } from '../src/llm/http-backend.js';
import type { GenerateRequest } from '../src/llm/llm-client.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { startFakeLlmServer, type FakeLlmServer } from '../src/testing/fake-llm-server.js';
import { randomEngine } from '../src/testing/fake-llm-policies.js';

const ROLLOUTS = 256;
const TURNS = 5;
const BASE_MS = 20;
const SLOTS = 8;
const FACTORS = [1, 1, 2, 4];
const POLICIES = ['least-loaded', 'cumulative-count', 'round-robin'] as const;

const codec = createQwen3Codec();
const engine = randomEngine(codec, { seed: 7, maxLength: 16 });

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function request(rollout: number, turn: number, promptIds: number[], preferredBackendId: string | undefined): GenerateRequest {
  return {
    rolloutId: `r${rollout}`,
    instance: { data_source: 'bench', instance_id: `i${rollout}` },
    turn,
    promptIds,
    maxTokens: 16,
    sampling: { temperature: 1 },
    preferredBackendId,
    signal: new AbortController().signal,
  };
}

async function throughput(policy: (typeof POLICIES)[number], servers: FakeLlmServer[]): Promise<number> {
  const pool = new BackendPool({ policy, probeIntervalMs: 0 });
  servers.forEach((s, i) => pool.addBackend({ id: `b${i}`, url: s.url, protocol: 'prorl' }));
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: ROLLOUTS }, async (_, r) => {
      let prompt = [151644, 872, 198, 100 + r, 151645, 198, 151644, 77091, 198];
      let prev: string | undefined;
      for (let turn = 0; turn < TURNS; turn++) {
        const res = await pool.generate(request(r, turn, prompt, prev));
        prev = res.backendId;
        prompt = [...prompt, ...res.outputIds, 198, 151644, 872, 198, 42, 151645, 198, 151644, 77091, 198];
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  await pool.close();
  return ROLLOUTS / s;
}

async function policyRound(): Promise<Record<string, number>> {
  const servers = await Promise.all(FACTORS.map((f) => startFakeLlmServer({ policy: engine, latencyMs: BASE_MS * f, maxConcurrent: SLOTS })));
  const out: Record<string, number> = {};
  try {
    await throughput('least-loaded', servers); // warm-up: sockets, JIT
    for (const p of POLICIES) {
      const runs: number[] = [];
      for (let i = 0; i < 3; i++) runs.push(await throughput(p, servers));
      out[p] = median(runs);
      console.log(`${p.padEnd(17)} ${out[p]!.toFixed(1)} rollouts/s (runs: ${runs.map((x) => x.toFixed(1)).join(', ')})`);
    }
  } finally {
    await Promise.all(servers.map((s) => s.close()));
  }
  return out;
}

async function overhead(): Promise<{ direct: number; pooled: number; diff: number }> {
  const server = await startFakeLlmServer({ policy: engine });
  const pool = new BackendPool({ probeIntervalMs: 0 });
  pool.addBackend({ id: 'p', url: server.url, protocol: 'prorl' });
  const direct = new HttpBackend({ id: 'd', url: server.url, protocol: 'prorl' });
  const prompt = [151644, 872, 198, 100, 151645, 198, 151644, 77091, 198];
  const d: number[] = [];
  const p: number[] = [];
  const diffs: number[] = [];
  for (let i = 0; i < 4000; i++) {
    const req = request(i, 0, prompt, 'p');
    const t0 = performance.now();
    await direct.generate(req, 60_000);
    const t1 = performance.now();
    await pool.generate(req);
    const t2 = performance.now();
    if (i >= 500) {
      d.push(t1 - t0);
      p.push(t2 - t1);
      diffs.push(t2 - t1 - (t1 - t0));
    }
  }
  direct.close();
  await pool.close();
  await server.close();
  return { direct: median(d), pooled: median(p), diff: median(diffs) };
}

const cap = await policyRound();
const ov = await overhead();
console.log(`direct call p50 ${ov.direct.toFixed(3)} ms, through the pool p50 ${ov.pooled.toFixed(3)} ms, paired difference p50 ${ov.diff.toFixed(3)} ms`);
const figures = {
  least_loaded_per_s: round(cap['least-loaded']!),
  cumulative_count_per_s: round(cap['cumulative-count']!),
  round_robin_per_s: round(cap['round-robin']!),
  least_loaded_over_cumulative: round(cap['least-loaded']! / cap['cumulative-count']!),
  direct_call_p50_ms: round(ov.direct, 4),
  pool_call_p50_ms: round(ov.pooled, 4),
  pool_overhead_p50_ms: round(Math.max(0, ov.pooled - ov.direct), 4),
  pool_overhead_paired_p50_ms: round(ov.diff, 4),
};
console.log(JSON.stringify({ bench: 'backends', figures }));

function round(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
