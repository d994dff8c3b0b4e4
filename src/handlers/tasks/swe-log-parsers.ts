/**
 * Per-test results from a test log, and the SWE-bench grade built on them. The parsers follow
 * the SWE-bench harness' (`swebench/harness/log_parsers.py`) for the two runners most rows use:
 * pytest with `-rA` (and `-v` lines) and Django's `runtests.py --verbosity 2`.
 */

/** A test's outcome as a runner reports it. */
export type TestStatus = 'PASSED' | 'FAILED' | 'SKIPPED' | 'ERROR' | 'XFAIL';

/** Test name → status; the last report of a test wins. */
export type TestStatusMap = Map<string, TestStatus>;

const PYTEST_STATUSES = new Set(['PASSED', 'FAILED', 'SKIPPED', 'ERROR', 'XFAIL', 'XPASS']);

/**
 * pytest: `PASSED tests/t.py::test_a`, `FAILED tests/t.py::test_b - AssertionError...` (the `-rA`
 * summary) and `tests/t.py::test_a PASSED [ 50%]` (verbose lines). XPASS counts as PASSED.
 */
export function parsePytestLog(log: string): TestStatusMap {
  const out: TestStatusMap = new Map();
  for (const raw of log.split('\n')) {
    // eslint-disable-next-line no-control-regex -- ANSI colour codes in test logs are what is stripped
    const line = raw.replace(/\r$/, '').replace(/\x1b\[[0-9;]*m/g, '').trim();
    const sp = line.indexOf(' ');
    if (sp < 0) continue;
    const first = line.slice(0, sp);
    if (PYTEST_STATUSES.has(first)) {
      let name = line.slice(sp + 1);
      const dash = name.indexOf(' - ');
      if (dash >= 0) name = name.slice(0, dash);
      name = name.trim();
      if (name) out.set(name, norm(first));
      continue;
    }
    const m = /^(\S+::\S+)\s+(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b/.exec(line);
    if (m) out.set(m[1]!, norm(m[2]!));
  }
  return out;
}

function norm(s: string): TestStatus {
  return s === 'XPASS' ? 'PASSED' : (s as TestStatus);
}

const DJANGO_RESULT = /\s\.\.\.\s*(ok|OK|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$/;
const DJANGO_NAME = /^(\w+ \([\w.]+\))/;

/**
 * Django's runner at verbosity 2: `test_x (app.tests.Case) ... ok` / `... FAIL` / `... ERROR` /
 * `... skipped 'why'`; a test whose docstring is printed puts the result on the next line.
 */
export function parseDjangoLog(log: string): TestStatusMap {
  const out: TestStatusMap = new Map();
  let pending: string | null = null;
  for (const raw of log.split('\n')) {
    const line = raw.replace(/\r$/, '');
    const name = DJANGO_NAME.exec(line)?.[1] ?? null;
    const res = DJANGO_RESULT.exec(line);
    if (res) {
      const who = name ?? pending;
      if (who) out.set(who, djangoStatus(res[1]!));
      pending = null;
    } else if (name) pending = name;
    // `FAIL: test_x (app.tests.Case)` blocks after the run confirm failures the dots lost.
    const block = /^(FAIL|ERROR): (\w+ \([\w.]+\))/.exec(line);
    if (block) out.set(block[2]!, block[1] === 'FAIL' ? 'FAILED' : 'ERROR');
  }
  return out;
}

function djangoStatus(s: string): TestStatus {
  if (s === 'ok' || s === 'OK' || s === 'expected failure') return s === 'expected failure' ? 'XFAIL' : 'PASSED';
  if (s.startsWith('skipped')) return 'SKIPPED';
  if (s === 'ERROR') return 'ERROR';
  return 'FAILED';
}

/** Which parser a log needs: Django's for `django/django`, else pytest's (also for unknown runners). */
export function parseTestLog(log: string, runner: 'pytest' | 'django'): TestStatusMap {
  return runner === 'django' ? parseDjangoLog(log) : parsePytestLog(log);
}

/** The per-test report of an eval. */
export interface SweTestReport {
  FAIL_TO_PASS: { success: string[]; failure: string[] };
  PASS_TO_PASS: { success: string[]; failure: string[] };
  /** Every test the log reported (at most 500, for the result's size). */
  tests: Record<string, TestStatus>;
}

/**
 * SWE-bench's rule: resolved iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test
 * still passes. A test missing from the log did not pass. XFAIL counts as passing (as there).
 * Django names match also across its 3.x/4.x+ forms (`t (m.C)` vs `t (m.C.t)`).
 */
export function gradeTests(statuses: TestStatusMap, failToPass: readonly string[], passToPass: readonly string[]): { resolved: boolean; report: SweTestReport } {
  const passed = (name: string): boolean => {
    const s = statuses.get(name) ?? statuses.get(djangoAlt(name) ?? '');
    return s === 'PASSED' || s === 'XFAIL';
  };
  const split = (list: readonly string[]): { success: string[]; failure: string[] } => ({ success: list.filter(passed), failure: list.filter((t) => !passed(t)) });
  const f2p = split(failToPass);
  const p2p = split(passToPass);
  const tests: Record<string, TestStatus> = {};
  let n = 0;
  for (const [k, v] of statuses) {
    if (n++ >= 500) break;
    tests[k] = v;
  }
  return { resolved: f2p.failure.length === 0 && p2p.failure.length === 0, report: { FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p, tests } };
}

/** `t (m.C)` ↔ `t (m.C.t)`. */
function djangoAlt(name: string): string | null {
  const m = /^(\w+) \(([\w.]+)\)$/.exec(name);
  if (!m) return null;
  const [, t, mod] = m;
  return mod!.endsWith(`.${t}`) ? `${t} (${mod!.slice(0, -(t!.length + 1))})` : `${t} (${mod}.${t})`;
}
