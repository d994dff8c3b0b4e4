import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { defaultHarnessStoreDir, HARNESS_PRESETS, HarnessStore, type PresetName } from '../../../src/handlers/tasks/harness-presets/index.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';

const ROLLOUT = join(import.meta.dirname, '../../../bin/rollout.js');

/** The store the tests install into and run from: ROLLOUT_HARNESS_DIR, else the machine's (a cache kept across runs, as `.ci/run` keeps it). */
export const store = new HarnessStore(defaultHarnessStoreDir());

/**
 * Installs `preset` at its default version with `rollout harness install` (from the npm
 * registry; a no-op once it is in the store). Returns the version.
 */
export async function install(preset: PresetName): Promise<string> {
  const version = HARNESS_PRESETS[preset].defaultVersion;
  if (store.installed(preset, version)) return version;
  const out = await new Promise<{ code: number | null; text: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [ROLLOUT, 'harness', 'install', `${preset}@${version}`, '--harness-dir', store.dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => (text += d.toString()));
    child.stderr.on('data', (d: Buffer) => (text += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, text }));
  });
  if (out.code !== 0) throw new Error(`rollout harness install ${preset}@${version} failed (${out.code}):\n${out.text}`);
  return version;
}

/**
 * A tag for one rollout's processes: passed as the preset's `env` (`ROLLOUT_TEST_TAG`), so the
 * CLI and everything it starts (daemons included) carry it, and suites running at once in other
 * test workers do not see each other's.
 */
export function testTag(name: string): { tag: string; env: Record<string, string> } {
  const tag = `${name}-${process.pid}-${Date.now()}`;
  return { tag, env: { ROLLOUT_TEST_TAG: tag } };
}

/** Host pids of processes (the sandbox's are host processes too) whose environment has `ROLLOUT_TEST_TAG=tag`. */
export async function presetProcesses(tag: string): Promise<number[]> {
  const out: number[] = [];
  const needle = `ROLLOUT_TEST_TAG=${tag}\0`;
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const env = await readFile(`/proc/${p}/environ`, 'utf8').catch(() => '');
    if (`${env}\0`.includes(needle)) out.push(Number(p));
  }
  return out;
}

/**
 * Every sampled token is in the trajectory where the mask is 1, with its logprob, in order, in
 * each segment; and every request the CLI made was answered (200s only, one per turn).
 */
export function expectTokenExact(r: RolloutResult, opts: { answeredOnly?: boolean } = {}): void {
  const t = r.trajectory;
  expect(t.tokens.length).toBe(t.lossMask.length);
  expect(t.logprobs.length).toBe(t.lossMask.length);
  const sampled = t.turns.flatMap((x) => x.outputIds);
  const sampledLp = t.turns.flatMap((x) => x.logprobs);
  expect(sampled.length).toBeGreaterThan(0);
  const masked = t.tokens.filter((_, i) => t.lossMask[i] === 1);
  const maskedLp = t.logprobs.filter((_, i) => t.lossMask[i] === 1);
  expect(masked).toEqual(sampled);
  expect(maskedLp).toEqual(sampledLp);
  // Each turn's prompt is in the record before its output (its own segment's prefix).
  for (const seg of t.segments ?? [{ tokenStart: 0, tokenEnd: t.tokens.length, turnStart: 0, turnEnd: t.turns.length }]) {
    const tokens = t.tokens.slice(seg.tokenStart, seg.tokenEnd);
    for (const turn of t.turns.slice(seg.turnStart, seg.turnEnd)) {
      const at = turn.promptIds.length;
      expect(tokens.slice(0, at)).toEqual(turn.promptIds);
      expect(tokens.slice(at, at + turn.outputIds.length)).toEqual(turn.outputIds);
    }
  }
  const statuses = r.evalDetails?.proxy_requests as Record<string, number>;
  // A request refused by a limit (429 past max_llm_calls) was answered, with an error; none may be lost.
  if (opts.answeredOnly === false) expect(statuses['200'], JSON.stringify(statuses)).toBe(t.turns.length);
  else expect(statuses, 'every request answered').toEqual({ '200': t.turns.length });
}

/** The small task every preset solves: write a file, run a command, read its output, finish. */
export const TASK = {
  instruction: 'Write answer.py that prints 6*7, run it into out.txt, and tell me what it printed.',
  eval_command: 'test "$(python3 answer.py)" = 42 && test "$(cat out.txt)" = 42',
};

/** A tool call of the oracle's turns. */
type Call = { name: string; arguments: Record<string, unknown> };

/**
 * One e2e suite for `preset`: the CLI at its default version (installed from the npm registry
 * first), unchanged, in a real sandbox, its proxy answered by the oracle backend replaying
 * `turns` (the CLI's own tool names and argument shapes): it must solve {@link TASK}, leave a
 * token-exact trajectory and answered requests, and leave nothing running.
 */
export function describePreset(preset: PresetName, turns: { write: Call; run: Call; read: Call }): void {
  const codec = new TestCodec();
  let root: string;
  let provider: SandboxProvider;
  let runtime: EmbeddedRuntime;
  beforeAll(async () => {
    await install(preset);
    root = await mkdtemp(join(tmpdir(), `preset-${preset}-`));
    provider = createSandboxProvider({ stateDir: root, hosts: 1 });
    // The CLIs' system prompts and tool schemas are tens of thousands of characters: the test codec's tokens are characters.
    runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 180_000, maxModelLen: 1_000_000 });
  }, 600_000);
  afterAll(async () => {
    await runtime?.close();
    await provider?.close();
    if (root) await rm(root, { recursive: true, force: true });
  });

  describe(`the ${preset} preset: the CLI unchanged in a real sandbox`, { timeout: 240_000 }, () => {
    it(`solves the task with its own tools (${turns.write.name}, ${turns.run.name}, ${turns.read.name}), and the trajectory is token-exact`, async () => {
      const { tag, env } = testTag(preset);
      const r = await runtime.submit({
        data_source: 'harness',
        instance_id: `${preset}-42`,
        preset,
        env,
        ...TASK,
        oracle: [{ tool_calls: [turns.write] }, { tool_calls: [turns.run] }, { tool_calls: [turns.read] }, { content: 'It printed 42.' }],
      }).result;
      const why = JSON.stringify({ e: r.error, d: r.evalDetails });
      expect([r.outcome, r.reward, r.evalDetails?.harness_exit_code], why).toEqual(['completed', 1, 0]);
      expect(r.evalDetails?.preset).toBe(`${preset}@${HARNESS_PRESETS[preset].defaultVersion}`);
      expect(r.trajectory.turns, why).toHaveLength(4);
      // Its tools ran: what the command printed came back to the model as a tool result.
      expect(r.trajectory.messages.filter((m) => m.role === 'tool').map((m) => m.content).join('\n')).toMatch(/42/);
      expectTokenExact(r);
      expect(await presetProcesses(tag)).toEqual([]);
    });
  });
}
