import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { resolveInWorkspace } from '../../../src/sandbox/workspace-path.js';

let dir: string;
let ws: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wsp-'));
  ws = path.join(dir, 'ws');
  fs.mkdirSync(path.join(ws, 'src'), { recursive: true });
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('resolveInWorkspace', () => {
  it('maps /workspace paths and relative paths to the host workdir', () => {
    const real = fs.realpathSync(ws);
    expect(resolveInWorkspace(ws, '/workspace/src/a.py')).toBe(path.join(real, 'src/a.py'));
    expect(resolveInWorkspace(ws, 'src/a.py')).toBe(path.join(real, 'src/a.py'));
    expect(resolveInWorkspace(ws, '/workspace')).toBe(real);
  });

  it('refuses absolute paths elsewhere and .. escapes', () => {
    expect(resolveInWorkspace(ws, '/etc/passwd')).toBeNull();
    expect(resolveInWorkspace(ws, '/workspace/../etc/passwd')).toBeNull();
    expect(resolveInWorkspace(ws, '../outside')).toBeNull();
  });

  it('refuses a path through a symlink that points outside the workspace', () => {
    fs.symlinkSync(dir, path.join(ws, 'escape'));
    expect(resolveInWorkspace(ws, '/workspace/escape/secret')).toBeNull();
    expect(resolveInWorkspace(ws, 'escape')).toBeNull();
  });

  it('accepts a symlink that stays inside the workspace', () => {
    fs.symlinkSync(path.join(ws, 'src'), path.join(ws, 'link'));
    expect(resolveInWorkspace(ws, 'link/new.txt')).toBe(path.join(fs.realpathSync(ws), 'src/new.txt'));
  });

  it('refuses a dangling symlink', () => {
    fs.symlinkSync('/nonexistent/target', path.join(ws, 'dangling'));
    expect(resolveInWorkspace(ws, 'dangling')).toBeNull();
  });
});
