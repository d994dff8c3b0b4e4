import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { SandboxError } from '../errors.js';
import type { ForkSnapshot } from './fork-snapshot.js';
import { TRUSTED_PATH } from './drivers.js';
import { removeSandboxDir } from './lease.js';
import type { Mounter } from './mounter.js';
import { grantSearch, removeSandboxFs, type SandboxFs } from './sandbox-fs.js';

/**
 * The filesystems of a fork's branches made before the snapshot exists (#26), so that their
 * shells start while the parent is still being captured, frozen and snapshotted.
 *
 * Each branch root is a size-capped tmpfs (as sandbox-fs.ts makes it), mounted
 * propagation-shared, holding `upper` and `ovl-work` for its overlay, `ctl`, `home`, and an empty
 * `workspace`. The branch's bwrap binds `workspace` at /workspace; that bind, in the sandbox's
 * mount namespace, is a slave of the root's peer group (a less privileged namespace turns shared
 * into slave), so the overlay that {@link mountBranchOverlays} mounts on `workspace` once the
 * snapshot stands appears at the sandbox's /workspace too. Nothing propagates back, and what
 * propagates is locked in place (the sandbox cannot unmount it to see what it covers). Until
 * then the branch's shell waits on its gate (a FIFO in `ctl`, {@link BranchGate}); then it enters
 * the new /workspace and restores the parent's shell state.
 */
export interface BranchFs extends SandboxFs {
  /** The branch's gate, a FIFO in its control dir (`/run/rollout/gate` inside). */
  gate: string;
}

/** The gate's name in a branch's control dir. */
export const GATE_NAME = 'gate';

/**
 * Mounts one branch root per entry of `dirs` (each an existing, empty sandbox directory) in one
 * `sh`: tmpfs, layout, the shared workspace bind, the gate. As root only.
 * @throws SandboxError `FORK_FAILED` when a mount fails; the roots mounted so far are unmounted.
 */
export async function prepareBranches(dirs: readonly string[], opts: { bytes: number; uid: number | null; stateDir: string; mounter?: Mounter | null }): Promise<BranchFs[]> {
  const roots = dirs.map((d) => path.join(d, 'fs'));
  try {
    for (const root of roots) fs.mkdirSync(root, { mode: 0o711 });
    // The host's mount helper when it has one (mounter.ts), else one `bash`.
    const helped = await opts.mounter?.run(
      roots.map((root) => ({ op: 'root', root, data: `size=${opts.bytes},mode=0711`, gate: GATE_NAME })),
      "a fork branch's workspace",
    );
    if (!helped) await sh(PREPARE, [`size=${opts.bytes},mode=0711,nosuid,nodev`, ...roots], "a fork branch's workspace");
    for (const root of roots) {
      fs.mkdirSync(path.join(root, 'ovl-work'), { mode: 0o700 });
      if (opts.uid !== null) {
        fs.chownSync(path.join(root, 'home'), opts.uid, opts.uid);
        grantSearch(opts.stateDir, root);
      }
    }
  } catch (err) {
    for (const d of dirs) removeSandboxFs(d);
    throw err;
  }
  return roots.map((root) => ({ root, workdir: path.join(root, 'workspace'), ctlDir: path.join(root, 'ctl'), homeDir: path.join(root, 'home'), capped: true, gate: path.join(root, 'ctl', GATE_NAME) }));
}

/**
 * Mounts each branch's workspace overlay: the snapshot's `layers` (read-only, shared, top first)
 * under the branch's own `upper`, whose root takes the top layer root's owner and mode (the
 * merged root shows the upper's). One `sh` for every branch. The overlay's options name `l<i>`,
 * links in the branch root, relative to it: they show in the sandbox's mountinfo, which must
 * name no host path.
 * @throws SandboxError `FORK_FAILED` when a mount fails (the caller closes the branches).
 */
