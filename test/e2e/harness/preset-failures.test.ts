import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { install, presetProcesses, TASK, testTag } from './preset-kit.js';

/** How real CLIs fail: not installed, a non-zero exit, a hang. */
const codec = new TestCodec();
let root: string;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;
beforeAll(async () => {
  await Promise.all([install('pi'), install('codex')]);
  root = await mkdtemp(join(tmpdir(), 'preset-fail-'));
  provider = createSandboxProvider({ stateDir: root, hosts: 1 });
  runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 25_000, maxModelLen: 1_000_000 });
}, 600_000);
afterAll(async () => {
  await runtime?.close();
  await provider?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

/** Host pids whose command line contains `text`. */
async function processesWith(text: string): Promise<number[]> {
  const out: number[] = [];
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    if ((await readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '')).includes(text)) out.push(Number(p));
  }
  return out;
}

describe('presets that fail', { timeout: 120_000 }, () => {
  it('a preset whose CLI is not in the store is a task-error naming the install command, with no download', async () => {
    const r = await runtime.submit({ data_source: 'harness', instance_id: 'missing', preset: 'pi', version: '0.0.1-missing', ...TASK }).result;
    expect([r.outcome, r.error?.code]).toEqual(['task-error', 'HARNESS_NOT_INSTALLED']);
    expect(r.error?.message).toMatch(/run `rollout harness install pi@0\.0\.1-missing`/);
  });

  it('a CLI exiting non-zero: its exit code and log are in the result, and the eval still runs', async () => {
    const { tag, env } = testTag('bad-flag');
    const r = await runtime.submit({ data_source: 'harness', instance_id: 'bad-flag', preset: 'codex', env, args: ['--no-such-flag'], ...TASK, eval_command: 'echo evaluated; false' }).result;
    expect([r.outcome, r.reward], JSON.stringify(r.evalDetails)).toEqual(['completed', 0]);
    expect(r.evalDetails?.harness_exit_code).toBe(2);
    expect(String(r.evalDetails?.harness_output)).toMatch(/--no-such-flag/);
    expect([r.evalDetails?.exit_code, r.evalDetails?.output]).toEqual([1, 'evaluated\n']);
    expect(await presetProcesses(tag)).toEqual([]);
  });

  it('a CLI that hangs (its own tool never returns) is ended by the budget, with nothing left running', async () => {
    const { tag, env } = testTag('hang');
    const h = runtime.submit({
      data_source: 'harness',
      instance_id: 'hang',
      preset: 'pi',
      env,
      ...TASK,
      oracle: [{ tool_calls: [{ name: 'bash', arguments: { command: `sleep 3600; echo ${tag}` } }] }, { content: 'never' }],
    });
    // While it hangs, its processes are seen by their tag (so the check after the end can fail).
    await expect.poll(async () => (await presetProcesses(tag)).length > 0 && (await processesWith(tag)).length > 0, { timeout: 20_000 }).toBe(true);
    const r = await h.result;
    expect([r.outcome, r.finish]).toEqual(['timed-out', 'timeout']);
    expect(r.trajectory.turns).toHaveLength(1);
    expect(await presetProcesses(tag)).toEqual([]);
    expect(await processesWith(tag)).toEqual([]);
  });
});
