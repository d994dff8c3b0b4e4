import fs from 'node:fs';
import path from 'node:path';
import { SandboxError, TaskError } from '../errors.js';
import type { SandboxCreate } from '../protocol/sandbox.js';
import { PidsCgroup } from './cgroup.js';
import type { LaunchPlan } from './drivers.js';
import { Editor } from './editor.js';
import { removeSandboxDir, sandboxesDir, writeLease, type Lease } from './lease.js';
import { entrypointFailed, imageCwd, mountImageRoot, toWorkspaceAlias, type ImageMount } from './images/image-root.js';
import { overlayDirs, releaseOverlay } from './images/overlay-mount.js';
import { REPL_DRIVER } from './python-repl.js';
import { SANDBOX_DNS } from './network.js';
import { checkProxySocket, mountProxySocket } from './llm-proxy-forwarder.js';
import { mountHarnessStore } from './harness-mount.js';
import { ForkSnapshot } from './fork-snapshot.js';
import { GATE_NAME, type GatedBranch, type SnapshotHold } from './branch-fs.js';
import type { ForkPool } from './fork-pool.js';
import type { Mounter } from './mounter.js';
import { HostShell } from './host-shell.js';
import { leaseFor, sandboxPath, seed } from './host-launch.js';
import { forkSandbox, prewarmFork, shellStateName, type BranchStart, type ForkBranchRequest, type ForkParent, type ForkResult, type HostOwner } from './host-fork.js';
import { chownTree, makeSandboxFs, pinDir, removeSandboxFs, unpinDir, type SandboxFs } from './sandbox-fs.js';
import { isRoot } from './sandbox-user.js';
import { writeSeccompFilter } from './seccomp.js';
import type { BashRequest, BashResult, EditorRequest, EditorResult, PythonResult } from './sandbox.js';
import { readWorkspaceFile, writeWorkspaceFile } from './workspace-fs.js';
import { WORKSPACE } from './workspace-path.js';

export type { HostOwner, BranchStart } from './host-fork.js';

/**
 * One sandbox inside a sandbox host: its directory (workspace, control files, lease), its
 * cgroup, its editor and its forks; its pty shell, its Python REPL (on first use) and their
 * namespace helpers are its {@link HostShell} (host-shell.ts).
 *
 * Close path (the only one): kill the pty's launcher (bwrap's --die-with-parent then kills the
 * namespace's init, which takes every process of the pid namespace with it), kill every
 * remaining process of the cgroup and every descendant seen before, remove the cgroup and
 * the directory.
 */
export class HostSandbox {
  private editor: Editor;
  /** Its shell, REPL and namespace helpers (host-shell.ts). */
  private readonly shell: HostShell;
  private closing = false;
  /** True when the proxy socket was bind-mounted into the control dir by this (root) host. */
  private proxyMounted = false;
  /** The harness store's binds for the driver (non-root; as root they are mounted into the control dir): harness-mount.ts. */
  private harnessBinds: Array<[string, string]> = [];
  /** An image sandbox's mounted root and its user inside (images/image-root.ts). */
  private imageMount: ImageMount | null = null;
  /** A fork branch's snapshot (its workspace's lower layer), released at close. */
  private snapshot: ForkSnapshot | null = null;
  /** A gated branch's snapshot hold (GatedBranch.hold), until {@link snapshot} takes it over. */
  private branchHold: SnapshotHold | null = null;

  readonly id: string;
  readonly workdir: string;
  private readonly req: SandboxCreate;
  private readonly dir: string;
  private readonly ctlDir: string;
  private readonly files: SandboxFs;
  private readonly seccompFile: string | null;
  private readonly cgroup: PidsCgroup | null;
  private readonly lease: Lease;
  private readonly onLost: (reason: string) => void;

