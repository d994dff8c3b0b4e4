import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { createSandboxProvider, reapStale, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { CancelledError, SandboxError, TaskError } from '../../../src/errors.js';
import { descendants, processStartTime } from '../../../src/sandbox/proc.js';
import { readLease } from '../../../src/sandbox/lease.js';
import type { SandboxClient } from '../../../src/sandbox/sandbox-client.js';
import { isGone, pidsByCmdline, testDriver, until } from './helpers.js';
import { haveTools } from '../../helpers/system-tools.js';

let stateDir: string;
let provider: HostSandboxProvider;
const tag = String(process.pid).padStart(6, '0');

beforeAll(() => {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-life-'));
  provider = createSandboxProvider({ driver: testDriver(), hosts: 2, stateDir, timeouts: { bashMs: 5000, noOutputMs: 5000, pythonMs: 5000 } });
});
afterAll(async () => {
  await provider?.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
});

/** The command line of a process, NULs as spaces ('' when gone). */
function readCmdline(pid: string): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** Sends a signal to a process that may already be gone. */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // exited meanwhile
  }
}

function leaseOf(id: string) {
  return readLease(path.join(stateDir, 'sandboxes', id))!;
}

describe('sandbox lifecycle', () => {
  it('close kills a running foreground command and a background child, and removes the workdir', async () => {
    const sb = await provider.create({}, { rolloutId: 'close' });
    const workdir = leaseOf(sb.id).workdir;
    await sb.bash({ command: `sleep 1000.${tag}1 & sleep 1001.${tag}1`, timeoutMs: 100 });
    const bg = await until(() => pidsByCmdline(['sleep', `1000.${tag}1`])[0]);
    const fg = await until(() => pidsByCmdline(['sleep', `1001.${tag}1`])[0]);
    await sb.close();
    expect(isGone(bg)).toBe(true);
    expect(isGone(fg)).toBe(true);
    expect(fs.existsSync(workdir)).toBe(false);
  });

  it('aborting a call kills the command and its background child but keeps the shell', async () => {
    const sb = await provider.create({}, { rolloutId: 'abort' });
    try {
      const ac = new AbortController();
      const p = sb.bash({ command: `sleep 1000.${tag}2 & sleep 1001.${tag}2` }, ac.signal);
      const bg = await until(() => pidsByCmdline(['sleep', `1000.${tag}2`])[0]);
      const fg = await until(() => pidsByCmdline(['sleep', `1001.${tag}2`])[0]);
      ac.abort();
      await expect(p).rejects.toBeInstanceOf(CancelledError);
      await until(() => isGone(bg) && isGone(fg));
      const after = await sb.bash({ command: '', timeoutMs: 3000 });
      // The cancelled command's own exit, reported to the next call: it was killed by a signal.
      expect(after.exitCode).toBeGreaterThan(128);
      expect((await sb.bash({ command: 'echo alive' })).output).toBe('alive\n');
    } finally {
      await sb.close();
    }
  });

  it('a SIGKILL sweep ends detached pid-hopping forkers that ignore every other signal, and keeps the shell', async () => {
    const sb = await provider.create({}, { rolloutId: 'sweep' });
    const mark = `hop.${tag}7`;
    const hoppers = (): number[] => fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p) && !isGone(Number(p)) && readCmdline(p).includes(mark)).map(Number);
    try {
      // Four chains, each leaving its session, ignoring INT/QUIT/TERM/HUP, and forking after every
      // write while the parent exits: a new pid each time, which a single read-then-kill pass misses.
      const chain = `trap "" INT QUIT TERM HUP; h() { echo x >> hop.txt; h & exit 0; }; h`;
      expect((await sb.bash({ command: `for i in 1 2 3 4; do setsid bash -c '${chain}' ${mark} & done; wait` })).exitCode).toBe(0);
      await until(() => hoppers().length > 0);
      // They run, and hop.
      const grown = (await sb.readFile('hop.txt')).length;
      await expect.poll(async () => (await sb.readFile('hop.txt')).length).toBeGreaterThan(grown);
      // SIGINT, sent once, does not stop them: they trap it. (Its count may be 0: every hopper
      // listed may have hopped on to a new pid before the signal, which is what the sweep is for.)
      await sb.signalProcesses!('SIGINT');
      const afterInt = (await sb.readFile('hop.txt')).length;
      await expect.poll(async () => (await sb.readFile('hop.txt')).length).toBeGreaterThan(afterInt);
      expect(await sb.signalProcesses!('SIGKILL')).toBeGreaterThan(0);
      // No process of the hopper is left (hoppers() reads /proc): nothing can write hop.txt any
      // more, so there is nothing to wait for.
      expect(hoppers()).toEqual([]);
      // The shell is untouched, and can fork again (the hold on forks was lifted).
      expect(await sb.bash({ command: 'echo alive; (true) && echo forked' })).toMatchObject({ output: 'alive\nforked\n', exitCode: 0 });
    } finally {
      await sb.close();
    }
  });

  it('a sandbox whose shell dies is lost: the pending call and later calls fail with SandboxError', async () => {
    const sb = await provider.create({}, { rolloutId: 'lost' });
    try {
      const pending = sb.bash({ command: 'sleep 100' });
      await until(() => leaseOf(sb.id).ptyPid);
      // Every process of the sandbox dies at once, as under the OOM killer. Stopped first: killing
      // the launcher alone hangs up `sleep`, and a busy machine may let bash print its prompt
      // marker (a normal-looking result) before it dies in turn.
      const root = leaseOf(sb.id).ptyPid!;
      const tree = [root, ...descendants(root)];
      for (const pid of tree) signal(pid, 'SIGSTOP');
      for (const pid of tree) signal(pid, 'SIGKILL');
      await expect(pending).rejects.toBeInstanceOf(SandboxError);
      await expect(sb.bash({ command: 'echo' })).rejects.toBeInstanceOf(SandboxError);
    } finally {
      await sb.close();
    }
  });

  it('is busy while a call runs and ready once it has returned, also between back-to-back calls', async () => {
    const sb = (await provider.create({}, { rolloutId: 'states' })) as SandboxClient;
    try {
      const running = sb.bash({ command: 'echo one' });
      expect(sb.state).toBe('busy');
      await running;
      expect(sb.state).toBe('ready');
      await sb.bash({ command: 'echo two' });
      const third = sb.bash({ command: 'echo three' });
      expect(sb.state).toBe('busy');
      expect((await third).output).toBe('three\n');
      expect(sb.state).toBe('ready');
    } finally {
      await sb.close();
    }
    expect(sb.state).toBe('closed');
  });

  it('copies the seed directory so two sandboxes never share edits', async () => {
    const seed = fs.mkdtempSync(path.join(os.tmpdir(), 'seed-'));
    fs.writeFileSync(path.join(seed, 'f.txt'), 'orig');
    try {
      const [a, b] = await Promise.all([provider.create({ seedDir: seed }, { rolloutId: 'a' }), provider.create({ seedDir: seed }, { rolloutId: 'b' })]);
      await a.bash({ command: 'echo changed > f.txt' });
      expect(await b.readFile('f.txt')).toBe('orig');
      expect(fs.readFileSync(path.join(seed, 'f.txt'), 'utf8')).toBe('orig');
      await Promise.all([a.close(), b.close()]);
    } finally {
      fs.rmSync(seed, { recursive: true, force: true });
    }
  });

  it.skipIf(!haveTools('git'))('clones a local git repository into the workspace', async () => {
    const repo = fs.mkdtempSync(path.join(os.tmpdir(), 'repo-'));
    try {
      const git = (...a: string[]) => execFileSync('git', ['-C', repo, '-c', 'user.email=t@t', '-c', 'user.name=t', ...a], { stdio: 'ignore' });
      git('init', '-q');
      fs.writeFileSync(path.join(repo, 'main.py'), 'print(1)\n');
      git('add', '.');
      git('commit', '-qm', 'init');
      const sb = await provider.create({ gitRepo: repo }, { rolloutId: 'git' });
      expect((await sb.bash({ command: 'git log --oneline | wc -l; cat main.py' })).output).toBe('1\nprint(1)\n');
      await sb.close();
    } finally {
      fs.rmSync(repo, { recursive: true, force: true });
    }
  });

  it('fails the create with TaskError when a setup command fails, leaving nothing behind', async () => {
    const err = await provider.create({ setup: ['true', 'test -e /workspace/missing'] }, { rolloutId: 'setup' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect(fs.readdirSync(path.join(stateDir, 'sandboxes'))).toEqual([]);
  });

  it('an aborted create rejects with CancelledError and leaves no sandbox behind', async () => {
    const ac = new AbortController();
    // The setup command keeps the create busy until the abort arrives.
    const p = provider.create({ setup: ['sleep 0.3'] }, { rolloutId: 'abort-create', signal: ac.signal });
    await until(() => fs.existsSync(path.join(stateDir, 'sandboxes')) && fs.readdirSync(path.join(stateDir, 'sandboxes')).length > 0);
    ac.abort();
    await expect(p).rejects.toBeInstanceOf(CancelledError);
    await until(() => fs.readdirSync(path.join(stateDir, 'sandboxes')).length === 0);
  });

  it('writes and reads workspace files and refuses paths outside it', async () => {
    const sb = await provider.create({}, { rolloutId: 'files' });
    await sb.writeFile('a/b.txt', 'content');
    expect((await sb.bash({ command: 'cat /workspace/a/b.txt' })).output).toBe('content');
    await expect(sb.readFile('../../lease.json')).rejects.toBeInstanceOf(TaskError);
    expect((await sb.editor({ command: 'view', path: '/etc/passwd' })).error).toBe(true);
    await sb.close();
  });

  it('runs Python cells that keep state, return the final expression, tracebacks, and survive a timeout', async () => {
    const sb = await provider.create({}, { rolloutId: 'py' });
    try {
      expect(await sb.python('import os\nx = 20\nprint("cwd", os.getcwd())\nx * 2')).toEqual({ output: 'cwd /workspace\n40\n', error: null, timedOut: false });
      const err = await sb.python('def f():\n    raise ValueError("boom")\nf()');
      expect(err.error).toMatch(/ValueError: boom/);
      expect(err.error).toMatch(/File "<cell>"/);
      const slow = await sb.python('import time\nprint("before", flush=True)\ntime.sleep(30)', { timeoutMs: 1500 });
      expect(slow).toMatchObject({ output: 'before\n', timedOut: true });
      expect((await sb.python('x')).output).toBe('20\n');
      // the REPL shares the sandbox's filesystem with the shell
      await sb.bash({ command: 'echo shared > /tmp/s.txt' });
      expect((await sb.python('open("/tmp/s.txt").read()')).output).toBe("'shared\\n'\n");
    } finally {
      await sb.close();
    }
  });

  it('spreads sandboxes over the hosts, least loaded first', async () => {
    const sbs = await Promise.all([1, 2, 3, 4].map((i) => provider.create({}, { rolloutId: `spread-${i}` })));
    const hostPids = new Set(sbs.map((s) => leaseOf(s.id).hostPid));
    expect(hostPids.size).toBe(2);
    await Promise.all(sbs.map((s) => s.close()));
  });

  it('spreads a burst over hosts that are still starting, instead of piling it on the first one up', { timeout: 120_000 }, async () => {
    // hostStartMs: a loaded 2-core machine can take seconds to start two Node hosts at once.
    const p2 = createSandboxProvider({ driver: testDriver(), hosts: 2, stateDir, timeouts: { hostStartMs: 60_000 } });
    try {
      // All creates arrive before either host is ready (before the fix: 23 of 24 on one host).
      const sbs = await Promise.all(Array.from({ length: 24 }, (_, i) => p2.create({}, { rolloutId: `burst-${i}` })));
      const perHost = new Map<number, number>();
      for (const s of sbs) perHost.set(leaseOf(s.id).hostPid, (perHost.get(leaseOf(s.id).hostPid) ?? 0) + 1);
      expect([...perHost.values()]).toEqual([12, 12]);
      await Promise.all(sbs.map((s) => s.close()));
    } finally {
      await p2.close();
    }
  });

  it("removes a killed host's socket file at once, not at the next start", async () => {
    const p2 = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir });
    try {
      const sb = await p2.create({}, { rolloutId: 'sock' });
      const hostPid = p2.hostPids()[0]!;
      const socks = () => fs.readdirSync(path.join(stateDir, 'hosts')).filter((n) => n.startsWith(`h-${process.pid}-`));
      const mine = socks();
      expect(mine.length).toBeGreaterThan(0);
      process.kill(hostPid, 'SIGKILL');
      await until(() => isGone(hostPid));
      await until(() => socks().length < mine.length);
      expect(p2.hostPids()).toEqual([]);
      await sb.close();
    } finally {
      await p2.close();
    }
  });

  it('a host that dies takes its sandboxes with it and their calls fail with SandboxError', async () => {
    const p2 = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir });
    try {
      const sb = await p2.create({}, { rolloutId: 'host-dies' });
      await sb.bash({ command: `sleep 1002.${tag}3 &` });
      const child = await until(() => pidsByCmdline(['sleep', `1002.${tag}3`])[0]);
      const pending = sb.bash({ command: 'sleep 100' });
      process.kill(p2.hostPids()[0]!, 'SIGKILL');
      await expect(pending).rejects.toBeInstanceOf(SandboxError);
      await until(() => isGone(child));
      // the runtime cleans what the dead host left: the directory and the cgroup
      await until(() => !fs.existsSync(path.join(stateDir, 'sandboxes', sb.id)));
      expect(fs.existsSync(`/sys/fs/cgroup/pids/rollout-runtime/${sb.id}`)).toBe(false);
      await sb.close();
    } finally {
      await p2.close();
    }
  });

  it('the host kills its sandboxes and exits when the runtime connection closes', async () => {
    const p2 = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir });
    const sb = await p2.create({}, { rolloutId: 'conn' });
    await sb.bash({ command: `sleep 1003.${tag}4 &` });
    const child = await until(() => pidsByCmdline(['sleep', `1003.${tag}4`])[0]);
    const host = p2.hostPids()[0]!;
    await p2.close();
    expect(isGone(host)).toBe(true);
    await until(() => isGone(child));
  });
});

