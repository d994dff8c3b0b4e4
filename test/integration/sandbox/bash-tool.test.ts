import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider, type Sandbox } from '../../../src/sandbox/index.js';
import { testDriver } from './helpers.js';

let stateDir: string;
let provider: HostSandboxProvider;
let sb: Sandbox;

beforeAll(async () => {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-bash-'));
  provider = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir, timeouts: { bashMs: 5000, noOutputMs: 5000 }, maxOutputChars: 2000 });
  sb = await provider.create({ files: { 'hello.txt': 'hi there\n' } }, { rolloutId: 'bash-tests' });
});
afterAll(async () => {
  await provider?.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
});

describe('bash tool', () => {
  it('starts a new shell for a Python cell when the shell ended between calls, and the REPL joins it', async () => {
    const own = await provider.create({}, { rolloutId: 'bash-exit-python' });
    try {
      expect((await own.python('print(1)')).output).toBe('1\n');
      const exited = new Promise<{ exitCode: number }>((resolve) => {
        const off = own.onShellExit!((e) => (off(), resolve(e)));
      });
      // The call returns before its command ends the shell: no bash call sees the exit.
      expect((await own.bash({ command: 'sleep 0.3; exit 3', timeoutMs: 100 })).timedOut).toBe(true);
      expect(await exited).toEqual({ exitCode: 3 });
      const r = await own.python("import os\nprint(os.getcwd(), sorted(os.listdir('/workspace')))");
      expect(r.error).toBeNull();
      expect(r.output).toBe('/workspace []\n');
      // The REPL is in the new shell's sandbox: a file one writes, the other sees.
      await own.bash({ command: 'echo from-shell > /tmp/shared.txt' });
      expect((await own.python("print(open('/tmp/shared.txt').read().strip())")).output).toBe('from-shell\n');
    } finally {
      await own.close();
    }
  });

  it('returns output, exit code and cwd of a command', async () => {
    const r = await sb.bash({ command: 'cat hello.txt; cd /tmp; false' });
    expect(r).toEqual({ output: 'hi there\n', exitCode: 1, cwd: '/tmp', timedOut: false, truncated: false });
    await sb.bash({ command: 'cd /workspace' });
  });

  it('keeps shell state (variables, functions, cwd) between commands', async () => {
    await sb.bash({ command: 'export FOO=bar; greet() { echo "hello $1"; }; mkdir -p d && cd d' });
    const r = await sb.bash({ command: 'greet $FOO; pwd' });
    expect(r.output).toBe('hello bar\n/workspace/d\n');
    await sb.bash({ command: 'cd /workspace' });
  });

  it('runs a multi-line command as one action with one exit code', async () => {
    const r = await sb.bash({ command: 'for i in 1 2 3; do\n  echo "n=$i"\ndone\n(exit 7)' });
    expect(r.output).toBe('n=1\nn=2\nn=3\n');
    expect(r.exitCode).toBe(7);
  });

  it('reports an unbalanced quote as a syntax error instead of hanging', async () => {
    const r = await sb.bash({ command: 'echo "unterminated' });
    expect(r.exitCode).toBe(2);
    expect(r.output).toMatch(/unexpected EOF/);
  });

  it('runs a command longer than the terminal line limit', async () => {
    const long = `echo ${'x'.repeat(6000)} | wc -c`;
    expect((await sb.bash({ command: long })).output.trim()).toBe('6001');
  });

  it('strips ANSI colour sequences', async () => {
    const r = await sb.bash({ command: "printf '\\033[31mred\\033[0m\\n'" });
    expect(r.output).toBe('red\n');
  });

  it('truncates long output keeping head, a slice near 80% and the tail', async () => {
    const r = await sb.bash({ command: 'seq 1 20000' });
    expect(r.truncated).toBe(true);
    expect(r.output.startsWith('1\n2\n3\n')).toBe(true);
    expect(r.output).toContain('\n20000\n');
    expect(r.output).toMatch(/characters truncated/);
    expect(r.exitCode).toBe(0);
  });

  it('returns the output so far with a hint on timeout, then more output on an empty command', async () => {
    // Margins for a loaded machine: `start` must be out well before the timeout, `end` well after.
    const r1 = await sb.bash({ command: 'echo start; sleep 2; echo end', timeoutMs: 1000 });
    expect(r1.timedOut).toBe(true);
    expect(r1.exitCode).toBeNull();
    expect(r1.output).toMatch(/^start\n/);
    expect(r1.output).toMatch(/empty command to wait/);
    const r2 = await sb.bash({ command: '', timeoutMs: 5000 });
    expect(r2).toMatchObject({ output: 'end\n', exitCode: 0, timedOut: false });
  });

  it('refuses a new command while one runs, returning the running one’s new output', async () => {
    await sb.bash({ command: 'echo a; sleep 0.3; echo b; sleep 0.3', timeoutMs: 100 });
    const busy = await sb.bash({ command: 'echo should-not-run', timeoutMs: 100 });
    expect(busy.exitCode).toBeNull();
    expect(busy.output).toMatch(/was NOT run/);
    expect(busy.output).not.toContain('should-not-run\n');
    const done = await sb.bash({ command: '', timeoutMs: 3000 });
    expect(done.exitCode).toBe(0);
  });

  it('interrupts the running command with C-c', async () => {
    await sb.bash({ command: 'sleep 30', timeoutMs: 100 });
    const r = await sb.bash({ command: 'C-c', isInput: true, timeoutMs: 3000 });
    expect(r.exitCode).toBe(130);
  });

  it('sends input to a running program', async () => {
    await sb.bash({ command: 'read -r line; echo "got $line"', timeoutMs: 100 });
    const r = await sb.bash({ command: 'hello', isInput: true, timeoutMs: 3000 });
    expect(r).toMatchObject({ output: 'got hello\n', exitCode: 0 });
  });

  it('suspends the running command with C-z and ends the wait', async () => {
    // A sandbox of its own: a stopped job left in the shared shell would make a later `exit`
    // refuse ("There are stopped jobs", exit 1), and `kill -9 %1; wait` does not wait for a
    // stopped job's death to be seen.
    const own = await provider.create({}, { rolloutId: 'bash-suspend' });
    try {
      await own.bash({ command: 'sleep 30', timeoutMs: 100 });
      const r = await own.bash({ command: 'C-z', isInput: true, timeoutMs: 3000 });
      expect(r.exitCode).toBe(148);
      expect((await own.bash({ command: 'jobs -s' })).output).toMatch(/Stopped\s+sleep 30/);
    } finally {
      await own.close();
    }
  });

  it('starts a fresh shell when a command exits the shell, and reports its exit code', async () => {
    const exits: number[] = [];
    const off = sb.onShellExit!((e) => exits.push(e.exitCode));
    const r = await sb.bash({ command: 'export GONE=1; exit 3' });
    off();
    expect(r.exitCode).toBe(3);
    // The host's notification comes before the call's answer on the same channel.
    expect(exits).toEqual([3]);
    expect(r.output).toMatch(/A new shell was started/);
    expect((await sb.bash({ command: 'echo "[$GONE]"; pwd' })).output).toBe('[]\n/workspace\n');
    expect((await sb.python('1 + 1')).output).toBe('2\n');
  });
});
