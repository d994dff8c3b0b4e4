import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';

/**
 * The `harness` family end to end: a stdlib Python agent in a real sandbox (bwrap where it
 * works; ROLLOUT_REQUIRE_BWRAP makes it mandatory in CI) reaches its rollout's proxy only
 * through OPENAI_BASE_URL, the oracle backend answers, the eval runs in the same sandbox.
 */
const AGENT = readFileSync(join(import.meta.dirname, 'sandbox-agent.py'), 'utf8');
const codec = new TestCodec();
let root: string;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'harness-sandbox-'));
  provider = createSandboxProvider({ stateDir: root, hosts: 1 });
  runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 60_000 });
});
afterAll(async () => {
  await runtime?.close();
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

/** Proxy socket dirs of this process still on disk. */
async function proxyDirs(): Promise<string[]> {
  return (await readdir(tmpdir())).filter((f) => f.startsWith('rollout-proxy-'));
}

describe('a harness in a real sandbox', () => {
  it('runs the agent against its proxy, answers it from the oracle and grades the sandbox', async () => {
    const before = await proxyDirs();
    const r = await runtime.submit({
      data_source: 'harness',
      instance_id: 'e2e',
      command: 'python3 agent.py tools',
      files: { 'agent.py': AGENT },
      eval_command: 'test "$(cat done.txt)" = ok',
      oracle: [{ tool_calls: [{ name: 'bash', arguments: { command: 'echo ok > done.txt && cat done.txt' } }] }, { content: 'Finished.' }],
    }).result;
    expect([r.outcome, r.finish, r.reward, r.evalDetails?.harness_exit_code], JSON.stringify(r.evalDetails)).toEqual(['completed', 'no_tool_call', 1, 0]);
    const out = String(r.evalDetails?.harness_output);
    expect(out).toMatch(/base http:\/\/127\.0\.0\.1:\d+\/v1/);
    // Another rollout's token is refused; the sandbox's own is served.
    expect(out).toMatch(/wrong-key 401 invalid_api_key/);
    expect(out).toMatch(/models 200 rollout-policy/);
    expect(r.trajectory.turns).toHaveLength(2);
    expect(r.trajectory.diagnostics.continuity).toBe('token-exact');
    expect(r.trajectory.messages.find((m) => m.role === 'tool')?.content).toBe('ok\n');
    expect(await proxyDirs()).toEqual(before);
  });

  it('times out a harness that never calls the model, and leaves no proxy behind', async () => {
    const rt = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 3_000 });
    try {
      const before = await proxyDirs();
      const r = await rt.submit({ data_source: 'harness', instance_id: 'silent', command: 'python3 agent.py silent', files: { 'agent.py': AGENT }, eval_command: 'true' }).result;
      expect([r.outcome, r.finish]).toEqual(['timed-out', 'timeout']);
      for (let i = 0; i < 50 && (await proxyDirs()).length > before.length; i++) await new Promise((res) => setTimeout(res, 20));
      expect(await proxyDirs()).toEqual(before);
    } finally {
      await rt.close();
    }
  });

  it('cancels a working harness: the sandbox and its processes are gone', async () => {
    const h = runtime.submit({ data_source: 'harness', instance_id: 'cancel', command: 'python3 agent.py silent', files: { 'agent.py': AGENT }, eval_command: 'true' });
    while (runtime.get(h.id)?.state !== 'llmCalling') await new Promise((res) => setTimeout(res, 20));
    await h.cancel('test');
    expect((await h.result).outcome).toBe('cancelled');
  });
});
