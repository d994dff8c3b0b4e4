import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PresetName } from '../../../src/handlers/tasks/harness-presets/index.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { startLlmServeProcess, stopServerProcesses, type ServerProcess } from '../../helpers/server-process.js';
import { expectTokenExact, install, presetProcesses, TASK, testTag } from './preset-kit.js';

/**
 * Two presets against a real engine emitting garbage (`rollout llm-serve` with the tiny random
 * model, Qwen3's vocabulary): whatever the CLI makes of it, it ends by itself (an answer or an
 * error) within its budget, and every token it was sent is the engine's, token for token.
 */
// Two chat-dialect CLIs with prompts the tiny engine reads in seconds (Claude Code's ~20k tokens took it two minutes here).
const PRESETS: PresetName[] = ['pi', 'opencode'];
let server: ServerProcess;
let root: string;
let provider: SandboxProvider;
let pool: BackendPool;
let runtime: EmbeddedRuntime;
beforeAll(async () => {
  await Promise.all(PRESETS.map(install));
  // The CLIs' system prompts and tool schemas are ~10k Qwen3 tokens.
  server = await startLlmServeProcess(['--model', ensureTinyGguf({ seed: 3 }), '--port', '0', '--parallel', '1', '--context-size', '32768']);
  root = await mkdtemp(join(tmpdir(), 'preset-tiny-'));
  provider = createSandboxProvider({ stateDir: root, hosts: 1 });
  pool = new BackendPool({ probeIntervalMs: 0 });
  pool.addBackend({ id: 'tiny', url: server.url, protocol: 'prorl', weightVersion: 'w0' });
  runtime = createRuntime({ codec: createQwen3Codec(), llm: pool, sandboxes: provider, retries: { max: 0 }, budgetMs: 150_000, maxModelLen: 32_768 });
}, 600_000);
afterAll(async () => {
  await runtime?.close();
  await pool?.close();
  await provider?.close();
  await stopServerProcesses();
  if (root) await rm(root, { recursive: true, force: true });
});

describe('presets against llm-serve --tiny (a real engine emitting garbage)', { timeout: 200_000 }, () => {
  for (const preset of PRESETS) {
    it(`${preset}: the CLI ends by itself within its budget and the trajectory is the engine's, token for token`, async () => {
      const { tag, env } = testTag(`tiny-${preset}`);
      const r = await runtime.submit({ data_source: 'harness', instance_id: `tiny-${preset}`, preset, env, ...TASK, max_llm_calls: 4 }, { max_output_tokens: 24, temperature: 1, seed: 7 }).result;
      const why = JSON.stringify({ o: r.outcome, f: r.finish, e: r.error, d: r.evalDetails, turns: r.trajectory.turns.map((t) => [t.promptIds.length, t.outputIds.length, t.finishReason, t.latencyMs]) });
      // Garbage solves nothing; the eval still ran in the sandbox.
      expect([r.reward, r.evalDetails?.exit_code], why).toEqual([0, 1]);
      // Exited by itself (an answer or its own error), not stopped by the budget.
      expect(r.outcome, why).not.toBe('timed-out');
      expect(r.evalDetails?.harness_exit_code, why).not.toBeNull();
      expect(r.trajectory.turns.length, why).toBeGreaterThan(0);
      const samples = ((await (await fetch(`${server.url}/debug/samples`)).json()) as { samples: LlamaSample[] }).samples.filter((s) => s.instanceId === r.instanceId);
      expect(r.trajectory.turns.map((t) => [t.promptIds, t.outputIds, t.logprobs])).toEqual(samples.map((s) => [s.promptIds, s.outputIds, s.logprobs]));
      expectTokenExact(r, { answeredOnly: false });
      expect(await presetProcesses(tag)).toEqual([]);
    });
  }
});
