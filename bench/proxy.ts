/**
 * Bring-your-own-agent benchmark (issue #14): the per-rollout LLM proxy and the `harness` family.
 *
 * 1. `proxy_overhead_p50_ms`: one chat call of a harness in a real bwrap sandbox — Python's
 *    http.client on a keep-alive connection → the loopback listener in the sandbox's network
 *    namespace → the rollout's proxy (Unix socket) → the rollout loop → backend pool → a fake
 *    token-level backend (in this process, fixed 24-token answer) → back — minus a direct
 *    token-level call from this process to the same backend with the same prompt ids and the
 *    same output length (`HttpBackend.generate`, the ids the backend recorded for each proxied
 *    call, replayed in order). Medians over `CALLS` calls after a warm-up, both in this run.
 *    Target ≤ 1 ms.
 * 2. `rollouts_per_s`: 64 concurrent `harness` rollouts of examples/harness/tasks.jsonl (16 of
 *    each task: stdlib Python agents, oracle replay backend, real sandboxes) over the
 *    `rollouts_per_s` of our own tool agent on the same tasks (`shell` family, the same oracle
 *    commands as `execute_bash`), measured one after the other in this run:
 *    `harness_rollouts_per_s`, `tool_agent_rollouts_per_s` and their ratio.
 *
 * Needs root-less or root bwrap (the sandboxes are real) and python3 on the host.
 * Run: npx tsx bench/proxy.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRuntime } from '../src/runtime/runtime.js';
import { HttpBackend } from '../src/llm/http-backend.js';
import type { GenerateRequest } from '../src/llm/llm-client.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { startFakeLlmServer } from '../src/testing/fake-llm-server.js';
import { fixedAnswerEngine } from './_proxy-engine.js';
import { TIMING_AGENT, timingLine } from './_proxy-timing-agent.js';
import { median, report, round } from './stats.js';

const CALLS = Number(process.env.PROXY_BENCH_CALLS ?? 200);
const WARMUP = 30;
const CONCURRENT = 64;
const figures: Record<string, number | string | boolean> = {};
const codec = createQwen3Codec();
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-proxy-'));
// Sandboxed processes run as an unprivileged uid when root: the state dir must be searchable.
fs.chmodSync(stateDir, 0o711);

// ── part 1: proxy overhead per chat call ──
{
  const { engine, seen } = fixedAnswerEngine(codec);
  const server = await startFakeLlmServer({ policy: engine, codec });
  const provider = createSandboxProvider({ hosts: 1, stateDir: path.join(stateDir, 'p1') });
  const rt = createRuntime({ codec, backends: [`prorl+${server.url}`], sandboxes: provider, maxIterations: CALLS + 10, retries: { max: 0 } });
  try {
    const result = await rt.submit({
      data_source: 'harness',
      instance_id: 'bench-proxy-overhead',
      command: `python3 timing_agent.py ${CALLS} ${WARMUP}`,
      files: { 'timing_agent.py': TIMING_AGENT },
      eval_command: 'true',
      max_llm_calls: CALLS + 1,
      max_tokens_total: 10_000_000,
    } as never).result;
    const out = String(result.evalDetails?.harness_output ?? '');
    const proxied = timingLine(out, `outcome ${result.outcome}, error ${JSON.stringify(result.error)}`);
    if (seen.length !== CALLS) throw new Error(`the backend saw ${seen.length} calls, expected ${CALLS}`);
    // The same prompts and output lengths, straight from this process to the same backend.
    const direct = new HttpBackend({ id: 'direct', url: server.url, protocol: 'prorl' });
    const recorded = seen.slice();
    const directMs: number[] = [];
    for (const [i, s] of recorded.entries()) {
      const req: GenerateRequest = {
        rolloutId: 'direct',
        instance: { data_source: 'bench', instance_id: 'direct' },
        turn: i,
        promptIds: s.promptIds,
        maxTokens: s.maxTokens,
        sampling: { temperature: 1 },
        signal: new AbortController().signal,
      };
      const t = performance.now();
      await direct.generate(req, 60_000);
      if (i >= WARMUP) directMs.push(performance.now() - t);
    }
    direct.close();
    figures.proxied_call_p50_ms = round(proxied.p50, 3);
    figures.direct_call_p50_ms = round(median(directMs), 3);
    figures.proxy_overhead_p50_ms = round(proxied.p50 - median(directMs), 3);
    figures.proxy_overhead_target_ms = 1;
    figures.proxy_calls_measured = proxied.n;
    figures.proxy_continuity = String((result.trajectory as { diagnostics?: { continuity?: string } }).diagnostics?.continuity ?? 'unknown');
  } finally {
    await rt.close();
    await provider.close();
    await server.close();
  }
}

// ── part 2: 64 concurrent harness rollouts vs our own tool agent on the same tasks ──
interface HarnessTask {
  instance_id: string;
  command: string;
  files: Record<string, string>;
  eval_command: string;
  max_llm_calls: number;
  max_tokens_total: number;
  oracle: { content?: string; tool_calls?: { name: string; arguments: Record<string, unknown> }[] }[];
}
const tasks = fs
  .readFileSync(path.resolve(import.meta.dirname, '../examples/harness/tasks.jsonl'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as HarnessTask);

class SkipThroughput extends Error {}

/** The same task for our own tool agent: the task text as the prompt, the oracle's commands as `execute_bash`, then `finish`. */
function asShellTask(t: HarnessTask): Record<string, unknown> {
  const files = Object.fromEntries(Object.entries(t.files).filter(([k]) => !k.startsWith('agent/')));
  const oracle = t.oracle.map((turn) =>
    turn.tool_calls ? { tool_calls: turn.tool_calls.map((c) => ({ name: 'execute_bash', arguments: c.arguments })) } : { tool_calls: [{ name: 'finish', arguments: { message: turn.content ?? '' } }] },
  );
  return { data_source: 'shell', instance_id: t.instance_id, prompt: t.files['agent/TASK.md'], files, eval_command: t.eval_command, oracle };
}

