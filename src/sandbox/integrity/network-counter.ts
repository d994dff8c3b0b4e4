import fs from 'node:fs';
import type { IntegrityViolation } from '../../protocol/integrity.js';

/**
 * Network attempts out of a sandbox, from its own network namespace's counters: a sandbox
 * without `network: true` has only a loopback interface, so every connect or send to another
 * address fails at the route lookup, and the kernel counts it in `Ip: OutNoRoutes`
 * (/proc/<pid>/net/snmp, `Ip6OutNoRoutes` in snmp6) — a TCP connect, a UDP send, a DNS lookup
 * alike. Reading the two files per action costs ~20 µs and needs nothing but the pid. What it
 * misses: the address and the program (counters only; see docs/integrity.md), and connections to
 * the sandbox's own loopback (allowed: tests start local servers). The fallback of the observer's
 * TUN device (observer-helper.ts), which sees the addresses.
 */
export class NetworkCounter {
  private last: number;

  private constructor(
    private readonly pid: number,
    private readonly allowed: boolean,
    first: number,
  ) {
    this.last = first;
  }

  /**
   * Opens the counters of `pid`'s namespace; null when they are not readable. `fromZero`: counts
   * from the namespace's creation (a fresh one: a restarted shell's), not from now.
   */
  static open(pid: number, allowed: boolean, fromZero = false): NetworkCounter | null {
    const n = readNoRoutes(pid);
    return n === null ? null : new NetworkCounter(pid, allowed, fromZero ? 0 : n);
  }

  /** A `network` violation when attempts out were refused since the last call (none when the spec allows the network). */
  observe(turn: number): IntegrityViolation[] {
    const n = readNoRoutes(this.pid);
    if (n === null) return [];
    const d = n - this.last;
    this.last = n;
    if (d <= 0 || this.allowed) return [];
    return [{ kind: 'network', turn, detail: `${d} attempt${d === 1 ? '' : 's'} to reach the network refused (no route: the sandbox has no network)` }];
  }
}

/** `Ip: OutNoRoutes` + `Ip6OutNoRoutes` of `pid`'s network namespace, or null. */
export function readNoRoutes(pid: number): number | null {
  let snmp: string;
  try {
    snmp = fs.readFileSync(`/proc/${pid}/net/snmp`, 'utf8');
  } catch {
    return null;
  }
  const lines = snmp.split('\n').filter((l) => l.startsWith('Ip: '));
  if (lines.length < 2) return null;
  const names = lines[0]!.split(/\s+/);
  const values = lines[1]!.split(/\s+/);
  const i = names.indexOf('OutNoRoutes');
  let n = i > 0 ? Number(values[i]) : 0;
  try {
    const m = /^Ip6OutNoRoutes\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/net/snmp6`, 'utf8'));
    if (m) n += Number(m[1]);
  } catch {
    // no IPv6 in this kernel
  }
  return n;
}
