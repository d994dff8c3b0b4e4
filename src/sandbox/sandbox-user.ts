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

/**
 * Runs `fn` with this process's effective uid/gid set to `uid`, so host-side file work for a
 * sandbox (the editor, file upload) gets exactly the sandbox's own rights: a symlink the
 * sandbox planted cannot make the host read a root-only file or write outside what the sandbox
 * itself could write, and new files belong to the sandbox. `uid` null runs `fn` as is.
 *
 * Pass synchronous work only: the effective ids are process-wide and restored before returning,
 * so no other event-loop work ever runs under them — and a promise `fn` returns continues as
 * root after its first `await` (only its synchronous start ran as the sandbox's user).
 * @throws whatever `fn` throws (ids restored first).
 */
export function asSandboxUser<T>(uid: number | null, fn: () => T): T {
  if (uid === null || !isRoot()) return fn();
  // Supplementary groups of root (group 0) would otherwise still apply under the sandbox's uid.
  process.setgroups!([]);
  process.setegid!(uid);
  process.seteuid!(uid);
  try {
    return fn();
  } finally {
    process.seteuid!(0);
    process.setegid!(0);
  }
}
