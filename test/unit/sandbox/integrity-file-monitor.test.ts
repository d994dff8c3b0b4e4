import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { globSet } from '../../../src/protocol/integrity.js';
import { FileMonitor } from '../../../src/sandbox/integrity/file-monitor.js';

let root: string;
beforeEach(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'file-monitor-'));
  fs.mkdirSync(path.join(root, 'tests'));
  fs.mkdirSync(path.join(root, '.git'));
  fs.writeFileSync(path.join(root, 'tests/test_a.py'), 'def test_a():\n    assert 0\n');
  fs.writeFileSync(path.join(root, 'src.py'), 'x = 1\n');
  fs.writeFileSync(path.join(root, '.git/index'), 'i');
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

const monitor = (opts?: { maxEntries: number; maxHashBytes: number }) => {
  const m = new FileMonitor(root, globSet(['tests/test_a.py', 'conftest.py']), opts);
  m.start();
  return m;
};
const w = (rel: string, s: string) => fs.writeFileSync(path.join(root, rel), s);

describe('FileMonitor', () => {
  it('reports nothing for changes to unprotected files, counting the new ones', () => {
    const m = monitor();
    w('src.py', 'x = 2\n');
    w('new.py', '');
    const o = m.observe(0);
    expect([o.violations, o.created, o.modified]).toEqual([[], 1, 0]);
  });

  it('reports an edit of a protected file by its hash, not by its timestamp', () => {
    const m = monitor();
    const p = path.join(root, 'tests/test_a.py');
    fs.utimesSync(p, new Date(0), new Date(0));
    expect(m.observe(0).violations).toEqual([]);
    w('tests/test_a.py', 'def test_a():\n    assert 1\n');
    expect(m.observe(1).violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['edit-protected', 1, 'tests/test_a.py']]);
    // Reported once: the next scan compares with the edited state.
    expect(m.observe(2).violations).toEqual([]);
  });

  it('reports a deletion, a new conftest.py at any depth and a link put in place of a protected file', () => {
    const m = monitor();
    fs.rmSync(path.join(root, 'tests/test_a.py'));
    w('tests/conftest.py', 'x');
    expect(m.observe(3).violations.map((v) => [v.kind, v.path])).toEqual([
      ['delete-protected', 'tests/test_a.py'],
      ['create-protected', 'tests/conftest.py'],
    ]);
    fs.symlinkSync('/etc/passwd', path.join(root, 'tests/test_a.py'));
    expect(m.observe(4).violations.map((v) => [v.kind, v.path, v.detail])).toEqual([['symlink-protected', 'tests/test_a.py', 'created as a link to /etc/passwd']]);
  });

  it('does not descend into .git', () => {
    const m = monitor();
    w('.git/index', 'changed');
    w('.git/conftest.py', 'x');
    expect(m.observe(0)).toMatchObject({ violations: [], created: 0 });
  });

  it('sees a protected file in a directory created in one action, and edits in directories it did not list again', () => {
    const m = monitor();
    fs.mkdirSync(path.join(root, 'pkg/sub'), { recursive: true });
    w('pkg/sub/conftest.py', 'x');
    expect(m.observe(0).violations.map((v) => [v.kind, v.path])).toEqual([['create-protected', 'pkg/sub/conftest.py']]);
    w('pkg/sub/conftest.py', 'y');
    expect(m.observe(1).violations.map((v) => [v.kind, v.path])).toEqual([['edit-protected', 'pkg/sub/conftest.py']]);
    fs.rmSync(path.join(root, 'pkg'), { recursive: true });
    expect(m.observe(2).violations.map((v) => [v.kind, v.path])).toEqual([['delete-protected', 'pkg/sub/conftest.py']]);
  });

  it('stops a scan at maxEntries and says so', () => {
    const m = monitor({ maxEntries: 2, maxHashBytes: 1024 });
    expect(m.observe(0).truncated).toBe(true);
  });
});
