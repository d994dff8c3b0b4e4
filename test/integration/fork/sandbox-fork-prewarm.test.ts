import { describe, expect, it, onTestFinished } from 'vitest';
import fs from 'node:fs';
import http from 'node:http';
import { once } from 'node:events';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';
import { mountsUnder } from '../../../src/sandbox/remove-tree.js';
import { forkSkip, run } from './fork-kit.js';
import { parkedAtGate, pooledIds, sandboxEntries, stateEntries } from './pool-dirs.js';

/**
 * Fork prewarm (#26, Sandbox.prewarmFork → host-fork.ts `prewarmFork`): a live sandbox's host
 * parks branches of its configuration before its first fork, which then takes them instead of
 * launching its own. Real bwrap sandboxes as root, read through the state dir (pool-dirs.ts).
 */
const ok = forkSkip('the fork prewarm tests') === null;

/** A fresh provider (one host) on a fresh state dir under its own temp dir, closed and removed after the test. */
function provider(prefix: string, forkPool?: { size: number }): { dir: string; stateDir: string; p: HostSandboxProvider } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(dir, 0o711);
  const stateDir = path.join(dir, 'state');
  const p = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, ...(forkPool ? { forkPool } : {}), timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  onTestFinished(async () => {
    await p.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { dir, stateDir, p };
}

function cgroupDirs(name: string): string[] {
  return ['pids', 'memory', 'freezer'].map((h) => `/sys/fs/cgroup/${h}/rollout-runtime/${name}`).filter((d) => fs.existsSync(d));
}

describe.skipIf(!ok)('fork prewarm', () => {
  it("a prewarmed sandbox's first fork takes all its branches from the pool: they carry the shell state and the last status, and diverge", async () => {
    const { stateDir, p } = provider('sbx-prewarm-');
    const parent = await p.create({ files: { 'base.txt': 'base\n' } }, { rolloutId: 'r-pre-parent' });
    await run(parent, 'mkdir d && cd d && export V=v1 && f() { echo fn; }');
    // Nothing is parked before a prewarm: the pool learns configurations from forks.
    expect(pooledIds(stateDir)).toEqual([]);
    expect(await parent.prewarmFork!(3)).toBe(3);
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(3);
    const parked = pooledIds(stateDir);
    // Asked again (a retried attempt): nothing more.
    expect(await parent.prewarmFork!(3)).toBe(3);
    expect(pooledIds(stateDir)).toEqual(parked);
    expect((await parent.bash({ command: 'echo p > from-parent; (exit 4)' })).exitCode).toBe(4);
    const fork = await parent.fork!({ rolloutIds: ['r-w0', 'r-w1', 'r-w2'], keepParent: false });
    onTestFinished(() => Promise.all(fork.branches.map((b) => b.close())).then(() => undefined));
    // All three from the pool: the parked branches' own ids.
    expect(fork.branches.map((b) => b.id).sort()).toEqual([...parked].sort());
    const [w0, w1, w2] = fork.branches as [Sandbox, Sandbox, Sandbox];
    for (const b of fork.branches) expect((await b.bash({ command: 'echo $?' })).output.trim()).toBe('4');
    expect(await run(w0, 'pwd; echo $V; f; cat ../base.txt from-parent')).toBe('/workspace/d\nv1\nfn\nbase\np');
    await run(w0, 'echo zero > only-w0');
    await run(w1, 'echo one > only-w1 && rm ../base.txt');
    expect(await run(w2, 'ls -1A; ls -1A ..')).toBe('from-parent\nbase.txt\nd');
    expect(await run(w0, 'ls -1A')).toBe('from-parent\nonly-w0');
    // The fork refilled the pool to its size (4) for the branches' own forks.
    await expect.poll(() => parkedAtGate(stateDir).filter((id) => !parked.includes(id)).length, { timeout: 60_000 }).toBe(4);
  });

  it('a sandbox whose host pool is disabled (size 0) answers 0 and nothing is parked; its fork works as before', async () => {
    const { stateDir, p } = provider('sbx-prewarm-off-', { size: 0 });
    const parent = await p.create({}, { rolloutId: 'r-pre-off' });
    onTestFinished(() => parent.close());
    await run(parent, 'export V=off');
    expect(await parent.prewarmFork!(2)).toBe(0);
    expect(pooledIds(stateDir)).toEqual([]);
    const fork = await parent.fork!({ rolloutIds: ['r-off-0'] });
    onTestFinished(() => fork.branches[0]!.close());
    expect(await run(fork.branches[0]!, 'echo $V')).toBe('off');
    expect(pooledIds(stateDir)).toEqual([]);
  });

  it('a sandbox made with an LLM proxy, and one of the unshare driver, answer 0 and nothing is parked', async () => {
    const { dir, stateDir, p } = provider('sbx-prewarm-proxy-');
    const sock = path.join(dir, 'proxy.sock');
    const server = http.createServer((_req, res) => res.end('{}'));
    server.listen(sock);
    await once(server, 'listening');
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    const proxied = await p.create({ llmProxy: { socketPath: sock, token: 'tok' } }, { rolloutId: 'r-pre-proxy' });
    onTestFinished(() => proxied.close());
    expect(await proxied.prewarmFork!(2)).toBe(0);
    const unshareState = path.join(dir, 'unshare-state');
    const u = createSandboxProvider({ driver: 'unshare', hosts: 1, stateDir: unshareState, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
    onTestFinished(() => u.close());
    const sb = await u.create({}, { rolloutId: 'r-pre-unshare' });
    onTestFinished(() => sb.close());
    expect(await run(sb, 'echo up')).toBe('up');
    expect(await sb.prewarmFork!(2)).toBe(0);
    expect(pooledIds(stateDir)).toEqual([]);
    expect(pooledIds(unshareState)).toEqual([]);
  });

  it('prewarmed branches never taken are ended when the sandbox closes and the provider closes: no directory, cgroup or mount is left', async () => {
    const { dir, stateDir, p } = provider('sbx-prewarm-close-');
    const sb = await p.create({}, { rolloutId: 'r-pre-close' });
    expect(await sb.prewarmFork!(2)).toBe(2);
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(2);
    const parked = pooledIds(stateDir);
    for (const id of parked) expect(cgroupDirs(id).length).toBeGreaterThan(0);
    // The sandbox's close leaves only the host's parked branches (they name no rollout).
    await sb.close();
    expect(stateEntries(stateDir)).toEqual([]);
    await p.close();
    expect(sandboxEntries(stateDir)).toEqual([]);
    expect(mountsUnder(dir)).toEqual([]);
    for (const id of parked) expect(cgroupDirs(id)).toEqual([]);
  });

  it('a closed sandbox cannot be prewarmed (SandboxError), and n outside 1..64 is a ValidationError naming n', async () => {
    const { p } = provider('sbx-prewarm-bad-');
    const sb = await p.create({}, { rolloutId: 'r-pre-bad' });
    await expect(sb.prewarmFork!(0)).rejects.toMatchObject({ name: 'ValidationError', issues: [{ path: 'n' }] });
    await expect(sb.prewarmFork!(65)).rejects.toMatchObject({ name: 'ValidationError' });
    await sb.close();
    await expect(sb.prewarmFork!(1)).rejects.toMatchObject({ name: 'SandboxError' });
  });
});
