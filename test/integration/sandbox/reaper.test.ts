import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { reapStale } from '../../../src/sandbox/lease.js';
import { mountsUnder, removeTree } from '../../../src/sandbox/remove-tree.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import { PYTHON, testDriver } from './helpers.js';
import readline from 'node:readline';
import { UdsChannel } from '../../../src/ipc/uds-channel.js';
import { parseSandboxOptions } from '../../../src/sandbox/sandbox-options.js';
import { sandboxUidFor } from '../../../src/sandbox/sandbox-user.js';
import { haveTools } from '../../helpers/system-tools.js';

const BIN = path.resolve(import.meta.dirname, '../../../bin/rollout.js');

/**
 * The reaper against what a hostile policy can leave in a sandbox directory (#9 item 2): trees
 * deeper than any recursive removal handles, unreadable directories, immutable files, and mounts
 * that must be detached, never followed.
 */

let stateDir: string;
const isRoot = process.getuid?.() === 0;

beforeEach(() => {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'reaper-'));
});
afterEach(async () => {
  // Nothing the tests made may stay: immutable bits off, mounts off, then remove.
  spawnSync('chattr', ['-R', '-i', stateDir], { stdio: 'ignore' });
  for (const mp of mountsUnder(stateDir)) spawnSync('umount', ['-l', mp], { stdio: 'ignore' });
  expect(await removeTree(stateDir)).toEqual({ removed: true });
});

/** A stale sandbox directory: a lease whose owner is a process that has exited. */
async function staleSandbox(id: string): Promise<string> {
  const dead = spawn('true');
  await new Promise((r) => dead.once('exit', r));
  const dir = path.join(stateDir, 'sandboxes', id);
  fs.mkdirSync(path.join(dir, 'workspace'), { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'lease.json'),
    JSON.stringify({ sandboxId: id, runtimeId: 'gone', ownerPid: dead.pid, ownerStart: null, rolloutId: 'r', hostPid: dead.pid, hostStart: '1', ptyPid: null, ptyStart: null, cgroup: null, dir, workdir: path.join(dir, 'workspace'), createdAt: '' }),
  );
  return dir;
}

/** Makes `depth` nested directories `d/d/...` under `dir` with fd-relative steps (no PATH_MAX limit). */
function deepTree(dir: string, depth: number): void {
  execFileSync(PYTHON, ['-c', `import os\nfor _ in range(${depth}):\n  os.mkdir('d'); os.chdir('d')\nopen('f', 'w').write('x')`], { cwd: dir });
}

describe('reapStale against hostile trees', () => {
  it('removes a sandbox directory 3,000 levels deep (recursive rmSync throws RangeError on it)', { timeout: 120_000 }, async () => {
    const dir = await staleSandbox('sb-deep');
    deepTree(path.join(dir, 'workspace'), 3000);
    const report = await reapStale(stateDir);
    expect(report.sandboxes).toEqual(['sb-deep']);
    expect(report.quarantined).toEqual([]);
    expect(fs.existsSync(dir)).toBe(false);
  });

  it('removes unreadable (mode 000) directories and files', async () => {
    const dir = await staleSandbox('sb-000');
    const ws = path.join(dir, 'workspace');
    fs.mkdirSync(path.join(ws, 'a/b'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'a/b/secret'), 'x');
    fs.chmodSync(path.join(ws, 'a/b/secret'), 0);
    fs.chmodSync(path.join(ws, 'a/b'), 0);
    fs.chmodSync(path.join(ws, 'a'), 0);
    const report = await reapStale(stateDir);
    expect(report.sandboxes).toEqual(['sb-000']);
    expect(fs.existsSync(dir)).toBe(false);
  });

  it('quarantines a directory holding an immutable file, warns, and goes on reaping the others', async (ctx) => {
    const dir = await staleSandbox('sb-immutable');
    const file = path.join(dir, 'workspace', 'pinned');
    fs.writeFileSync(file, 'x');
    if (!haveTools('chattr') || spawnSync('chattr', ['+i', file]).status !== 0) {
      ctx.skip(); // needs chattr (apt-get install e2fsprogs), root and a filesystem with the immutable flag (ext4, xfs, btrfs)
      return;
    }
    const other = await staleSandbox('sb-plain');
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }): void => void (w.code === 'ROLLOUT_QUARANTINE' && warnings.push(w.message));
    process.on('warning', onWarning);
    try {
      const report = await reapStale(stateDir);
      expect(report.sandboxes.sort()).toEqual(['sb-immutable', 'sb-plain']);
      expect(report.quarantined).toHaveLength(1);
      expect(report.quarantined[0]).toMatchObject({ sandboxId: 'sb-immutable', reason: expect.stringMatching(/rm failed/) });
      const to = report.quarantined[0]!.to!;
      expect(path.dirname(to)).toBe(path.join(stateDir, 'quarantine'));
      expect(fs.readFileSync(path.join(to, 'workspace', 'pinned'), 'utf8')).toBe('x');
      expect(fs.readdirSync(path.join(stateDir, 'sandboxes'))).toEqual([]);
      expect(fs.existsSync(other)).toBe(false);
      await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
      expect(warnings.join('\n')).toMatch(/sb-immutable: its directory could not be removed/);
      // A second start-up finds nothing to trip over.
      expect(await reapStale(stateDir)).toEqual({ sandboxes: [], sockets: [], quarantined: [] });
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('detaches a bind mount and a tmpfs left inside, never deleting host files through them', async (ctx) => {
    if (!isRoot) {
      ctx.skip(); // mounting needs root: run the suite as root, as CI does
      return;
    }
    const hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'reaper-host-'));
    try {
      fs.writeFileSync(path.join(hostDir, 'precious'), 'keep me');
      fs.mkdirSync(path.join(hostDir, 'sub'));
      fs.writeFileSync(path.join(hostDir, 'sub', 'nested'), 'keep me too');
      const dir = await staleSandbox('sb-mounts');
      const ws = path.join(dir, 'workspace');
      fs.mkdirSync(path.join(ws, 'bound'));
      fs.mkdirSync(path.join(ws, 'tmp'));
      execFileSync('mount', ['--bind', hostDir, path.join(ws, 'bound')]);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'reaper-test', path.join(ws, 'tmp')]);
      // a mount stacked inside the tmpfs too
      fs.mkdirSync(path.join(ws, 'tmp', 'inner'));
      execFileSync('mount', ['--bind', hostDir, path.join(ws, 'tmp', 'inner')]);
      expect(mountsUnder(dir)).toHaveLength(3);
      const report = await reapStale(stateDir);
      expect(report).toMatchObject({ sandboxes: ['sb-mounts'], quarantined: [] });
      expect(fs.existsSync(dir)).toBe(false);
      expect(mountsUnder(stateDir)).toEqual([]);
      expect(fs.readFileSync(path.join(hostDir, 'precious'), 'utf8')).toBe('keep me');
      expect(fs.readFileSync(path.join(hostDir, 'sub', 'nested'), 'utf8')).toBe('keep me too');
    } finally {
      fs.rmSync(hostDir, { recursive: true, force: true });
    }
  });
});

