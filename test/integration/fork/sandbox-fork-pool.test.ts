import { describe, expect, it, onTestFinished } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';
import type { UdsChannel } from '../../../src/ipc/uds-channel.js';
import { killAll } from '../../../src/sandbox/proc.js';
import { mountsUnder } from '../../../src/sandbox/remove-tree.js';
import { forkProvider, forkSkip, run } from './fork-kit.js';
import { parkedAtGate, pooledIds, pooledPids, sandboxEntries, stateEntries } from './pool-dirs.js';

/**
 * The sandbox host's fork pool (#26, src/sandbox/fork-pool.ts) on real bwrap sandboxes as root:
 * branches launched before a fork asks, parked at their gates, handed to the next fork of the
 * same configuration (a parent and its branches), refilled, discarded when dead, closed with the
 * provider. Read through the state dir: directories, leases, cgroups (pool-dirs.ts).
 */
const ok = forkSkip('the fork pool tests') === null;

/** A fresh provider (one host) for one test, closed and its state dir removed after it. */
function provider(prefix: string, forkPool?: { size: number }): { stateDir: string; p: HostSandboxProvider } {
  let stateDir: string;
  let p: HostSandboxProvider;
  if (forkPool) {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    fs.chmodSync(stateDir, 0o711);
    p = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, forkPool, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  } else ({ stateDir, provider: p } = forkProvider(prefix));
  onTestFinished(async () => {
    await p.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
  });
  return { stateDir, p };
}

function cgroupDirs(name: string): string[] {
  return ['pids', 'memory', 'freezer'].map((h) => `/sys/fs/cgroup/${h}/rollout-runtime/${name}`).filter((d) => fs.existsSync(d));
}

function leaseRollout(stateDir: string, id: string): string {
  return (JSON.parse(fs.readFileSync(path.join(stateDir, 'sandboxes', id, 'lease.json'), 'utf8')) as { rolloutId: string }).rolloutId;
}

/** A parent with shell state and a last status of 3, forked once (keepParent false): its branches, the pool filled after. */
async function forkedOnce(p: HostSandboxProvider): Promise<Sandbox[]> {
  const parent = await p.create({ files: { 'base.txt': 'base\n' } }, { rolloutId: 'r-pool-parent' });
  await run(parent, 'mkdir d && cd d && export V=v1 && f() { echo fn; }');
  expect((await parent.bash({ command: '(exit 3)' })).exitCode).toBe(3);
  const fork = await parent.fork!({ rolloutIds: ['r-p0', 'r-p1'], keepParent: false });
  onTestFinished(() => Promise.all(fork.branches.map((b) => b.close())).then(() => undefined));
  return fork.branches;
}

