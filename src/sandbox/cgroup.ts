import fs from 'node:fs';
import path from 'node:path';

/** Root of the cgroup v1 pids controller (REFERENCE.md §3). */
const PIDS_ROOT = '/sys/fs/cgroup/pids';
const PARENT = 'rollout-runtime';

/**
 * A cgroup v1 `pids` group for one sandbox: caps its process count (RLIMIT_NPROC is not
 * enforced for root) and lists every process of the sandbox, even ones that left its process
 * group, so close can kill them all.
 */
export class PidsCgroup {
  private constructor(readonly dir: string) {}

  /**
   * Creates `<pids root>/rollout-runtime/<name>` with `pids.max`. Returns null when the
   * controller is missing or not writable (not root): the caller falls back to rlimits.
   */
  static create(name: string, maxProcesses: number): PidsCgroup | null {
    const parent = path.join(PIDS_ROOT, PARENT);
    try {
      fs.mkdirSync(parent, { recursive: true });
      const dir = path.join(parent, name);
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'pids.max'), String(maxProcesses));
      return new PidsCgroup(dir);
    } catch {
      return null;
    }
  }

  /** Opens an existing group by directory (from a lease) without creating it. */
  static open(dir: string): PidsCgroup {
    return new PidsCgroup(dir);
  }

  /** The file a launcher writes its pid into to join the group before exec. */
  get procsFile(): string {
    return path.join(this.dir, 'cgroup.procs');
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
   * SIGKILLs every process in the group until it is empty (a fork in flight can add one after a
   * read), then removes the directory. Bounded: gives up after ~1 s and leaves the dir.
   */
  async killAllAndRemove(): Promise<void> {
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
    try {
      fs.rmdirSync(this.dir);
    } catch {
      // still busy or already gone: reapStale retries later
    }
  }
}
