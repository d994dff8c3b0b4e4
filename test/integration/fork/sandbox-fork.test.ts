import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import fs from 'node:fs';
import type { HostSandboxProvider } from '../../../src/sandbox/index.js';
import { SandboxError } from '../../../src/errors.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';
import { forkProvider, forkSkip, run } from './fork-kit.js';
import { sandboxEntries, stateEntries as leftOver } from './pool-dirs.js';

/**
 * Sandbox forks (#26), host-root sandboxes on real bwrap as root: freeze, shell state, copy-on-write
 * workspace, keepParent true and false.
 */
const ok = forkSkip('the sandbox fork tests') === null;

let stateDir: string;
let provider: HostSandboxProvider;

beforeAll(() => {
  if (!ok) return;
  ({ stateDir, provider } = forkProvider('sbx-fork-'));
});
afterAll(async () => {
  await provider?.close();
  // The provider's close ends the host's parked fork branches too.
  if (stateDir) expect(sandboxEntries(stateDir)).toEqual([]);
  if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
});

/** Entries of the state dir's sandboxes directory (sandboxes and snapshots), but the host's parked fork branches (fork-pool.ts). */
const stateEntries = (): string[] => leftOver(stateDir);

describe.skipIf(!ok)('sandbox fork (host root)', () => {
  it('branches diverge: each sees the parent files and its own writes, none sees another branch or changes the parent', async () => {
    const parent = await provider.create({ files: { 'base.txt': 'base\n', 'sub/deep.txt': 'deep\n' } }, { rolloutId: 'r-parent' });
    try {
      await run(parent, 'echo parent-made > made.txt');
      const fork = await parent.fork!({ rolloutIds: ['r-b0', 'r-b1'] });
      expect(fork.branches).toHaveLength(2);
      expect(fork.copiedBytes).toBeGreaterThan(0);
      expect(fork.lost).toEqual([]);
      const [b0, b1] = fork.branches as [Sandbox, Sandbox];
      expect(new Set([parent.id, b0.id, b1.id]).size).toBe(3);
      await run(b0, 'echo zero > only-b0.txt && echo changed-b0 > base.txt');
      await run(b1, 'echo one > only-b1.txt && rm sub/deep.txt');
      expect(await run(b0, 'cat made.txt sub/deep.txt')).toBe('parent-made\ndeep');
      expect(await run(b0, 'ls')).not.toContain('only-b1.txt');
      expect(await run(b1, 'ls')).not.toContain('only-b0.txt');
      expect(await run(b1, 'cat base.txt')).toBe('base');
      expect(await run(b1, 'ls sub')).toBe('');
      // The parent, thawed, goes on with its own files.
      expect(await run(parent, 'cat base.txt sub/deep.txt; ls -1')).toBe('base\ndeep\nbase.txt\nmade.txt\nsub');
      await run(parent, 'echo after > after.txt');
      expect(await run(b0, 'ls')).not.toContain('after.txt');
      await Promise.all([b0.close(), b1.close()]);
    } finally {
      await parent.close();
    }
    await expect.poll(stateEntries).toEqual([]);
  });

  it("a branch's shell, started before the snapshot, works in the overlay mounted under it: its mountinfo names no host path, its gate is gone, and the file calls reach the same files", async () => {
    const parent = await provider.create({ files: { 'base.txt': 'base' } }, { rolloutId: 'r-gated' });
    onTestFinished(() => parent.close());
    const fork = await parent.fork!({ rolloutIds: ['r-g0'], keepParent: false });
    const b = fork.branches[0]!;
    onTestFinished(() => b.close());
    const info = await run(b, 'cat /proc/self/mountinfo');
    expect(info).not.toContain(stateDir);
    // The last mount at /workspace (the one the shell sees) is the branch's overlay.
    const top = info.split('\n').filter((l) => l.split(' ')[4] === '/workspace').at(-1)!;
    expect(top).toMatch(/ - overlay overlay /);
    expect(await run(b, 'ls /run/rollout')).not.toMatch(/\bgate\b/);
    expect(await run(b, 'stat -f -c %T .; cat base.txt')).toBe('overlayfs\nbase');
    // The host's file calls hold the overlay too, not the empty directory it covers.
    expect(await b.readFile('base.txt')).toBe('base');
    await b.writeFile('from-host.txt', 'h');
    expect(await run(b, 'cat from-host.txt')).toBe('h');
  });

  it('carries the shell state: cwd, a variable, an exported variable, a function, an alias, umask, an option', async () => {
    const parent = await provider.create({ files: { 'sub/x.txt': 'x' } }, { rolloutId: 'r-shell' });
    try {
      await run(parent, "cd sub && PLAIN='a b'; export EXP=exported; declare -a ARR=(1 '2 3'); greet() { echo \"hi $1\"; }; alias ll='echo aliased'; umask 027; shopt -s globstar; set -o noclobber");
      const fork = await parent.fork!({ rolloutIds: ['r-s0'] });
      const b = fork.branches[0]!;
      onTestFinished(() => b.close());
      const r = await b.bash({ command: 'pwd' });
      expect(r.cwd).toBe('/workspace/sub');
      expect(r.output.trim()).toBe('/workspace/sub');
      expect(await run(b, 'echo "$PLAIN|$EXP|${ARR[1]}|$(bash -c \'echo $EXP\')"')).toBe('a b|exported|2 3|exported');
      expect(await run(b, 'greet there')).toBe('hi there');
      expect(await run(b, 'll')).toBe('aliased');
      expect(await run(b, 'umask')).toBe('0027');
      expect(await run(b, 'shopt -q globstar && [[ -o noclobber ]] && echo both')).toBe('both');
      // The capture left no trace in the parent: no history entry, no variable of its own.
      expect(await run(parent, "history | grep -c '[b]ase64' || true")).toBe('0');
      expect(await run(parent, 'compgen -v __rr_ | grep -v __rr_ec || true')).toBe('');
      await b.close();
    } finally {
      await parent.close();
    }
  });

  it('carries errexit, and a DEBUG trap of the policy that prints before every command does not break the capture', async () => {
    const parent = await provider.create({}, { rolloutId: 'r-trap-dbg' });
    onTestFinished(() => parent.close());
    await run(parent, "set -e; V=kept; trap 'echo debug-noise' DEBUG");
    const fork = await parent.fork!({ rolloutIds: ['r-td0'] });
    const b = fork.branches[0]!;
    onTestFinished(() => b.close());
    expect(await run(b, '[[ -o errexit ]] && echo "on $V"')).toBe('on kept');
  });

  it('lost names a background process and is empty without one', async () => {
    const parent = await provider.create({}, { rolloutId: 'r-lost' });
    try {
      await run(parent, '(sleep 1000 &) ; touch /tmp/scratch');
      const fork = await parent.fork!({ rolloutIds: ['r-l0'] });
      expect(fork.lost).toEqual(['1 background process (sleep)', "1 entry in /tmp (the shell's private /tmp is not carried)"]);
      // The branch has no such process.
      expect(await run(fork.branches[0]!, 'pgrep -c sleep || true')).toBe('0');
      await fork.branches[0]!.close();
    } finally {
      await parent.close();
    }
  });

  it('keepParent false closes the parent at the fork, its files shared without a copy; the snapshot goes with the last branch', async () => {
    const parent = await provider.create({ files: { 'kept.txt': 'kept\n' } }, { rolloutId: 'r-move' });
    await run(parent, 'echo more > more.txt');
    const fork = await parent.fork!({ rolloutIds: ['r-m0', 'r-m1'], keepParent: false });
    expect(fork.copiedBytes).toBe(0);
    await expect(parent.bash({ command: 'true' })).rejects.toBeInstanceOf(SandboxError);
    const [b0, b1] = fork.branches as [Sandbox, Sandbox];
    expect(await run(b0, 'cat kept.txt more.txt')).toBe('kept\nmore');
    await run(b0, 'echo b0 > more.txt');
    expect(await run(b1, 'cat more.txt')).toBe('more');
    const snaps = (): string[] => stateEntries().filter((n) => n.startsWith('snap-'));
    expect(snaps()).toHaveLength(1);
    await b0.close();
    expect(snaps()).toHaveLength(1);
    expect(await run(b1, 'cat kept.txt')).toBe('kept');
    await b1.close();
    await expect.poll(stateEntries).toEqual([]);
  });

  it('forks a branch, and a branch of that, three levels deep: each stacks on the snapshot below it (deletions and a replaced directory included)', async () => {
    const open: Sandbox[] = [];
    onTestFinished(async () => {
      await Promise.all(open.map((sb) => sb.close()));
    });
    const root = await provider.create({ files: { 'a.txt': 'a', 'gone.txt': 'x', 'dir/old.txt': 'old' } }, { rolloutId: 'r-tree' });
    open.push(root);
    const l1 = (await root.fork!({ rolloutIds: ['r-t1'] })).branches[0]!;
    open.push(l1);
    await run(l1, 'rm gone.txt && rm -r dir && mkdir dir && echo new > dir/new.txt && echo l1 > l1.txt');
    for (const keepParent of [true, false]) {
      const l2 = (await l1.fork!({ rolloutIds: [`r-t2-${keepParent}`], keepParent: keepParent || undefined })).branches[0]!;
      open.push(l2);
      if (!keepParent) {
        // The kernel caps nested overlays at depth 2: a third level stands only because layers stack.
        await run(l2, 'echo l2 > l2.txt && rm a.txt');
        const l3 = (await l2.fork!({ rolloutIds: ['r-t3'], keepParent: false })).branches[0]!;
        open.push(l3);
        expect(await run(l3, 'ls -1A; ls -1A dir')).toBe('dir\nl1.txt\nl2.txt\nnew.txt');
        continue;
      }
      expect(await run(l2, 'ls -1A; ls -1A dir; cat a.txt')).toBe('a.txt\ndir\nl1.txt\nnew.txt\na');
    }
    // The branch forked with keepParent kept going; the root never saw any of it.
    expect(await run(root, 'ls -1A; ls -1A dir')).toBe('a.txt\ndir\ngone.txt\nold.txt');
    // Every snapshot goes with the last sandbox standing on it, the ones below included.
    await Promise.all(open.map((sb) => sb.close()));
    await expect.poll(stateEntries).toEqual([]);
  });
});
