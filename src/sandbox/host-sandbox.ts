import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { SandboxError, TaskError } from '../errors.js';
import type { SandboxCreate } from '../protocol/sandbox.js';
import { PidsCgroup } from './cgroup.js';
import { buildEnter, buildLaunch, type LaunchPlan } from './drivers.js';
import { Editor } from './editor.js';
import { imageCwd, imageEnv, imageWorkdir, mountImageRoot, toWorkspaceAlias } from './images/image-root.js';
import { overlayDirs, releaseOverlay } from './images/overlay-mount.js';
import { sandboxesDir, writeLease, type Lease } from './lease.js';
import { descendants, killAll, parentOf, processStartTime } from './proc.js';
import { PtySession } from './pty-session.js';
import { PythonRepl, REPL_DRIVER } from './python-repl.js';
import type { BashRequest, BashResult, EditorRequest, EditorResult, PythonResult } from './sandbox.js';
import { WORKSPACE, resolveInWorkspace } from './workspace-path.js';

/** Who owns the host, as said in `host.hello`. */
export interface HostOwner {
  runtimeId: string;
  ownerPid: number;
  ownerStart: string | null;
}

const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * One sandbox inside a sandbox host: its directory (workspace, control files, lease), its
 * cgroup, its pty shell, its Python REPL (on first use) and its editor.
 *
 * Close path (the only one): kill the pty's launcher (bwrap's --die-with-parent then kills the
 * namespace's init, which takes every process of the pid namespace with it), kill every
 * remaining process of the cgroup and every descendant seen before, remove the cgroup and
 * the directory.
 */
export class HostSandbox {
  private pty: PtySession | null = null;
  private repl: PythonRepl | null = null;
  private readonly editor: Editor;
  private closing = false;
  private shellPid: number | null = null;
  /** Exit code when the shell exited on its own (`exit`), until it is restarted. */
  private selfExit: number | null = null;

  private constructor(
    readonly id: string,
    private readonly req: SandboxCreate,
    private readonly dir: string,
    readonly workdir: string,
    private readonly ctlDir: string,
    private readonly cgroup: PidsCgroup | null,
    private readonly lease: Lease,
    private readonly onLost: (reason: string) => void,
  ) {
    this.editor = new Editor(workdir);
  }

