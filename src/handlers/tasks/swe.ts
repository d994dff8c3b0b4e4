import { resolve } from 'node:path';
import { z } from 'zod';
import { SandboxError } from '../../errors.js';
import type { AgentHandler } from '../agent-handler.js';
import type { Sandbox, SandboxSpec } from '../../sandbox/sandbox.js';
import { clip, parseInstance, runToEnd, settleShell, shellQuote } from './task-kit.js';
import { defineToolAgent } from '../tool-agent.js';
import { toolSchemas } from '../tools.js';
import type { Clock } from '../../runtime/clock.js';

/**
 * A software-engineering instance: a small repository with a bug and tests that fail on it.
 * The repository comes from `files` (relative path → content) or `repo_dir` (a host directory,
 * absolute or relative to the working directory of the runtime; copied, never shared; a `.git`
 * in it is kept). `problem_statement` (or `prompt`) is the issue text; `test_command` decides:
 * exit 0 → resolved. `test_files` are written over the patched tree before the tests run, so
 * the agent cannot pass by editing the tests. `setup` runs after the repository is in place.
 */
export const SweInstanceSchema = z
  .object({
    problem_statement: z.string().min(1).optional(),
    prompt: z.string().min(1).optional(),
    files: z.record(z.string().min(1), z.string()).optional(),
    repo_dir: z.string().min(1).optional(),
    setup: z.array(z.string()).optional(),
    test_command: z.string().min(1),
    test_files: z.record(z.string().min(1), z.string()).optional(),
    eval_timeout_s: z.number().positive().max(3600).default(120),
  })
  .transform((v, ctx) => {
    const problem = v.problem_statement ?? v.prompt;
    if (problem === undefined) ctx.addIssue({ code: 'custom', path: ['problem_statement'], message: "required: the issue text ('problem_statement' or 'prompt')" });
    if (!v.files && !v.repo_dir) ctx.addIssue({ code: 'custom', path: ['files'], message: "required: the repository ('files' or 'repo_dir')" });
    return { ...v, problem: problem ?? '' };
  });
type SweInstance = z.output<typeof SweInstanceSchema>;

/** The tag the workspace's original state carries; the agent's diff is taken against it. */
const BASE_TAG = 'rollout-base';

/**
 * Git without a user config: identity and `safe.directory` come from the environment, because the
 * sandbox's home may be read-only and the workspace may belong to another uid than the shell.
 */
const GIT_ENV: Record<string, string> = {
  GIT_AUTHOR_NAME: 'rollout',
  GIT_AUTHOR_EMAIL: 'rollout@localhost',
  GIT_COMMITTER_NAME: 'rollout',
  GIT_COMMITTER_EMAIL: 'rollout@localhost',
  GIT_CONFIG_COUNT: '1',
  GIT_CONFIG_KEY_0: 'safe.directory',
  GIT_CONFIG_VALUE_0: '*',
  GIT_PAGER: 'cat',
  PAGER: 'cat',
};

const GIT_INIT = `{ [ -d .git ] || { git init -q && git add -A && git commit -qm base --no-verify; }; } && git tag -f ${BASE_TAG} >/dev/null`;

function repoSpec(inst: SweInstance): SandboxSpec {
  return {
    ...(inst.files ? { files: inst.files } : {}),
    ...(inst.repo_dir ? { seedDir: resolve(inst.repo_dir) } : {}),
    setup: [GIT_INIT, ...(inst.setup ?? [])],
    env: GIT_ENV,
  };
}

const SYSTEM =
  'You are a software engineer working in a git repository at /workspace. Fix the issue below: ' +
  'explore the code with execute_bash, edit files with str_replace_editor, and run the tests. ' +
  'When the fix is complete, call finish.';

async function mustRun(sb: Sandbox, command: string, what: string, ctx: { signal: AbortSignal; clock: Clock }): Promise<string> {
  const r = await runToEnd(sb, command, 120_000, ctx.signal, ctx.clock);
  if (r.exitCode !== 0) throw new SandboxError(`swe eval: ${what} failed (exit ${r.exitCode}): ${clip(r.output, 500)}`, { stage: 'eval' });
  return r.output;
}

/**
 * `swe` (alias `swebench`): bash, editor and finish in the repository. The eval takes
 * `git diff` of the workspace against its original state (recorded as `git_patch` in the eval
 * details), applies it in a FRESH sandbox made from the original repository, writes
 * `test_files`, and runs `test_command` there: exit 0 → resolved, reward 1. A patch that does not
 * apply scores 0 (the policy's doing). Git failures outside the patch are SandboxErrors.
 */
export const sweHandler: AgentHandler = defineToolAgent({
  name: 'swe',
  aliases: ['swebench'],
  tools: toolSchemas(['execute_bash', 'str_replace_editor', 'think', 'finish']),
  async init(ctx) {
    const inst = parseInstance('swe', SweInstanceSchema, ctx.instance);
    const sandbox = await ctx.createSandbox(repoSpec(inst));
    return {
      sandbox,
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: inst.problem },
      ],
      state: inst,
    };
  },
  async eval(ctx) {
    const inst = ctx.state as SweInstance;
    if (!ctx.sandbox) throw new SandboxError('swe eval: the run left no sandbox', { stage: 'eval' });
    await settleShell(ctx.sandbox, ctx.signal);
    // An agent that deleted .git (or the base tag) broke its own workspace: a trainable failure,
    // scored 0, not an infrastructure fault to retry.
    const base = await runToEnd(ctx.sandbox, `git rev-parse -q --verify ${BASE_TAG}^{commit}`, 60_000, ctx.signal, ctx.clock);
    if (base.exitCode !== 0) {
      return { reward: 0, resolved: false, details: { git_patch: null, applied: false, error: `the workspace's git repository or its ${BASE_TAG} tag is gone` } };
    }
    // Into .git, so the patch file is not part of the diff; read back as a file because the bash
    // tool truncates long output.
    await mustRun(ctx.sandbox, `git add -A && git diff --cached --binary ${BASE_TAG} > .git/rollout.patch`, 'git diff', ctx);
    const patch = await ctx.sandbox.readFile('.git/rollout.patch');
    await ctx.sandbox.close();

    const sb = await ctx.createSandbox(repoSpec(inst));
    try {
      if (patch.trim()) {
        await sb.writeFile('.git/rollout.patch', patch);
        const ap = await runToEnd(sb, 'git apply --whitespace=nowarn .git/rollout.patch', 120_000, ctx.signal, ctx.clock);
        if (ap.exitCode !== 0) {
          return { reward: 0, resolved: false, details: { git_patch: patch, applied: false, output: clip(ap.output) } };
        }
      }
      for (const [path, content] of Object.entries(inst.test_files ?? {})) await sb.writeFile(path, content);
      const t = await runToEnd(sb, `timeout ${inst.eval_timeout_s} bash -c ${shellQuote(inst.test_command)}`, (inst.eval_timeout_s + 10) * 1000, ctx.signal, ctx.clock);
      const resolved = t.exitCode === 0;
      return { reward: resolved ? 1 : 0, resolved, details: { git_patch: patch, applied: true, exit_code: t.exitCode, timed_out: t.timedOut || t.exitCode === 124, output: clip(t.output) } };
    } finally {
      await sb.close();
    }
  },
});