describe('a sandbox host started by hand', () => {
  // The provider starts its hosts in a private mount namespace, so their workdir tmpfs mounts die
  // with them; a host started by hand (`rollout sandbox-host`, as root) mounts in the host's own
  // namespace, and SIGKILL leaves the tmpfs there for the next reap.
  it.runIf(isRoot)('leaves its workdir tmpfs mounted in the host namespace when killed, and the next reap unmounts and removes it', async () => {
    const sock = path.join(stateDir, 'h.sock');
    const host = spawn(process.execPath, [BIN, 'sandbox-host', '--socket', sock, '--state-dir', stateDir], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise((r) => host.once('exit', r));
    let channel: UdsChannel | null = null;
    try {
      await new Promise<void>((resolve) => readline.createInterface({ input: host.stdout! }).on('line', (l) => l.startsWith('ready ') && resolve()));
      channel = await UdsChannel.connect(sock);
      // Its runtime is gone by the time of the reap: a process that has exited.
      const dead = spawn('true');
      await new Promise((r) => dead.once('exit', r));
      await channel.request({ type: 'host.hello', runtimeId: 'by-hand', ownerPid: dead.pid, ownerStart: null });
      const o = parseSandboxOptions({ driver: testDriver() });
      const sandboxId = 'sb-by-hand';
      await channel.request(
        {
          type: 'sandbox.create', sandboxId, rolloutId: 'r', spec: { files: { 'a.txt': 'x' } }, driver: testDriver(), rootfs: null, image: null, limits: o.limits,
          sandboxUid: sandboxUidFor(sandboxId, o.sandboxUids),
          tools: { bashTimeoutMs: o.timeouts.bashMs, noOutputTimeoutMs: o.timeouts.noOutputMs, pythonTimeoutMs: o.timeouts.pythonMs, maxOutputChars: o.maxOutputChars, startTimeoutMs: o.timeouts.startMs },
        },
        { timeoutMs: 30_000 },
      );
      const dir = path.join(stateDir, 'sandboxes', sandboxId);
      expect(mountsUnder(dir).length).toBeGreaterThan(0);
      host.kill('SIGKILL');
      await exited;
      expect(mountsUnder(dir).length).toBeGreaterThan(0);
      const report = await reapStale(stateDir);
      expect(report).toMatchObject({ sandboxes: [sandboxId], quarantined: [] });
      expect(mountsUnder(stateDir)).toEqual([]);
      expect(fs.existsSync(dir)).toBe(false);
    } finally {
      await channel?.close().catch(() => undefined);
      if (host.exitCode === null && host.signalCode === null) host.kill('SIGKILL');
      await exited;
    }
  });
});

describe('start-up on a state dir a policy left hostile', () => {
  it('a provider reaps a 3,000-deep stale sandbox and serves (before: every start crashed in reapStale)', { timeout: 120_000 }, async () => {
    const dir = await staleSandbox('sb-deep-start');
    deepTree(path.join(dir, 'workspace'), 3000);
    const provider = createSandboxProvider({ driver: testDriver(), hosts: 1, stateDir, timeouts: { hostStartMs: 60_000 } });
    try {
      expect(await provider.reaped).toMatchObject({ sandboxes: ['sb-deep-start'], quarantined: [] });
      const sb = await provider.create({}, { rolloutId: 'after-reap' });
      expect((await sb.bash({ command: 'echo up' })).output).toBe('up\n');
      await sb.close();
    } finally {
      await provider.close();
    }
    expect(fs.existsSync(dir)).toBe(false);
  });
});

describe('removeTree', () => {
  it('removes a symlink to a host directory without following it', async () => {
    const hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'reaper-host-'));
    try {
      fs.writeFileSync(path.join(hostDir, 'precious'), 'keep me');
      const dir = path.join(stateDir, 'tree');
      fs.mkdirSync(dir);
      fs.symlinkSync(hostDir, path.join(dir, 'link'));
      expect(await removeTree(dir)).toEqual({ removed: true });
      expect(fs.readFileSync(path.join(hostDir, 'precious'), 'utf8')).toBe('keep me');
    } finally {
      fs.rmSync(hostDir, { recursive: true, force: true });
    }
  });

  it('reports a missing directory as removed', async () => {
    expect(await removeTree(path.join(stateDir, 'nope'))).toEqual({ removed: true });
  });
});