  /**
   * Makes the sandbox: directory, seed, cgroup, lease, shell, setup commands.
   * @throws TaskError for a bad spec (missing seed, failing setup command), SandboxError when
   *   the shell does not start. Nothing is left behind on a throw.
   */
  static async create(req: SandboxCreate, ctx: { stateDir: string; owner: HostOwner; onLost: (reason: string) => void }): Promise<HostSandbox> {
    const dir = path.join(sandboxesDir(ctx.stateDir), req.sandboxId);
    if (fs.existsSync(dir)) throw new SandboxError(`sandbox ${req.sandboxId} already exists`, { code: 'SANDBOX_EXISTS', stage: 'init' });
    // An image sandbox's workspace is its WorkingDir inside the overlay, made once it is mounted.
    const workdir = req.image ? imageWorkdir(dir, req.image) : path.join(dir, 'workspace');
    const ctlDir = path.join(dir, 'ctl');
    fs.mkdirSync(req.image ? dir : workdir, { recursive: true });
    fs.mkdirSync(ctlDir);
    fs.mkdirSync(path.join(dir, 'home'));
    fs.mkdirSync(path.join(dir, 'root')); // mount point of the unshare driver's root
    const cgroup = req.driver === 'none' ? null : PidsCgroup.create(req.sandboxId, req.limits.maxProcesses);
    const lease: Lease = {
      sandboxId: req.sandboxId,
      runtimeId: ctx.owner.runtimeId,
      ownerPid: ctx.owner.ownerPid,
      ownerStart: ctx.owner.ownerStart,
      rolloutId: req.rolloutId,
      hostPid: process.pid,
      hostStart: processStartTime(process.pid),
      ptyPid: null,
      ptyStart: null,
      cgroup: cgroup?.dir ?? null,
      dir,
      workdir,
      createdAt: new Date().toISOString(),
    };
    writeLease(lease);
    const sb = new HostSandbox(req.sandboxId, req, dir, workdir, ctlDir, cgroup, lease, ctx.onLost);
    try {
      if (req.image) await mountImageRoot(dir, req.image);
      await seed(workdir, req);
      fs.writeFileSync(path.join(ctlDir, 'repl.py'), REPL_DRIVER);
      await sb.startShell();
      for (const cmd of req.spec.setup ?? []) {
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

  private plan(): LaunchPlan {
    return {
      driver: this.req.driver,
      workdir: this.workdir,
      stateDir: path.dirname(path.dirname(this.dir)),
      homeDir: path.join(this.dir, 'home'),
      // bwrap binds the image overlay writable as the root; the unshare driver gets it as its (read-only) rootfs.
      rootfs: this.req.image && this.req.driver !== 'bwrap' ? overlayDirs(this.dir).merged : this.req.rootfs,
      imageRoot: this.req.image && this.req.driver === 'bwrap' ? { merged: overlayDirs(this.dir).merged, cwd: imageCwd(this.req.image) } : null,
      network: this.req.spec.network ?? false,
      limits: this.req.limits,
      ctlDir: this.ctlDir,
      cgroupProcs: this.cgroup?.procsFile ?? null,
      command: ['bash', '--noprofile', '--norc', '--noediting', '-i'],
    };
  }

  private env(home: string): Record<string, string> {
    return {
      PATH: BASE_PATH,
      HOME: home,
      TERM: 'dumb',
      LANG: 'C.UTF-8',
      LC_ALL: 'C.UTF-8',
      PAGER: 'cat',
      GIT_PAGER: 'cat',
      PYTHONUNBUFFERED: '1',
      PYTHONDONTWRITEBYTECODE: '1',
      ...imageEnv(this.req.image),
      ...(this.req.spec.env ?? {}),
    };
  }

  private async startShell(): Promise<void> {
    const launch = buildLaunch(this.plan());
    const hostWorkdir = fs.realpathSync(this.workdir);
    this.pty = await PtySession.start(
      {
        argv: launch.argv,
        cwd: launch.hostCwd,
        env: this.env(launch.home),
        ctlHostDir: this.ctlDir,
        ctlInsideDir: launch.ctlInside,
        bashTimeoutMs: this.req.tools.bashTimeoutMs,
        noOutputTimeoutMs: this.req.tools.noOutputTimeoutMs,
        maxOutputChars: this.req.tools.maxOutputChars,
        // The unshare and none drivers show the host path; the model always sees /workspace.
        mapCwd: (cwd) => (cwd === hostWorkdir || cwd.startsWith(`${hostWorkdir}/`) ? WORKSPACE + cwd.slice(hostWorkdir.length) : cwd),
        onExit: (e) => {
          if (this.closing) return;
          // A normal exit is the shell's own doing (`exit` typed by the model): the next bash
          // call starts a fresh shell. Death by a signal means the sandbox was killed: lost.
          if (!e.signal) this.selfExit = e.exitCode;
          else this.onLost(`the sandbox shell was killed (signal ${e.signal})`);
        },
      },
      this.req.tools.startTimeoutMs,
    );
    this.lease.ptyPid = this.pty.pid;
    this.lease.ptyStart = processStartTime(this.pty.pid);
    writeLease(this.lease);
    this.shellPid = this.findShell();
  }

  /** Host pid of the sandboxed bash (the deepest-first `bash` under the launcher). */
  private findShell(): number | null {
    for (const pid of descendants(this.pty!.pid)) {
      try {
        if (fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'bash') return pid;
      } catch {
        // gone
      }
    }
    // `none` driver: the launcher itself exec'd into bash.
    return this.pty!.pid;
  }

  private alive(): PtySession {
    if (this.closing || !this.pty || (this.pty.exited && this.selfExit === null)) throw new SandboxError(`sandbox ${this.id} is closed or lost`, { code: 'SANDBOX_LOST' });
    return this.pty;
  }

  /**
   * Runs a bash tool call. When the command ends the shell (`exit`), a new shell is started
   * and the result says so; the exit code is the shell's.
   * @throws SandboxError when the sandbox was killed or is closed.
   */
  async bash(req: BashRequest): Promise<BashResult> {
    if (this.selfExit !== null && !this.closing) await this.restartShell();
    const pty = this.alive();
    try {
      return await pty.exec(req);
    } catch (err) {
      if (this.selfExit === null || this.closing) throw err;
      const code = this.selfExit;
      await this.restartShell();
      return {
        output: `[The shell exited with code ${code}. A new shell was started in ${WORKSPACE}: variables, functions, background jobs, /tmp and the Python REPL were reset.]`,
        exitCode: code,
        cwd: WORKSPACE,
        timedOut: false,
        truncated: false,
      };
    }
  }

  private async restartShell(): Promise<void> {
    this.selfExit = null;
    // The old pid namespace died with its shell; the REPL (inside it) is gone too.
    this.repl?.dispose();
    this.repl = null;
    this.pty?.dispose();
    if (this.cgroup) killAll(this.cgroup.pids());
    await this.startShell();
  }

  /** Runs a Python cell, starting the REPL on first use. @throws SandboxError when the sandbox is gone. */
  python(code: string, timeoutMs?: number): Promise<PythonResult> {
    this.alive();
    if (!this.repl) {
      const plan = this.plan();
      const inside = this.req.driver !== 'none';
      const argv = buildEnter(plan, this.shellPid ?? this.pty!.pid, [
        'python3',
        '-u',
        inside ? '/run/rollout/repl.py' : path.join(this.ctlDir, 'repl.py'),
        inside ? WORKSPACE : this.workdir,
      ]);
      const home = buildLaunch(plan).home;
      this.repl = new PythonRepl({ argv, env: this.env(home), cwd: this.workdir, maxOutputChars: this.req.tools.maxOutputChars });
    }
    return this.repl.run(code, timeoutMs ?? this.req.tools.pythonTimeoutMs);
  }

  /** Runs an editor command on the host-side workspace. */
  editorOp(req: EditorRequest): EditorResult {
    this.alive();
    return this.editor.run({ ...req, path: toWorkspaceAlias(this.req.image, req.path) });
  }

  /** Reads a workspace file. @throws TaskError when the path leaves the workspace or is missing. */
  readFile(p: string): string {
    this.alive();
    const host = resolveInWorkspace(this.workdir, toWorkspaceAlias(this.req.image, p));
    if (!host) throw new TaskError(`path outside the workspace: ${p}`, { code: 'PATH_OUTSIDE_WORKSPACE' });
    try {
      return fs.readFileSync(host, 'utf8');
    } catch (err) {
      throw new TaskError(`cannot read ${p}: ${(err as Error).message}`, { code: 'READ_FAILED' });
    }
  }

  /** Writes a workspace file, creating directories. @throws TaskError when the path leaves the workspace. */
  writeFile(p: string, content: string): void {
    this.alive();
    const host = resolveInWorkspace(this.workdir, toWorkspaceAlias(this.req.image, p));
    if (!host) throw new TaskError(`path outside the workspace: ${p}`, { code: 'PATH_OUTSIDE_WORKSPACE' });
    fs.mkdirSync(path.dirname(host), { recursive: true });
    fs.writeFileSync(host, content);
  }

  /**
   * Kills every process of the sandbox except the shell and the REPL (the foreground command,
   * background jobs, daemons). The shell then prints its marker and is ready again.
   */
  interrupt(): number {
    if (!this.pty || this.closing) return 0;
    const keep = new Set<number>([this.pty.pid]);
    if (this.shellPid) keep.add(this.shellPid);
    const replPid = this.repl?.pid;
    const replTree = replPid ? [replPid, ...descendants(replPid)] : [];
    for (const p of replTree) keep.add(p);
    // The namespace's init (inner bwrap) sits between the launcher and the shell: keep the chain.
    for (let p = this.shellPid ? parentOf(this.shellPid) : null; p && p !== this.pty.pid && p > 1; p = parentOf(p)) keep.add(p);
    const all = descendants(this.pty.pid);
    const victims = [...all, ...(this.cgroup?.pids() ?? [])].filter((p) => !keep.has(p));
    return killAll(new Set(victims));
  }

  /** Kills everything and removes the directory and cgroup. Idempotent; never throws. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const tree = this.pty ? [this.pty.pid, ...descendants(this.pty.pid)] : [];
    if (this.repl?.pid) tree.push(this.repl.pid, ...descendants(this.repl.pid));
    this.repl?.dispose();
    this.pty?.dispose();
    if (this.pty) {
      try {
        process.kill(-this.pty.pid, 'SIGKILL');
      } catch {
        // no group
      }
    }
    killAll(tree);
    await this.cgroup?.killAllAndRemove();
    await releaseOverlay(this.dir);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

async function seed(workdir: string, req: SandboxCreate): Promise<void> {
  const spec = req.spec;
  if (spec.gitRepo) {
    await new Promise<void>((resolve, reject) => {
      const git = spawn('git', ['clone', '--quiet', '--no-hardlinks', '--', spec.gitRepo!, workdir], {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, GIT_TERMINAL_PROMPT: '0' },
      });
      let err = '';
      git.stderr.on('data', (d: Buffer) => (err += d.toString()));
      git.on('error', (e) => reject(new TaskError(`git clone failed: ${e.message}`, { code: 'SEED_FAILED', stage: 'init' })));
      git.on('close', (code) => (code === 0 ? resolve() : reject(new TaskError(`git clone of ${spec.gitRepo} failed: ${err.trim()}`, { code: 'SEED_FAILED', stage: 'init' }))));
    });
  }
  if (spec.seedDir) {
    if (!fs.existsSync(spec.seedDir) || !fs.statSync(spec.seedDir).isDirectory()) {
      throw new TaskError(`seedDir ${spec.seedDir} is not a directory`, { code: 'SEED_FAILED', stage: 'init' });
    }
    // A copy, never a shared mount: sandboxes of one group must not see each other's edits.
    fs.cpSync(spec.seedDir, workdir, { recursive: true, verbatimSymlinks: true, force: true });
  }
  for (const [rel, content] of Object.entries(spec.files ?? {})) {
    const host = resolveInWorkspace(workdir, rel);
    if (!host) throw new TaskError(`spec.files path outside the workspace: ${rel}`, { code: 'SEED_FAILED', stage: 'init' });
    fs.mkdirSync(path.dirname(host), { recursive: true });
    fs.writeFileSync(host, content);
  }
}
