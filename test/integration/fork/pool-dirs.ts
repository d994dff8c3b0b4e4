import fs from 'node:fs';
import path from 'node:path';

/**
 * What the fork tests (and bench/fork.ts) read of a host's fork pool (src/sandbox/fork-pool.ts)
 * from its state dir: no test double, the directories, leases and cgroups themselves. Free of
 * vitest, so a fixture process may use it.
 */

/** The rollout id a parked branch's lease names until a fork takes it (host-fork.ts POOL_ROLLOUT_ID). */
const POOL_ROLLOUT_ID = 'fork-pool';

function leaseOf(dir: string): { rolloutId: string; cgroup: string | null } | null {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'lease.json'), 'utf8')) as { rolloutId: string; cgroup: string | null };
  } catch {
    return null;
  }
}

/** Entries of `<stateDir>/sandboxes` (sandboxes, branches, snapshots, parked branches). */
export function sandboxEntries(stateDir: string): string[] {
  try {
    return fs.readdirSync(path.join(stateDir, 'sandboxes')).sort();
  } catch {
    return [];
  }
}

/** The ids (directory names) of the parked branches of a host's fork pool: their lease names no rollout yet. */
export function pooledIds(stateDir: string): string[] {
  return sandboxEntries(stateDir).filter((n) => leaseOf(path.join(stateDir, 'sandboxes', n))?.rolloutId === POOL_ROLLOUT_ID);
}

/** Entries of `<stateDir>/sandboxes` but the fork pool's parked branches: what a test's own sandboxes left. */
export function stateEntries(stateDir: string): string[] {
  const pooled = new Set(pooledIds(stateDir));
  return sandboxEntries(stateDir).filter((n) => !pooled.has(n));
}

/** The processes of parked branch `id` (its pids cgroup's members). */
export function pooledPids(stateDir: string, id: string): number[] {
  const cgroup = leaseOf(path.join(stateDir, 'sandboxes', id))?.cgroup;
  if (!cgroup) return [];
  try {
    return fs.readFileSync(path.join(cgroup, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Parked branches whose shell already waits at its gate (a `bash` of its cgroup blocked reading the gate's FIFO). */
export function parkedAtGate(stateDir: string): string[] {
  return pooledIds(stateDir).filter((id) =>
    pooledPids(stateDir, id).some((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'bash' && fs.readFileSync(`/proc/${pid}/wchan`, 'utf8').includes('pipe_read');
      } catch {
        return false;
      }
    }),
  );
}
