import fs from 'node:fs';
import path from 'node:path';

/** Root of the cgroup v1 hierarchies (REFERENCE.md §3). */
const CGROUP_ROOT = '/sys/fs/cgroup';
const PIDS_ROOT = path.join(CGROUP_ROOT, 'pids');
const MEMORY_ROOT = path.join(CGROUP_ROOT, 'memory');
const PARENT = 'rollout-runtime';

/**
 * Root of the v1 `freezer` hierarchy: `ROLLOUT_CGROUP_FREEZER_ROOT` when set (read at each use,
 * so a test can point it at a directory without the controller), else /sys/fs/cgroup/freezer.
 */
export function freezerRoot(): string {
  return process.env['ROLLOUT_CGROUP_FREEZER_ROOT'] || path.join(CGROUP_ROOT, 'freezer');
}

/**
 * The cgroups of one sandbox (v1): a `pids` group that caps its process count (RLIMIT_NPROC is
 * per uid, and ignored for root) and lists every process of the sandbox, even ones that left
 * its process group, so close can kill them all; and, where the memory controller is mounted, a
 * `memory` group of the same name capping the sandbox's total memory. `dir` (the pids group) is
 * what leases record; the memory group is found from its name.
 */
export class PidsCgroup {
  /** Fork holds in force ({@link holdForks}), and the limit the last one restores. */
  private holds = 0;
  private heldLimit = '';

  private constructor(
    readonly dir: string,
    /** The memory group, or null when there is none. */
    readonly memoryDir: string | null,
    /** The freezer group (what a fork freezes), or null when the controller is missing. */
    readonly freezerDir: string | null,
  ) {}

