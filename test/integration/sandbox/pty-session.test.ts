import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PtySession } from '../../../src/sandbox/pty-session.js';
import { buildLaunch, TRUSTED_PATH } from '../../../src/sandbox/drivers.js';
import { isGone } from './helpers.js';

let dir: string;
let session: PtySession | null = null;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pty-'));
  fs.mkdirSync(path.join(dir, 'ws'));
  fs.mkdirSync(path.join(dir, 'ctl'));
});
afterEach(() => {
  session?.dispose();
  session = null;
  fs.rmSync(dir, { recursive: true, force: true });
});

async function start(noOutputTimeoutMs: number, onExit?: () => void): Promise<PtySession> {
  const launch = buildLaunch({
    driver: 'none',
    workdir: path.join(dir, 'ws'),
    stateDir: dir,
    homeDir: dir,
    rootfs: null,
    network: false,
    limits: { maxProcesses: 1000, memoryBytes: 2 ** 32, fileSizeBytes: 2 ** 30, cpuSeconds: 100, totalMemoryBytes: 2 ** 32, tmpBytes: 2 ** 30, workdirBytes: 2 ** 30 },
    ctlDir: path.join(dir, 'ctl'),
    cgroupProcs: null,
    memoryCgroupProcs: null,
    sandboxUid: null,
    seccompFile: null,
    resolvConf: null,
    sandboxPath: TRUSTED_PATH,
    command: ['bash', '--noprofile', '--norc', '--noediting', '-i'],
  });
  session = await PtySession.start(
    {
      argv: launch.argv,
      cwd: launch.hostCwd,
      env: { PATH: '/usr/bin:/bin', HOME: dir, TERM: 'dumb' },
      ctlHostDir: path.join(dir, 'ctl'),
      ctlInsideDir: path.join(dir, 'ctl'),
      bashTimeoutMs: 20_000,
      noOutputTimeoutMs,
      maxOutputChars: 10_000,
      ...(onExit ? { onExit } : {}),
    },
    10_000,
  );
  return session;
}

describe('PtySession', () => {
  it('ends the wait when no new output comes for noOutputTimeoutMs, before the command timeout', async () => {
    const s = await start(150);
    const r = await s.exec({ command: 'echo a; sleep 5' });
    expect(r).toMatchObject({ exitCode: null, timedOut: true });
    expect(r.output.startsWith('a\n')).toBe(true);
    s.interrupt();
  });

  it('keeps waiting past noOutputTimeoutMs while output keeps coming', async () => {
    const s = await start(500);
    const r = await s.exec({ command: 'for i in 1 2 3 4 5 6; do echo $i; sleep 0.1; done' });
    expect(r).toMatchObject({ output: '1\n2\n3\n4\n5\n6\n', exitCode: 0, timedOut: false });
  });

  it('never matches the marker definition it typed itself, only the printed marker', async () => {
    const s = await start(5000);
    const r = await s.exec({ command: 'declare -p PROMPT_COMMAND >/dev/null; echo ok' });
    expect(r).toMatchObject({ output: 'ok\n', exitCode: 0 });
  });

  it('reports the shell exit to its owner and fails later calls', async () => {
    let exited = false;
    const s = await start(5000, () => (exited = true));
    await expect(s.exec({ command: 'exit 3' })).rejects.toMatchObject({ name: 'SandboxError' });
    expect(exited).toBe(true);
    await expect(s.exec({ command: 'echo' })).rejects.toMatchObject({ code: 'SANDBOX_LOST' });
  });

  it('kills its process on dispose', async () => {
    const s = await start(5000);
    const pid = s.pid;
    s.dispose();
    // The kill is asynchronous: wait for the process itself to be gone (reaped or a zombie).
    await expect.poll(() => isGone(pid), { timeout: 30_000 }).toBe(true);
  });
});
