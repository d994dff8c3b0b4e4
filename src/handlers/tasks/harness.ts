import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { SandboxError, TaskError } from '../../errors.js';
import { LlmProxy } from '../../proxy/llm-proxy.js';
import { SandboxHarness } from '../../proxy/sandbox-harness.js';
import type { SandboxSpec } from '../../sandbox/sandbox.js';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import { clip, freshShellForEval, parseInstance, runToEnd } from './task-kit.js';

/**
 * The `harness` task: `{data_source: "harness", instance_id, command, files?, setup?,
 * eval_command, eval_timeout_s?, max_llm_calls?, max_tokens_total?, oracle?}`. `files` seed
 * `/workspace` and `setup` runs there, as in the `shell` family; `command` is the agent program.
 */
export const HarnessInstanceSchema = z.object({
  command: z.string().min(1),
  files: z.record(z.string().min(1), z.string()).optional(),
  setup: z.array(z.string()).optional(),
  eval_command: z.string().min(1),
  eval_timeout_s: z.number().positive().max(3600).optional(),
  /** Chat requests answered at most; the next one is refused (429) and the loop ends `max_iterations`. Default: the runtime's max iterations. */
  max_llm_calls: z.number().int().positive().max(100_000).optional(),
  /** Tokens of the trajectory (every segment, prompt and sampled) at most; past it the loop ends `length`. */
  max_tokens_total: z.number().int().positive().optional(),
  /** The proxy's API key (the agent's `OPENAI_API_KEY`); default a fresh random one. Polar sets its session id here. */
  api_key: z.string().regex(/^[A-Za-z0-9_-]{16,200}$/, 'must be 16 to 200 characters of [A-Za-z0-9_-]').optional(),
});

interface HarnessState {
  evalCommand: string;
  evalTimeoutMs: number;
  agent: SandboxHarness;
}

/**
 * `harness`: bring your own agent. The handler starts the rollout's LLM proxy on a Unix socket
 * in a private temp dir, starts a sandbox that reaches it (`OPENAI_BASE_URL` / `OPENAI_API_KEY`,
 * no other network), seeds it, and runs `command` there; the runtime's loop then answers the
 * command's chat requests (docs/proxy.md). Once the loop ends (the command exited, or a limit)
 * the eval runs `eval_command` in the same sandbox, in a fresh shell: exit 0 → resolved,
 * reward 1, else 0 — as the `shell` family. The proxy closes and its socket dir is removed when
 * the attempt ends, on every path. `act` is never called.
 */
export const harnessHandler: AgentHandler = {
  name: 'harness',
  async init(ctx) {
    const inst = parseInstance('harness', HarnessInstanceSchema, ctx.instance);
    const dir = await mkdtemp(join(tmpdir(), 'rollout-proxy-'));
    let proxy: LlmProxy | null = null;
    const cleanup = async (): Promise<void> => {
      await proxy?.close();
      await rm(dir, { recursive: true, force: true });
    };
    try {
      // The sandbox's own uid must reach the socket through the dir; the token is the gate.
      await chmod(dir, 0o755);
      const token = inst.api_key ?? `rk-${randomBytes(24).toString('hex')}`;
      proxy = await LlmProxy.listen({ socketPath: join(dir, 'llm.sock'), token });
      // Bound to the attempt: aborted when it ends on any path (done, failed, timed out, cancelled).
      if (ctx.signal.aborted) throw new SandboxError('harness init: the rollout ended', { stage: 'init' });
      ctx.signal.addEventListener('abort', () => void cleanup(), { once: true });
      const spec: SandboxSpec = { files: inst.files, setup: inst.setup, network: false, llmProxy: { socketPath: proxy.socketPath, token } };
      const sandbox = await ctx.createSandbox(spec);
      const agent = new SandboxHarness(sandbox, inst.command, proxy, { maxLlmCalls: inst.max_llm_calls, maxTokensTotal: inst.max_tokens_total }, ctx.clock);
      const state: HarnessState = { evalCommand: inst.eval_command, evalTimeoutMs: (inst.eval_timeout_s ?? 60) * 1000, agent };
      return { sandbox, messages: [], tools: [], external: agent, state };
    } catch (err) {
      if (!ctx.signal.aborted) await cleanup();
      throw err;
    }
  },
  act() {
    return Promise.reject(new TaskError('harness: act is never called; the loop answers the harness through its proxy', { code: 'HARNESS_ACT' }));
  },
  async eval(ctx) {
    const st = ctx.state as HarnessState;
    if (!ctx.sandbox) throw new SandboxError('harness eval: the run left no sandbox', { stage: 'eval' });
    await st.agent.stop('evaluating');
    await freshShellForEval(ctx.sandbox, ctx.signal);
    const r = await runToEnd(ctx.sandbox, st.evalCommand, st.evalTimeoutMs, ctx.signal, ctx.clock);
    const resolved = r.exitCode === 0;
    return {
      reward: resolved ? 1 : 0,
      resolved,
      details: { exit_code: r.exitCode, timed_out: r.timedOut, output: clip(r.output), harness_exit_code: st.agent.exitCode, harness_output: clip(st.agent.output) },
    };
  },
};
