import { resolve } from 'node:path';
import { z } from 'zod';
import { SandboxError, TaskError } from '../../errors.js';
import type { HandlerContext } from '../../proxy/agent-contract.js';
import { gradeTests, parseTestLog, type TestStatusMap } from './swe-log-parsers.js';
import { derivedImageName, patchFiles, R2eRowSchema, rowKind, runnerOf, SweBenchRowSchema, sweTestCommand, type R2eRow, type SweBenchRow } from './swe-rows.js';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import type { Sandbox, SandboxSpec } from '../../sandbox/sandbox.js';
import { sweIntegrityDefaults } from './integrity-defaults.js';
import { clip, freshShellForEval, parseInstance, runToEnd, shellQuote } from './task-kit.js';
import { evalFault, faultMessage } from './eval-fault.js';
import { defineToolAgent } from '../tool-agent.js';
import { toolSchemas } from '../tools.js';
import type { Clock } from '../../clock.js';

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
    /** An image of the store to run in (its root instead of the host's); the repository is still `files` / `repo_dir`. */
    image: z.string().min(1).optional(),
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

function repoSpec(inst: { files?: Record<string, string> | undefined; repo_dir?: string | undefined; setup?: string[] | undefined; image?: string | undefined }): SandboxSpec {
  return {
    ...(inst.files ? { files: inst.files } : {}),
    ...(inst.repo_dir ? { seedDir: resolve(inst.repo_dir) } : {}),
    setup: [GIT_INIT, ...(inst.setup ?? [])],
    env: GIT_ENV,
    ...(inst.image ? { image: inst.image } : {}),
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

/** What init hands to eval. */
type SweState =
  | { kind: 'bundled'; inst: SweInstance }
  | { kind: 'swebench'; row: SweBenchRow; spec: SandboxSpec; image: string | null; diagnostic: string | null }
  | { kind: 'r2e'; row: R2eRow; spec: SandboxSpec; image: string };

const SYSTEM_IMAGE =
  'You are a software engineer working in a git repository: the shell starts in its root, which is also ' +
  'mounted at /workspace. Fix the issue below: explore the code with execute_bash, edit files with ' +
  'str_replace_editor, and run the tests. When the fix is complete, call finish.';

/** Tags the image's checkout as the base the agent's diff is taken against. */
function imageSpec(image: string, base: string): SandboxSpec {
  return { image, env: GIT_ENV, setup: [`git rev-parse -q --verify ${shellQuote(`${base}^{commit}`)} >/dev/null && git tag -f ${BASE_TAG} ${shellQuote(base)} >/dev/null`] };
}

function isImageNotFound(err: unknown): boolean {
  return err instanceof TaskError && err.code === 'IMAGE_NOT_FOUND';
}

/**
 * A SWE-bench / SWE-Gym row: its image (the row's `image` / `docker_image`, else the name derived
 * from `instance_id` when the store has it), else — for a derived name only, and when the row
 * carries the repository as `files` / `repo_dir` — the host-root sandbox, with a diagnostic.
 */
async function initSweBench(ctx: HandlerContext, row: SweBenchRow): Promise<{ sandbox: Sandbox; state: SweState }> {
  const explicit = row.image ?? row.docker_image;
  const image = explicit ?? derivedImageName(row.instance_id);
  const spec = imageSpec(image, row.base_commit);
  try {
    return { sandbox: await ctx.createSandbox(spec), state: { kind: 'swebench', row, spec, image, diagnostic: null } };
  } catch (err) {
    if (!isImageNotFound(err) || explicit) throw err;
    if (!row.files && !row.repo_dir) {
      throw new TaskError(`swe instance ${row.instance_id}: no image given and the derived image '${image}' is not in the image store; the row has no files or repo_dir to run without one`, { code: 'IMAGE_NOT_FOUND', stage: 'init', details: { image } });
    }
    const host = repoSpec({ files: row.files, repo_dir: row.repo_dir });
    const diagnostic = `image '${image}' (derived from instance_id) is not in the image store: ran in the host-root sandbox from the row's ${row.files ? 'files' : 'repo_dir'}`;
    return { sandbox: await ctx.createSandbox(host), state: { kind: 'swebench', row, spec: host, image: null, diagnostic } };
  }
}

/**
 * `swe` (alias `swebench`): bash, editor and finish in the repository. Three row formats
 * (swe-rows.ts): the bundled one (`files` / `repo_dir` + `test_command`: exit 0 → resolved),
 * SWE-bench / SWE-Gym rows and R2E-Gym rows (per-test grading).
 *
 * The eval takes `git diff` of the workspace against its base (recorded as `git_patch`), applies
 * it in a FRESH sandbox made the same way (same image), and runs the tests there. A patch that
 * does not apply scores 0 (the policy's doing). Git failures outside the patch are SandboxErrors.
 * SWE-bench rows: the test files are reset to the base and `test_patch` applied, the tests the
 * patch touches run, the log is parsed per test (pytest, Django) and the row is resolved iff every
 * FAIL_TO_PASS passes and every PASS_TO_PASS still passes; the per-test report is in the details.
 */
export const sweHandler: AgentHandler = withIntegrityDefaults(sweIntegrityDefaults, defineToolAgent({
  name: 'swe',
  aliases: ['swebench'],
  tools: toolSchemas(['execute_bash', 'str_replace_editor', 'think', 'finish']),
  async init(ctx) {
    const kind = rowKind(ctx.instance);
    if (kind === 'swebench') {
      const row = parseInstance('swe', SweBenchRowSchema, ctx.instance);
      const { sandbox, state } = await initSweBench(ctx, row);
      return { sandbox, messages: [{ role: 'system', content: state.kind === 'swebench' && state.image ? SYSTEM_IMAGE : SYSTEM }, { role: 'user', content: row.problem_statement }], state };
    }
    if (kind === 'r2e') {
      const row = parseInstance('swe', R2eRowSchema, ctx.instance);
      const spec = imageSpec(row.docker_image, 'HEAD');
      const sandbox = await ctx.createSandbox(spec);
      return { sandbox, messages: [{ role: 'system', content: SYSTEM_IMAGE }, { role: 'user', content: row.problem_statement }], state: { kind: 'r2e', row, spec, image: row.docker_image } satisfies SweState };
    }
    const inst = parseInstance('swe', SweInstanceSchema, ctx.instance);
    const sandbox = await ctx.createSandbox(repoSpec(inst));
    return {
      sandbox,
      messages: [
        { role: 'system', content: inst.image ? SYSTEM_IMAGE : SYSTEM },
        { role: 'user', content: inst.problem },
      ],
      state: { kind: 'bundled', inst } satisfies SweState,
    };
  },
  async eval(ctx) {
    const state = ctx.state as SweState;
    if (!ctx.sandbox) throw new SandboxError('swe eval: the run left no sandbox', { stage: 'eval' });
    await freshShellForEval(ctx.sandbox, ctx.signal);
    // An agent that deleted .git (or the base tag) broke its own workspace: a trainable failure,
    // scored 0, not an infrastructure fault to retry.
    const base = await runToEnd(ctx.sandbox, `git rev-parse -q --verify ${BASE_TAG}^{commit}`, 60_000, ctx.signal, ctx.clock);
    if (base.exitCode !== 0) {
      return { reward: 0, resolved: false, details: { git_patch: null, applied: false, error: `the workspace's git repository or its ${BASE_TAG} tag is gone` } };
    }
    // Into .git, so the patch file is not part of the diff; read back as a file because the bash
    // tool truncates long output. The workspace is the policy's: a diff it broke (an unreadable
    // file, .git/rollout.patch made a directory) scores 0 (eval-fault.ts).
    let patch: string;
    try {
      await mustRun(ctx.sandbox, `git add -A && git diff --cached --binary ${BASE_TAG} > .git/rollout.patch`, 'git diff', ctx);
      patch = await ctx.sandbox.readFile('.git/rollout.patch');
    } catch (err) {
      if (evalFault(err, true) === 'rethrow') throw err;
      return { reward: 0, resolved: false, details: { git_patch: null, applied: false, error: `the agent's workspace gave no diff: ${faultMessage(err)}` } };
    }
    await ctx.sandbox.close();
    if (state.kind === 'bundled') return evalBundled(ctx, state.inst, patch);
    return evalGraded(ctx, state, patch);
  },
}));

/** The handler with the family's default integrity policy (#27). */
function withIntegrityDefaults(defaults: NonNullable<AgentHandler['integrityDefaults']>, h: AgentHandler): AgentHandler {
  return Object.assign(h, { integrityDefaults: defaults });
}

/** Applies the agent's patch in a fresh sandbox; null when it applied, else the 0-reward result. */
async function applyPatch(sb: Sandbox, patch: string, ctx: { signal: AbortSignal; clock: Clock }): Promise<{ reward: number; resolved: boolean; details: Record<string, unknown> } | null> {
  if (!patch.trim()) return null;
  await sb.writeFile('.git/rollout.patch', patch);
  const ap = await runToEnd(sb, 'git apply --whitespace=nowarn .git/rollout.patch', 120_000, ctx.signal, ctx.clock);
  if (ap.exitCode === 0) return null;
  return { reward: 0, resolved: false, details: { git_patch: patch, applied: false, output: clip(ap.output) } };
}

/** Runs `command` with its whole output in `.git/rollout-test.log` (the bash tool would cut it) and reads it back. */
async function runTests(sb: Sandbox, command: string, timeoutS: number, ctx: { signal: AbortSignal; clock: Clock }): Promise<{ log: string; exitCode: number | null; timedOut: boolean }> {
  const r = await runToEnd(sb, `timeout ${timeoutS} bash -c ${shellQuote(command)} > .git/rollout-test.log 2>&1; echo "rollout-exit=$?"`, (timeoutS + 10) * 1000, ctx.signal, ctx.clock);
  const m = /rollout-exit=(\d+)/.exec(r.output);
  const log = await sb.readFile('.git/rollout-test.log').catch(() => '');
  const exitCode = m ? Number(m[1]) : null;
  return { log, exitCode, timedOut: r.timedOut || exitCode === 124 };
}

async function evalGraded(ctx: EvalContextLike, state: Exclude<SweState, { kind: 'bundled' }>, patch: string): Promise<{ reward: number; resolved: boolean; details: Record<string, unknown> }> {
  const sb = await ctx.createSandbox(state.spec);
  const where = { image: state.image, ...(state.kind === 'swebench' && state.diagnostic ? { diagnostic: state.diagnostic } : {}) };
  try {
    const refused = await applyPatch(sb, patch, ctx);
    if (refused) return { ...refused, details: { ...refused.details, ...where } };
    let statuses: TestStatusMap;
    let run: Awaited<ReturnType<typeof runTests>>;
    if (state.kind === 'swebench') {
      const row = state.row;
      const files = patchFiles(row.test_patch);
      if (row.test_patch.trim()) {
        // As the SWE-bench harness: the test files back to the base, then the test patch. What the
        // agent's patch put at those paths (a symlink, a directory) goes first.
        checkTestPaths(files);
        const reset = async (): Promise<void> => {
          await clearTestPaths(sb, files, ctx);
          await mustRun(sb, files.map((f) => `{ git checkout -q ${BASE_TAG} -- ${shellQuote(f)} 2>/dev/null || rm -f -- ${shellQuote(f)}; }`).join(' && ') || 'true', 'resetting the test files', ctx);
        };
        const fault = await policyFault(reset, patch);
        if (fault) return { reward: 0, resolved: false, details: { git_patch: patch, applied: true, ...where, error: `the test files could not be reset over the patch: ${fault}` } };
        await sb.writeFile('.git/rollout-test.patch', row.test_patch);
        const tp = await runToEnd(sb, 'git apply --whitespace=nowarn .git/rollout-test.patch', 120_000, ctx.signal, ctx.clock);
        if (tp.exitCode !== 0) {
          // The task's fault only if the test patch does not apply to the base either (checked on
          // a scratch index of the base, the worktree untouched); else the agent's patch is in the way.
          const onBase = await runToEnd(sb, `GIT_INDEX_FILE=.git/rollout-base.index git read-tree ${BASE_TAG} && GIT_INDEX_FILE=.git/rollout-base.index git apply --cached --check .git/rollout-test.patch`, 120_000, ctx.signal, ctx.clock);
          if (onBase.exitCode !== 0 || !patch.trim()) throw new TaskError(`swe instance ${row.instance_id}: test_patch does not apply to the base commit: ${clip(tp.output, 500)}`, { code: 'BAD_TEST_PATCH', stage: 'eval' });
          return { reward: 0, resolved: false, details: { git_patch: patch, applied: true, ...where, error: `test_patch does not apply over the patch: ${clip(tp.output, 500)}` } };
        }
      }
      run = await runTests(sb, sweTestCommand(row), row.eval_timeout_s, ctx);
      statuses = parseTestLog(run.log, runnerOf(row.repo));
      const { resolved, report } = gradeTests(statuses, row.FAIL_TO_PASS, row.PASS_TO_PASS);
      return { reward: resolved ? 1 : 0, resolved, details: { git_patch: patch, applied: true, ...where, exit_code: run.exitCode, timed_out: run.timedOut, report, output: clip(run.log) } };
    }
    const row = state.row;
    run = await runTests(sb, `[ -d /r2e_tests ] && [ ! -e r2e_tests ] && cp -r /r2e_tests r2e_tests; ${row.test_command}`, row.eval_timeout_s, ctx);
    statuses = parseTestLog(run.log, 'pytest');
    const expected = Object.entries(row.expected_output_json);
    const mismatched = expected.filter(([t, want]) => (statuses.get(t) ?? 'MISSING') !== want.toUpperCase()).map(([t, want]) => ({ test: t, expected: want, got: statuses.get(t) ?? null }));
    const resolved = expected.length > 0 && mismatched.length === 0;
    return { reward: resolved ? 1 : 0, resolved, details: { git_patch: patch, applied: true, ...where, exit_code: run.exitCode, timed_out: run.timedOut, report: { expected: expected.length, mismatched, tests: Object.fromEntries([...statuses].slice(0, 500)) }, output: clip(run.log) } };
  } finally {
    await sb.close();
  }
}

type EvalContextLike = Pick<HandlerContext, 'createSandbox' | 'signal' | 'clock'>;

/**
 * Checks the task's test paths before any step over the agent's patch: one that leaves the
 * workspace is the task's fault, never to be blamed on the policy.
 * @throws TaskError `BAD_TEST_FILES`.
 */
function checkTestPaths(paths: string[]): void {
  const bad = paths.find((p) => p === '' || p.startsWith('/') || p.split('/').some((c) => c === '..'));
  if (bad !== undefined) throw new TaskError(`swe: test file path '${bad.slice(0, 200)}' must be relative to the workspace, without '..'`, { code: 'BAD_TEST_FILES', stage: 'eval' });
}

/**
 * Removes, in the eval sandbox, what the agent's patch put at the task's test paths or on the way
 * to them: each path, and each ancestor that is a symlink or not a directory. Runs inside the
 * sandbox as its user (nothing there reaches the host), so the task's files are then written
 * as regular files where the task put them.
 */
async function clearTestPaths(sb: Sandbox, paths: string[], ctx: { signal: AbortSignal; clock: Clock }): Promise<void> {
  if (paths.length === 0) return;
  const script =
    'for p in "$@"; do d=; rest=$p; while case $rest in */*) true;; *) false;; esac; do c=${rest%%/*}; rest=${rest#*/}; d=$d$c; ' +
    'if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then rm -rf -- "$d"; fi; d=$d/; done; rm -rf -- "$p"; done';
  await mustRun(sb, `sh -c ${shellQuote(script)} sh ${paths.map(shellQuote).join(' ')}`, 'clearing the test paths', ctx);
}

/**
 * Runs an eval step over the agent's patch; answers null when it worked, or the error's message
 * when it failed on the policy's doing (eval-fault.ts) — with an empty patch the tree is the
 * task's own and the error is rethrown, as is every infrastructure fault.
 */
async function policyFault(step: () => Promise<void>, patch: string): Promise<string | null> {
  try {
    await step();
    return null;
  } catch (err) {
    if (evalFault(err, patch.trim() !== '') === 'rethrow') throw err;
    return faultMessage(err);
  }
}

async function evalBundled(ctx: EvalContextLike, inst: SweInstance, patch: string): Promise<{ reward: number; resolved: boolean; details: Record<string, unknown> }> {
  const sb = await ctx.createSandbox(repoSpec(inst));
  try {
    if (patch.trim()) {
      await sb.writeFile('.git/rollout.patch', patch);
      const ap = await runToEnd(sb, 'git apply --whitespace=nowarn .git/rollout.patch', 120_000, ctx.signal, ctx.clock);
      if (ap.exitCode !== 0) {
        return { reward: 0, resolved: false, details: { git_patch: patch, applied: false, output: clip(ap.output) } };
      }
    }
    // The task's tests go over whatever the patch left at their paths (a symlink to a directory
    // made `sh check.sh` a no-op that passed); what still cannot be written over a non-empty
    // patch is the policy's doing.
    const tests = Object.entries(inst.test_files ?? {});
    checkTestPaths(tests.map(([p]) => p));
    const fault = await policyFault(async () => {
      await clearTestPaths(sb, tests.map(([p]) => p), ctx);
      for (const [path, content] of tests) await sb.writeFile(path, content);
    }, patch);
    if (fault) return { reward: 0, resolved: false, details: { git_patch: patch, applied: true, error: `the test files could not be written over the patch: ${fault}` } };
    const t = await runToEnd(sb, `timeout ${inst.eval_timeout_s} bash -c ${shellQuote(inst.test_command)}`, (inst.eval_timeout_s + 10) * 1000, ctx.signal, ctx.clock);
    const resolved = t.exitCode === 0;
    return { reward: resolved ? 1 : 0, resolved, details: { git_patch: patch, applied: true, exit_code: t.exitCode, timed_out: t.timedOut || t.exitCode === 124, output: clip(t.output) } };
  } finally {
    await sb.close();
  }
}
