import fs from 'node:fs';
import path from 'node:path';
import { PidsCgroup } from './cgroup.js';
import { releaseOverlay } from './images/overlay-mount.js';
import { isSameProcessAlive, killAll, descendants } from './proc.js';

/**
 * A lease: `<stateDir>/sandboxes/<id>/lease.json`, naming who owns a sandbox and which
 * processes and files are its. Every pid comes with its start time, so a reused pid is never
 * mistaken for ours.
 */
export interface Lease {
  sandboxId: string;
  runtimeId: string;
  ownerPid: number;
  ownerStart: string | null;
  rolloutId: string;
  hostPid: number;
  hostStart: string | null;
  /** The pty's process (launcher → driver); null until the shell started. */
  ptyPid: number | null;
  ptyStart: string | null;
  /** cgroup directory, or null without one. */
  cgroup: string | null;
  /** The sandbox's directory (workspace, control files, lease). */
  dir: string;
  workdir: string;
  createdAt: string;
}

/** Directory holding every sandbox's directory. */
export function sandboxesDir(stateDir: string): string {
  return path.join(stateDir, 'sandboxes');
}

/** Directory holding host sockets. */
export function hostsDir(stateDir: string): string {
  return path.join(stateDir, 'hosts');
}

/** Writes (or rewrites) a lease atomically: a reaper never reads half a file. */
export function writeLease(lease: Lease): void {
  const file = path.join(lease.dir, 'lease.json');
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(lease));
  fs.renameSync(`${file}.tmp`, file);
}

/** Reads a lease, or null when missing or unreadable. */
export function readLease(dir: string): Lease | null {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'lease.json'), 'utf8')) as Lease;
  } catch {
    return null;
  }
}

/** What {@link reapStale} cleaned. */
export interface ReapReport {
  sandboxes: string[];
  sockets: string[];
}

/**
 * Cleans every sandbox whose owner runtime is gone (pid dead, or reused by another process):
 * kills its cgroup, its pty's process group and every descendant of it, and its host if that
 * host is still alive, then removes its directory (workdir included). Also removes host
 * sockets of dead owners. Never kills by process name; never touches a live owner's sandboxes.
 * Never throws.
 */
export async function reapStale(stateDir: string): Promise<ReapReport> {
  const report: ReapReport = { sandboxes: [], sockets: [] };
  let names: string[] = [];
  try {
    names = fs.readdirSync(sandboxesDir(stateDir));
  } catch {
    // nothing to reap
  }
  for (const name of names) {
    const dir = path.join(sandboxesDir(stateDir), name);
    const lease = readLease(dir);
    if (lease && isSameProcessAlive(lease.ownerPid, lease.ownerStart)) continue;
    if (!lease) {
      // A directory whose lease was never written: only reap it once it is clearly abandoned.
      try {
        if (Date.now() - fs.statSync(dir).mtimeMs < 60_000) continue;
      } catch {
        continue;
      }
    }
    if (lease) await killLeased(lease);
    await releaseOverlay(dir); // an image sandbox: unmount before removing, or rm would walk the overlay
    fs.rmSync(dir, { recursive: true, force: true });
    report.sandboxes.push(name);
  }
  try {
    for (const s of fs.readdirSync(hostsDir(stateDir))) {
      const m = /^h-(\d+)-(\d+)-\d+\.sock$/.exec(s);
      if (m && !isSameProcessAlive(Number(m[1]), m[2]!)) {
        fs.rmSync(path.join(hostsDir(stateDir), s), { force: true });
        report.sockets.push(s);
      }
    }
  } catch {
    // no hosts dir
  }
  return report;
}

/**
 * Cleans one sandbox directory whatever its owner: kills what its lease names, removes its
 * cgroup and the directory. Used by the runtime when a host died without cleaning up.
 * Never throws.
 */
export async function reapSandbox(dir: string): Promise<void> {
  const lease = readLease(dir);
  if (lease) await killLeased(lease);
  await releaseOverlay(dir);
  fs.rmSync(dir, { recursive: true, force: true });
}

async function killLeased(lease: Lease): Promise<void> {
  if (lease.ptyPid && isSameProcessAlive(lease.ptyPid, lease.ptyStart)) {
    const tree = descendants(lease.ptyPid);
    try {
      process.kill(-lease.ptyPid, 'SIGKILL');
    } catch {
      // no such group
    }
    killAll([lease.ptyPid, ...tree]);
  }
  if (lease.hostPid !== process.pid && isSameProcessAlive(lease.hostPid, lease.hostStart)) killAll([lease.hostPid]);
  if (lease.cgroup) await PidsCgroup.open(lease.cgroup).killAllAndRemove();
}
