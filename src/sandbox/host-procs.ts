import fs from 'node:fs';
import type { PidsCgroup } from './cgroup.js';
import { descendants, isLive, parentOf } from './proc.js';

/** Which processes of a host sandbox (host-sandbox.ts) are its shell, and which are strays. */

/**
 * Host pid of a sandbox's bash: the shallowest `bash` of its pids cgroup whose parents lead to
 * `launcher` (its pty's process), else the first (behind an image's Entrypoint, the deepest)
 * `bash` under the launcher, else the launcher itself (the `none` driver exec'd into bash).
 */
export function findShell(launcher: number, cgroup: PidsCgroup | null, entrypoint: boolean): number {
  if (cgroup && !entrypoint) {
    // The sandbox's pids cgroup lists its few processes in one small file, where descendants()
    // reads every process's stat on the machine (~20 ms at load 8, per branch of a fork, after
    // its shell is ready): the shallowest bash whose parents lead to this launcher (a dying one
    // of a shell before, after `exit`, has no such parents).
    let best: { pid: number; depth: number } | null = null;
    for (const pid of cgroup.pids()) {
      if (readComm(pid) !== 'bash') continue;
      let p: number | null = pid;
      let depth = 0;
      while (p !== null && p > 1 && p !== launcher && depth < 16) {
        p = parentOf(p);
        depth++;
      }
      if (p === launcher && (!best || depth < best.depth)) best = { pid, depth };
    }
    if (best) return best.pid;
  }
  // Behind an image's Entrypoint (itself maybe a bash script running the shell as a child),
  // the shell is the deepest bash, not the first.
  const pids = entrypoint ? descendants(launcher).reverse() : descendants(launcher);
  for (const pid of pids) if (readComm(pid) === 'bash') return pid;
  // `none` driver: the launcher itself exec'd into bash.
  return launcher;
}

/**
 * The processes of a sandbox that are not its shell or REPL (with the chain between the
 * launcher and the shell, and the network helper `netPid`): what HostSandbox.interrupt signals
 * and what a fork cannot carry. A function: it lists them anew at each call.
 */
export function strayLister(launcher: number, own: { netPid: number | null; shellPid: number | null; replPid: number | null }, cgroup: PidsCgroup | null, opts: { cgroupOnly?: boolean } = {}): () => number[] {
  const keep = new Set<number>([launcher]);
  if (own.netPid) keep.add(own.netPid);
  if (own.shellPid) keep.add(own.shellPid);
  const replPid = own.replPid;
  const replTree = replPid ? [replPid, ...descendants(replPid)] : [];
  for (const p of replTree) keep.add(p);
  // The namespace's init (inner bwrap) sits between the launcher and the shell: keep the chain.
  for (let p = own.shellPid ? parentOf(own.shellPid) : null; p && p !== launcher && p > 1; p = parentOf(p)) keep.add(p);
  // cgroupOnly (a fork's inventory, its parent frozen): every process of the sandbox is in its
  // pids group (joined before the first exec, inherited), read from one file rather than a scan
  // of every process's stat (~20 ms on a loaded machine, while the parent is frozen).
  if (opts.cgroupOnly && cgroup) {
    return () => cgroup.pids().filter((p) => !keep.has(p) && isLive(p));
  }
  return () => [...new Set([...descendants(launcher), ...(cgroup?.pids() ?? [])])].filter((p) => !keep.has(p) && isLive(p));
}

/** A process's `comm` (its executable's name, as ps shows it), or null when it is gone. */
function readComm(pid: number): string | null {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}
