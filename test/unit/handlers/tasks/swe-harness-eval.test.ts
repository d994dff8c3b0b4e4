import { afterEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { gradeSweLog, SWE_HARNESS_LOG, sweGradeOf, SweHarnessInstanceSchema, sweHarnessScript, sweTestsTimedOut } from '../../../../src/handlers/tasks/swe-harness-eval.js';

// Polar's swebench_harness script run by the system's bash over the repository's SWE sample (a
// real git checkout, real pytest), graded by the SWE family's parser.
const ROOT = resolve(import.meta.dirname, '../../../..');
const rows = readFileSync(join(ROOT, 'examples/swe-sample/tasks.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
const row = rows.find((r) => r['instance_id'] === 'minilib__minilib-1')!;
const hasPytest = spawnSync('python3', ['-m', 'pytest', '--version']).status === 0;

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const GIT = { GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' };

/** A workspace holding the sample repository as a git checkout in `repo/`. */
function workspace(): string {
  const ws = mkdtempSync(join(tmpdir(), 'swe-harness-'));
  dirs.push(ws);
  cpSync(join(ROOT, 'examples/swe-sample/repo'), join(ws, 'repo'), { recursive: true });
  const git = spawnSync('sh', ['-c', 'git init -q && git add -A && git commit -qm base'], { cwd: join(ws, 'repo'), env: { ...process.env, ...GIT } });
  expect(git.status).toBe(0);
  return ws;
}

function evaluate(ws: string, config: Partial<Parameters<typeof sweHarnessScript>[0]> = {}): { code: number | null; out: string; resolved: boolean; report: ReturnType<typeof gradeSweLog>['report'] } {
  const instance = SweHarnessInstanceSchema.parse(row);
  const script = sweHarnessScript({ instance, repoDir: 'repo', patchCommand: null, excludePatterns: [], testTimeoutS: 120, envExports: '', ...config });
  const r = spawnSync('bash', ['-c', script], { cwd: ws, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: ws } });
  const log = existsSync(join(ws, SWE_HARNESS_LOG)) ? readFileSync(join(ws, SWE_HARNESS_LOG), 'utf8') : '';
  const graded = gradeSweLog(log, sweGradeOf(instance));
  return { code: r.status, out: r.stdout + r.stderr, resolved: r.status === 0 && graded.resolved, report: graded.report };
}

describe.skipIf(!hasPytest)('swebench_harness on the SWE eval path (needs python3-pytest)', () => {
  it('resolves the fix: FAIL_TO_PASS passes with the test patch applied, PASS_TO_PASS still passes', () => {
    const ws = workspace();
    const f = join(ws, 'repo/minilib/intervals.py');
    writeFileSync(f, readFileSync(f, 'utf8').replace('if out and start < out[-1][1]:', 'if out and start <= out[-1][1]:'));
    // Build litter the agent left: not part of the patch (Polar's default excludes).
    mkdirSync(join(ws, 'repo/minilib/__pycache__'), { recursive: true });
    writeFileSync(join(ws, 'repo/minilib/__pycache__/junk.pyc'), 'x');
    const r = evaluate(ws);
    expect(r.out).toContain('POLAR_SWEBENCH_APPLY=ok');
    expect(r.out).toContain('POLAR_SWEBENCH_TEST_PATCH=ok');
    expect(r.resolved).toBe(true);
    expect(r.report.FAIL_TO_PASS).toEqual({ success: ['tests/test_intervals.py::test_merge_touching'], failure: [] });
    expect(r.report.PASS_TO_PASS.failure).toEqual([]);
  });

  it('does not resolve an untouched tree: the FAIL_TO_PASS test fails', () => {
    const ws = workspace();
    const r = evaluate(ws);
    expect(r.out).toContain('POLAR_SWEBENCH_APPLY=empty');
    expect(r.resolved).toBe(false);
    expect(r.report.FAIL_TO_PASS.failure).toEqual(['tests/test_intervals.py::test_merge_touching']);
  });

  it('does not let the agent pass by editing the tests: the test files are reset before the test patch', () => {
    const ws = workspace();
    // The agent "adds" the failing test as one that passes on the bug.
    writeFileSync(join(ws, 'repo/tests/test_intervals.py'), readFileSync(join(ws, 'repo/tests/test_intervals.py'), 'utf8') + '\n\ndef test_merge_touching():\n    assert True\n');
    const r = evaluate(ws);
    expect(r.out).toContain('POLAR_SWEBENCH_TEST_PATCH=ok');
    expect(r.resolved).toBe(false);
    expect(r.report.FAIL_TO_PASS.failure).toEqual(['tests/test_intervals.py::test_merge_touching']);
  });

  it('scores 0 when the patch does not apply, and says why', () => {
    const ws = workspace();
    const r = evaluate(ws, { patchCommand: "printf 'diff --git a/nope b/nope\\n--- a/nope\\n+++ b/nope\\n@@ -1 +1 @@\\n-a\\n+b\\n'" });
    expect(r.code).toBe(2);
    expect(r.out).toContain('POLAR_SWEBENCH_APPLY=failed');
    expect(r.resolved).toBe(false);
  });

  it('reports tests that ran out of test_timeout (the verifier timeout), not graded as a pass', () => {
    const ws = workspace();
    const r = evaluate(ws, { instance: SweHarnessInstanceSchema.parse({ ...row, test_command: 'sleep 30 #' }), testTimeoutS: 1 });
    expect(r.out).toMatch(/^POLAR_SWEBENCH_EXIT=124$/m);
    expect(sweTestsTimedOut(r.out)).toBe(true);
    expect(r.code).not.toBe(0);
    expect(r.resolved).toBe(false);
    expect(sweTestsTimedOut('POLAR_SWEBENCH_EXIT=1\n')).toBe(false);
  });

  it('refuses an instance with nothing to grade, naming the field', () => {
    const r = SweHarnessInstanceSchema.safeParse({ instance_id: 'x' });
    expect(r.success).toBe(false);
    expect(r.error!.issues[0]!.path).toEqual(['FAIL_TO_PASS']);
  });
});
