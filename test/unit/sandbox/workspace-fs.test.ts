import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TaskError } from '../../../src/errors.js';
import { writeWorkspaceFile } from '../../../src/sandbox/workspace-fs.js';

// The runtime's own writes into a workspace the policy shaped (the swe eval writes the task's
// test files there): links are followed only inside the workspace, and a link that ends at a
// directory is refused, never written "through" under another name.
let root: string;
let ws: string;
beforeEach(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'ws-fs-'));
  ws = path.join(root, 'ws');
  fs.mkdirSync(path.join(ws, 'sub'), { recursive: true });
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

describe('writeWorkspaceFile', () => {
  it('refuses a path whose last link ends at a directory (tests -> .) instead of writing a file named "null"', async () => {
    fs.symlinkSync('.', path.join(ws, 'tests'));
    const err = await writeWorkspaceFile(ws, 'tests', 'echo hi').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect((err as Error).message).toBe('The path /workspace/tests is a directory, not a file.');
    expect(fs.readdirSync(ws).sort()).toEqual(['sub', 'tests']);
  });

  it('follows a link that stays inside the workspace, and refuses one that leaves it', async () => {
    fs.symlinkSync('..', path.join(ws, 'sub', 'up'));
    fs.symlinkSync('..', path.join(ws, 'out'));
    await writeWorkspaceFile(ws, 'sub/up/inside.txt', 'a');
    expect(fs.readFileSync(path.join(ws, 'inside.txt'), 'utf8')).toBe('a');
    await expect(writeWorkspaceFile(ws, 'out/escape.txt', 'b')).rejects.toThrow('points outside the workspace');
    expect(fs.existsSync(path.join(root, 'escape.txt'))).toBe(false);
  });
});
