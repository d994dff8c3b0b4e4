/**
 * The harness benchmark (issue #24). Sections, each adding its figures to one report:
 *
 * 1. **Dialects** (`proxy_over_floor_<dialect>`, target ≤ 1.5 each): per API dialect — chat,
 *    responses, anthropic, google — streaming, the per-call overhead of a `harness` rollout's
 *    proxy (this process's HTTP client on a keep-alive connection → the proxy's Unix socket →
 *    the dialect's reader → the rollout loop → backend pool → a fake token-level backend in this
 *    process, fixed 24-token answer → the dialect's stream back), i.e. the proxied call's p50
 *    minus a direct `HttpBackend.generate` with the same prompt ids, divided by the same
 *    difference for bench/_proxy-floor.ts speaking that dialect (a bare node:http server that
 *    only parses the body, renders the new messages' ids, calls the backend and writes the
 *    dialect's stream by hand), with the same client in the same run. The conversation grows by
 *    the echoed answer and a user message each call, as an agent's does. Also per dialect:
 *    `<dialect>_proxied_p50_ms`, `<dialect>_floor_p50_ms` and both overheads.
 * 2. (Per preset — rollouts/s on the scripted task, the CLI's start-up share — is added by the
 *    presets work as a section of its own: push a function onto `sections`.)
 *
 * The rollouts run in real sandboxes (the agent command only sleeps: this process is the client).
 * Ours and the floor's conversations alternate by blocks of 10 calls (and so do their direct
 * replays), so a shared machine's drifting load falls on both sides alike; the ratio used to move
 * 2x between runs when each side ran whole, one after the other.
 * `cpu_over_floor_<dialect>` is the same ratio in this process's CPU time per call (client,
 * proxy, loop and fake backend all run here): on a loaded shared machine latencies move with
 * other processes' load, CPU time much less. `<dialect>_sleeps_per_call` (and the floor's) count
 * the times per call this process blocked and had to be woken (voluntary context switches): what
 * a loaded machine's run-queue delay multiplies; under 1 per call on both sides, since client,
 * proxy and backend share this event loop.
 *
 * Run: npx tsx bench/harness.ts   (HARNESS_BENCH_CALLS, default 200; HARNESS_BENCH_DIALECTS=chat,google to pick)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { LlmProxy } from '../src/proxy/llm-proxy.js';
import { createRuntime } from '../src/runtime/runtime.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { startFakeLlmServer } from '../src/testing/fake-llm-server.js';
import { DirectCalls, type RecordedCall } from './_direct-calls.js';
import { fixedAnswerEngine } from './_proxy-engine.js';
import { startFloorServer, type FloorDialect } from './_proxy-floor.js';
import { Conversation } from './_proxy-dialect-client.js';
import { median, report, round } from './stats.js';

const CALLS = Number(process.env.HARNESS_BENCH_CALLS ?? 200);
const WARMUP = 30;
/** Calls per block: ours and the floor's conversations alternate by blocks. */
const BLOCK = 10;
const DIALECTS = (process.env.HARNESS_BENCH_DIALECTS?.split(',') ?? ['chat', 'responses', 'anthropic', 'google']) as FloorDialect[];
const figures: Record<string, number | string | boolean> = {};
const codec = createQwen3Codec();
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-harness-'));
fs.chmodSync(stateDir, 0o711);

/** A run's latencies after the warm-up, and per call: this process's CPU (ms) and its voluntary context switches. */
interface Run {
  lat: number[];
  cpu: number;
  sleeps: number;
}

const runOf = (c: { lat: number[]; cpu: number; sleeps: number }): Run => ({ lat: c.lat, cpu: c.cpu / c.lat.length, sleeps: c.sleeps / c.lat.length });

/**
 * The direct replays of both sides' recorded prompts, also alternating by block: the same
 * backend client, so neither side's baseline sees a quieter machine than the other's.
 */
async function directPair(url: string, ours: RecordedCall[], floor: RecordedCall[]): Promise<[Run, Run]> {
  const direct = new DirectCalls(url);
  const acc = [ours, floor].map(() => ({ lat: [] as number[], cpu: 0, sleeps: 0 }));
  try {
    await direct.run(ours.slice(0, WARMUP));
    await direct.run(floor.slice(0, WARMUP));
    for (let i = WARMUP; i < Math.max(ours.length, floor.length); i += BLOCK) {
      for (const [k, list] of [ours, floor].entries()) {
        const a = acc[k]!;
        const vcs0 = process.resourceUsage().voluntaryContextSwitches;
        const r = await direct.run(list.slice(i, i + BLOCK));
        a.lat.push(...r.lat);
        a.cpu += r.cpu;
        a.sleeps += process.resourceUsage().voluntaryContextSwitches - vcs0;
      }
    }
  } finally {
    direct.close();
  }
  return [runOf(acc[0]!), runOf(acc[1]!)];
}

