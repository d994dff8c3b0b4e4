/**
 * CPU accounting from /proc for the benchmarks that run several processes (Linux only): the CPU
 * time of a process tree, and the utilisation of each core over a window. The leading `_` keeps
 * run-all from running this file as a benchmark.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's utime/stime fields (USER_HZ: 100 on every Linux build we run). */
const HZ = 100;

interface ProcStat {
  pid: number;
  ppid: number;
  /** utime + stime + cutime + cstime, in ticks: the process and its reaped children. */
  ticks: number;
}

function readStat(pid: number): ProcStat | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command (which may hold spaces), starting with field 3 (state).
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { pid, ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]) };
  } catch {
    return null; // gone meanwhile
  }
}

/**
 * CPU seconds used so far by each root pid's process tree: every live descendant's own time plus
 * what its reaped children used. A child that exits between two reads is counted in its parent's
 * `cutime` once reaped, so the difference of two reads is the tree's CPU over the window (a
 * process that escapes the tree by being re-parented to init is lost; the sandbox hosts and
 * their bwrap children stay in it).
 */
export function treeCpuSeconds(roots: readonly number[]): Map<number, number> {
  const all: ProcStat[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const st = readStat(Number(d));
    if (st) all.push(st);
  }
  const children = new Map<number, ProcStat[]>();
  for (const p of all) {
    const list = children.get(p.ppid);
    if (list) list.push(p);
    else children.set(p.ppid, [p]);
  }
  const byPid = new Map(all.map((p) => [p.pid, p]));
  const out = new Map<number, number>();
  for (const root of roots) {
    let ticks = 0;
    const stack = byPid.has(root) ? [byPid.get(root)!] : [];
    while (stack.length) {
      const p = stack.pop()!;
      ticks += p.ticks;
      stack.push(...(children.get(p.pid) ?? []));
    }
    out.set(root, ticks / HZ);
  }
  return out;
}

/** Busy and total jiffies of each core (`cpuN` lines of /proc/stat). */
export function coreTimes(): { busy: number; total: number }[] {
  return readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .filter((l) => /^cpu\d+ /.test(l))
    .map((l) => {
      const v = l.trim().split(/\s+/).slice(1).map(Number);
      const idle = v[3]! + (v[4] ?? 0); // idle + iowait
      const total = v.slice(0, 8).reduce((a, b) => a + b, 0); // without guest (already in user)
      return { busy: total - idle, total };
    });
}

/** Utilisation (0..1) of each core between two {@link coreTimes} reads. */
export function coreUtilisation(a: readonly { busy: number; total: number }[], b: readonly { busy: number; total: number }[]): number[] {
  return b.map((x, i) => {
    const dt = x.total - a[i]!.total;
    return dt > 0 ? (x.busy - a[i]!.busy) / dt : 0;
  });
}

/** The 1-minute load average (`uptime`'s first figure). */
export function loadAverage1(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}
