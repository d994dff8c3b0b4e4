import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { SandboxError } from '../errors.js';
import { removeSandboxDir, sandboxesDir, writeLease, type Lease } from './lease.js';
import type { Mounter } from './mounter.js';
import { processStartTime } from './proc.js';
import { isMountPoint, unpinDir } from './sandbox-fs.js';

/**
 * The filesystem snapshot of one fork (#26): a read-only directory, `lower`, that every branch of
 * the fork mounts as a lower layer of its own overlay (sandbox-fs.ts `makeSandboxFs`, or the image
 * overlay's `top`), so a branch costs no disk until it writes. It holds what the parent had
 * changed: a host-root sandbox's workspace, an image sandbox's overlay upper dir, or — when the
 * parent is itself a branch — that branch's upper dir (whiteouts and opaque markers included),
 * stacked on the branch's own snapshot ({@link layers}).
 *
 * Two ways to take it, both while the parent's processes are frozen (nothing writes):
 * - `share` (the parent ends at the fork): the parent's own directory is bind-mounted at `lower`
 *   — no copy. The bind keeps the parent's tmpfs alive after its close unmounts it.
 * - `copy` (the parent goes on): `cp -a` into a tmpfs of the snapshot's own (size-capped like the
 *   parent's workspace), once, shared by every branch.
 *
 * It lives at `<stateDir>/sandboxes/snap-<hex>/` with a lease naming this runtime and host, so
 * after a kill -9 the start-up reap (lease.ts `reapStale`) and the dead-host reap remove it like a
 * sandbox; its mounts exist only in the sandbox host's private mount namespace and vanish with
 * it. Reference-counted: the last {@link release} unmounts and removes it.
 */
export class ForkSnapshot {
  private refs = 0;
  private removed: Promise<void> | null = null;

  readonly id: string;
  readonly dir: string;
  /** This snapshot's own layer: what its parent had changed. */
  readonly lower: string;
  /** Bytes copied to make it (0 when shared). */
  private copied = 0;
  /** The snapshot the parent (itself a branch) stood on, held until this one is removed. */
  private readonly parent: ForkSnapshot | null;

  /** Made only by {@link take}, with the fields above. */
  private constructor(o: { id: string; dir: string; lower: string; parent: ForkSnapshot | null }) {
    this.id = o.id;
    this.dir = o.dir;
    this.lower = o.lower;
    this.parent = o.parent;
    o.parent?.acquire();
  }

  /**
   * The read-only lower layers of the branches' overlays, top first: this snapshot's, then its
   * parent's and so on (a fork of a branch stacks on the branch's snapshot: no copy of what it
   * holds, no overlay nested in an overlay, whose depth the kernel caps at 2).
   */
  get layers(): string[] {
    return [this.lower, ...(this.parent?.layers ?? [])];
  }

  /** Bytes copied to make it (0 when shared). */
  get copiedBytes(): number {
    return this.copied;
  }

  /**
   * Takes a snapshot of the directory `sourceFd` holds (opened without following links by its
   * owner; the walk never leaves it: `cp -a` copies symlinks as symlinks and never follows one).
   * @throws SandboxError `FORK_FAILED` when the copy or the mounts fail; nothing is left then.
   */
  static async take(sourceFd: number, opts: { stateDir: string; mode: 'share' | 'copy'; bytes: number; parent: ForkSnapshot | null; mounter?: Mounter | null; lease: Omit<Lease, 'sandboxId' | 'dir' | 'workdir' | 'createdAt' | 'ptyPid' | 'ptyStart' | 'cgroup' | 'hostPid' | 'hostStart'> }): Promise<ForkSnapshot> {
    const id = `snap-${crypto.randomBytes(6).toString('hex')}`;
    const dir = path.join(sandboxesDir(opts.stateDir), id);
    fs.mkdirSync(dir, { recursive: true, mode: 0o711 });
    const root = path.join(dir, 'fs');
    const lower = opts.mode === 'share' ? path.join(dir, 'lower') : path.join(root, 'lower');
    // The lease first: a crash from here on leaves a directory the reaps know to remove.
    writeLease({
      ...opts.lease,
      sandboxId: id,
      hostPid: process.pid,
      hostStart: processStartTime(process.pid),
      ptyPid: null,
      ptyStart: null,
      cgroup: null,
      dir,
      workdir: lower,
      createdAt: new Date().toISOString(),
    });
    const snap = new ForkSnapshot({ id, dir, lower, parent: opts.parent });
    try {
      if (opts.mode === 'share') {
        // pinDir's bind, off the event loop: a fork's branch launches run meanwhile (by the
        // host's mount helper when it has one: mounter.ts).
        fs.mkdirSync(lower, { mode: 0o755 });
        const src = `/proc/${process.pid}/fd/${sourceFd}`;
        if (!(await opts.mounter?.run([{ op: 'bind', src, dst: lower }], 'the workspace for a fork'))) await run('mount', ['--no-canonicalize', '--bind', src, lower], 'cannot bind the workspace for a fork');
        return snap;
      }
      fs.mkdirSync(root, { mode: 0o711 });
      const m = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${opts.bytes},mode=0711,nosuid,nodev`, 'rollout-snapshot', root], { encoding: 'utf8' });
      if (m.status !== 0) throw new SandboxError(`cannot mount the fork snapshot's tmpfs: ${(m.stderr || m.error?.message || '').trim()}`, { code: 'FORK_FAILED' });
      // `/proc/<pid>/fd/<n>/.`: the very directory the fd holds, whatever its path has become.
      await copyTree(`/proc/${process.pid}/fd/${sourceFd}/.`, lower);
      const st = fs.statfsSync(root);
      snap.copied = (st.blocks - st.bfree) * st.bsize;
      return snap;
    } catch (err) {
      await snap.remove();
      if (err instanceof SandboxError) throw err;
      throw new SandboxError(`cannot take the fork snapshot: ${(err as Error).message}`, { code: 'FORK_FAILED', cause: err });
    }
  }

  /** Counts one more user (a branch, or the fork while it makes them). */
  acquire(): void {
    this.refs++;
  }

  /** Counts one user less; the last one unmounts and removes the snapshot. Never throws. */
  async release(): Promise<void> {
    if (--this.refs > 0) return;
    await this.remove();
  }

  private remove(): Promise<void> {
    this.removed ??= (async () => {
      unpinDir(this.lower);
      const root = path.join(this.dir, 'fs');
      if (isMountPoint(root)) spawnSync('umount', ['-l', root], { stdio: 'ignore' });
      await removeSandboxDir(this.dir);
      await this.parent?.release();
    })();
    return this.removed;
  }
}

/** `cp -a` of a directory's contents into `dst` (created), off the event loop. */
function copyTree(src: string, dst: string): Promise<void> {
  // -T: `dst` is the copy, never a directory to copy into; `--` ends options whatever the paths.
  return run('cp', ['-a', '-T', '--', src, dst], 'cannot copy the workspace for a fork');
}

/**
 * Runs a host tool off the event loop. @throws SandboxError `FORK_FAILED` with `what` and its
 * stderr (it names host paths under the state dir: it stays in the host's error, not the policy's view).
 */
function run(file: string, args: string[], what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    p.on('error', (e) => reject(new SandboxError(`${what}: ${e.message}`, { code: 'FORK_FAILED' })));
    p.on('close', (code) => (code === 0 ? resolve() : reject(new SandboxError(`${what} (${file} exit ${code}): ${err.trim()}`, { code: 'FORK_FAILED' }))));
  });
}
