import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { ScriptedPolicy } from '../../../src/testing/scripted-policy.js';

/**
 * Evals outlive the bash tool's no-new-output timeout: a silent test suite is waited for, not
 * scored 0. The provider's no-output timeout is cut to 200 ms so a 1.5 s silent command shows it.
 */
let root: string;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'silent-eval-'));
  provider = createSandboxProvider({ stateDir: root, hosts: 1, timeouts: { noOutputMs: 200 } });
  const codec = new TestCodec();
  runtime = createRuntime({ codec, llm: new ScriptedPolicy({ codec }), sandboxes: provider, retries: { max: 0 } });
});
afterAll(async () => {
  await runtime?.close();
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

describe('a silent eval command', () => {
  it('resolves a shell task whose eval_command is quiet longer than the no-output timeout', async () => {
    const r = await runtime.submit({ data_source: 'shell', instance_id: 'quiet', prompt: 'p', eval_command: 'sleep 1.5 && test -f done', oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'touch done' } }, { name: 'finish', arguments: {} }] }] }).result;
    expect([r.outcome, r.resolved, r.evalDetails?.exit_code]).toEqual(['completed', true, 0]);
  });
  it('scores a task 0 when its eval_command outlives eval_timeout_s', async () => {
    const r = await runtime.submit({ data_source: 'shell', instance_id: 'slow', prompt: 'p', eval_command: 'sleep 30', eval_timeout_s: 1, oracle: [{ tool_calls: [{ name: 'finish', arguments: {} }] }] }).result;
    expect([r.outcome, r.reward, r.evalDetails?.timed_out]).toEqual(['completed', 0, true]);
  });
});
