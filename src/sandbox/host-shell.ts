import fs from 'node:fs';
import path from 'node:path';
import { SandboxError } from '../errors.js';
import type { SandboxCreate } from '../protocol/sandbox.js';
import type { PidsCgroup } from './cgroup.js';
import { buildEnter, buildLaunch, type LaunchPlan } from './drivers.js';
import { launchEnv } from './host-launch.js';
import { findShell, strayLister } from './host-procs.js';
import { writeLease, type Lease } from './lease.js';
import { LLM_PROXY_URL, LlmProxyForwarder } from './llm-proxy-forwarder.js';
import { UserNet } from './network.js';
import { descendants, killAll, processStartTime } from './proc.js';
import { PtySession } from './pty-session.js';
import { PythonRepl, REPL_PYTHON_FLAGS } from './python-repl.js';
import type { BashRequest, BashResult, PythonResult } from './sandbox.js';
import { restoreCommand } from './shell-state.js';
import { WORKSPACE } from './workspace-path.js';

/** What a sandbox's shell sees of its sandbox (HostSandbox): the few members it needs. */
export interface ShellOwner {
  readonly id: string;
  readonly req: SandboxCreate;
  /** The control dir on the host (the REPL's driver, a fork's state files). */
  readonly ctlDir: string;
  /** The workspace as this host reaches it. */
  readonly workdir: string;
  readonly cgroup: PidsCgroup | null;
  /** Its lease: each shell's pty pid and start are written to it. */
  readonly lease: Lease;
  readonly seccompFile: string | null;
  /** True for an image sandbox (its workdir was resolved at the mount: not resolved again). */
  imageMounted(): boolean;
  /** True once the sandbox closes: a shell's exit then is no loss, and calls are refused. */
  closing(): boolean;
  /** The launch plan of its shells and REPL entries. */
  plan(): LaunchPlan;
  /** Gives the workspace root's owner its rights back, before a new shell enters it. */
  restoreWorkdirMode(): void;
  /** The sandbox was lost (its shell killed by a signal). */
  onLost(reason: string): void;
}

/**
 * A host sandbox's shell and what lives in its namespaces (STYLE 16: the sandbox hands this role
 * out behind {@link ShellOwner}): the pty bash, its restarts after the model's `exit`, the Python
 * REPL entered into its namespaces, the user-mode network and the LLM proxy's listener of each
 * namespace, and the sweep of stray processes. The sandbox keeps its directory, cgroup, lease,
 * workspace and forks.
 */
export class HostShell {
  private pty: PtySession | null = null;
  private repl: PythonRepl | null = null;
  private shellPid: number | null = null;
  /** The shell's start time (/proc stat), to know its pid still names it when the REPL enters. */
  private shellStart: string | null = null;
  private net: UserNet | null = null;
  private forwarder: LlmProxyForwarder | null = null;
  /** Exit code when the shell exited on its own (`exit`), until it is restarted. */
  private selfExit: number | null = null;
  /** Python cells in flight (queued or running): a fork waits for none. */
  private pythonRunning = 0;
  /** A fork's shell state for the next start to restore (its file in the control dir, and a gated branch's gate), once. */
  private pendingRestore: { name: string; lastExit: number | null; gate?: string } | null = null;
  /** Told each time the shell exits on its own (see {@link onExit}). */
  private shellExitListener: ((exitCode: number) => void) | null = null;
  /** Set by {@link reset}: shells from then on get no LLM proxy listener. */
  private llmProxyDone = false;

  constructor(private readonly sb: ShellOwner) {}

  /** The next {@link start} restores this shell state first (a fork's branch). */
  restoreOnStart(state: { name: string; lastExit: number | null; gate?: string }): void {
    this.pendingRestore = state;
  }

  /** The shell's host pid (else its launcher's), or null before the first start. */
  get pid(): number | null {
    return this.shellPid ?? this.pty?.pid ?? null;
  }

  /** The shell's own pid as found under its launcher, or null. */
  get bashPid(): number | null {
    return this.shellPid;
  }

  /** True when a REPL process was started (a fork cannot carry it). */
  get replStarted(): boolean {
    return Boolean(this.repl?.pid);
  }

  /** True while a command or a Python cell runs. */
  get busy(): boolean {
    return (this.pty?.busy ?? false) || this.pythonRunning > 0;
  }

