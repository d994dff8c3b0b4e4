import { z } from 'zod';

/**
 * The rows users have: SWE-bench / SWE-Gym (`instance_id`, `repo`, `base_commit`,
 * `problem_statement`, `FAIL_TO_PASS`, `PASS_TO_PASS` — JSON-string lists in the datasets,
 * arrays accepted too — `test_patch`, optional `image` / `docker_image`), and R2E-Gym
 * (`docker_image`, `problem_statement`, `expected_output_json`).
 */

/** A list of test names: an array, or a JSON string holding one (as the HF datasets store it). */
export const TestListSchema = z.union([
  z.array(z.string()),
  z.string().transform((s, ctx) => {
    try {
      const v: unknown = JSON.parse(s);
      if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return v as string[];
    } catch {
      // below
    }
    ctx.addIssue({ code: 'custom', message: 'expected a list of test names or a JSON string of one' });
    return z.NEVER;
  }),
]);

/** A SWE-bench / SWE-Gym row. */
export const SweBenchRowSchema = z.object({
  instance_id: z.string().min(1),
  repo: z.string().min(1).optional(),
  base_commit: z.string().regex(/^[0-9a-f]{7,40}$/, 'expected a git commit hash'),
  problem_statement: z.string().min(1),
  FAIL_TO_PASS: TestListSchema,
  PASS_TO_PASS: TestListSchema.default([]),
  test_patch: z.string().default(''),
  image: z.string().min(1).optional(),
  docker_image: z.string().min(1).optional(),
  /** Overrides the test command derived from `repo` (test names or files are appended unless it holds `{tests}`). */
  test_command: z.string().min(1).optional(),
  /** Host-root fallback: the repository as files or a host directory (see swe.ts). */
  files: z.record(z.string().min(1), z.string()).optional(),
  repo_dir: z.string().min(1).optional(),
  eval_timeout_s: z.number().positive().max(3600).default(1800),
});
export type SweBenchRow = z.output<typeof SweBenchRowSchema>;

/** An R2E-Gym row. */
export const R2eRowSchema = z.object({
  docker_image: z.string().min(1),
  problem_statement: z.string().min(1),
  /** Test name → expected status after the fix (`PASSED`, `FAILED`, ...): a JSON string in the dataset. */
  expected_output_json: z.union([z.record(z.string(), z.string()), z.string().transform((s, ctx) => {
    try {
      const v: unknown = JSON.parse(s);
      if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, string>;
    } catch {
      // below
    }
    ctx.addIssue({ code: 'custom', message: 'expected a JSON object of test name → status' });
    return z.NEVER;
  })]),
  repo_name: z.string().optional(),
  commit_hash: z.string().optional(),
  test_command: z.string().min(1).default('bash run_tests.sh'),
  eval_timeout_s: z.number().positive().max(3600).default(1800),
});
export type R2eRow = z.output<typeof R2eRowSchema>;

/** Which row format an instance is in. */
export function rowKind(instance: Record<string, unknown>): 'swebench' | 'r2e' | 'bundled' {
  if ('FAIL_TO_PASS' in instance || ('base_commit' in instance && 'test_patch' in instance)) return 'swebench';
  if ('expected_output_json' in instance) return 'r2e';
  return 'bundled';
}

/**
 * The image name the reference derives from a SWE-bench instance id when a row names none
 * (OpenHands' and the SWE-bench harness' convention): `sweb.eval.x86_64.<id>` with `__`
 * written `_1776_`, lower-cased. The store also finds it under `docker.io/swebench/…:latest`.
 */
export function derivedImageName(instanceId: string): string {
  return `sweb.eval.x86_64.${instanceId.replace(/__/g, '_1776_')}`.toLowerCase();
}

/** Files a unified diff touches (`diff --git a/X b/X`), in order. */
export function patchFiles(patch: string): string[] {
  const out: string[] = [];
  for (const m of patch.matchAll(/^diff --git a\/(\S+) b\/(\S+)$/gm)) if (!out.includes(m[2]!)) out.push(m[2]!);
  return out;
}

/** Which log parser a repository's tests need. */
export function runnerOf(repo: string | undefined): 'pytest' | 'django' {
  return repo === 'django/django' ? 'django' : 'pytest';
}

/** Activates SWE-bench images' conda env when there is one; harmless elsewhere. */
const CONDA = 'if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi';

/**
 * The test command of a SWE-bench row (as the harness' specs run them): Django's runtests with
 * the touched test modules as labels; sympy's bin/test; otherwise pytest with `-rA` over the
 * test files of the test patch. A row's own `test_command` wins (`{tests}` is replaced by the
 * files, or they are appended).
 */
export function sweTestCommand(row: Pick<SweBenchRow, 'repo' | 'test_command' | 'test_patch'>): string {
  const files = patchFiles(row.test_patch);
  const quoted = files.map((f) => `'${f.replace(/'/g, `'\\''`)}'`).join(' ');
  let cmd: string;
  if (row.test_command) cmd = row.test_command.includes('{tests}') ? row.test_command.replace('{tests}', quoted) : `${row.test_command} ${quoted}`;
  else if (row.repo === 'django/django') {
    const labels = files.filter((f) => f.startsWith('tests/') && f.endsWith('.py')).map((f) => f.slice('tests/'.length, -3).replace(/\//g, '.'));
    cmd = `./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 ${labels.join(' ')}`;
  } else if (row.repo === 'sympy/sympy') cmd = `PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose ${quoted}`;
  else cmd = `if command -v pytest >/dev/null; then P=pytest; else P='python3 -m pytest'; fi; $P -rA --tb=no -p no:cacheprovider ${quoted}`;
  return `${CONDA}; ${cmd}`;
}
