import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { exited } from '../proc.js';
import { OBSERVER_SOURCE } from './observer-helper.js';

export { MAX_NET_ADDRESSES, NET_PACKET_BUDGET } from './observer-helper.js';

/** The Python the observer runs on (Debian's; the suite's core needs it anyway). */
const PYTHON = '/usr/bin/python3';
const REPLY_TIMEOUT_MS = 10_000;

/** What the observer saw of one sandbox since the last drain. */
export interface ProcessDrain {
  /** Programs executed: host pid and command line (null: it exited before it was read). */
  execs: { pid: number; argv: string[] | null }[];
  /** Files opened under a marked directory, workspace-relative. */
  reads: string[];
  /** Events dropped (a kernel queue overflowed, or more than the helper keeps per action). */
  lost: number;
  /** Network attempts out of the sandbox's namespace (its TUN device), one entry per protocol and destination, first seen first. */
  net: NetAttempt[];
  /** Attempts to further destinations past the helper's {@link MAX_NET_ADDRESSES}, counted only. */
  netMore: number;
  /** Packets the kernel dropped unread while the helper's packet budget was spent. */
  netDropped: number;
  /** The packet budget was spent since the last drain: attempts may be reported at a later one. */
  netCapped: boolean;
}


/** One destination the sandbox tried to reach: `ip:port` (`[ip6]:port`; no port for ICMP and others), how often, and a DNS query's name. */
export interface NetAttempt {
  proto: string;
  address: string;
  count: number;
  name?: string | null;
}

/** What the observer can see on this machine; `why` says what it cannot, and why. */
export interface ObserverCapabilities {
  exec: boolean;
  reads: boolean;
  why: string[];
}

/**
 * The host process's one process and secret-read observer (observer-helper.ts), started on first
 * use and shared by its sandboxes: a root Python helper on the kernel's process-events connector
 * (every exec with its command line) and fanotify (opens under marked directories). It dies with
 * the host process (its stdin closes). Requests are answered in order.
 */
export class ProcessObserver {
  private static shared: Promise<ProcessObserver> | null = null;
  private readonly waiting: { resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }[] = [];
  private buf = '';
  private dead: string | null = null;

  private constructor(
    private readonly proc: ChildProcess,
    readonly caps: ObserverCapabilities,
  ) {}

  /**
   * Ends the host's observer, if one runs (its TUN devices close with it), and waits for its
   * exit; the next {@link get} starts a new one. For a host that stops observing, and tests.
   */
  static async shutdown(): Promise<void> {
    const p = ProcessObserver.shared;
    ProcessObserver.shared = null;
    const obs = await p?.catch(() => null);
    if (!obs || obs.proc.exitCode !== null || obs.proc.signalCode !== null) return;
    const gone = exited(obs.proc);
    obs.proc.stdin!.end();
    await gone;
  }

  /** The host's observer, started once. @throws Error when it cannot start (no python3, not root). */
  static get(): Promise<ProcessObserver> {
    ProcessObserver.shared ??= ProcessObserver.start().catch((e: unknown) => {
      ProcessObserver.shared = null;
      throw e;
    });
    return ProcessObserver.shared;
  }

