import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { expectTokenExact, install, presetProcesses } from './preset-kit.js';

const codec = new TestCodec();
let root: string;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;
beforeAll(async () => {
  await install('qwen-code');
  root = await mkdtemp(join(tmpdir(), 'preset-qwen-'));
  provider = createSandboxProvider({ stateDir: root, hosts: 1 });
  runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 180_000, maxModelLen: 1_000_000 });
}, 600_000);
afterAll(async () => {
  await runtime?.close();
  await provider?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

describe('the qwen-code preset: Qwen Code unchanged in a real sandbox', { timeout: 240_000 }, () => {
  it('solves the task with its own tools (write_file, run_shell_command, read_file), and the trajectory is token-exact', async () => {
    const r = await runtime.submit({
      data_source: 'harness',
      instance_id: 'qwen-42',
      preset: 'qwen-code',
      instruction: 'Write answer.py that prints 6*7, run it into out.txt, and tell me what it printed.',
      eval_command: 'test "$(python3 answer.py)" = 42 && test "$(cat out.txt)" = 42',
      oracle: [
        { tool_calls: [{ name: 'write_file', arguments: { file_path: '/workspace/answer.py', content: 'print(6 * 7)\n' } }] },
        { tool_calls: [{ name: 'run_shell_command', arguments: { command: 'python3 answer.py > out.txt', description: 'run it' } }] },
        { tool_calls: [{ name: 'read_file', arguments: { file_path: '/workspace/out.txt' } }] },
        { content: 'It printed 42.' },
      ],
    }).result;
    const why = JSON.stringify({ e: r.error, d: r.evalDetails });
    expect([r.outcome, r.reward, r.evalDetails?.harness_exit_code], why).toEqual(['completed', 1, 0]);
    expect(r.trajectory.turns).toHaveLength(4);
    // Its tools ran: the tool results came back into the conversation.
    expect(r.trajectory.messages.filter((m) => m.role === 'tool').map((m) => m.content).join('\n')).toMatch(/42/);
    expectTokenExact(r);
    expect(await presetProcesses('qwen-code')).toEqual([]);
  });
});
