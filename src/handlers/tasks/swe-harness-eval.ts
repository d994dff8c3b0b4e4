import { z } from 'zod';
import { gradeTests, parseTestLog, type SweTestReport } from './swe-log-parsers.js';
import { patchFiles, runnerOf, sweTestCommand, TestListSchema } from './swe-rows.js';
import { shellQuote } from './task-kit.js';

/**
 * Polar's `swebench_harness` evaluator on the SWE family's eval path: the agent's patch is taken
 * from the repository, applied to the base tree, the row's `test_patch` applied over the test
 * files reset to the base, the tests the test patch touches run with the SWE family's command
 * (`sweTestCommand`), and the log graded per test (`parseTestLog` + `gradeTests`): resolved iff
 * every FAIL_TO_PASS passes and every PASS_TO_PASS still passes.
 *
 * Unlike the `swe` family (a fresh sandbox), this runs in the session's own sandbox, as Polar's
 * other evaluators do here: the tree is made fresh in place (`git reset --hard` to the base and
 * `git clean -fd`, ignored files kept) before the patch is applied.
 */

/** `evaluator.config.instance`: the SWE-bench / SWE-Gym row (Polar's `instance`). */
export const SweHarnessInstanceSchema = z
  .object({
    instance_id: z.union([z.string().min(1), z.number()]).transform(String),
    repo: z.string().min(1).optional(),
    base_commit: z.string().min(1).optional(),
    FAIL_TO_PASS: TestListSchema.default([]),
    PASS_TO_PASS: TestListSchema.default([]),
    test_patch: z.string().default(''),
    /** Ours: overrides the test command derived from `repo` (as a SWE row's). */
    test_command: z.string().min(1).optional(),
  })
  .superRefine((v, ctx) => {
    if (v.FAIL_TO_PASS.length + v.PASS_TO_PASS.length === 0) ctx.addIssue({ code: 'custom', path: ['FAIL_TO_PASS'], message: 'FAIL_TO_PASS and PASS_TO_PASS are both empty: nothing to grade' });
  });
export type SweHarnessInstance = z.output<typeof SweHarnessInstanceSchema>;

/** What the harness family's eval needs to grade the log (the instance's `swebench_grade`). */
export const SweGradeSchema = z.object({
  fail_to_pass: z.array(z.string()).max(100_000),
  pass_to_pass: z.array(z.string()).max(100_000),
  runner: z.enum(['pytest', 'django']),
  /** The test log, a workspace-relative file the eval command wrote. */
  log_file: z.string().regex(/^[A-Za-z0-9._-]+$/, 'must be a plain file name in the workspace'),
});
export type SweGrade = z.output<typeof SweGradeSchema>;

/** Where the eval command leaves the test log in the workspace. */
export const SWE_HARNESS_LOG = '.polar-swebench-test.log';
/** The line the eval command prints once the tests ran (the patch and the test patch applied). */
export const SWE_HARNESS_MARK = 'POLAR_SWEBENCH';

/** Polar's default skip list for the extracted diff (`_patch_utils`), before `exclude_patterns`. */
const DEFAULT_EXCLUDES = ['__pycache__', '*.pyc', '.pytest_cache', '*.egg-info', '.mypy_cache', '.tox'];

const GIT_ENV = [
  'export GIT_AUTHOR_NAME=rollout GIT_AUTHOR_EMAIL=rollout@localhost GIT_COMMITTER_NAME=rollout GIT_COMMITTER_EMAIL=rollout@localhost',
  'export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0=* GIT_PAGER=cat PAGER=cat',
].join('\n');

export interface SweHarnessOptions {
  instance: SweHarnessInstance;
  /** The repository inside the sandbox (Polar's `repo_dir`, default `/testbed`). */
  repoDir: string;
  /** Prints the agent's patch (Polar's `patch_command`); default: everything changed against the base, as `git diff --binary`. */
  patchCommand: string | null;
  /** Globs left out of the patch, after Polar's default list. */
  excludePatterns: string[];
  testTimeoutS: number;
  /** `export …; ` of `evaluator.env`, put before the test command. */
  envExports: string;
}

/**
 * The eval command (bash, run in a fresh shell in the workspace). It prints
 * `POLAR_SWEBENCH_APPLY=ok|failed|empty`, `POLAR_SWEBENCH_TEST_PATCH=ok|failed`,
 * `POLAR_SWEBENCH_EXIT=<tests' exit>`, and exits 0 only when the tests ran; the log is left in
 * {@link SWE_HARNESS_LOG} for {@link gradeSweLog}.
 */
