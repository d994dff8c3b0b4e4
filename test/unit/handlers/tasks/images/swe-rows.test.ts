import { describe, expect, it } from 'vitest';
import { gradeTests, parseDjangoLog, parsePytestLog } from '../../../../../src/handlers/tasks/swe-log-parsers.js';
import { derivedImageName, patchFiles, R2eRowSchema, rowKind, SweBenchRowSchema, sweTestCommand } from '../../../../../src/handlers/tasks/swe-rows.js';
import { withInstanceImage } from '../../../../../src/sandbox/images/instance-image.js';
import { TaskError } from '../../../../../src/errors.js';
import type { SandboxSpec } from '../../../../../src/sandbox/sandbox.js';

const PYTEST_LOG = `============================= test session starts ==============================
collected 4 items

tests/test_a.py::test_one PASSED                                        [ 25%]
tests/test_a.py::test_two FAILED                                        [ 50%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
FAILED tests/test_a.py::test_two - AssertionError: assert 1 == 2
ERROR tests/test_b.py::test_setup - fixture 'db' not found
SKIPPED [1] tests/test_b.py:10: no network
XFAIL tests/test_b.py::test_known - reason: bug 12
PASSED tests/test_b.py::test_param[a-b]
========================= 2 passed, 1 failed in 0.10s ==========================
`;

const DJANGO_LOG = `Testing against Django installed in '/testbed/django'
Importing application queries
test_exists (queries.tests.ExistsSql) ... ok
test_ticket_18414 (queries.tests.ExistsSql) ... FAIL
test_docstring (queries.tests.Other)
A test whose docstring is printed. ... ok
test_skip (queries.tests.Other) ... skipped 'no db feature'
test_err (queries.tests.Other) ... ERROR

======================================================================
FAIL: test_ticket_18414 (queries.tests.ExistsSql)
----------------------------------------------------------------------
`;

describe('test log parsers', () => {
  it('reads pytest -rA summary lines and verbose lines, the last report winning', () => {
    const m = parsePytestLog(PYTEST_LOG);
    expect(m.get('tests/test_a.py::test_one')).toBe('PASSED');
    expect(m.get('tests/test_a.py::test_two')).toBe('FAILED');
    expect(m.get('tests/test_b.py::test_setup')).toBe('ERROR');
    expect(m.get('tests/test_b.py::test_known')).toBe('XFAIL');
    expect(m.get('tests/test_b.py::test_param[a-b]')).toBe('PASSED');
  });

  it("reads Django's verbosity-2 lines, including a result on the line after a docstring", () => {
    const m = parseDjangoLog(DJANGO_LOG);
    expect(m.get('test_exists (queries.tests.ExistsSql)')).toBe('PASSED');
    expect(m.get('test_ticket_18414 (queries.tests.ExistsSql)')).toBe('FAILED');
    expect(m.get('test_docstring (queries.tests.Other)')).toBe('PASSED');
    expect(m.get('test_skip (queries.tests.Other)')).toBe('SKIPPED');
    expect(m.get('test_err (queries.tests.Other)')).toBe('ERROR');
  });

  it('resolves only when every FAIL_TO_PASS passes and every PASS_TO_PASS still passes; a missing test fails', () => {
    const m = parsePytestLog(PYTEST_LOG);
    expect(gradeTests(m, ['tests/test_a.py::test_one'], ['tests/test_b.py::test_known']).resolved).toBe(true);
    const g = gradeTests(m, ['tests/test_a.py::test_one', 'tests/test_a.py::test_two'], ['tests/test_b.py::nope']);
    expect(g.resolved).toBe(false);
    expect(g.report.FAIL_TO_PASS).toEqual({ success: ['tests/test_a.py::test_one'], failure: ['tests/test_a.py::test_two'] });
    expect(g.report.PASS_TO_PASS.failure).toEqual(['tests/test_b.py::nope']);
    // Django names match across the 3.x and 4.x forms.
    const d = parseDjangoLog(DJANGO_LOG);
    expect(gradeTests(d, ['test_exists (queries.tests.ExistsSql.test_exists)'], []).resolved).toBe(true);
  });
});