async function throughput(label: string, instances: Record<string, unknown>[]): Promise<number> {
  const provider = createSandboxProvider({ stateDir: path.join(stateDir, label) });
  const rt = createRuntime({ backends: ['oracle'], sandboxes: provider, stages: { init: CONCURRENT, run: CONCURRENT, eval: CONCURRENT }, retries: { max: 0 } });
  try {
    // Warm-up: one of each (sandbox hosts started, JIT).
    await Promise.all(instances.slice(0, tasks.length).map((inst, i) => rt.submit({ ...inst, trajectory_id: `w${i}` } as never).result));
    const t0 = performance.now();
    const results = await Promise.all(instances.map((inst, i) => rt.submit({ ...inst, trajectory_id: String(i) } as never).result));
    const s = (performance.now() - t0) / 1000;
    const resolved = results.filter((r) => r.resolved).length;
    figures[`${label}_resolved`] = `${resolved}/${results.length}`;
    if (resolved !== results.length) {
      const bad = results.find((r) => !r.resolved)!;
      console.error(`${label}: ${results.length - resolved} unresolved, e.g. ${bad.instanceId}: outcome ${bad.outcome}, finish ${bad.finish}, turns ${bad.trajectory.turns.length}, ${JSON.stringify(bad.error ?? bad.evalDetails).slice(0, 500)}`);
    }
    return results.length / s;
  } finally {
    await rt.close();
    await provider.close();
  }
}

try {
  // PROXY_BENCH_OVERHEAD_ONLY=1: part 1 alone (seconds instead of minutes), for alternated before/after runs.
  if (process.env.PROXY_BENCH_OVERHEAD_ONLY === '1') throw new SkipThroughput();
  const harness = Array.from({ length: CONCURRENT }, (_, i) => ({ ...tasks[i % tasks.length]!, data_source: 'harness' }) as Record<string, unknown>);
  const shell = Array.from({ length: CONCURRENT }, (_, i) => asShellTask(tasks[i % tasks.length]!));
  const h = await throughput('harness', harness);
  const a = await throughput('tool_agent', shell);
  figures.harness_rollouts_per_s = round(h, 2);
  figures.tool_agent_rollouts_per_s = round(a, 2);
  figures.rollouts_per_s = round(h / a, 3);
} catch (e) {
  if (!(e instanceof SkipThroughput)) throw e;
} finally {
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('proxy', figures);