  /** A shell that exited on its own is started again (the first step of a call or a fork). */
  async restartIfExited(): Promise<void> {
    if (this.selfExit !== null && !this.sb.closing()) await this.restart();
  }

  /**
   * Ends every process of the shell, its REPL and helpers, for the sandbox's close: the pty's
   * process group killed, then every descendant seen before. Resolves once the user-mode network
   * helper (a host process outside the sandbox's cgroup) has exited.
   */
  kill(): Promise<void> {
    const tree = this.pty ? [this.pty.pid, ...descendants(this.pty.pid)] : [];
    if (this.repl?.pid) tree.push(this.repl.pid, ...descendants(this.repl.pid));
    this.repl?.dispose();
    this.pty?.dispose();
    const netGone = this.net?.close();
    this.forwarder?.close();
    if (this.pty) {
      try {
        process.kill(-this.pty.pid, 'SIGKILL');
      } catch {
        // no group
      }
    }
    killAll(tree);
    return netGone ?? Promise.resolve();
  }

  /** `OPENAI_BASE_URL` inside the sandbox, or undefined without `spec.llmProxy`. */
  get llmProxyUrl(): string | undefined {
    if (!this.sb.req.spec.llmProxy) return undefined;
    // Fixed inside a namespace (known before the listener exists: the shell's env names it).
    if (this.sb.req.driver !== 'none') return LLM_PROXY_URL;
    return this.forwarder ? `http://127.0.0.1:${this.forwarder.port}/v1` : undefined;
  }

  /**
   * Starts a shell (the first, or a new one after `exit` or a reset): its pty, then the
   * namespace's user-mode network and LLM proxy listener when the spec has them.
   * @throws SandboxError when the shell does not start within `timeoutMs`.
   */
  async start(timeoutMs = this.sb.req.tools.startTimeoutMs): Promise<void> {
    // The `none` driver's shell shares the host's network: one listener on a host port, made
    // before the shell so its environment can name the port.
    if (this.sb.req.spec.llmProxy && this.sb.req.driver === 'none' && !this.forwarder && !this.llmProxyDone) this.forwarder = await LlmProxyForwarder.openOnHost(this.sb.req.spec.llmProxy.socketPath);
    const launch = buildLaunch(this.sb.plan());
    if (launch.argsData !== undefined) {
      const file = this.sb.plan().argsFile!;
      fs.rmSync(file, { force: true });
      fs.writeFileSync(file, launch.argsData, { mode: 0o600, flag: 'wx' });
    }
    // An image's workdir was resolved when it was mounted (and an overlay in a namespace of its
    // own is reached through /proc/<pid>/root, which realpath would drop); re-resolving it now
    // would follow whatever links the sandbox has put on its way since.
    const hostWorkdir = this.sb.imageMounted() ? this.sb.workdir : fs.realpathSync(this.sb.workdir);
    const restore = this.pendingRestore;
    this.pendingRestore = null;
    this.pty = await PtySession.start(
      {
        firstCommand: restore ? restoreCommand(path.posix.join(launch.ctlInside, restore.name), restore.lastExit, restore.gate && path.posix.join(launch.ctlInside, restore.gate)) : undefined,
        argv: launch.argv,
        cwd: launch.hostCwd,
        env: launchEnv(this.sb.req, launch.home, this.llmProxyUrl),
        ctlHostDir: this.sb.ctlDir,
        ctlInsideDir: launch.ctlInside,
        bashTimeoutMs: this.sb.req.tools.bashTimeoutMs,
        noOutputTimeoutMs: this.sb.req.tools.noOutputTimeoutMs,
        maxOutputChars: this.sb.req.tools.maxOutputChars,
        // The unshare and none drivers show the host path; the model always sees /workspace.
        mapCwd: (cwd) => (cwd === hostWorkdir || cwd.startsWith(`${hostWorkdir}/`) ? WORKSPACE + cwd.slice(hostWorkdir.length) : cwd),
        onExit: (e) => {
          if (this.sb.closing()) return;
          // A normal exit is the shell's own doing (`exit` typed by the model): the next bash
          // call starts a fresh shell. Death by a signal means the sandbox was killed: lost.
          if (!e.signal) {
            this.selfExit = e.exitCode;
            this.shellExitListener?.(e.exitCode);
          } else this.sb.onLost(`the sandbox shell was killed (signal ${e.signal})`);
        },
      },
      timeoutMs,
    ).finally(() => {
      if (restore) fs.rmSync(path.join(this.sb.ctlDir, restore.name), { force: true });
      if (restore?.gate) fs.rmSync(path.join(this.sb.ctlDir, restore.gate), { force: true });
    });
    this.sb.lease.ptyPid = this.pty.pid;
    this.sb.lease.ptyStart = processStartTime(this.pty.pid);
    writeLease(this.sb.lease);
    const shellPid = (this.shellPid = findShell(this.pty.pid, this.sb.cgroup, Boolean(this.sb.req.image?.entrypoint?.length)));
    this.shellStart = processStartTime(shellPid);
    if (this.sb.req.spec.network && this.sb.req.driver !== 'none') {
      // A fresh namespace (first start, or after `exit`) needs its own user-mode network.
      await this.net?.close();
      this.net = null;
      this.net = await UserNet.attach(shellPid);
    }
    if (this.sb.req.spec.llmProxy && this.sb.req.driver !== 'none' && !this.llmProxyDone) {
      // Each network namespace (a restarted shell has a fresh one) gets its own listener.
      this.forwarder?.close();
      this.forwarder = null;
      this.forwarder = await LlmProxyForwarder.open(shellPid, this.sb.req.spec.llmProxy.socketPath, {
        bringLoopbackUp: this.sb.req.driver === 'unshare',
        // A helper process start, like the shell's: bounded by the sandbox's start timeout.
        timeoutMs: this.sb.req.tools.startTimeoutMs,
      });
    }
  }