describe('SWE rows', () => {
  const row = {
    instance_id: 'django__django-11099',
    repo: 'django/django',
    base_commit: 'd26b2424437dabeeca94d7900b37d2df4410da0c',
    problem_statement: 'UsernameValidator allows trailing newline',
    FAIL_TO_PASS: '["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]',
    PASS_TO_PASS: '[]',
    test_patch: 'diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py\n--- a/x\n+++ b/x\n',
  };

  it('reads SWE-bench rows with JSON-string test lists, and names the bad field otherwise', () => {
    const r = SweBenchRowSchema.parse(row);
    expect(r.FAIL_TO_PASS).toEqual(['test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)']);
    expect(rowKind(row)).toBe('swebench');
    const bad = SweBenchRowSchema.safeParse({ ...row, FAIL_TO_PASS: 'not json' });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.path).toEqual(['FAIL_TO_PASS']);
  });

  it('derives the reference image name from instance_id', () => {
    expect(derivedImageName('django__django-11099')).toBe('sweb.eval.x86_64.django_1776_django-11099');
    expect(derivedImageName('Foo__Bar-1')).toBe('sweb.eval.x86_64.foo_1776_bar-1');
  });

  it("runs Django's runner on the test patch's modules, pytest -rA elsewhere, a row's own command when given", () => {
    expect(patchFiles(row.test_patch)).toEqual(['tests/auth_tests/test_validators.py']);
    expect(sweTestCommand(SweBenchRowSchema.parse(row))).toContain('./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 auth_tests.test_validators');
    const py = SweBenchRowSchema.parse({ ...row, repo: 'pallets/flask', test_patch: 'diff --git a/tests/t.py b/tests/t.py\n' });
    expect(sweTestCommand(py)).toMatch(/-rA --tb=no -p no:cacheprovider 'tests\/t.py'$/);
    expect(sweTestCommand({ ...py, test_command: 'make test T="{tests}"' })).toContain(`make test T="'tests/t.py'"`);
  });

  it('reads R2E-Gym rows with expected_output_json as a JSON string', () => {
    const r = R2eRowSchema.parse({ docker_image: 'namanjain12/orange3_final:abc', problem_statement: 'x', expected_output_json: '{"r2e_tests/test_1.py::test_a": "PASSED"}' });
    expect(r.expected_output_json).toEqual({ 'r2e_tests/test_1.py::test_a': 'PASSED' });
    expect(r.test_command).toBe('bash run_tests.sh');
    expect(rowKind({ docker_image: 'x', expected_output_json: '{}' })).toBe('r2e');
    expect(rowKind({ files: {}, test_command: 'true' })).toBe('bundled');
  });
});

describe('withInstanceImage', () => {
  const ctx = (image: unknown) => {
    const specs: SandboxSpec[] = [];
    return { specs, ctx: { instance: { data_source: 'math', image } as Record<string, unknown>, createSandbox: async (spec: SandboxSpec) => void specs.push(spec) } };
  };

  it("gives every sandbox the instance's image unless the spec names one", async () => {
    const { specs, ctx: c } = ctx('py:3');
    const w = withInstanceImage(c);
    await w.createSandbox({ files: { a: 'b' } });
    await w.createSandbox({ image: 'other' });
    expect(specs).toEqual([{ files: { a: 'b' }, image: 'py:3' }, { image: 'other' }]);
  });

  it('leaves the context alone without an image, and refuses a non-string image naming the field', () => {
    const { ctx: c } = ctx(undefined);
    expect(withInstanceImage(c)).toBe(c);
    expect(() => withInstanceImage(ctx(42).ctx)).toThrow(TaskError);
    expect(() => withInstanceImage(ctx(42).ctx)).toThrow(/instance field 'image'/);
  });
});