describe.skipIf(!ok)('the fork pool', () => {
  it('a fork of a branch takes its branches from the pool (host ids, parked at their gates before it): they diverge, carry the shell state and the last status, name their rollouts, and the pool refills', async () => {
    const { stateDir, p } = provider('sbx-pool-');
    const [b0, b1] = (await forkedOnce(p)) as [Sandbox, Sandbox];
    // Filled after the first fork: 4 (the default size), every shell at its gate.
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(4);
    const parked = pooledIds(stateDir);
    // The host's counters (host.stats, summed by the provider: /metrics reads them): the first
    // fork found an empty pool and launched its 2 branches itself.
    // (Polled: a shell waits at its gate a moment before the host counts its launch done.)
    await expect.poll(() => p.forkPoolStats(), { timeout: 60_000 }).toEqual({ keys: 1, parked: 4, starting: 0, hits: 0, misses: 2, discarded: 0 });
    expect((await b0.bash({ command: 'echo b0 > from-b0; (exit 5)' })).exitCode).toBe(5);
    const fork = await b0.fork!({ rolloutIds: ['r-c0', 'r-c1', 'r-c2'] });
    expect(await p.forkPoolStats()).toMatchObject({ keys: 1, hits: 3, misses: 2, discarded: 0 });
    const [c0, c1, c2] = fork.branches as [Sandbox, Sandbox, Sandbox];
    onTestFinished(() => Promise.all(fork.branches.map((b) => b.close())).then(() => undefined));
    expect(parked).toEqual(expect.arrayContaining(fork.branches.map((b) => b.id)));
    expect(fork.branches.map((b) => leaseRollout(stateDir, b.id))).toEqual(['r-c0', 'r-c1', 'r-c2']);
    // The last status, then the shell state, carried.
    for (const c of fork.branches) expect((await c.bash({ command: 'echo $?' })).output.trim()).toBe('5');
    expect(await run(c0, 'pwd; echo $V; f; cat ../base.txt from-b0')).toBe('/workspace/d\nv1\nfn\nbase\nb0');
    // Branches diverge; none changes its parent (kept) or a sibling.
    await run(c0, 'echo zero > only-c0');
    await run(c1, 'echo one > only-c1 && rm ../base.txt');
    expect(await run(c2, 'ls -1A; ls -1A ..')).toBe('from-b0\nbase.txt\nd');
    expect(await run(c0, 'ls -1A')).toBe('from-b0\nonly-c0');
    expect(await run(b0, 'ls -1A; cat ../base.txt')).toBe('from-b0\nbase');
    expect(await run(b1, 'ls -1A')).toBe('');
    // The pool refills with new branches.
    await expect.poll(() => parkedAtGate(stateDir).filter((id) => !parked.includes(id)).length, { timeout: 60_000 }).toBe(3);
    expect(pooledIds(stateDir)).toHaveLength(4);
  });

  it('a parked branch that died is discarded and replaced, never handed out', async () => {
    const { stateDir, p } = provider('sbx-pool-dead-');
    const [b0] = (await forkedOnce(p)) as [Sandbox];
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(4);
    const [victim] = pooledIds(stateDir) as [string];
    const pids = pooledPids(stateDir, victim);
    expect(pids.length).toBeGreaterThan(0);
    killAll(pids);
    // Its directory, cgroups and mounts go; a new one takes its place.
    await expect.poll(() => sandboxEntries(stateDir).includes(victim), { timeout: 60_000 }).toBe(false);
    expect(cgroupDirs(victim)).toEqual([]);
    await expect.poll(async () => (await p.forkPoolStats()).discarded, { timeout: 60_000 }).toBe(1);
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(4);
    const fork = await b0.fork!({ rolloutIds: ['r-d0', 'r-d1', 'r-d2', 'r-d3'] });
    onTestFinished(() => Promise.all(fork.branches.map((b) => b.close())).then(() => undefined));
    expect(fork.branches.map((b) => b.id)).not.toContain(victim);
    for (const b of fork.branches) expect(await run(b, 'pwd; echo $V')).toBe('/workspace/d\nv1');
  });

  it('closing the provider ends every parked branch: no directory, cgroup or mount is left', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-pool-close-'));
    fs.chmodSync(dir, 0o711);
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const stateDir = path.join(dir, 'state');
    const p = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
    try {
      const sb = await p.create({}, { rolloutId: 'r-close' });
      const fork = await sb.fork!({ rolloutIds: ['r-close-0'], keepParent: false });
      await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(4);
      const parked = pooledIds(stateDir);
      for (const id of parked) expect(cgroupDirs(id).length).toBeGreaterThan(0);
      await fork.branches[0]!.close();
      expect(stateEntries(stateDir)).toEqual([]);
      await p.close();
      expect(sandboxEntries(stateDir)).toEqual([]);
      expect(mountsUnder(dir)).toEqual([]);
      for (const id of parked) expect(cgroupDirs(id)).toEqual([]);
    } finally {
      await p.close();
    }
  });

  it('size 0 disables the pool: forks launch their own branches and nothing is parked', async () => {
    const { stateDir, p } = provider('sbx-pool-off-', { size: 0 });
    const [b0] = (await forkedOnce(p)) as [Sandbox];
    const fork = await b0.fork!({ rolloutIds: ['r-o0'] });
    onTestFinished(() => fork.branches[0]!.close());
    expect(await run(fork.branches[0]!, 'pwd; echo $V')).toBe('/workspace/d\nv1');
    expect(fork.branches[0]!.id).not.toBe(b0.id);
    expect(pooledIds(stateDir)).toEqual([]);
    // A disabled pool counts nothing: its forks never ask it (a miss is a fork a pool could have served).
    expect(await p.forkPoolStats()).toEqual({ keys: 0, parked: 0, starting: 0, hits: 0, misses: 0, discarded: 0 });
  });

  it('a close of the id the runtime proposed for a branch reaches the pooled branch that replaced it, and no other sandbox', async () => {
    // Only a fork call that timed out as the host answered sends such a close
    // (SandboxClient.fork closes the ids it proposed; sandbox-host.ts maps them through
    // forkAliases): the test plays that client on the parent's own channel, the fork's reply
    // never adopted, since the timeout (180 s) cannot be met on cue.
    const { stateDir, p } = provider('sbx-pool-alias-');
    const [b0, b1] = (await forkedOnce(p)) as [Sandbox, Sandbox];
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(4);
    const parked = pooledIds(stateDir);
    const channel = (b0 as unknown as { channel: UdsChannel }).channel;
    const proposed = ['sb-alias-test-0', 'sb-alias-test-1'];
    const reply = (await channel.request({ type: 'sandbox.fork', sandboxId: b0.id, keepParent: true, branches: proposed.map((sandboxId, i) => ({ sandboxId, rolloutId: `r-alias-${i}` })) }, { timeoutMs: 60_000 })) as unknown as { branches: string[] };
    const made = reply.branches;
    // The pool served the fork: its branches are parked ids, not the proposed ones, and run.
    expect(made).toHaveLength(2);
    for (const id of made) expect(parked).toContain(id);
    for (const id of proposed) expect(sandboxEntries(stateDir)).not.toContain(id);
    expect(made.map((id) => leaseRollout(stateDir, id))).toEqual(['r-alias-0', 'r-alias-1']);
    for (const id of made) expect(cgroupDirs(id).length).toBeGreaterThan(0);
    // The timed-out client's cleanup: closes of the proposed ids end the branches behind them.
    for (const sandboxId of proposed) await channel.request({ type: 'sandbox.close', sandboxId }, { timeoutMs: 60_000 });
    for (const id of made) {
      expect(sandboxEntries(stateDir)).not.toContain(id);
      expect(cgroupDirs(id)).toEqual([]);
    }
    // A second close of a proposed id finds nothing (the alias went with its branch), and the
    // parent and its sibling are untouched.
    await channel.request({ type: 'sandbox.close', sandboxId: proposed[0]! }, { timeoutMs: 60_000 });
    expect(await run(b0, 'pwd; echo $V')).toBe('/workspace/d\nv1');
    expect(await run(b1, 'echo alive')).toBe('alive');
  });
});
