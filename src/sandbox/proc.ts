import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';

/**
 * Process facts read from /proc. Identity is (pid, start time): a recorded pid is only acted
 * on when its start time still matches, so a reused pid is never killed.
 */

/** The start time (clock ticks since boot, field 22 of /proc/<pid>/stat) or null when gone. */
export function processStartTime(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
  } catch {
    return null;
  }
}

/** True when `pid` runs and, if `startTime` is given, is the same process that was recorded. */
export function isSameProcessAlive(pid: number, startTime: string | null): boolean {
  const now = processStartTime(pid);
  if (now === null) return false;
  return startTime === null || now === startTime;
}

/**
 * True when `pid` is still a running process: not gone, and not a zombie (dead, waiting for
 * its parent to reap it; a zombie can neither run nor fork, so a kill sweep is done with it).
 */
export function isLive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat[stat.lastIndexOf(')') + 2];
    return state !== 'Z' && state !== 'X' && state !== 'x';
  } catch {
    return false;
  }
}

/** Parent pid of every process, read in one pass over /proc. */
function parentMap(): Map<number, number[]> {
  const children = new Map<number, number[]>();
  for (const name of fs.readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue;
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = children.get(ppid);
    if (list) list.push(pid);
    else children.set(ppid, [pid]);
  }
  return children;
}

/** Every descendant of `pid` (not `pid` itself), parents before children. */
export function descendants(pid: number): number[] {
  const children = parentMap();
  const out: number[] = [];
  const queue = [pid];
  while (queue.length) {
    const p = queue.shift()!;
    for (const c of children.get(p) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

/** Sends `signal` to each pid, ignoring ones already gone. Returns how many were signalled. */
export function killAll(pids: Iterable<number>, signal: NodeJS.Signals = 'SIGKILL'): number {
  let n = 0;
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
      n++;
    } catch {
      // already gone
    }
  }
  return n;
}

/** The parent pid of `pid`, or null when gone. */
export function parentOf(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

/** Resolves once the child has exited (at once when it already has). */
export function exited(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => proc.once('exit', () => resolve()));
}
