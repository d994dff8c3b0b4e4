import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Editor, MAX_EDIT_BYTES } from '../../../src/sandbox/editor.js';

let dir: string;
let ed: Editor;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ed-'));
  fs.writeFileSync(path.join(dir, 'a.py'), 'one\ntwo\nthree\ntwo\n');
  ed = new Editor(dir);
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('Editor', () => {
  it("works with the rights of its user (asUid): a mode-000 file and a 0555 directory are refused as the kernel would; a 0700 subdirectory is listed, not entered", async () => {
    const uid = process.getuid!();
    const mine = new Editor(dir, { asUid: uid === 0 ? 4242 : uid });
    if (uid === 0) execFileSync('chown', ['-R', '4242:4242', dir]);
    fs.writeFileSync(path.join(dir, 'none.txt'), 'secret\n', { mode: 0o000 });
    fs.chmodSync(path.join(dir, 'none.txt'), 0o000);
    fs.mkdirSync(path.join(dir, 'ro'), { mode: 0o555 });
    fs.chmodSync(path.join(dir, 'ro'), 0o555);
    fs.mkdirSync(path.join(dir, 'closed'));
    fs.writeFileSync(path.join(dir, 'closed', 'inner.txt'), 'x');
    if (uid === 0) execFileSync('chown', ['-R', '0:0', path.join(dir, 'closed')]);
    fs.chmodSync(path.join(dir, 'closed'), 0o700);
    const view = await mine.run({ command: 'view', path: 'none.txt' });
    expect(view).toEqual({ error: true, output: 'The path /workspace/none.txt is not accessible (permission denied).' });
    expect((await mine.run({ command: 'insert', path: 'none.txt', insert_line: 0, new_str: 'x' })).error).toBe(true);
    expect((await mine.run({ command: 'create', path: 'ro/new.txt', file_text: 'x' })).output).toMatch(/permission denied/);
    expect(fs.existsSync(path.join(dir, 'ro', 'new.txt'))).toBe(false);
    const list = await mine.run({ command: 'view', path: '/workspace' });
    expect(list.output).toContain('/workspace/closed/\n');
    if (uid === 0) expect(list.output).not.toContain('inner.txt');
    // What the user may do still works.
    expect((await mine.run({ command: 'str_replace', path: 'a.py', old_str: 'one', new_str: 'uno' })).error).toBe(false);
  });

  it('walks from the root fd it was given: a workspace renamed and replaced by a link stays the one it holds', async () => {
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(ws);
    const other = path.join(dir, 'other');
    fs.mkdirSync(other);
    const fd = fs.openSync(ws, 'r');
    try {
      const held = new Editor(ws, { rootFd: fd });
      fs.renameSync(ws, path.join(dir, 'ws.old'));
      fs.symlinkSync(other, ws);
      expect((await held.run({ command: 'create', path: '/workspace/f.txt', file_text: 'kept\n' })).error).toBe(false);
      expect(fs.readdirSync(other)).toEqual([]);
      expect(fs.readFileSync(path.join(dir, 'ws.old', 'f.txt'), 'utf8')).toBe('kept\n');
    } finally {
      fs.closeSync(fd);
    }
  });

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

describe('Editor confinement and bounds', () => {
  it('follows links that stay inside the workspace, relative or absolute, and refuses ones that leave it', async () => {
    fs.mkdirSync(path.join(dir, 'src'));
    fs.writeFileSync(path.join(dir, 'src', 'm.py'), 'inside\n');
    fs.symlinkSync('src', path.join(dir, 'rel'));
    fs.symlinkSync('/workspace/src/m.py', path.join(dir, 'abs'));
    fs.symlinkSync('../../../../../../etc/hostname', path.join(dir, 'up'));
    fs.symlinkSync('/etc', path.join(dir, 'out'));
    expect((await ed.run({ command: 'view', path: 'rel/m.py' })).output).toContain('on /workspace/src/m.py:\n     1\tinside');
    expect((await ed.run({ command: 'view', path: 'abs' })).output).toContain('     1\tinside');
    expect(await ed.run({ command: 'create', path: 'rel/new.py', file_text: 'n' })).toEqual({ error: false, output: 'File created successfully at: /workspace/src/new.py' });
    for (const p of ['up', 'out/hostname', 'out']) {
      const r = await ed.run({ command: 'view', path: p });
      expect(r).toMatchObject({ error: true, output: expect.stringMatching(/points outside the workspace; it was refused/) });
    }
    expect((await ed.run({ command: 'create', path: 'out/planted', file_text: 'x' })).error).toBe(true);
    expect(fs.existsSync('/etc/planted')).toBe(false);
  });

  it('refuses a FIFO without blocking, and names no host path in any refusal', async () => {
    execFileSync('mkfifo', [path.join(dir, 'pipe')]);
    const results = [
      await ed.run({ command: 'view', path: 'pipe' }),
      await ed.run({ command: 'str_replace', path: 'pipe', old_str: 'a', new_str: 'b' }),
      await ed.run({ command: 'insert', path: 'pipe', insert_line: 0, new_str: 'b' }),
      await ed.run({ command: 'view', path: 'missing/file' }),
      await ed.run({ command: 'str_replace', path: 'a.py/x', old_str: 'a', new_str: 'b' }),
      await ed.run({ command: 'create', path: 'a.py/x', file_text: 'b' }),
      await ed.run({ command: 'view', path: '/workspace/../../etc/passwd' }),
      await ed.run({ command: 'undo_edit', path: 'nothing' }),
    ];
    expect(results[0]!.output).toBe('The path /workspace/pipe is a FIFO (named pipe), not a regular file.');
    for (const r of results) {
      expect(r.error).toBe(true);
      expect(r.output).not.toContain(dir);
      expect(r.output).not.toContain('/proc/self/fd');
    }
  });

  it('views of a long file stop at the view limit with a note, and view_range reads only what it shows', async () => {
    const lines = Array.from({ length: 50_000 }, (_, i) => `line ${i + 1}`);
    fs.writeFileSync(path.join(dir, 'long.txt'), lines.join('\n'));
    const all = await ed.run({ command: 'view', path: 'long.txt' });
    expect(all.output).toMatch(/\[File content truncated \(the file is \d+ bytes\); use view_range to see more.\]/);
    expect(all.output.length).toBeLessThan(17_000);
    const mid = await ed.run({ command: 'view', path: 'long.txt', view_range: [40_000, 40_002] });
    expect(mid.output).toBe("Here's the result of running `cat -n` on /workspace/long.txt:\n 40000\tline 40000\n 40001\tline 40001\n 40002\tline 40002\n");
    expect((await ed.run({ command: 'view', path: 'long.txt', view_range: [60_000, -1] })).output).toMatch(/the first line must be between 1 and 50000/);
  });

  it('refuses edits of files over the edit limit', async () => {
    fs.writeFileSync(path.join(dir, 'big.txt'), Buffer.alloc(MAX_EDIT_BYTES + 1, 'a'));
    expect((await ed.run({ command: 'str_replace', path: 'big.txt', old_str: 'a', new_str: 'b' })).output).toMatch(/over the editor's 8 MiB limit for edits/);
  });

  it("gives new files and directories the owner of the workspace root (the sandbox's user)", async (ctx) => {
    if (process.getuid?.() !== 0) {
      ctx.skip(); // chown needs root: run as root, as CI does
      return;
    }
    fs.chownSync(dir, 65534, 65534);
    await ed.run({ command: 'create', path: 'made/new.txt', file_text: 'x' });
    expect(fs.statSync(path.join(dir, 'made')).uid).toBe(65534);
    expect(fs.statSync(path.join(dir, 'made', 'new.txt')).gid).toBe(65534);
  });
});

describe('Editor ordering', () => {
  it('runs concurrent commands one at a time, so two edits of one file both land', async () => {
    const results = await Promise.all([
      ed.run({ command: 'str_replace', path: 'a.py', old_str: 'one', new_str: '1' }),
      ed.run({ command: 'str_replace', path: 'a.py', old_str: 'three', new_str: '3' }),
    ]);
    expect(results.map((r) => r.error)).toEqual([false, false]);
    expect(fs.readFileSync(path.join(dir, 'a.py'), 'utf8')).toBe('1\ntwo\n3\ntwo\n');
  });
});
