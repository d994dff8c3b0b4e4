import type { IntegrityDefaults } from '../../protocol/integrity.js';
import { patchFiles, rowKind } from './swe-rows.js';

/** Anywhere in the workspace: files that change how the tests run (pytest's conftest, Python's start-up hooks). */
const HOOKS = ['conftest.py', 'sitecustomize.py', 'usercustomize.py'];
/** Names that are tests in a bundled repository. */
const TEST_NAME = /(^|\/)(test_[^/]*\.py|[^/]*_test\.py)$|(^|\/)tests?\//;
/** Paths a default may hold as literal globs: no glob syntax in them (a rare name with it is left out, not misread). */
const LITERAL = /^[^*?{},]+$/;

/**
 * The SWE family's default integrity policy (#27): protected are the files the test patch
 * touches, the files the FAIL_TO_PASS / PASS_TO_PASS tests live in (`path::name` ids), and for a
 * bundled row its `test_files` and the test files of its `files`; `conftest.py`,
 * `sitecustomize.py` and `usercustomize.py` anywhere; `.git` is secret. Pure; never throws.
 */
export function sweIntegrityDefaults(instance: Record<string, unknown>): IntegrityDefaults {
  const files = new Set<string>();
  if (rowKind(instance) === 'swebench') {
    if (typeof instance.test_patch === 'string') for (const f of patchFiles(instance.test_patch)) files.add(f);
    for (const key of ['FAIL_TO_PASS', 'PASS_TO_PASS']) {
      for (const id of testList(instance[key])) {
        const file = id.split('::')[0]!;
        if (file.endsWith('.py')) files.add(file);
      }
    }
  }
  if (isRecord(instance.test_files)) for (const f of Object.keys(instance.test_files)) files.add(f);
  if (isRecord(instance.files)) for (const f of Object.keys(instance.files)) if (TEST_NAME.test(f)) files.add(f);
  const protect = [...files].map((f) => f.replace(/^\.\//, '')).filter((f) => LITERAL.test(f) && !f.startsWith('/') && !f.split('/').includes('..'));
  return { protect: [...protect, ...HOOKS], secret: ['.git'] };
}

function testList(v: unknown): string[] {
  let list = v;
  if (typeof v === 'string') {
    try {
      list = JSON.parse(v);
    } catch {
      return [];
    }
  }
  return Array.isArray(list) ? list.filter((x): x is string => typeof x === 'string') : [];
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