  /**
   * Creates `<pids root>/rollout-runtime/<name>` with `pids.max` and, when `memoryBytes` is
   * given and the memory controller is there, `<memory root>/rollout-runtime/<name>` with
   * `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, so swap cannot extend it).
   * Returns null when the pids controller is missing or not writable (not root): the caller
   * falls back to rlimits. A memory group that cannot be made leaves `memoryDir` null.
   */
  static create(name: string, maxProcesses: number, memoryBytes?: number): PidsCgroup | null {
    const parent = path.join(PIDS_ROOT, PARENT);
    let dir: string;
    try {
      fs.mkdirSync(parent, { recursive: true });
      dir = path.join(parent, name);
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'pids.max'), String(maxProcesses));
    } catch {
      return null;
    }
    let memoryDir: string | null = null;
    if (memoryBytes !== undefined && fs.existsSync(path.join(MEMORY_ROOT, 'memory.limit_in_bytes'))) {
      const m = path.join(MEMORY_ROOT, PARENT, name);
      try {
        fs.mkdirSync(m, { recursive: true });
        fs.writeFileSync(path.join(m, 'memory.limit_in_bytes'), String(memoryBytes));
        const memsw = path.join(m, 'memory.memsw.limit_in_bytes');
        if (fs.existsSync(memsw)) fs.writeFileSync(memsw, String(memoryBytes));
        memoryDir = m;
      } catch {
        try {
          fs.rmdirSync(m);
        } catch {
          // not made
        }
      }
    }
    return new PidsCgroup(dir, memoryDir, makeFreezerGroup(name));
  }

  /** Opens an existing group by directory (from a lease) without creating it. */
  static open(dir: string): PidsCgroup {
    const m = path.join(MEMORY_ROOT, PARENT, path.basename(dir));
    const f = path.join(freezerRoot(), PARENT, path.basename(dir));
    return new PidsCgroup(dir, fs.existsSync(m) ? m : null, fs.existsSync(path.join(f, 'freezer.state')) ? f : null);
  }

  /**
   * Moves every process of the pids group that is not yet in the freezer group into it. The
   * launch and the REPL's entry join the freezer group themselves (drivers.ts) and children
   * inherit it, so this only catches a straggler; {@link freeze} runs it before each attempt.
   * A process that exits meanwhile is skipped. No-op without a freezer group.
   */
  joinFreezer(): void {
    if (!this.freezerDir) return;
    const inFreezer = new Set(readPids(path.join(this.freezerDir, 'cgroup.procs')));
    for (const pid of this.pids()) {
      if (inFreezer.has(pid)) continue;
      try {
        fs.writeFileSync(path.join(this.freezerDir, 'cgroup.procs'), String(pid));
      } catch {
        // exited meanwhile
      }
    }
  }

  /**
   * Freezes every process of the sandbox (cgroup v1 freezer: no signal is involved, so a
   * process that ignores or traps SIGSTOP/SIGTSTP is frozen all the same) and resolves once the
   * group reads FROZEN with every process of the pids group inside it (one forked outside the
   * freezer group before it was frozen is moved in and frozen too). Bounded by `timeoutMs`;
   * on a timeout the group is thawed again and this throws.
   * @throws Error without a freezer group, or when the group does not freeze in time.
   */
  async freeze(timeoutMs = 5000): Promise<void> {
    const dir = this.freezerDir;
    if (!dir) throw new Error('no freezer group');
    const stateFile = path.join(dir, 'freezer.state');
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      this.joinFreezer();
      fs.writeFileSync(stateFile, 'FROZEN');
      // FREEZING until every task of the group has stopped (a task in an uninterruptible sleep
      // holds it there for as long as it lasts).
      let wait = 1;
      while (fs.readFileSync(stateFile, 'utf8').trim() !== 'FROZEN') {
        if (Date.now() > deadline) {
          this.thaw();
          throw new Error(`the sandbox's processes did not freeze in ${timeoutMs} ms`);
        }
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(wait * 2, 20);
      }
      const inFreezer = new Set(readPids(path.join(dir, 'cgroup.procs')));
      if (this.pids().every((p) => inFreezer.has(p))) return;
      if (Date.now() > deadline) {
        this.thaw();
        throw new Error(`the sandbox's processes did not freeze in ${timeoutMs} ms`);
      }
    }
  }

  /** Thaws the freezer group. Never throws (a group already gone has nothing frozen). */
  thaw(): void {
    if (!this.freezerDir) return;
    try {
      fs.writeFileSync(path.join(this.freezerDir, 'freezer.state'), 'THAWED');
    } catch {
      // gone
    }
  }

  /** The file a launcher writes its pid into to join the group before exec. */
  get procsFile(): string {
    return path.join(this.dir, 'cgroup.procs');
  }

  /** The freezer group's `cgroup.procs`, or null without a freezer group. */
  get freezerProcsFile(): string | null {
    return this.freezerDir ? path.join(this.freezerDir, 'cgroup.procs') : null;
  }

  /** The memory group's `cgroup.procs`, or null without a memory group. */
  get memoryProcsFile(): string | null {
    return this.memoryDir ? path.join(this.memoryDir, 'cgroup.procs') : null;
  }

  /** The highest memory use the memory group recorded (bytes), or null without one. */
  maxMemoryUsage(): number | null {
    if (!this.memoryDir) return null;
    try {
      return Number(fs.readFileSync(path.join(this.memoryDir, 'memory.max_usage_in_bytes'), 'utf8'));
    } catch {
      return null;
    }
  }

  /** Pids in the group now (empty when the group is gone). */
  pids(): number[] {
    return readPids(this.procsFile);
  }

  /**
   * Stops every process of the group from forking (`pids.max` lowered to 0: a fork or clone in
   * the group fails with EAGAIN; running processes keep running) until the returned function
   * restores the limit. A kill sweep under it cannot be outrun by a process that forks a new
   * child between the sweep's read of /proc and its kill. Returns a no-op when the limit cannot
   * be written (the group is gone).
   */
  holdForks(): () => void {
    const file = path.join(this.dir, 'pids.max');
    // Holds nest (a cancel's sweep may overlap a harness's): the first saves the limit, the last
    // restores it — a second hold must never save the 0 of the first as the limit to restore.
    if (this.holds === 0) {
      try {
        this.heldLimit = fs.readFileSync(file, 'utf8').trim();
        fs.writeFileSync(file, '0');
      } catch {
        return () => undefined;
      }
    }
    this.holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.holds > 0) return;
      try {
        fs.writeFileSync(file, this.heldLimit);
      } catch {
        // the group is gone
      }
    };
  }

  /**
   * SIGKILLs every process in the group until it is empty (a fork in flight can add one after a
   * read), then removes the directory and the memory group. Bounded: gives up after ~2 s and
   * leaves the dirs.
   */
  async killAllAndRemove(): Promise<void> {
    // No fork may outrun the sweep (the group is removed: the limit is never restored).
    this.holdForks();
    // A frozen task does not die until it is thawed (SIGKILL stays pending).
    this.thaw();
    for (let i = 0; i < 100; i++) {
      const pids = this.pids();
      if (pids.length === 0) break;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    // A task that has just died can keep its group busy (EBUSY) for a moment after it left
    // cgroup.procs (exit not finished, a zombie not yet reaped): retry for ~1 s more.
    for (const d of [this.dir, this.memoryDir, this.freezerDir]) {
      if (!d) continue;
      for (let i = 0; i < 50; i++) {
        try {
          fs.rmdirSync(d);
          break;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EBUSY') break; // gone, or not ours to remove
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    }
  }
}

/** The pids listed in a `cgroup.procs` file (empty when it is gone). */
function readPids(file: string): number[] {
  try {
    return fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

/**
 * Makes `<freezer root>/rollout-runtime/<name>`, or returns null when the freezer controller is
 * not mounted there (no `freezer.state` in the new group) or not writable.
 */
function makeFreezerGroup(name: string): string | null {
  const root = freezerRoot();
  if (!fs.existsSync(path.join(root, 'cgroup.procs'))) return null;
  const dir = path.join(root, PARENT, name);
  try {
    fs.mkdirSync(dir, { recursive: true });
    if (fs.existsSync(path.join(dir, 'freezer.state'))) return dir;
    fs.rmdirSync(dir);
  } catch {
    // not ours to make
  }
  return null;
}