export async function mountBranchOverlays(branches: readonly BranchFs[], layers: readonly string[], mounter: Mounter | null = null): Promise<void> {
  const top = fs.statSync(layers[0]!);
  for (const b of branches) {
    const upper = path.join(b.root, 'upper');
    fs.chownSync(upper, top.uid, top.gid);
    fs.chmodSync(upper, top.mode & 0o7777);
    layers.forEach((l, i) => fs.symlinkSync(l, path.join(b.root, `l${i}`)));
  }
  const lower = layers.map((_, i) => `l${i}`).join(':');
  // The host's mount helper when it has one (no process spawned per fork: mounter.ts).
  if (await mounter?.run(branches.map((b) => ({ op: 'overlay', root: b.root, lower })), "a fork branch's workspace overlay")) return;
  await sh(OVERLAYS, [lower, ...branches.map((b) => b.root)], "a fork branch's workspace overlay");
}

/**
 * A branch shell's gate: the shell's first line blocks reading it (shell-state.ts
 * `restoreCommand`) until the fork {@link open}s it (`go`: the overlay is mounted and the state
 * file written) or {@link refuse}s it (the shell exits). Held open read-write by this process
 * from the start, so the shell's open never blocks and a line written before the shell reads
 * is kept; {@link close} once the shell has read it (or is gone).
 */
export class BranchGate {
  private fd: number | null;

  constructor(file: string) {
    // O_RDWR on a FIFO never blocks (Linux), and keeps a writer for the reader's open.
    this.fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_NONBLOCK);
  }

  /** Lets the shell go on. */
  open(): void {
    this.write('go\n');
  }

  /** Makes the shell exit (its start then fails and the branch closes). */
  refuse(): void {
    this.write('stop\n');
  }

  /** Closes this side. Idempotent. */
  close(): void {
    if (this.fd === null) return;
    fs.closeSync(this.fd);
    this.fd = null;
  }

  private write(line: string): void {
    if (this.fd !== null) fs.writeSync(this.fd, line);
  }
}

/**
 * Per root `$2…` (an existing directory), in bash: a tmpfs (options `$1`) made
 * propagation-shared as it is mounted, all in parallel; then the layout of every root in one
 * `mkdir` and every gate in one `mkfifo`. Each command is a fork and exec, the dearest part of
 * this on a loaded machine: their number does not grow with the roots but for the mounts.
 */
const PREPARE = [
  'o=$1; shift',
  'pids=()',
  'for r; do mount --make-shared -t tmpfs -o "$o" rollout-sandbox "$r" & pids+=($!); done',
  'st=0; for p in "${pids[@]}"; do wait "$p" || st=1; done',
  '[ "$st" = 0 ] || exit 1',
  'd=(); g=()',
  `for r; do d+=("$r/upper" "$r/workspace" "$r/ctl" "$r/home" "$r/root"); g+=("$r/ctl/${GATE_NAME}"); done`,
  'mkdir -m 755 -- "${d[@]}" && mkfifo -m 644 -- "${g[@]}"',
].join('\n');

/** Per root `$2…`, in bash, in parallel: the overlay of lower dirs `$1` (links in the root) on its `workspace`. */
const OVERLAYS = [
  'l=$1; shift',
  'pids=()',
  'for r; do (cd "$r" && exec mount -t overlay overlay -o "lowerdir=$l,upperdir=upper,workdir=ovl-work,index=off,xino=off" workspace) & pids+=($!); done',
  'st=0; for p in "${pids[@]}"; do wait "$p" || st=1; done',
  'exit $st',
].join('\n');

/** Runs a root `bash -c` script off the event loop. @throws SandboxError `FORK_FAILED` naming `what` when it fails. */
function sh(script: string, args: string[], what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('/bin/bash', ['--norc', '--noprofile', '-c', script, 'bash', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: TRUSTED_PATH } });
    let err = '';
    p.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    p.on('error', (e) => reject(new SandboxError(`cannot mount ${what}: ${e.message}`, { code: 'FORK_FAILED', stage: 'init' })));
    p.on('close', (code) => (code === 0 ? resolve() : reject(new SandboxError(`cannot mount ${what}: ${err.trim() || `sh exit ${code}`}`, { code: 'FORK_FAILED', stage: 'init' }))));
  });
}