  alive(): PtySession {
    if (this.sb.closing() || !this.pty || (this.pty.exited && this.selfExit === null)) throw new SandboxError(`sandbox ${this.sb.id} is closed or lost`, { code: 'SANDBOX_LOST' });
    return this.pty;
  }

  /**
   * Runs a bash tool call. When the command ends the shell (`exit`), a new shell is started
   * and the result says so; the exit code is the shell's.
   * @throws SandboxError when the sandbox was killed or is closed.
   */
  async bash(req: BashRequest): Promise<BashResult> {
    await this.restartIfExited();
    const pty = this.alive();
    try {
      return await pty.exec(req);
    } catch (err) {
      if (this.selfExit === null || this.sb.closing()) throw err;
      const code = this.selfExit;
      await this.restart();
      return {
        output: `[The shell exited with code ${code}. A new shell was started in ${WORKSPACE}: variables, functions, background jobs, /tmp and the Python REPL were reset.]`,
        exitCode: code,
        cwd: WORKSPACE,
        timedOut: false,
        truncated: false,
      };
    }
  }

  /** Ends the shell's processes and starts a new one (after `exit`, or for a reset). */
  private async restart(): Promise<void> {
    this.selfExit = null;
    // The policy may have taken its own workspace's rights away (`chmod 000 /workspace`): a new
    // shell could not enter it, and the eval that follows would be an infra-error for what the
    // policy did (#28 §5.5). Its owner gets them back; nothing else of its mode changes.
    this.sb.restoreWorkdirMode();
    // The old pid namespace died with its shell; the REPL (inside it) is gone too.
    this.repl?.dispose();
    this.repl = null;
    this.pty?.dispose();
    if (this.sb.cgroup) killAll(this.sb.cgroup.pids());
    await this.start();
  }

  /**
   * A fresh shell: every process of the sandbox ends (the shell, the REPL, whatever they left
   * running; with the shell's namespaces, its /tmp and /dev/shm go too) and a new shell starts
   * on the same root and workspace. Nothing of the old shell's state — functions, aliases,
   * traps, PROMPT_COMMAND, variables, keystrokes queued on its terminal — reaches the new one,
   * and it has no LLM proxy listener (a reset is for an eval, after the agent's loop).
   * @throws SandboxError when the sandbox is gone or the new shell does not start.
   */
  async reset(): Promise<void> {
    this.alive();
    // A reset is for an eval, after the agent's loop: the new shell gets no LLM proxy listener
    // (its helper process is most of a reset's cost; the proxy has ended by then anyway).
    this.llmProxyDone = true;
    this.forwarder?.close();
    this.forwarder = null;
    await this.restart();
  }

