import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { compileGlob, execMatcher, globSet, IntegrityPolicySchema } from '../../../src/protocol/integrity.js';
import { validateSubmission } from '../../../src/runtime/submission.js';

describe('compileGlob', () => {
  it.each([
    ['conftest.py', 'conftest.py', true],
    ['conftest.py', 'a/b/conftest.py', true],
    ['conftest.py', 'a/conftest.pyc', false],
    ['tests/test_calc.py', 'tests/test_calc.py', true],
    ['tests/test_calc.py', 'x/tests/test_calc.py', false],
    ['tests/*.py', 'tests/test_a.py', true],
    ['tests/*.py', 'tests/sub/test_a.py', false],
    ['tests/**/*.py', 'tests/sub/deep/test_a.py', true],
    ['tests/**/*.py', 'tests/test_a.py', true],
    ['**/sitecustomize.py', 'sitecustomize.py', true],
    ['**/sitecustomize.py', 'lib/site-packages/sitecustomize.py', true],
    ['.git', '.git/config', true],
    ['.git', 'sub/.git/HEAD', true],
    ['.git', '.github/workflows/ci.yml', false],
    ['test_?.py', 'test_a.py', true],
    ['*.{py,cfg}', 'setup.cfg', true],
    ['*.{py,cfg}', 'setup.toml', false],
    ['a+b(c).py', 'a+b(c).py', true],
    ['./src/x.py', 'src/x.py', true],
  ])('%s matches %s: %s', (glob, path, want) => {
    expect(compileGlob(glob).test(path)).toBe(want);
  });

  it.each([
    ['', /empty/],
    ['/etc/passwd', /relative to the workspace/],
    ['../outside.py', /inside the workspace/],
    ['a/../../b', /inside the workspace/],
    ['a//b', /empty or '.' segment/],
    ['a**b/c', /whole path segment/],
    ['{a,b', /unbalanced '\{'/],
    ['a}', /unbalanced '\}'/],
    ['{a,{b}}', /nested/],
    ['a\nb', /control characters/],
  ])('refuses %j', (glob, msg) => {
    expect(() => compileGlob(glob)).toThrow(msg);
  });

  it('a glob set matches when any glob does', () => {
    const s = globSet(['conftest.py', 'tests/**']);
    expect(s.matches('tests/a/b.py')).toBe(true);
    expect(s.matches('src/conftest.py')).toBe(true);
    expect(s.matches('src/a.py')).toBe(false);
  });
});

describe('the instance integrity field', () => {
  it('defaults to flag with the family defaults on', () => {
    expect(IntegrityPolicySchema.parse({})).toEqual({ protect: [], secret: [], deny_exec: [], on_violation: 'flag', defaults: true });
  });

  function fieldsOf(integrity: unknown): string[] {
    try {
      validateSubmission({ data_source: 'shell', integrity }, {});
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      return (e as ValidationError).issues.map((i) => i.path);
    }
    return [];
  }

  it.each([
    [{ protect: ['../etc/shadow'] }, 'instance.integrity.protect.0'],
    [{ secret: ['ok', '/abs'] }, 'instance.integrity.secret.1'],
    [{ protect: Array.from({ length: 10_000 }, (_, i) => `f${i}.py`) }, 'instance.integrity.protect'],
    [{ deny_exec: ['pip{'] }, 'instance.integrity.deny_exec.0'],
    [{ deny_exec: ['git log ../x'] }, 'instance.integrity.deny_exec.0'],
    [{ deny_exec: ['   '] }, 'instance.integrity.deny_exec.0'],
    [{ on_violation: 'explode' }, 'instance.integrity.on_violation'],
    [{ protect: 'tests/*' }, 'instance.integrity.protect'],
    [{ protekt: ['x'] }, 'instance.integrity'],
  ])('refuses %j at submit naming %s', (integrity, field) => {
    expect(fieldsOf(integrity)).toEqual([field]);
  });

  it('accepts a good policy, deny_exec with absolute program paths', () => {
    const { instance } = validateSubmission({ data_source: 'shell', integrity: { protect: ['tests/**', 'conftest.py'], secret: ['.git'], deny_exec: ['pip*', '/usr/bin/curl'], on_violation: 'zero' } }, {});
    expect(instance.integrity).toEqual({ protect: ['tests/**', 'conftest.py'], secret: ['.git'], deny_exec: ['pip*', '/usr/bin/curl'], on_violation: 'zero', defaults: true });
  });
});

describe('execMatcher (deny_exec)', () => {
  const rules = ['pip install', 'git log --all', 'git show', 'curl', '/workspace/**/pytest', 'python* -c'];
  const m = execMatcher(rules);
  it.each([
    [['pip', 'install', 'x'], 'pip install'],
    [['/usr/local/bin/pip', 'install', '-e', '.'], 'pip install'],
    [['/usr/bin/python3', '/usr/bin/pip', 'install', 'x'], 'pip install'],
    [['python3', '-m', 'pip', 'install', 'x'], 'pip install'],
    [['python3', '-u', '-m', 'pip', 'install', 'x'], 'pip install'],
    [['pip', 'list'], null],
    [['pip3', 'install', 'x'], null],
    [['git', 'log', '--oneline', '--all'], 'git log --all'],
    [['git', 'log', '--oneline'], null],
    [['/usr/bin/git', 'show', 'HEAD~1'], 'git show'],
    [['git', 'status'], null],
    [['/usr/bin/curl', '-s', 'http://x'], 'curl'],
    [['curlx'], null],
    [['/workspace/bin/pytest'], '/workspace/**/pytest'],
    [['/bin/sh', '/workspace/bin/pytest', '-q'], '/workspace/**/pytest'],
    [['/usr/bin/pytest'], null],
    [['python3.11', '-c', 'print(1)'], 'python* -c'],
    [[], null],
  ] as const)('%j → %s', (argv, rule) => {
    expect(m(argv)).toBe(rule);
  });

  it('matches nothing without rules', () => {
    expect(execMatcher([])(['pip', 'install'])).toBeNull();
  });
});