export function sweHarnessScript(o: SweHarnessOptions): string {
  const inst = o.instance;
  const b64 = (s: string): string => shellQuote(Buffer.from(s).toString('base64'));
  const excludes = [...DEFAULT_EXCLUDES, ...o.excludePatterns].flatMap((g) => [`:(exclude,glob)**/${g}`, `:(exclude,glob)**/${g}/**`]).map(shellQuote).join(' ');
  const testFiles = patchFiles(inst.test_patch);
  const test = sweTestCommand({ repo: inst.repo, test_command: inst.test_command, test_patch: inst.test_patch });
  const M = SWE_HARNESS_MARK;
  return [
    'polar_ws=$PWD; polar_d=$(mktemp -d) || exit 1',
    `rm -f "$polar_ws/${SWE_HARNESS_LOG}"`,
    GIT_ENV,
    `cd ${shellQuote(o.repoDir)} || { echo "swebench_harness: repo_dir ${o.repoDir.replace(/["$`\\]/g, '')} is missing"; exit 3; }`,
    'git rev-parse --git-dir >/dev/null 2>&1 || { echo "swebench_harness: repo_dir is not a git repository"; exit 3; }',
    // The base: the row's base_commit when the checkout has it, else the checkout's HEAD.
    `polar_base=HEAD; ${inst.base_commit ? `git rev-parse -q --verify ${shellQuote(`${inst.base_commit}^{commit}`)} >/dev/null && polar_base=${shellQuote(inst.base_commit)}` : 'true'}`,
    o.patchCommand
      ? `( ${o.patchCommand} ) > "$polar_d/model.patch" || { echo "swebench_harness: patch_command failed"; exit 3; }`
      : `{ git add -A && git diff --cached --binary "$polar_base" -- . ${excludes} > "$polar_d/model.patch" && git reset -q; } || { echo "swebench_harness: git diff failed"; exit 3; }`,
    // The tree made fresh: the base, untracked files gone (ignored ones kept, as in the image).
    'git reset -q --hard "$polar_base" && git clean -fdq || { echo "swebench_harness: resetting the tree failed"; exit 3; }',
    `if [ ! -s "$polar_d/model.patch" ]; then echo ${M}_APPLY=empty; elif git apply --whitespace=nowarn "$polar_d/model.patch" > "$polar_d/apply.out" 2>&1; then echo ${M}_APPLY=ok; else echo ${M}_APPLY=failed; head -c 2000 "$polar_d/apply.out"; rm -rf "$polar_d"; exit 2; fi`,
    ...(inst.test_patch.trim()
      ? [
          testFiles.map((f) => `{ git checkout -q "$polar_base" -- ${shellQuote(f)} 2>/dev/null || rm -rf -- ${shellQuote(f)}; }`).join('; '),
          `printf '%s' ${b64(inst.test_patch)} | base64 -d > "$polar_d/test.patch"`,
          `if git apply --whitespace=nowarn "$polar_d/test.patch" > "$polar_d/apply.out" 2>&1; then echo ${M}_TEST_PATCH=ok; else echo ${M}_TEST_PATCH=failed; head -c 2000 "$polar_d/apply.out"; rm -rf "$polar_d"; exit 4; fi`,
        ]
      : []),
    `timeout ${Math.ceil(o.testTimeoutS)} bash -c ${shellQuote(`${o.envExports}${test}`)} > "$polar_d/test.log" 2>&1; polar_rc=$?`,
    `cp "$polar_d/test.log" "$polar_ws/${SWE_HARNESS_LOG}"; tail -c 1500 "$polar_d/test.log"; rm -rf "$polar_d"`,
    `echo "${M}_EXIT=$polar_rc"`,
    // The tests' own timeout is the verifier's: no exit 0, so the grade is not trusted.
    '[ "$polar_rc" -ne 124 ]',
  ].join('\n');
}

/** The grade the harness family's eval reads back: the row's lists and its log parser. */
export function sweGradeOf(inst: SweHarnessInstance): SweGrade {
  return { fail_to_pass: inst.FAIL_TO_PASS, pass_to_pass: inst.PASS_TO_PASS, runner: runnerOf(inst.repo), log_file: SWE_HARNESS_LOG };
}

/** True when the eval command's tests ran out of `test_timeout` (Polar's evaluator timeout: the trajectory is kept, `verifier_timeout`). */
export function sweTestsTimedOut(output: string): boolean {
  return new RegExp(`^${SWE_HARNESS_MARK}_EXIT=124\\r?$`, 'm').test(output);
}

/** Grades a test log as the SWE family does: resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passed. */
export function gradeSweLog(log: string, grade: SweGrade): { resolved: boolean; report: SweTestReport } {
  return gradeTests(parseTestLog(log, grade.runner), grade.fail_to_pass, grade.pass_to_pass);
}