  /**
   * Sets the one listener told each time the sandbox's shell exits on its own (the model's
   * `exit`; not a kill, which is a loss, nor a close or reset), with its exit code. The sandbox
   * host forwards it to the runtime as `sandbox.shellExit`.
   */
  onExit(listener: (exitCode: number) => void): void {
    this.shellExitListener = listener;
  }

  /** Runs a Python cell, starting the REPL on first use. @throws SandboxError when the sandbox is gone. */
  async python(code: string, timeoutMs?: number): Promise<PythonResult> {
    // A shell that ended (`exit`) took its namespaces, and the REPL in them, along: a new shell
    // first, as `bash` does. Its old pid may already be another process's (32,768 pids cycle
    // fast), and entering that one's namespaces would run the REPL outside this sandbox.
    await this.restartIfExited();
    this.alive();
    if (!this.repl) {
      const target = this.shellPid ?? this.pty!.pid;
      if (processStartTime(target) !== this.shellStart) throw new SandboxError(`sandbox ${this.sb.id}: its shell is gone`, { code: 'SANDBOX_LOST' });
      const plan = this.sb.plan();
      const inside = this.sb.req.driver !== 'none';
      const argv = buildEnter(plan, target, [
        'python3',
        ...REPL_PYTHON_FLAGS,
        inside ? '/run/rollout/repl.py' : path.join(this.sb.ctlDir, 'repl.py'),
        inside ? WORKSPACE : this.sb.workdir,
        inside && this.sb.seccompFile ? `/run/rollout/${path.basename(this.sb.seccompFile)}` : '',
        plan.sandboxPath,
      ]);
      const home = buildLaunch(plan).home;
      // Inside a namespace the REPL takes the shell's cwd (buildEnter); its spawn starts in /, not
      // on a host path through the workspace's ancestors, which the sandbox may have swapped.
      this.repl = new PythonRepl({ argv, env: launchEnv(this.sb.req, home, this.llmProxyUrl), cwd: inside ? '/' : this.sb.workdir, maxOutputChars: this.sb.req.tools.maxOutputChars });
    }
    this.pythonRunning++;
    try {
      return await this.repl.run(code, timeoutMs ?? this.sb.req.tools.pythonTimeoutMs);
    } finally {
      this.pythonRunning--;
    }
  }

  /**
   * Signals every process of the sandbox except the shell and the REPL (the foreground command,
   * background jobs, daemons that left its process group or double-forked to the namespace's
   * init): found as descendants of the launcher and as members of the sandbox's cgroup.
   *
   * `SIGKILL` (the default, used on cancel and to end a harness) is a sweep that leaves nothing:
   * forks are held off in the cgroup (`pids.max` 0) while it runs, and it repeats until no victim
   * is left alive (bounded, ~1 s), so a process that forks as fast as it can, or traps every other
   * signal, is gone when it resolves. The shell then prints its marker and is ready again.
   * `SIGINT` is sent once, to let a harness that handles it finish its writes.
   *
   * Resolves with how many distinct processes were signalled.
   */
  async interrupt(signal: 'SIGINT' | 'SIGKILL' = 'SIGKILL'): Promise<number> {
    if (!this.pty || this.sb.closing()) return 0;
    const victims = this.strays();
    if (signal === 'SIGINT') return killAll(victims(), 'SIGINT');
    const signalled = new Set<number>();
    const release = this.sb.cgroup?.holdForks();
    try {
      // A SIGKILLed process is listed until it has exited: the sweep waits for that, re-killing
      // whatever a fork in flight before the hold (or a kernel without the cgroup) added.
      for (let pass = 0; pass < 100; pass++) {
        const left = victims();
        if (left.length === 0) break;
        killAll(left);
        for (const p of left) signalled.add(p);
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      release?.();
    }
    return signalled.size;
  }

  /** The sandbox's stray processes (host-procs.ts `strayLister`): all but its shell, REPL, their chain and its network helper. */
  strays(opts: { cgroupOnly?: boolean } = {}): () => number[] {
    const launcher = this.pty?.pid;
    if (launcher === undefined) return () => [];
    return strayLister(launcher, { netPid: this.net?.pid ?? null, shellPid: this.shellPid, replPid: this.repl?.pid ?? null }, this.sb.cgroup, opts);
  }
}