describe('reapStale', () => {
  it('kills the processes and removes the directory of a sandbox whose owner is gone', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reap-'));
    try {
      const dead = spawn('true');
      await new Promise((r) => dead.once('exit', r));
      const victim = spawn('sleep', [`1004.${tag}5`], { detached: true, stdio: 'ignore' });
      await until(() => processStartTime(victim.pid!));
      const sbDir = path.join(dir, 'sandboxes', 'sb-stale');
      fs.mkdirSync(path.join(sbDir, 'workspace'), { recursive: true });
      fs.writeFileSync(
        path.join(sbDir, 'lease.json'),
        JSON.stringify({ sandboxId: 'sb-stale', runtimeId: 'gone', ownerPid: dead.pid, ownerStart: null, rolloutId: 'r', hostPid: dead.pid, hostStart: '1', ptyPid: victim.pid, ptyStart: processStartTime(victim.pid!), cgroup: null, dir: sbDir, workdir: path.join(sbDir, 'workspace'), createdAt: '' }),
      );
      const exited = new Promise((r) => victim.once('exit', r));
      const report = await reapStale(dir);
      expect(report.sandboxes).toEqual(['sb-stale']);
      await exited;
      expect(fs.existsSync(sbDir)).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('leaves the sandboxes of a live owner alone', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reap-'));
    try {
      const sbDir = path.join(dir, 'sandboxes', 'sb-live');
      fs.mkdirSync(sbDir, { recursive: true });
      fs.writeFileSync(path.join(sbDir, 'lease.json'), JSON.stringify({ sandboxId: 'sb-live', ownerPid: process.pid, ownerStart: processStartTime(process.pid), ptyPid: null, cgroup: null, dir: sbDir }));
      expect((await reapStale(dir)).sandboxes).toEqual([]);
      expect(fs.existsSync(sbDir)).toBe(true);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
