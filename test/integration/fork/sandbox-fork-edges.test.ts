import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import http from 'node:http';
import { once } from 'node:events';
import { spawn } from 'node:child_process';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { PidsCgroup } from '../../../src/sandbox/cgroup.js';
import { mountsUnder } from '../../../src/sandbox/remove-tree.js';
import { isSameProcessAlive } from '../../../src/sandbox/proc.js';
import { SandboxError } from '../../../src/errors.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';
import { forkProvider, forkSkip, run } from './fork-kit.js';
import { pooledIds, stateEntries } from './pool-dirs.js';
import { isGone, until } from '../sandbox/helpers.js';

/**
 * Sandbox forks (#26) at their edges: the freezer against processes that handle stop signals,
 * a fork mid-command, no freezer, hostile file names, and a runtime killed with -9.
 */
const ok = forkSkip('the sandbox fork edge tests') === null;
const ROOT = path.resolve(import.meta.dirname, '../../..');

let stateDir: string;
let provider: HostSandboxProvider;

beforeAll(() => {
  if (!ok) return;
  ({ stateDir, provider } = forkProvider('sbx-fork-edge-'));
});
afterAll(async () => {
  await provider?.close();
  if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
});

function lines(file: string): number {
  try {
    return fs.readFileSync(file, 'utf8').split('\n').length - 1;
  } catch {
    return 0;
  }
}

/** The cgroup directories named `name` under each v1 hierarchy a sandbox uses. */
function cgroupDirs(name: string): string[] {
  return ['pids', 'memory', 'freezer'].map((h) => `/sys/fs/cgroup/${h}/rollout-runtime/${name}`).filter((d) => fs.existsSync(d));
}

describe.skipIf(!ok)('the freezer', () => {
  it('freezes a process that ignores SIGTSTP and traps SIGCONT: it stops writing while a sibling outside the group goes on, and resumes on thaw', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'freeze-'));
    const name = `test-freeze-${process.pid}`;
    const cg = PidsCgroup.create(name, 64)!;
    expect(cg.freezerDir).not.toBeNull();
    const writer = (file: string, traps: boolean): ReturnType<typeof spawn> =>
      spawn('bash', ['-c', `${traps ? 'trap "" TSTP TTIN TTOU; trap "echo cont >> $0" CONT; ' : ''}while :; do echo x >> "$0"; done`, file], { stdio: 'ignore' });
    const frozenFile = path.join(dir, 'frozen');
    const controlFile = path.join(dir, 'control');
    const target = writer(frozenFile, true);
    const control = writer(controlFile, false);
    onTestFinished(async () => {
      control.kill('SIGKILL');
      await cg.killAllAndRemove();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    fs.writeFileSync(cg.procsFile, String(target.pid));
    await until(() => lines(frozenFile) > 10);
    await cg.freeze();
    // A SIGSTOP-style stop would be ignored by the trap; the freezer does not ask.
    process.kill(target.pid!, 'SIGTSTP');
    const at = lines(frozenFile);
    const controlAt = lines(controlFile);
    await until(() => lines(controlFile) > controlAt + 500);
    expect(lines(frozenFile)).toBe(at);
    cg.thaw();
    await until(() => lines(frozenFile) > at);
  });
});