  /** Made only by {@link create}, from the parts it prepared (named as the fields above). */
  private constructor(o: {
    id: string;
    req: SandboxCreate;
    dir: string;
    workdir: string;
    ctlDir: string;
    files: SandboxFs;
    seccompFile: string | null;
    cgroup: PidsCgroup | null;
    lease: Lease;
    onLost: (reason: string) => void;
  }) {
    this.id = o.id;
    this.workdir = o.workdir;
    this.req = o.req;
    this.dir = o.dir;
    this.ctlDir = o.ctlDir;
    this.files = o.files;
    this.seccompFile = o.seccompFile;
    this.cgroup = o.cgroup;
    this.lease = o.lease;
    this.onLost = o.onLost;
    this.editor = new Editor(o.workdir, { rootFd: null, asUid: this.uid });
    this.shell = new HostShell({
      id: o.id,
      req: o.req,
      ctlDir: o.ctlDir,
      workdir: o.workdir,
      cgroup: o.cgroup,
      lease: o.lease,
      seccompFile: o.seccompFile,
      imageMounted: () => this.imageMount !== null,
      closing: () => this.closing,
      plan: () => this.plan(),
      restoreWorkdirMode: () => this.restoreWorkdirMode(),
      onLost: o.onLost,
    });
  }

  /**
   * The workspace directory's fd, opened before any sandboxed process ran: the editor and file
   * calls start every walk from it (workspace-fs.ts), whatever the sandbox later renames.
   */
  private workdirFd: number | null = null;
  /**
   * Where the workspace is bound for the sandbox's launches: an image sandbox's WorkingDir may
   * sit below directories its user owns, so as root it is bind-mounted from the held fd onto a
   * directory of the host's own (`<dir>/fs/work`), and every shell binds that, never a path
   * through the image. Null: {@link workdir} itself (its ancestors are the host's).
   */
  private pinnedWorkdir: string | null = null;

