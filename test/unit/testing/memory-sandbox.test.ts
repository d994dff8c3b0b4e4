import { describe, expect, it } from 'vitest';
import { SandboxError } from '../../../src/errors.js';
import { ManualClock, MemorySandboxProvider } from '../../../src/testing/index.js';

describe('MemorySandboxProvider', () => {
  it('counts live sandboxes and closes them all on close', async () => {
    const p = new MemorySandboxProvider();
    await p.create({}, { rolloutId: 'a' });
    const b = await p.create({}, { rolloutId: 'b' });
    await b.close();
    await b.close();
    expect([p.live, p.created, p.closedCount]).toEqual([1, 2, 1]);
    await p.close();
    expect(p.live).toBe(0);
  });

  it('runs echo with redirect, cat and ls on its files', async () => {
    const p = new MemorySandboxProvider();
    const s = await p.create({ files: { 'x.txt': 'x' } }, { rolloutId: 'a' });
    await s.bash({ command: 'echo "hi" > a.txt' });
    expect((await s.bash({ command: 'cat a.txt' })).output).toBe('hi\n');
    expect((await s.bash({ command: 'ls' })).output).toBe('a.txt\nx.txt\n');
    expect((await s.bash({ command: 'nosuch' })).exitCode).toBe(127);
    await p.close();
  });

  it('supports the editor commands including undo', async () => {
    const p = new MemorySandboxProvider();
    const s = await p.create({}, { rolloutId: 'a' });
    expect((await s.editor({ command: 'create', path: '/workspace/f', file_text: 'a\nb' })).error).toBe(false);
    await s.editor({ command: 'insert', path: 'f', insert_line: 1, new_str: 'X' });
    expect(await s.readFile('f')).toBe('a\nX\nb');
    expect((await s.editor({ command: 'str_replace', path: 'f', old_str: 'zzz' })).error).toBe(true);
    await s.editor({ command: 'undo_edit', path: 'f' });
    expect((await s.editor({ command: 'view', path: 'f' })).output).toBe('     1\ta\n     2\tb');
    await p.close();
  });

  it('injects latency on the clock and faults per op', async () => {
    const clock = new ManualClock();
    const p = new MemorySandboxProvider({ clock, latencyMs: 10, fail: (op) => (op === 'bash' ? new SandboxError('lost') : undefined) });
    let made = false;
    const c = p.create({}, { rolloutId: 'a' }).then((s) => ((made = true), s));
    await clock.advance(9);
    expect(made).toBe(false);
    await clock.advance(1);
    const s = await c;
    const b = expect(s.bash({ command: 'true' })).rejects.toBeInstanceOf(SandboxError);
    await clock.advance(10);
    await b;
    await p.close();
  });

  it('refuses operations after close', async () => {
    const p = new MemorySandboxProvider();
    const s = await p.create({}, { rolloutId: 'a' });
    await s.close();
    await expect(s.bash({ command: 'true' })).rejects.toBeInstanceOf(SandboxError);
  });
});
