import crypto from 'node:crypto';

/** The uid (and gid) a sandboxed process has inside its user namespace under bwrap. */
export const INSIDE_UID = 1000;

/** True when this process runs as host root (then sandboxes get their own unprivileged uid). */
export function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

/**
 * The host uid/gid of sandbox `sandboxId`: `base + hash(id) % count` when this process is root,
 * null otherwise (a non-root runtime is already unprivileged; its uid is kept).
 *
 * Why a hash and not a counter: several hosts and runtimes share one machine and no registry.
 * Two live sandboxes drawing the same uid (rare: 1 in `count` per pair) stay apart by their
 * mount/pid/user namespaces; they would only share an RLIMIT_NPROC count when there is no
 * pids cgroup.
 */
export function sandboxUidFor(sandboxId: string, range: { base: number; count: number }): number | null {
  if (!isRoot()) return null;
  const h = crypto.createHash('sha256').update(sandboxId).digest().readUInt32BE(0);
  return range.base + (h % range.count);
}