  private static async start(): Promise<ProcessObserver> {
    if (process.getuid?.() !== 0) throw new Error('the process and secret-read observer needs root (the process-events connector and fanotify)');
    if (!fs.existsSync(PYTHON)) throw new Error(`the process and secret-read observer needs ${PYTHON} (apt-get install python3)`);
    const proc = spawn(PYTHON, ['-I', '-S', '-c', OBSERVER_SOURCE], { stdio: ['pipe', 'pipe', 'pipe'] });
    // Never keeps the host process alive by itself: it exits when the host's end of stdin closes.
    proc.unref();
    (proc.stdin as unknown as { unref?: () => void }).unref?.();
    (proc.stdout as unknown as { unref?: () => void }).unref?.();
    (proc.stderr as unknown as { unref?: () => void }).unref?.();
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    const hello = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the observer did not start in ${REPLY_TIMEOUT_MS} ms`)), REPLY_TIMEOUT_MS);
      let first = '';
      const onData = (d: Buffer): void => {
        first += d.toString();
        const nl = first.indexOf('\n');
        if (nl < 0) return;
        clearTimeout(timer);
        proc.stdout!.off('data', onData);
        try {
          resolve(JSON.parse(first.slice(0, nl)) as Record<string, unknown>);
        } catch (e) {
          reject(e as Error);
        }
      };
      proc.stdout!.on('data', onData);
      proc.once('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the observer exited (${code}): ${stderr.trim()}`));
      });
    });
    const obs = new ProcessObserver(proc, { exec: hello.exec === true, reads: hello.reads === true, why: (hello.why as string[] | undefined) ?? [] });
    proc.stdout!.on('data', (d: Buffer) => obs.onData(d));
    proc.on('exit', (code) => obs.fail(`the observer exited (${code}): ${stderr.trim()}`));
    proc.stdin!.on('error', () => obs.fail('the observer closed its input'));
    return obs;
  }

  /**
   * Starts watching sandbox `id`: its pids cgroup (relative to the hierarchy), opens of the
   * children of `dirs`, execs from the filesystems of `execfs`. `root` is the workspace as this
   * host reaches it, `inside` as the sandbox's processes do.
   */
  async watch(id: string, w: { cgroup: string; dirs: string[]; root: string; inside: string; execfs: string[]; netPid?: number | null }): Promise<{ marked: number; errors: string[]; net: { ok: true } | { ok: false; why: string } | null }> {
    const r = await this.call({ op: 'watch', id, cgroup: w.cgroup, dirs: w.dirs, roots: [w.root], inside: w.inside, execfs: w.execfs, ...(w.netPid ? { netPid: w.netPid } : {}) });
    if (r.ok !== true) throw new Error(String(r.error ?? 'watch refused'));
    const net = !w.netPid ? null : r.net === true ? ({ ok: true } as const) : { ok: false as const, why: String(r.netError ?? 'the helper did not attach') };
    return { marked: Number(r.marked ?? 0), errors: (r.errors as string[] | undefined) ?? [], net };
  }

  /** Moves sandbox `id`'s TUN device to the network namespace of `netPid` (its shell restarted in a fresh one). */
  async moveNet(id: string, netPid: number): Promise<{ ok: true } | { ok: false; why: string }> {
    const r = await this.call({ op: 'net', id, netPid });
    if (r.ok !== true) throw new Error(String(r.error ?? 'net refused'));
    return r.net === true ? { ok: true } : { ok: false, why: String(r.netError ?? 'the helper did not attach') };
  }

  /** What sandbox `id` did since the last drain (everything before this call). */
  async drain(id: string): Promise<ProcessDrain> {
    const r = await this.call({ op: 'drain', id });
    if (typeof r.error === 'string') throw new Error(r.error);
    return {
      execs: (r.execs as ProcessDrain['execs']) ?? [],
      reads: (r.reads as string[]) ?? [],
      lost: Number(r.lost ?? 0),
      net: (r.net as NetAttempt[] | undefined) ?? [],
      netMore: Number(r.netMore ?? 0),
      netDropped: Number(r.netDropped ?? 0),
      netCapped: r.netCapped === true,
    };
  }

  async unwatch(id: string): Promise<void> {
    await this.call({ op: 'unwatch', id });
  }

  private call(req: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.dead) return Promise.reject(new Error(this.dead));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.fail(`the observer did not answer in ${REPLY_TIMEOUT_MS} ms`), REPLY_TIMEOUT_MS);
      this.waiting.push({ resolve, reject, timer });
      this.proc.stdin!.write(JSON.stringify(req) + '\n');
    });
  }

  private onData(d: Buffer): void {
    this.buf += d.toString();
    let nl;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const w = this.waiting.shift();
      if (!w) continue;
      clearTimeout(w.timer);
      try {
        w.resolve(JSON.parse(line) as Record<string, unknown>);
      } catch (e) {
        w.reject(e as Error);
      }
    }
  }

  private fail(why: string): void {
    if (this.dead) return;
    this.dead = why;
    if (ProcessObserver.shared) ProcessObserver.shared = null;
    for (const w of this.waiting.splice(0)) {
      clearTimeout(w.timer);
      w.reject(new Error(why));
    }
    this.proc.kill('SIGKILL');
  }
}
