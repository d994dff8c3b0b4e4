import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { TaskError } from '../../../src/errors.js';
import { readLease } from '../../../src/sandbox/lease.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { ScriptedPolicy } from '../../../src/testing/scripted-policy.js';
import { removeTree } from '../../../src/sandbox/remove-tree.js';
import { testDriver } from './helpers.js';

/**
 * What a policy or an instance can put in a workspace, against real sandbox hosts (#9 items
 * 2, 4 and 9): a FIFO the editor is asked to view, a huge sparse file, a `files` key 2,000
 * directories deep, and `files` keys that are bad instance data.
 */

let stateDir: string;
let provider: HostSandboxProvider;

beforeAll(() => {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-hostile-'));
  provider = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir, timeouts: { bashMs: 10_000, noOutputMs: 10_000 } });
});
afterAll(async () => {
  await provider?.close();
  await removeTree(stateDir);
});

describe('hostile workspace files on a sandbox host', () => {
  it('viewing a FIFO fails at once and another sandbox on the same host keeps answering', { timeout: 60_000 }, async () => {
    const [a, b] = await Promise.all([provider.create({}, { rolloutId: 'fifo-a' }), provider.create({}, { rolloutId: 'fifo-b' })]);
    try {
      expect(readLease(path.join(stateDir, 'sandboxes', a.id))!.hostPid).toBe(readLease(path.join(stateDir, 'sandboxes', b.id))!.hostPid);
      await a.bash({ command: 'mkfifo pipe' });
      const view = a.editor({ command: 'view', path: '/workspace/pipe' });
      // Before the fix the host's event loop blocked in open(2) on the FIFO: b never answered.
      expect((await b.bash({ command: 'echo alive' })).output).toBe('alive\n');
      const r = await view;
      expect(r.error).toBe(true);
      expect(r.output).toMatch(/\/workspace\/pipe is a FIFO \(named pipe\), not a regular file/);
      expect((await a.editor({ command: 'str_replace', path: 'pipe', old_str: 'a', new_str: 'b' })).output).toMatch(/not a regular file/);
      await expect(a.readFile('pipe')).rejects.toBeInstanceOf(TaskError);
      expect((await b.bash({ command: 'echo still' })).output).toBe('still\n');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a view of a 900 MB sparse file returns a bounded result, and edits of it are refused', async () => {
    const sb = await provider.create({}, { rolloutId: 'sparse' });
    try {
      await sb.bash({ command: 'truncate -s 900M big && printf "head line\\n" | dd of=big conv=notrunc status=none' });
      const r = await sb.editor({ command: 'view', path: 'big' });
      expect(r.error).toBe(false);
      expect(r.output).toContain('     1\thead line');
      expect(r.output).toMatch(/File content truncated \(the file is 943718400 bytes\)/);
      expect(r.output.length).toBeLessThan(20_000);
      const edit = await sb.editor({ command: 'str_replace', path: 'big', old_str: 'head', new_str: 'HEAD' });
      expect(edit).toMatchObject({ error: true, output: expect.stringMatching(/over the editor's 8 MiB limit/) });
      await expect(sb.readFile('big')).rejects.toThrow(/over the 32 MiB limit/);
    } finally {
      await sb.close();
    }
  });

  it('a files key 2,000 directories deep is written, and the sandbox directory is removed on close', { timeout: 90_000 }, async () => {
    const key = `${'d/'.repeat(2000)}f.txt`;
    const sb = await provider.create({ files: { [key]: 'deep' } }, { rolloutId: 'deep-key' });
    const dir = path.join(stateDir, 'sandboxes', sb.id);
    try {
      expect(await sb.readFile(key)).toBe('deep');
      expect((await sb.bash({ command: `cat ${key}` })).output).toBe('deep');
    } finally {
      await sb.close();
    }
    expect(fs.existsSync(dir)).toBe(false);
    expect(fs.existsSync(path.join(stateDir, 'quarantine'))).toBe(false);
  });

  it.each([
    ['.', /key "\." names the workspace root/],
    ['/workspace', /key "\/workspace" names the workspace root/],
    ['x'.repeat(300), /component longer than 255 bytes/],
    ['a\0b', /key "a\\u0000b" contains a NUL byte/],
    ['../../escape', /escapes \/workspace/],
  ])('refuses the files key %j with a TaskError naming it, before any host work', async (key, message) => {
    const err = await provider.create({ files: { [key]: 'x' } }, { rolloutId: 'bad-key' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect(err).toMatchObject({ code: 'BAD_FILES', stage: 'init', message: expect.stringMatching(message) });
    expect((err as Error).message).not.toContain(stateDir);
  });

  it('refuses `a` together with `a/b`', async () => {
    const err = await provider.create({ files: { a: '1', 'a/b': '2' } }, { rolloutId: 'bad-key' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'TaskError', message: 'files: key "a" is a file, but "a/b" needs it to be a directory' });
  });

  it('a files key under a seeded file is a TaskError naming the key, without host paths', async () => {
    const seed = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-seed-'));
    try {
      fs.writeFileSync(path.join(seed, 'plain'), 'x');
      const err = await provider.create({ seedDir: seed, files: { 'plain/inner.txt': 'y' } }, { rolloutId: 'under-file' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TaskError);
      expect((err as Error).message).toBe('files: key "plain/inner.txt": The path /workspace/plain has a component that is not a directory.');
      expect(fs.readdirSync(path.join(stateDir, 'sandboxes'))).toEqual([]);
    } finally {
      fs.rmSync(seed, { recursive: true, force: true });
    }
  });
});

describe('bad instance files through the runtime', () => {
  let runtime: EmbeddedRuntime;
  beforeAll(() => {
    const codec = new TestCodec();
    runtime = createRuntime({ codec, llm: new ScriptedPolicy({ codec }), sandboxes: provider, retries: { max: 2 } });
  });
  afterAll(async () => {
    await runtime?.close();
  });

  it.each([['.'], ['/workspace'], ['n'.repeat(256)], ['nul\0byte'], ['../up']])('a shell task with files key %j ends task-error after one attempt', async (key) => {
    const r = await runtime.submit({ data_source: 'shell', instance_id: 'bad-files', prompt: 'p', files: { [key]: 'x' }, eval_command: 'true', oracle: [{ tool_calls: [{ name: 'finish', arguments: {} }] }] }).result;
    expect([r.outcome, r.attempts, r.error?.name, r.error?.code]).toEqual(['task-error', 1, 'TaskError', 'BAD_FILES']);
    expect(r.error?.message).not.toContain(stateDir);
  });
});
