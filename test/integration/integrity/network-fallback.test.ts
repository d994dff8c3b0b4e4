import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleIntegrity } from '../../../src/sandbox/integrity/host-integrity.js';
import { ProcessObserver } from '../../../src/sandbox/integrity/process-observer.js';
import { missingTools, skipNote } from '../../helpers/system-tools.js';

/**
 * When the observer cannot put its TUN device in a sandbox's network namespace (#27), network
 * attempts fall back to the namespace's no-route counters: counted without their address, and
 * the start says so in `unobserved` (the rollout's result is then `degraded` with the reason).
 * Nothing crashes. A real observer, real namespaces (`unshare -n`), real sockets.
 */
const skip = process.getuid?.() !== 0 ? 'needs root (the observer, network namespaces, a pids cgroup)' : missingTools('python3');

let dir: string;
const procs: ChildProcess[] = [];
const cgroups: string[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'integrity-net-fallback-'));
});
afterAll(async () => {
  for (const p of procs) {
    if (p.exitCode === null && p.signalCode === null) {
      const gone = once(p, 'exit');
      p.kill('SIGKILL');
      await gone;
    }
  }
  for (const cg of cgroups) rmdirSync(cg);
  await ProcessObserver.shutdown();
  rmSync(dir, { recursive: true, force: true });
});

/** A process that sleeps until killed at the end, in a network namespace of its own when `ownNet`. */
async function sleeper(ownNet: boolean): Promise<number> {
  const p = spawn(ownNet ? 'unshare' : 'sleep', ownNet ? ['-n', 'sleep', '600'] : ['600'], { stdio: 'ignore' });
  procs.push(p);
  await once(p, 'spawn');
  return p.pid!;
}

/** A pids cgroup of this test's own holding `pid`, relative to the hierarchy. */
function cgroupWith(pid: number): string {
  const name = `integrity-net-fallback-${process.pid}-${cgroups.length}`;
  const abs = join('/sys/fs/cgroup/pids', name);
  mkdirSync(abs);
  cgroups.push(abs);
  writeFileSync(join(abs, 'cgroup.procs'), String(pid));
  return `/${name}`;
}

describe.skipIf(skip !== null)(`without the TUN device, network attempts are counted and the gap is stated${skipNote(skip)}`, () => {
  it("the observer refuses a namespace that is the host's own, saying so", async () => {
    const pid = await sleeper(false);
    const obs = await ProcessObserver.get();
    const w = await obs.watch('fallback-host-ns', { cgroup: cgroupWith(pid), dirs: [], root: dir, inside: '/workspace', execfs: [], netPid: pid });
    try {
      expect(w.net).toEqual({ ok: false, why: "the sandbox shares this host's network namespace" });
    } finally {
      await obs.unwatch('fallback-host-ns');
    }
  });

  it('a monitor whose observer cannot watch counts attempts without their address, and states it', async () => {
    const pid = await sleeper(true);
    const sb = { id: 'fallback', workdir: dir, integrityTargets: { cgroup: '/integrity-net-fallback-missing', netPid: pid, network: false, inside: '/workspace' } };
    const start = await handleIntegrity(sb, { op: 'start', protect: [] });
    const net = (start.unobserved ?? []).filter((u) => u.what === 'network');
    expect(net).toHaveLength(1);
    expect(net[0]!.why).toMatch(/^attempts are counted without their address \(cgroup: /);
    const connect = spawnSync('nsenter', ['-t', String(pid), '-n', 'python3', '-c', 'import socket\ntry: socket.create_connection(("203.0.113.7", 443), 5)\nexcept OSError as e: print(e.errno)'], { encoding: 'utf8' });
    expect(connect.stdout.trim()).toBe('101'); // ENETUNREACH: no route, as without the monitor
    const o = await handleIntegrity(sb, { op: 'observe', turn: 3 });
    expect(o.violations.map(({ kind, turn, address }) => ({ kind, turn, address }))).toEqual([{ kind: 'network', turn: 3, address: undefined }]);
    expect(o.violations[0]!.detail).toMatch(/^1 attempt to reach the network refused/);
  });
});
