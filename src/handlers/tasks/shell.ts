import { z } from 'zod';
import { SandboxError } from '../../errors.js';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import { clip, freshShellForEval, parseInstance, runToEnd } from './task-kit.js';
import { defineToolAgent } from '../tool-agent.js';
import { toolSchemas } from '../tools.js';

/**
 * The generic task: `{data_source: "shell", instance_id, prompt, files?, setup?, eval_command,
 * network?, oracle?}`, plus `eval_timeout_s` (default 60). `files` seed `/workspace`; `setup`
 * commands run there before the agent starts (a failing one is a task error).
 */
export const ShellInstanceSchema = z.object({
  prompt: z.string().min(1),
  files: z.record(z.string().min(1), z.string()).optional(),
  setup: z.array(z.string()).optional(),
  eval_command: z.string().min(1),
  network: z.boolean().optional(),
  eval_timeout_s: z.number().positive().max(3600).optional(),
});

const SYSTEM =
  'You are an agent working in a Linux sandbox; your working directory is /workspace. Use ' +
  'execute_bash to run commands and str_replace_editor to view and edit files. When the task is ' +
  'done, call finish.';

/**
 * `shell`: bash, editor and finish in a sandbox seeded from the instance; the eval runs
 * `eval_command` in the run's sandbox after the agent stops, in a fresh shell (nothing the agent
 * defined in its own shell or left running answers for it). Exit status 0 → resolved, reward 1;
 * anything else (or no exit before `eval_timeout_s`) → reward 0. Throws SandboxError when the
 * run left no sandbox to evaluate in.
 */
export const shellHandler: AgentHandler = defineToolAgent({
  name: 'shell',
  tools: toolSchemas(['execute_bash', 'str_replace_editor', 'finish']),
  async init(ctx) {
    const inst = parseInstance('shell', ShellInstanceSchema, ctx.instance);
    const sandbox = await ctx.createSandbox({ files: inst.files, setup: inst.setup, network: inst.network ?? false });
    return {
      sandbox,
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: inst.prompt },
      ],
      state: { evalCommand: inst.eval_command, evalTimeoutMs: (inst.eval_timeout_s ?? 60) * 1000 },
    };
  },
  async eval(ctx) {
    const st = ctx.state as { evalCommand: string; evalTimeoutMs: number };
    if (!ctx.sandbox) throw new SandboxError('shell eval: the run left no sandbox', { stage: 'eval' });
    await freshShellForEval(ctx.sandbox, ctx.signal);
    const r = await runToEnd(ctx.sandbox, st.evalCommand, st.evalTimeoutMs, ctx.signal, ctx.clock);
    const resolved = r.exitCode === 0;
    return { reward: resolved ? 1 : 0, resolved, details: { exit_code: r.exitCode, timed_out: r.timedOut, output: clip(r.output) } };
  },
});