/**
 * What a fork hands a gated branch at its gate: its snapshot, set (and acquired) by the fork
 * before it opens the gate, unless the branch has already closed (`released`), which it marks as
 * it releases.
 */
export interface SnapshotHold {
  snapshot: ForkSnapshot | null;
  released: boolean;
  /** Why the branch's start failed, set before it closes (its directory goes meanwhile). */
  startError?: unknown;
  /** Whether the branch's processes still run (set by its start once its cgroup exists): a pool hands out no dead branch. */
  alive?: () => boolean;
  /** The rollout a pooled branch serves, set by the fork that takes it: its start writes it into the lease. */
  rolloutId?: string;
}

/** What a gated branch's start is given (HostSandbox.create's `gated`). */
export interface GatedBranch {
  files: BranchFs;
  hold: SnapshotHold;
  /** How long the shell may wait at its gate, on top of the start timeout: a pooled branch's whole stay in the pool. */
  parkMs?: number;
}

/**
 * One branch launched ahead of its snapshot: its directory and filesystem (made in one process
 * with its siblings'), its gate, and its start, under way and waiting on the gate. A fork's own
 * launch or a fork pool's (fork-pool.ts) makes it; {@link EarlyBranches} ends it.
 */
export interface GatedLaunch<S> {
  dir: string;
  files: BranchFs;
  gate: BranchGate;
  hold: SnapshotHold;
  stateFile: string;
  /** Resolves once the shell, past its gate, has restored the state. */
  start: Promise<S>;
}

/**
 * Makes each branch's directory and filesystem, then starts each (`create`, not awaited: the
 * first on the next turn of the event loop, each other one turn after the one before). The
 * caller handles every `start`'s rejection.
 * @throws SandboxError `SANDBOX_EXISTS` when a directory exists, `FORK_FAILED` when the
 *   filesystems cannot be made; nothing is left then.
 */
export async function launchGated<S>(branches: Array<{ dir: string; stateFile: string; create: (gated: GatedBranch) => Promise<S> }>, opts: { bytes: number; uid: number | null; stateDir: string; parkMs?: number; mounter?: Mounter | null }): Promise<Array<GatedLaunch<S>>> {
  if (branches.length === 0) return [];
  const dirs: string[] = [];
  let files: BranchFs[];
  try {
    for (const b of branches) {
      fs.mkdirSync(b.dir);
      dirs.push(b.dir);
    }
    files = await prepareBranches(dirs, opts);
  } catch (err) {
    for (const d of dirs) await removeSandboxDir(d);
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new SandboxError('a fork branch id is already in use', { code: 'SANDBOX_EXISTS', stage: 'init' });
    throw err;
  }
  const gates: BranchGate[] = [];
  try {
    for (const f of files) gates.push(new BranchGate(f.gate));
  } catch (err) {
    for (const g of gates) g.close();
    for (const d of dirs) {
      removeSandboxFs(d);
      await removeSandboxDir(d);
    }
    throw new SandboxError(`cannot open a fork branch's gate: ${(err as Error).message}`, { code: 'FORK_FAILED', stage: 'init' });
  }
  // Each start spawns its shell synchronously (node-pty forks this process: ~10-20 ms on a
  // loaded machine); one per turn of the event loop, so the fork's capture, freeze and overlay
  // mounts run between them instead of after all of them (the shells need the overlay only at
  // their gate).
  let turn = Promise.resolve();
  return branches.map((b, i) => {
    const hold: SnapshotHold = { snapshot: null, released: false };
    turn = turn.then(() => new Promise<void>((r) => setImmediate(r)));
    const start = turn.then(() => b.create({ files: files[i]!, hold, ...(opts.parkMs ? { parkMs: opts.parkMs } : {}) }));
    return { dir: dirs[i]!, files: files[i]!, gate: gates[i]!, hold, stateFile: b.stateFile, start };
  });
}