/** The proxies harness rollouts start, with their keys, for the in-process client. */
const proxies: { proxy: LlmProxy; token: string }[] = [];
const listen = LlmProxy.listen.bind(LlmProxy);
LlmProxy.listen = async (o) => {
  const proxy = await listen(o);
  proxies.push({ proxy, token: o.token });
  return proxy;
};

const { engine, seen } = fixedAnswerEngine(codec);
const server = await startFakeLlmServer({ policy: engine, codec });
const provider = createSandboxProvider({ hosts: 1, stateDir: path.join(stateDir, 'p') });
const rt = createRuntime({ codec, backends: [`prorl+${server.url}`], sandboxes: provider, maxIterations: CALLS + 10, retries: { max: 0 } });

/**
 * Section 1: each dialect through a harness rollout's proxy against the floor speaking it, the
 * two conversations alternating by blocks of {@link BLOCK} calls (and so their direct replays):
 * on a shared machine whose load drifts within a run, both sides see the same load.
 */
async function dialectSection(): Promise<void> {
  for (const dialect of DIALECTS) {
    const n = proxies.length;
    const handle = rt.submit({ data_source: 'harness', instance_id: `bench-${dialect}`, command: 'sleep 600', eval_command: 'true', max_llm_calls: CALLS + 1, max_tokens_total: 10_000_000 } as never);
    while (proxies.length === n) await new Promise((r) => setTimeout(r, 20));
    const { proxy, token } = proxies.at(-1)!;
    const floorServer = await startFloorServer(server.url, codec, dialect);
    const oursConv = new Conversation(dialect, proxy.socketPath, token, WARMUP);
    const floorConv = new Conversation(dialect, floorServer.socketPath, 'floor', WARMUP);
    /** Our proxy's prompts, as the engine saw them: the engine serves one side at a time. */
    const oursRecorded: RecordedCall[] = [];
    try {
      for (let done = 0; done < CALLS; done += BLOCK) {
        const k = Math.min(BLOCK, CALLS - done);
        seen.length = 0;
        await oursConv.calls(k);
        oursRecorded.push(...seen);
        await floorConv.calls(k);
      }
    } finally {
      oursConv.close();
      floorConv.close();
      await handle.cancel('measured');
      await handle.result.catch(() => undefined);
      await floorServer.close();
    }
    const ours = runOf(oursConv);
    const floor = runOf(floorConv);
    const [oursDirect, floorDirect] = await directPair(server.url, oursRecorded, floorServer.recorded);
    const over = median(ours.lat) - median(oursDirect.lat);
    const floorOver = median(floor.lat) - median(floorDirect.lat);
    figures[`${dialect}_proxied_p50_ms`] = round(median(ours.lat), 3);
    figures[`${dialect}_floor_p50_ms`] = round(median(floor.lat), 3);
    figures[`${dialect}_overhead_ms`] = round(over, 3);
    figures[`${dialect}_floor_overhead_ms`] = round(floorOver, 3);
    figures[`${dialect}_cpu_per_call_ms`] = round(ours.cpu, 3);
    figures[`${dialect}_floor_cpu_per_call_ms`] = round(floor.cpu, 3);
    figures[`${dialect}_sleeps_per_call`] = round(ours.sleeps, 2);
    figures[`${dialect}_floor_sleeps_per_call`] = round(floor.sleeps, 2);
    figures[`cpu_over_floor_${dialect}`] = round((ours.cpu - oursDirect.cpu) / (floor.cpu - floorDirect.cpu), 2);
    figures[`proxy_over_floor_${dialect}`] = round(over / floorOver, 2);
  }
}

/** The sections, run in order; a later section (per preset) is pushed here. */
const sections: (() => Promise<void>)[] = [dialectSection];

try {
  for (const section of sections) await section();
  figures.load_avg_1m = round(os.loadavg()[0]!, 2);
} finally {
  await rt.close();
  await provider.close();
  await server.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('harness', figures);
