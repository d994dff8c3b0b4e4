import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Editor } from '../../../src/sandbox/editor.js';

let dir: string;
let ed: Editor;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ed-'));
  fs.writeFileSync(path.join(dir, 'a.py'), 'one\ntwo\nthree\ntwo\n');
  ed = new Editor(dir);
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('Editor', () => {
  it('views a file with numbered lines', async () => {
    const r = await ed.run({ command: 'view', path: '/workspace/a.py' });
    expect(r.error).toBe(false);
    expect(r.output).toContain('     1\tone\n     2\ttwo');
  });

  it('views a line range', async () => {
    const r = await ed.run({ command: 'view', path: 'a.py', view_range: [2, 3] });
    expect(r.output).toContain('     2\ttwo\n     3\tthree\n');
    expect(r.output).not.toContain('\tone');
  });

  it('lists a directory without hidden entries', async () => {
    fs.mkdirSync(path.join(dir, 'pkg'));
    fs.writeFileSync(path.join(dir, '.hidden'), '');
    const r = await ed.run({ command: 'view', path: '/workspace' });
    expect(r.output).toContain('/workspace/a.py');
    expect(r.output).toContain('/workspace/pkg/');
    expect(r.output).not.toContain('.hidden');
  });

  it('creates a file and refuses to overwrite one', async () => {
    expect((await ed.run({ command: 'create', path: 'new/b.txt', file_text: 'x' })).error).toBe(false);
    expect(fs.readFileSync(path.join(dir, 'new/b.txt'), 'utf8')).toBe('x');
    expect(await ed.run({ command: 'create', path: 'a.py', file_text: 'y' })).toMatchObject({ error: true });
  });

  it('replaces exactly one match', async () => {
    const r = await ed.run({ command: 'str_replace', path: 'a.py', old_str: 'three', new_str: '3' });
    expect(r.error).toBe(false);
    expect(fs.readFileSync(path.join(dir, 'a.py'), 'utf8')).toBe('one\ntwo\n3\ntwo\n');
  });

  it('refuses a replacement with several matches and says how many and where', async () => {
    const r = await ed.run({ command: 'str_replace', path: 'a.py', old_str: 'two', new_str: '2' });
    expect(r.error).toBe(true);
    expect(r.output).toMatch(/appears 2 times .*lines 2, 4/);
  });

  it('refuses a replacement with no match', async () => {
    expect((await ed.run({ command: 'str_replace', path: 'a.py', old_str: 'four', new_str: '4' })).output).toMatch(/did not appear verbatim/);
  });

  it('inserts after a line', async () => {
    await ed.run({ command: 'insert', path: 'a.py', insert_line: 1, new_str: 'inserted' });
    expect(fs.readFileSync(path.join(dir, 'a.py'), 'utf8')).toBe('one\ninserted\ntwo\nthree\ntwo\n');
  });

  it('undoes the last edit, and a create by removing the file', async () => {
    await ed.run({ command: 'str_replace', path: 'a.py', old_str: 'one', new_str: '1' });
    await ed.run({ command: 'undo_edit', path: 'a.py' });
    expect(fs.readFileSync(path.join(dir, 'a.py'), 'utf8')).toBe('one\ntwo\nthree\ntwo\n');
    await ed.run({ command: 'create', path: 'c.txt', file_text: 'c' });
    await ed.run({ command: 'undo_edit', path: 'c.txt' });
    expect(fs.existsSync(path.join(dir, 'c.txt'))).toBe(false);
  });

  it('refuses paths outside the workspace, including through symlinks', async () => {
    fs.symlinkSync('/etc', path.join(dir, 'etc'));
    expect((await ed.run({ command: 'view', path: '/etc/passwd' })).error).toBe(true);
    expect((await ed.run({ command: 'view', path: 'etc/passwd' })).error).toBe(true);
    expect((await ed.run({ command: 'create', path: '../x', file_text: '' })).error).toBe(true);
  });
});