describe.skipIf(!ok)('sandbox fork edges', () => {
  it('refuses a fork while a command runs (SANDBOX_BUSY), leaving the command and the sandbox as they were', async () => {
    const sb = await provider.create({}, { rolloutId: 'r-busy' });
    onTestFinished(() => sb.close());
    const running = sb.bash({ command: 'sleep 60 & echo $! > started; wait $!; echo done' });
    const err = await sb.fork!({ rolloutIds: ['r-busy-0'] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('SANDBOX_BUSY');
    // The kill must find the sleep: on a loaded machine the shell may not have started it yet.
    await until(async () => /^\d+\n$/.test(await sb.readFile('started').catch(() => '')));
    await sb.signalProcesses!('SIGKILL');
    await running;
    expect(await run(sb, 'echo still here')).toBe('still here');
    expect(fs.readdirSync(path.join(stateDir, 'sandboxes')).filter((n) => n.startsWith('snap-'))).toEqual([]);
  });

  it('a process trapping stop signals in the sandbox is frozen for the snapshot and named in lost, and runs on in the thawed parent', async () => {
    const sb = await provider.create({}, { rolloutId: 'r-trap' });
    onTestFinished(() => sb.close());
    await run(sb, `(trap '' TSTP TTIN TTOU; while :; do echo x >> tick; sleep 0.01; done) > /dev/null 2>&1 & disown; true`);
    // The writer may not have made the file yet at the first look.
    await until(async () => Number(await run(sb, 'cat tick 2>/dev/null | wc -l')) > 5);
    const fork = await sb.fork!({ rolloutIds: ['r-trap-0'] });
    onTestFinished(() => fork.branches[0]!.close());
    expect(fork.lost).toHaveLength(1);
    expect(fork.lost[0]).toMatch(/^\d+ background process(es)? \(.*\b(bash|sleep)\b.*\)$/);
    const snapLines = Number(await run(fork.branches[0]!, 'wc -l < tick'));
    // The branch's copy stays still; the parent's writer is thawed and goes on past it.
    await until(async () => Number(await run(sb, 'wc -l < tick')) > snapLines + 5);
    expect(Number(await run(fork.branches[0]!, 'wc -l < tick'))).toBe(snapLines);
  });

  it('copies and mounts hostile file names as they are: newlines, leading dashes, spaces, links pointing out', async () => {
    const sb = await provider.create({}, { rolloutId: 'r-hostile' });
    onTestFinished(() => sb.close());
    await run(sb, `printf one > $'new\\nline' && printf two > ./-rf && printf three > ' spaced name ' && mkdir -- --dir && printf four > ./--dir/-x && ln -s /etc/hostname out-abs && ln -s ../../../.. out-rel && ln -s /proc/self/root/etc root-link`);
    for (const keepParent of [true, false]) {
      const src = keepParent ? sb : await provider.create({}, { rolloutId: 'r-hostile-2' });
      if (!keepParent) await run(src, `printf two > ./-rf && printf one > $'new\\nline' && ln -s ../../../.. out-rel`);
      const fork = await src.fork!({ rolloutIds: ['r-h0'], keepParent });
      const b = fork.branches[0]!;
      onTestFinished(() => b.close());
      expect(await run(b, `cat $'new\\nline' ./-rf`)).toBe('onetwo');
      expect(await run(b, 'readlink out-rel')).toBe('../../../..');
      if (keepParent) {
        expect(await run(b, `cat ' spaced name ' ./--dir/-x`)).toBe('threefour');
        expect(await run(b, 'readlink out-abs root-link')).toBe('/etc/hostname\n/proc/self/root/etc');
      }
    }
    // Nothing of the host was copied through a link: the snapshot held links, not their targets.
    expect(fs.readdirSync(path.join(stateDir, 'sandboxes')).filter((n) => n.startsWith('snap-'))).toHaveLength(2);
  });

  it("gives a branch the LLM proxy it is given, never its parent's", async () => {
    const sock = path.join(stateDir, 'proxy-b0.sock');
    const seen: string[] = [];
    const server = http.createServer((req, res) => {
      seen.push(`${req.url} ${req.headers.authorization}`);
      res.end('{"data":[]}');
    });
    server.listen(sock);
    await once(server, 'listening');
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    const sb = await provider.create({}, { rolloutId: 'r-proxy' });
    onTestFinished(() => sb.close());
    const fork = await sb.fork!({ rolloutIds: ['r-p0', 'r-p1'], llmProxies: [{ socketPath: sock, token: 'tok-b0' }, undefined] });
    const [b0, b1] = fork.branches as [Sandbox, Sandbox];
    onTestFinished(async () => {
      await Promise.all([b0.close(), b1.close()]);
    });
    expect(b0.llmProxyUrl).toBe('http://127.0.0.1:18400/v1');
    expect(await run(b0, 'echo $OPENAI_API_KEY; python3 -c "import os,urllib.request as u; print(u.urlopen(os.environ[\'OPENAI_BASE_URL\'] + \'/models\').read().decode())"')).toBe('tok-b0\n{"data":[]}');
    expect(seen).toEqual(['/v1/models undefined']);
    expect(await run(b1, 'echo "[${OPENAI_API_KEY-}]"')).toBe('[]');
  });

  it('a branch that cannot start fails the fork (FORK_FAILED naming why): its sibling, launched meanwhile, is closed, the parent is thawed with its state, and no branch or snapshot is left (directory or mount)', async () => {
    const sb = await provider.create({ files: { 'a.txt': 'a' } }, { rolloutId: 'r-badbranch' });
    onTestFinished(() => sb.close());
    await run(sb, 'cd /workspace && X=kept');
    // The host's parked fork branches (fork-pool.ts) aside: they are the pool's, not this fork's.
    const before = stateEntries(stateDir);
    const missing = path.join(stateDir, 'no-such.sock');
    const err = await sb.fork!({ rolloutIds: ['r-bb-0', 'r-bb-1'], keepParent: false, llmProxies: [undefined, { socketPath: missing, token: 't' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('FORK_FAILED');
    expect((err as Error).message).toContain('no such socket');
    // Thawed, its shell state and files as they were, and it still writes.
    expect(await run(sb, 'echo $X; cat a.txt; echo; echo b > b.txt; cat b.txt')).toBe('kept\na\nb');
    expect(fs.readFileSync(`/sys/fs/cgroup/freezer/rollout-runtime/${sb.id}/freezer.state`, 'utf8').trim()).toBe('THAWED');
    expect(stateEntries(stateDir)).toEqual(before);
    // The host's private mount namespace holds no mount of a branch or snapshot either.
    const { hostPid } = JSON.parse(fs.readFileSync(path.join(stateDir, 'sandboxes', sb.id, 'lease.json'), 'utf8')) as { hostPid: number };
    const mounts = fs
      .readFileSync(`/proc/${hostPid}/mountinfo`, 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[4] ?? '')
      .filter((m) => m.startsWith(path.join(stateDir, 'sandboxes')));
    expect(mounts.length).toBeGreaterThan(0);
    const pooled = pooledIds(stateDir);
    expect(mounts.filter((m) => !m.includes(sb.id) && !pooled.some((id) => m.includes(id)))).toEqual([]);
  });

  it('without a freezer controller a fork is FREEZE_UNAVAILABLE, the parent still answers and nothing is left', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-nofreeze-'));
    fs.chmodSync(dir, 0o711);
    const before = process.env['ROLLOUT_CGROUP_FREEZER_ROOT'];
    // The host process inherits it at spawn: its sandboxes get no freezer group.
    process.env['ROLLOUT_CGROUP_FREEZER_ROOT'] = path.join(dir, 'no-freezer-here');
    const p = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: path.join(dir, 'state'), timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
    onTestFinished(async () => {
      await p.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    let sb: Sandbox;
    try {
      sb = await p.create({ files: { 'a.txt': 'a' } }, { rolloutId: 'r-nofreeze' });
    } finally {
      if (before === undefined) delete process.env['ROLLOUT_CGROUP_FREEZER_ROOT'];
      else process.env['ROLLOUT_CGROUP_FREEZER_ROOT'] = before;
    }
    await run(sb, 'X=1');
    const err = await sb.fork!({ rolloutIds: ['r-nf-0', 'r-nf-1'] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('FREEZE_UNAVAILABLE');
    expect(await run(sb, 'echo $X; cat a.txt')).toBe('1\na');
    expect(fs.readdirSync(path.join(dir, 'state', 'sandboxes'))).toEqual([sb.id]);
    await sb.close();
  });

  it("the 'none' driver cannot fork: FREEZE_UNAVAILABLE, and its sandbox still answers", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-fork-none-'));
    fs.chmodSync(dir, 0o711);
    const p = createSandboxProvider({ driver: 'none', hosts: 1, stateDir: path.join(dir, 'state'), timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
    onTestFinished(async () => {
      await p.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const sb = await p.create({}, { rolloutId: 'r-none' });
    const err = await sb.fork!({ rolloutIds: ['r-none-0'] }).catch((e: unknown) => e);
    expect((err as SandboxError).code).toBe('FREEZE_UNAVAILABLE');
    expect(await run(sb, 'echo alive')).toBe('alive');
    expect(fs.readdirSync(path.join(dir, 'state', 'sandboxes'))).toEqual([sb.id]);
    await sb.close();
  });

  it('after kill -9 of a runtime (and its host) that forked, the next provider reaps every sandbox, branch, snapshot and parked fork branch: no dir, mount or cgroup left', { timeout: 120_000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-fork-kill-'));
    fs.chmodSync(dir, 0o711);
    const state = path.join(dir, 'state');
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'test/integration/fork/fixtures/fork-runtime-child.ts'), state], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((r) => child.once('exit', r));
    onTestFinished(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    const line = await new Promise<string>((resolve, reject) => {
      readline.createInterface({ input: child.stdout! }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`the runtime child exited (${code}) before it had forked`)));
    });
    const made = JSON.parse(line) as { ids: string[]; parked: string[]; hostPids: number[] };
    const entries = fs.readdirSync(path.join(state, 'sandboxes'));
    const snaps = entries.filter((n) => n.startsWith('snap-'));
    expect(snaps).toHaveLength(3);
    // The host's fork pool: parked branches with their own directories, leases and cgroups.
    expect(made.parked.length).toBeGreaterThanOrEqual(8);
    expect(entries).toEqual(expect.arrayContaining(made.parked));
    for (const id of [...made.ids.slice(2), ...made.parked]) expect(cgroupDirs(id).length).toBeGreaterThan(0);
    // Both at once, the host first: nobody is left to close anything cleanly.
    for (const pid of made.hostPids) process.kill(pid, 'SIGKILL');
    child.kill('SIGKILL');
    await exited;
    await until(() => made.hostPids.every((p) => isGone(p) || !isSameProcessAlive(p, null)));
    const next = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: state });
    try {
      const report = await next.reaped;
      expect(report.quarantined).toEqual([]);
      expect(report.sandboxes).toEqual(expect.arrayContaining([...snaps, ...made.parked]));
    } finally {
      await next.close();
    }
    expect(fs.readdirSync(path.join(state, 'sandboxes'))).toEqual([]);
    expect(mountsUnder(dir)).toEqual([]);
    for (const id of [...made.ids, ...made.parked]) expect(cgroupDirs(id)).toEqual([]);
  });
});