  /** Opens the workspace fd and pins it (see {@link workdirFd}, {@link pinnedWorkdir}); before the first shell. */
  private holdWorkdir(): void {
    this.workdirFd = fs.openSync(this.workdir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
    this.editor = new Editor(this.workdir, { rootFd: this.workdirFd, asUid: this.uid });
    if (this.req.image && isRoot() && !this.imageMount?.via && this.req.driver !== 'none') {
      const pin = path.join(this.files.root, 'work');
      pinDir(this.workdirFd, pin);
      this.pinnedWorkdir = pin;
    }
  }

  /**
   * Makes the sandbox: directory, seed, cgroup, lease, shell, setup commands.
   * @throws TaskError for a bad spec (missing seed, failing setup command), SandboxError when
   *   the shell does not start. Nothing is left behind on a throw.
   */
  static async create(req: SandboxCreate, ctx: { stateDir: string; owner: HostOwner; onLost: (reason: string) => void; branchOf?: BranchStart | undefined; gated?: GatedBranch | undefined }): Promise<HostSandbox> {
    const dir = path.join(sandboxesDir(ctx.stateDir), req.sandboxId);
    const gated = ctx.gated;
    if (gated) return HostSandbox.createGated(req, dir, ctx, gated);
    if (fs.existsSync(dir)) throw new SandboxError(`sandbox ${req.sandboxId} already exists`, { code: 'SANDBOX_EXISTS', stage: 'init' });
    fs.mkdirSync(dir, { recursive: true });
    const uid = req.driver === 'none' ? null : req.sandboxUid;
    const branchOf = ctx.branchOf;
    // A fork's branch holds its snapshot until it closes (the last one removes it).
    branchOf?.snapshot.acquire();
    let files: SandboxFs;
    let mount: ImageMount | null;
    try {
      // A host-root branch's workspace: an overlay of the snapshot's layers under its own upper dir.
      files = makeSandboxFs(dir, { bytes: req.limits.workdirBytes, uid, stateDir: ctx.stateDir, lowerLayers: branchOf && !req.image ? branchOf.snapshot.layers : undefined });
      // A branch of an image sandbox: the snapshot layers (its parent's changes, its grandparent's…) above the image's.
      mount = req.image ? await mountImageRoot(dir, req.image, uid, { removeOnFailure: false, top: branchOf?.snapshot.layers }) : null;
    } catch (err) {
      removeSandboxFs(dir);
      fs.rmSync(dir, { recursive: true, force: true });
      await branchOf?.snapshot.release();
      throw err;
    }
    const { ctlDir } = files;
    // An image sandbox's workspace is its WorkingDir inside the overlay (seen through the
    // overlay's own namespace when it lives in one: overlay-mount.ts).
    const workdir = mount ? mount.workdir : files.workdir;
    fs.mkdirSync(path.join(files.root, 'root')); // mount point of the unshare driver's root
    const cgroup = req.driver === 'none' ? null : PidsCgroup.create(req.sandboxId, req.limits.maxProcesses, req.limits.totalMemoryBytes);
    const lease = leaseFor(req, ctx.owner, { dir, workdir, cgroup });
    const seccompFile = req.driver === 'none' ? null : writeSeccompFilter(ctlDir);
    const sb = new HostSandbox({ id: req.sandboxId, req, dir, workdir, ctlDir, files, seccompFile, cgroup, lease, onLost: ctx.onLost });
    sb.imageMount = mount;
    sb.snapshot = branchOf?.snapshot ?? null;
    try {
      // A branch's files are its parent's, already its uid's (a chown -R would copy every one up).
      if (!branchOf) {
        await seed(workdir, req);
        // Seeding ran as root before any sandboxed process existed; the sandbox's uid takes it over.
        if (uid !== null) chownTree(workdir, uid);
      }
      sb.holdWorkdir();
      sb.prepareControlDir();
      // A branch's shell restores the parent's state on its init line (no second round trip).
      if (branchOf) sb.shell.restoreOnStart(sb.writeShellState(branchOf.shellState, branchOf.lastExit));
      await sb.shell.start().catch((err: unknown) => {
        throw entrypointFailed(req.image, err);
      });
      for (const cmd of branchOf ? [] : (req.spec.setup ?? [])) {
        const r = await sb.bash({ command: cmd });
        if (r.exitCode !== 0) {
          throw new TaskError(`setup command failed (exit ${r.exitCode ?? 'timeout'}): ${cmd}\n${r.output.slice(-2000)}`, { code: 'SETUP_FAILED', stage: 'init' });
        }
      }
      return sb;
    } catch (err) {
      await sb.close();
      throw err;
    }
  }

  /**
   * A gated branch (GatedBranch): its directory and filesystem made by the fork; cgroup, lease and
   * shell as {@link create} makes them, the shell's first line waiting on the gate. Resolves once
   * the shell has restored the parent's state in the mounted workspace.
   */
  private static async createGated(req: SandboxCreate, dir: string, ctx: { owner: HostOwner; onLost: (reason: string) => void }, gated: GatedBranch): Promise<HostSandbox> {
    const files = gated.files;
    const cgroup = PidsCgroup.create(req.sandboxId, req.limits.maxProcesses, req.limits.totalMemoryBytes);
    const lease = leaseFor(req, ctx.owner, { dir, workdir: files.workdir, cgroup });
    const sb = new HostSandbox({ id: req.sandboxId, req, dir, workdir: files.workdir, ctlDir: files.ctlDir, files, seccompFile: writeSeccompFilter(files.ctlDir), cgroup, lease, onLost: ctx.onLost });
    sb.branchHold = gated.hold;
    // A pool's probe (fork-pool.ts): the launcher joins the group before anything else runs, and
    // the whole sandbox goes with its shell.
    gated.hold.alive = () => (cgroup ? cgroup.pids().length > 0 : true);
    try {
      sb.prepareControlDir();
      // The fork writes the state file (its last line the parent's status) before it opens the gate.
      sb.shell.restoreOnStart({ name: shellStateName(req.sandboxId), lastExit: null, gate: GATE_NAME });
      // A pooled branch may wait at its gate as long as it stays in the pool.
      await sb.shell.start(req.tools.startTimeoutMs + (gated.parkMs ?? 0));
      sb.snapshot = gated.hold.snapshot;
      // Only now is the overlay under the workspace path: the fd must hold it, not the empty dir it covers.
      sb.holdWorkdir();
      // A pooled branch was launched for no rollout: its lease names the one the fork gave it.
      if (gated.hold.rolloutId !== undefined) {
        sb.lease.rolloutId = gated.hold.rolloutId;
        writeLease(sb.lease);
      }
      return sb;
    } catch (err) {
      gated.hold.startError = err;
      await sb.close();
      throw err;
    }
  }

  /**
   * What the shell's launch needs in the control dir: the REPL's driver, resolv.conf for a
   * network, and the mounts of the LLM proxy's socket (as root; otherwise bwrap binds it) and of
   * the harness store. A harness store needs a driver: refused (BAD_SPEC) under `none`.
   */
  private prepareControlDir(): void {
    const { spec, driver } = this.req;
    fs.writeFileSync(path.join(this.ctlDir, 'repl.py'), REPL_DRIVER);
    if (spec.network) fs.writeFileSync(path.join(this.ctlDir, 'resolv.conf'), `nameserver ${SANDBOX_DNS}\n`);
    if (spec.llmProxy) {
      checkProxySocket(spec.llmProxy.socketPath);
      if (driver !== 'none') this.proxyMounted = mountProxySocket(spec.llmProxy.socketPath, this.ctlDir);
    }
    if (spec.harnessStore) {
      if (driver === 'none') throw new TaskError('harnessStore needs a sandbox driver (bwrap or unshare), not none', { code: 'BAD_SPEC', stage: 'init' });
      this.harnessBinds = mountHarnessStore(spec.harnessStore, this.ctlDir);
    }
  }

  private plan(): LaunchPlan {
    return {
      driver: this.req.driver,
      // The driver starts inside the overlay's own namespace, if any, where the plain path is the overlay.
      workdir: this.pinnedWorkdir ?? (this.imageMount?.via ? this.workdir.slice(this.imageMount.via.length) : this.workdir),
      stateDir: path.dirname(path.dirname(this.dir)),
      homeDir: this.files.homeDir,
      // Both drivers bind the image overlay writable as the root, entered as the image's User.
      rootfs: this.req.image ? null : this.req.rootfs,
      imageRoot:
        this.req.image && this.imageMount
          ? { merged: overlayDirs(this.dir).merged, cwd: imageCwd(this.req.image), ...this.imageMount.user, enterPid: this.imageMount.holderPid }
          : null,
      network: this.req.spec.network ?? false,
      limits: this.req.limits,
      ctlDir: this.ctlDir,
      cgroupProcs: this.cgroup?.procsFile ?? null,
      memoryCgroupProcs: this.cgroup?.memoryProcsFile ?? null,
      freezerCgroupProcs: this.cgroup?.freezerProcsFile ?? null,
      sandboxUid: this.uid,
      seccompFile: this.seccompFile,
      resolvConf: this.req.spec.network ? path.join(this.ctlDir, 'resolv.conf') : null,
      // Not root: bwrap binds the socket itself (as root the host mounted it into the control dir).
      llmSocket: this.req.spec.llmProxy && !this.proxyMounted ? this.req.spec.llmProxy.socketPath : null,
      sandboxPath: sandboxPath(this.req),
      roBinds: this.harnessBinds,
      // The image's Entrypoint runs the shell as Docker runs a command (`docker run IMAGE bash`):
      // once per shell, so an entrypoint that prepares the environment and `exec "$@"` does so.
      // The shell by its absolute path, never looked up on the sandbox's PATH: a `bash` the
      // policy planted in a directory on it (then `exit`, and the next shell is its) would answer
      // the eval's commands, and the reward, as it liked.
      command: [...(this.req.image?.entrypoint ?? []), '/bin/bash', '--noprofile', '--norc', '--noediting', '-i'],
      // bwrap's arguments name host paths: they go through a root-only file, not its argv (drivers.ts).
      argsFile: path.join(this.files.root, 'bwrap.args'),
    };
  }

  /** `OPENAI_BASE_URL` inside the sandbox, or undefined without `spec.llmProxy`. */
  get llmProxyUrl(): string | undefined {
    return this.shell.llmProxyUrl;
  }

  /** The sandbox's host uid, or null (not root, or the `none` driver). */
  private get uid(): number | null {
    return this.req.driver === 'none' ? null : this.req.sandboxUid;
  }

  /** Gives the workspace root's owner rwx again through the fd held since start (never a path the sandbox could swap). */
  private restoreWorkdirMode(): void {
    if (this.workdirFd === null) return;
    const mode = fs.fstatSync(this.workdirFd).mode & 0o7777;
    if ((mode & 0o700) !== 0o700) fs.fchmodSync(this.workdirFd, mode | 0o700);
  }
  /**
   * Runs a bash tool call (host-shell.ts): when the command ends the shell (`exit`), a new shell
   * is started and the result says so; the exit code is the shell's.
   * @throws SandboxError when the sandbox was killed or is closed.
   */
  bash(req: BashRequest): Promise<BashResult> {
    return this.shell.bash(req);
  }

  /**
   * A fresh shell (host-shell.ts `reset`): every process of the sandbox ends and a new shell
   * starts on the same root and workspace, with nothing of the old one's state.
   * @throws SandboxError when the sandbox is gone or the new shell does not start.
   */
  resetShell(): Promise<void> {
    return this.shell.reset();
  }

  /** Sets the one listener told each time the shell exits on its own (host-shell.ts `onExit`). */
  onShellExit(listener: (exitCode: number) => void): void {
    this.shell.onExit(listener);
  }

  /** Runs a Python cell, starting the REPL on first use. @throws SandboxError when the sandbox is gone. */
  python(code: string, timeoutMs?: number): Promise<PythonResult> {
    return this.shell.python(code, timeoutMs);
  }

  /**
   * An image sandbox's overlay upper dir as this process reaches it (what the sandbox changed in
   * its root) and the workspace's path in that root; null for a host-root sandbox. For the
   * integrity monitor (#27, src/sandbox/integrity/).
   */
  get overlayChanges(): { upper: string; workspace: string } | null {
    if (!this.imageMount || !this.req.image) return null;
    return { upper: (this.imageMount.via ?? '') + overlayDirs(this.dir).upper, workspace: imageCwd(this.req.image) };
  }

  /** What the integrity monitor (#27) watches of this sandbox: its pids cgroup, a pid in its network namespace, the spec's `network`. */
  get integrityTargets(): { cgroup: string | null; netPid: number | null; network: boolean; inside: string; readPaths: boolean } {
    const own = this.req.driver !== 'none';
    return {
      readPaths: this.req.driver !== 'unshare',
      cgroup: own && this.cgroup ? path.relative('/sys/fs/cgroup/pids', this.cgroup.dir).replace(/^(?!\/)/, '/') : null,
      netPid: own ? this.shell.pid : null,
      network: this.req.spec.network ?? false,
      inside: this.req.image ? imageCwd(this.req.image) : own ? WORKSPACE : this.workdir,
    };
  }

  /** Runs an editor command on the workspace (link-safe, bounded: editor.ts). */
  editorOp(req: EditorRequest): Promise<EditorResult> {
    this.shell.alive();
    // Link-safe by construction (every component opened with O_NOFOLLOW relative to its parent's
    // fd); new files take the workspace root's owner, the sandbox's uid. Not wrapped in a
    // seteuid: glibc applies it to every thread, so the thread pool's I/O for other sandboxes
    // would run with this sandbox's rights while an async call is in flight.
    return this.editor.run({ ...req, path: toWorkspaceAlias(this.req.image, req.path) });
  }

  /** Reads a workspace file. @throws TaskError when the path leaves the workspace, is missing or not a regular file. */
  readFile(p: string): Promise<string> {
    this.shell.alive();
    return readWorkspaceFile(this.workdir, toWorkspaceAlias(this.req.image, p), { rootFd: this.workdirFd });
  }

  /** Writes a workspace file, creating directories. @throws TaskError when the path leaves the workspace. */
  writeFile(p: string, content: string): Promise<void> {
    this.shell.alive();
    return writeWorkspaceFile(this.workdir, toWorkspaceAlias(this.req.image, p), content, 'WRITE_FAILED', { rootFd: this.workdirFd });
  }

  /**
   * Signals every process of the sandbox except the shell and the REPL (host-shell.ts
   * `interrupt`: `SIGKILL` sweeps until none is left, `SIGINT` is sent once). Resolves with how
   * many distinct processes were signalled.
   */
  interrupt(signal: 'SIGINT' | 'SIGKILL' = 'SIGKILL'): Promise<number> {
    return this.shell.interrupt(signal);
  }

  /**
   * Forks the sandbox at a turn boundary into one branch per `branches` entry (Sandbox.fork,
   * #26): host-fork.ts `forkSandbox`, given what it needs of this sandbox.
   * @throws SandboxError `SANDBOX_BUSY` while a command or cell runs, `FREEZE_UNAVAILABLE`
   *   without a freezer group (no controller, or the `none` driver), `FORK_FAILED` when the
   *   snapshot or a branch cannot be made — in every case the parent is as it was (thawed,
   *   running) and no branch or snapshot is left.
   */
  async fork(req: { branches: ForkBranchRequest[]; keepParent: boolean }, ctx: { stateDir: string; owner: HostOwner; onLost: (sandboxId: string) => (reason: string) => void; pool?: ForkPool<HostSandbox> | null; mounter?: Mounter | null }): Promise<ForkResult<HostSandbox>> {
    await this.shell.restartIfExited();
    const pty = this.shell.alive();
    if (this.shell.busy) throw new SandboxError(`sandbox ${this.id} is running a command: a fork waits for a turn boundary`, { code: 'SANDBOX_BUSY' });
    const cgroup = this.cgroup;
    if (!cgroup?.freezerDir || this.req.driver === 'none') {
      throw new SandboxError(`sandbox ${this.id} cannot be frozen: ${this.req.driver === 'none' ? "the 'none' driver has no cgroup" : 'no cgroup freezer controller (cgroup v1 freezer) is mounted'}`, { code: 'FREEZE_UNAVAILABLE' });
    }
    if (this.imageMount && this.imageMount.kind !== 'kernel') throw new SandboxError(`sandbox ${this.id}: only an image sandbox on a kernel overlay can be forked (this one is ${this.imageMount.kind})`, { code: 'FORK_FAILED' });
    const parent: ForkParent = {
      id: this.id,
      req: this.req,
      uid: this.uid,
      pty,
      cgroup,
      lease: this.lease,
      snapshot: this.snapshot,
      // What the parent changed: an image sandbox's upper dir; a branch's own upper dir (its
      // snapshot stacks on the branch's, with no copy of what that one holds); else the workspace.
      changes: () => {
        const source = this.imageMount ? overlayDirs(this.dir).upper : this.snapshot ? path.join(this.files.root, 'upper') : null;
        if (source === null) return { fd: this.workdirFd!, done: () => undefined };
        const fd = fs.openSync(source, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
        return { fd, done: () => fs.closeSync(fd) };
      },
      // Read while frozen: the pids group's file, no scan of every process.
      strays: () => this.shell.strays({ cgroupOnly: true })(),
      replStarted: () => this.shell.replStarted,
      shellPid: () => this.shell.bashPid,
      close: () => this.close(),
    };
    return forkSandbox(parent, req, { stateDir: ctx.stateDir, owner: ctx.owner, onLost: ctx.onLost, pool: ctx.pool ?? null, mounter: ctx.mounter ?? null, create: (r, c) => HostSandbox.create(r, c) });
  }

  /**
   * Parks up to `n` branches of this sandbox's configuration in the host's fork pool, ahead of its
   * first fork (Sandbox.prewarmFork, #26): host-fork.ts `prewarmFork`. Answers how many are
   * parked or starting for it; 0 when its forks could not use them (closed, no freezer group,
   * the `none` driver, or no pooled fast path). Never throws; the sandbox itself is not touched.
   */
  prewarmFork(n: number, ctx: { stateDir: string; owner: HostOwner; onLost: (sandboxId: string) => (reason: string) => void; pool: ForkPool<HostSandbox> | null; mounter: Mounter | null }): number {
    if (this.closing || !this.cgroup?.freezerDir || this.req.driver === 'none') return 0;
    return prewarmFork({ req: this.req, uid: this.uid }, n, { ...ctx, create: (r, c) => HostSandbox.create(r, c) });
  }

  /** Writes a fork's captured shell state into the control dir, for the shell's start to restore: shell-state.ts. */
  private writeShellState(state: string, lastExit: number | null): { name: string; lastExit: number | null } {
    const name = shellStateName(this.id);
    fs.writeFileSync(path.join(this.ctlDir, name), state, { mode: 0o644 });
    return { name, lastExit };
  }

  /** Kills everything and removes the directory and cgroup. Idempotent; never throws. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const helpersGone = this.shell.kill();
    await this.cgroup?.killAllAndRemove();
    await helpersGone;
    if (this.pinnedWorkdir) unpinDir(this.pinnedWorkdir);
    if (this.workdirFd !== null) fs.closeSync(this.workdirFd);
    this.workdirFd = null;
    await releaseOverlay(this.dir);
    removeSandboxFs(this.dir);
    // Any depth, mounts detached first, quarantined when it cannot go (remove-tree.ts).
    await removeSandboxDir(this.dir);
    // After the branch's own mounts: the last branch of a fork takes its snapshot along.
    const hold = this.branchHold;
    if (hold) hold.released = true;
    await (this.snapshot ?? hold?.snapshot)?.release();
  }
}

