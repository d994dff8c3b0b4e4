import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { TaskError } from '../../../src/errors.js';
import type { HandlerContext } from '../../../src/proxy/agent-contract.js';
import { harnessHandler } from '../../../src/handlers/tasks/harness.js';
import { systemClock } from '../../../src/clock.js';
import type { Sandbox, SandboxSpec } from '../../../src/sandbox/sandbox.js';

function ctx(instance: Record<string, unknown>, signal: AbortSignal, specs: SandboxSpec[] = []): HandlerContext {
  const sandbox = { id: 'sb', bash: async () => ({ output: '', exitCode: 0, cwd: '/workspace', timedOut: false, truncated: false }), close: async () => {} } as unknown as Sandbox;
  return {
    rolloutId: 'r1',
    instance: { data_source: 'harness', ...instance },
    sampling: {},
    signal,
    clock: systemClock,
    createSandbox: async (spec) => {
      specs.push(spec);
      return sandbox;
    },
  };
}

describe('the harness handler', () => {
  it('refuses an instance without command or eval_command as a task error naming both fields', async () => {
    const err = await harnessHandler.init(ctx({ max_llm_calls: 0 }, new AbortController().signal)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect((err as Error).message).toMatch(/field 'command'/);
    expect((err as Error).message).toMatch(/field 'eval_command'/);
    expect((err as Error).message).toMatch(/field 'max_llm_calls'/);
  });

  it('starts the proxy before the sandbox, hands it over as llmProxy, and removes it when the attempt ends', async () => {
    const ac = new AbortController();
    const specs: SandboxSpec[] = [];
    const r = await harnessHandler.init(ctx({ command: 'python3 agent.py', eval_command: 'true', files: { 'agent.py': 'pass' }, max_tokens_total: 1000 }, ac.signal, specs));
    const spec = specs[0] as SandboxSpec & { llmProxy: NonNullable<SandboxSpec['llmProxy']> };
    expect(spec.network).toBe(false);
    expect(spec.files).toEqual({ 'agent.py': 'pass' });
    expect(spec.llmProxy.token).toMatch(/^rk-[0-9a-f]{48}$/);
    expect(existsSync(spec.llmProxy.socketPath)).toBe(true);
    expect(r.external?.limits).toEqual({ maxLlmCalls: undefined, maxTokensTotal: 1000 });
    await r.external!.stop('test');
    ac.abort();
    await expect.poll(() => existsSync(dirname(spec.llmProxy.socketPath)), { timeout: 10_000 }).toBe(false);
  });
});