/** Removes a gated branch's directory and mounts when its start failed before it could own them (nothing when it went with its close). */
export async function removeGatedLeftovers(dir: string): Promise<void> {
  removeSandboxFs(dir);
  if (fs.existsSync(dir)) await removeSandboxDir(dir);
}

/**
 * A fork's branches launched before its snapshot (the fast path of a fork, host-fork.ts): taken
 * from the host's fork pool or launched by the fork itself. Its owner ends it one way:
 * {@link open} (then closes what failed), or {@link abort}.
 */
export class EarlyBranches<S extends { close(): Promise<void> }> {
  /** Every start, settled: a start that fails early is never an unhandled rejection. */
  private readonly settled: Promise<Array<PromiseSettledResult<S>>>;
  /** The first start that failed, as soon as it has. */
  private failed: PromiseRejectedResult | null = null;

  constructor(private readonly launches: Array<GatedLaunch<S>>) {
    for (const l of launches) l.start.catch((err: unknown) => (this.failed ??= { status: 'rejected', reason: err }));
    this.settled = Promise.allSettled(launches.map((l) => l.start));
  }

  /** Launches `branches` ({@link launchGated}) as one fork's. */
  static async launch<S extends { close(): Promise<void> }>(branches: Parameters<typeof launchGated<S>>[0], opts: Parameters<typeof launchGated<S>>[1]): Promise<EarlyBranches<S>> {
    return new EarlyBranches(await launchGated(branches, opts));
  }

  /**
   * Mounts every branch's workspace overlay on `snapshot`'s layers (frozen parent).
   * @throws SandboxError `FORK_FAILED` when a branch's start has already failed (naming why) or a
   *   mount fails.
   */
  async mount(snapshot: ForkSnapshot, mounter: Mounter | null = null): Promise<void> {
    const check = (): void => {
      const held = this.launches.find((l) => l.hold.startError !== undefined)?.hold;
      if (!this.failed && !held) return;
      const e = (held ? held.startError : this.failed!.reason) as Error;
      throw new SandboxError(`a fork branch could not be made: ${e.message}`, { code: 'FORK_FAILED', cause: e });
    };
    check();
    try {
      await mountBranchOverlays(this.launches.map((l) => l.files), snapshot.layers, mounter);
    } catch (err) {
      check();
      if (err instanceof SandboxError) throw err;
      throw new SandboxError(`cannot mount a fork branch's workspace: ${(err as Error).message}`, { code: 'FORK_FAILED', cause: err });
    }
  }

  /**
   * Writes each branch's shell state, hands it the snapshot (acquired once per branch still
   * standing) and opens its gate; resolves with every start's outcome.
   */
  async open(snapshot: ForkSnapshot, shellState: string): Promise<Array<PromiseSettledResult<S>>> {
    for (const { hold, stateFile, gate } of this.launches) {
      try {
        fs.writeFileSync(stateFile, shellState, { mode: 0o644 });
      } catch {
        // a branch already closed took its directory along: its gate is refused below
      }
      if (hold.released) continue;
      snapshot.acquire();
      hold.snapshot = snapshot;
      gate.open();
    }
    try {
      return await this.settled;
    } finally {
      for (const l of this.launches) l.gate.close();
    }
  }

  /** Ends every branch (its shell exits at the gate; each start fails and closes it) and removes what is left. */
  async abort(): Promise<void> {
    for (const l of this.launches) l.gate.refuse();
    const made = await this.settled;
    for (const l of this.launches) l.gate.close();
    await Promise.all(made.flatMap((m) => (m.status === 'fulfilled' ? [m.value.close()] : [])));
    await this.removeLeftovers();
  }

  /** Removes the directory and mounts of any branch whose start failed before it could own them. */
  async removeLeftovers(): Promise<void> {
    for (const l of this.launches) await removeGatedLeftovers(l.dir);
  }
}
