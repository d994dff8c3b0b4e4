import fs from 'node:fs';
import path from 'node:path';

/** Root of the cgroup v1 hierarchies (REFERENCE.md §3). */
const CGROUP_ROOT = '/sys/fs/cgroup';
const PIDS_ROOT = path.join(CGROUP_ROOT, 'pids');
const MEMORY_ROOT = path.join(CGROUP_ROOT, 'memory');
const PARENT = 'rollout-runtime';

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
    return new PidsCgroup(dir, memoryDir);
  }

  /** Opens an existing group by directory (from a lease) without creating it. */
  static open(dir: string): PidsCgroup {
    const m = path.join(MEMORY_ROOT, PARENT, path.basename(dir));
    return new PidsCgroup(dir, fs.existsSync(m) ? m : null);
  }

  /** The file a launcher writes its pid into to join the group before exec. */
  get procsFile(): string {
    return path.join(this.dir, 'cgroup.procs');
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
    try {
      return fs
        .readFileSync(this.procsFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number);
    } catch {
      return [];
    }
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
    for (const d of [this.dir, this.memoryDir]) {
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
