import fs from 'node:fs';
import path from 'node:path';
import { TaskError } from '../../errors.js';
import { globSet, type FileObservationResult, type GlobSet, type IntegrityViolation } from '../../protocol/integrity.js';
import { FileMonitor } from './file-monitor.js';
import { NetworkCounter } from './network-counter.js';
import { MAX_NET_ADDRESSES, NET_PACKET_BUDGET, ProcessObserver, type ProcessDrain } from './process-observer.js';
import { RootMonitor } from './root-monitor.js';

/** Directories marked for secret reads at most, per sandbox (fanotify marks are a per-user budget). */
const MAX_SECRET_DIRS = 4_000;

/** What the host sandbox tells its monitor (host-sandbox.ts `integrityTargets`). */
export interface IntegrityTargets {
  /** The sandbox's pids cgroup, relative to the pids hierarchy; null: no cgroup (driver `none`). */
  cgroup: string | null;
  /** A pid in the sandbox's own network namespace; null: it shares the host's (driver `none`). */
  netPid: number | null;
  /** The spec's `network: true`: attempts out are allowed, so not violations. */
  network: boolean;
  /** The workspace's path as the sandbox's processes see it (`/workspace`, an image's working dir). */
  inside: string;
  /**
   * False when the observer cannot name what the sandbox's processes open: with the `unshare`
   * driver a read's path resolves in the sandbox's own mount tree, which matches no workspace
   * root (secret reads then go unobserved and the result says `degraded`). Absent: true.
   */
  readPaths?: boolean | undefined;
}

interface HostSandboxLike {
  readonly id?: string;
  readonly workdir: string;
  readonly overlayChanges?: { upper: string; workspace: string } | null;
  readonly integrityTargets?: IntegrityTargets;
}

interface Monitors {
  files: FileMonitor;
  root: RootMonitor | null;
  /** The process and secret-read observer, and the sandbox's key there. */
  procs: { observer: ProcessObserver; key: string; secret: GlobSet } | null;
  /** The network counters: the fallback when the observer's TUN device is not in the sandbox's namespace. */
  net: NetworkCounter | null;
  /** Attempts out are seen with their address by the observer (its TUN device is the sandbox's default route). */
  tun: boolean;
  /** The network namespace watched (a pid in it and its inode): a restarted shell has a fresh one. */
  netns: { pid: number; ino: number; allowed: boolean } | null;
  unobserved: Unobserved[];
}

type Unobserved = NonNullable<FileObservationResult['unobserved']>[number];

/** The monitors of each sandbox of this host, dropped with the sandbox. */
const monitors = new WeakMap<object, Monitors>();
let keys = 0;

/**
 * Handles a `sandbox.integrity` request on the host that owns `sb`: `start` takes the baseline
 * of its workspace with `protect` (replacing an earlier monitor), marks the directories holding
 * `secret` paths and starts watching the sandbox's processes and network attempts; `observe`
 * scans once at `turn` and collects what the process observer and the network counters saw.
 * What cannot be observed here is said in `unobserved` (the runtime then reports `degraded`).
 * @throws TaskError (`INTEGRITY_POLICY`) for a bad glob (validated at submit, so only a client
 *   that skipped the validation), or (`INTEGRITY_NOT_STARTED`) for an observe before a start.
 */
export async function handleIntegrity(sb: HostSandboxLike, req: { op: 'start' | 'observe'; protect?: string[] | undefined; secret?: string[] | undefined; turn?: number | undefined }): Promise<FileObservationResult> {
  if (req.op === 'start') {
    let globs: GlobSet;
    let secret: GlobSet;
    try {
      globs = globSet(req.protect ?? []);
      secret = globSet(req.secret ?? []);
    } catch (e) {
      throw new TaskError(`integrity.protect: ${(e as Error).message}`, { code: 'INTEGRITY_POLICY' });
    }
    const t0 = performance.now();
    const prev = monitors.get(sb);
    // The old watch's processes may be gone already; nothing of it is read again.
    if (prev?.procs) await prev.procs.observer.unwatch(prev.procs.key).catch(() => undefined);
    const files = new FileMonitor(sb.workdir, globs);
    const ov = sb.overlayChanges ?? null;
    const root = ov ? new RootMonitor(ov.upper, ov.workspace) : null;
    const r = files.start();
    root?.start();
    const m: Monitors = { files, root, procs: null, net: null, tun: false, netns: null, unobserved: [] };
    const targets = sb.integrityTargets;
    // Addresses are recorded only for a sandbox without network: with `network: true` attempts are allowed.
    const netPid = targets?.netPid && !targets.network ? targets.netPid : null;
    let noTun = 'the process observer did not start';
    if (!targets?.cgroup) {
      const why = 'this sandbox has no cgroup of its own (driver none)';
      m.unobserved.push({ what: 'exec', why }, { what: 'reads', why });
    } else {
      try {
        const observer = await ProcessObserver.get();
        const key = `${sb.id ?? 'sb'}#${++keys}`;
        const dirs = secretDirs(sb.workdir, files, secret);
        // Programs run from the host's root and /usr (a host-root sandbox binds them), or the image's root, or the workspace.
        const execfs = ['/', '/usr', sb.workdir, ...(sb.overlayChanges ? [path.join(sb.workdir, '/usr')] : [])];
        const w = await observer.watch(key, { cgroup: targets.cgroup, dirs: dirs.dirs, root: sb.workdir, inside: targets.inside, execfs, netPid });
        m.procs = { observer, key, secret };
        if (w.net?.ok) m.tun = true;
        else if (w.net) noTun = w.net.why;
        if (!observer.caps.exec && !observer.caps.reads) m.unobserved.push({ what: 'exec', why: observer.caps.why.join('; ') });
        if (secret.globs.length > 0) {
          if (!observer.caps.reads) m.unobserved.push({ what: 'reads', why: observer.caps.why.join('; ') });
          else if (targets.readPaths === false) m.unobserved.push({ what: 'reads', why: "the unshare driver's mount namespace hides the paths the sandbox opens from the observer (install bubblewrap)" });
          else if (dirs.truncated) m.unobserved.push({ what: 'reads', why: `more than ${MAX_SECRET_DIRS} directories hold secret paths` });
          else if (w.marked < dirs.dirs.length) m.unobserved.push({ what: 'reads', why: `${dirs.dirs.length - w.marked} of ${dirs.dirs.length} directories not marked (${w.errors.join('; ')})` });
        }
      } catch (e) {
        const why = (e as Error).message;
        noTun = why;
        m.unobserved.push({ what: 'exec', why }, { what: 'reads', why });
      }
    }
    if (targets?.netPid) {
      m.netns = { pid: targets.netPid, ino: netnsInode(targets.netPid), allowed: targets.network };
      if (!m.tun) m.net = openCounters(m, targets.netPid, targets.network, netPid ? noTun : null);
    } else m.unobserved.push({ what: 'network', why: "this sandbox shares the host's network namespace (driver none)" });
    monitors.set(sb, m);
    return { violations: [], created: 0, modified: 0, deleted: 0, entries: r.entries, truncated: r.truncated || (root?.truncated ?? false), ms: performance.now() - t0, unobserved: m.unobserved };
  }
  const m = monitors.get(sb);
  if (!m) throw new TaskError('integrity observe before start', { code: 'INTEGRITY_NOT_STARTED' });
  const t0 = performance.now();
  const turn = req.turn ?? 0;
  // Sent first, so the observer drains while the files are scanned.
  const drain = m.procs?.observer.drain(m.procs.key);
  const o: FileObservationResult = m.files.observe(turn);
  if (m.root) {
    o.violations.push(...m.root.observe(turn));
    o.truncated ||= m.root.truncated;
  }
  if (m.net) o.violations.push(...m.net.observe(turn));
  if (drain && m.procs) {
    try {
      const d = await drain;
      o.execs = d.execs.map((e) => ({ argv: e.argv }));
      const read = [...new Set(d.reads.filter((rel) => m.procs!.secret.matches(rel)))];
      if (read.length > 0) o.violations.push(readViolation(turn, read));
      if (d.lost > 0) o.unobserved = [{ what: 'exec', why: `${d.lost} process or read events were lost at turn ${turn}` }];
      if (m.tun) o.violations.push(...networkViolations(turn, d));
    } catch (e) {
      m.procs = null;
      const why = (e as Error).message;
      o.unobserved = [{ what: 'exec', why }, { what: 'reads', why }];
      if (m.tun) {
        // The helper's TUN device went with it: the sandbox is back to no route, which the counters see.
        m.tun = false;
        const pid = sb.integrityTargets?.netPid;
        const un: Unobserved[] = [];
        if (pid) m.net = openCounters({ unobserved: un }, pid, false, why);
        o.unobserved.push(...un);
      }
    }
  }
  await followNetns(sb, m, turn, o);
  o.ms = performance.now() - t0;
  return o;
}

/** The inode of `pid`'s network namespace, or 0 when it is gone. */
function netnsInode(pid: number): number {
  try {
    return fs.statSync(`/proc/${pid}/ns/net`).ino;
  } catch {
    return 0;
  }
}

/**
 * A shell restarted by `exit` runs in a fresh network namespace, without the TUN device: its
 * counters since its creation are the attempts made before this observation (counted, without
 * address, at this action), and the device moves there for the next actions (else the counters
 * go on).
 */
async function followNetns(sb: HostSandboxLike, m: Monitors, turn: number, o: FileObservationResult): Promise<void> {
  const pid = sb.integrityTargets?.netPid;
  if (!m.netns || !pid) return;
  if (pid === m.netns.pid) return;
  const ino = netnsInode(pid);
  if (ino === 0 || ino === m.netns.ino) {
    if (ino !== 0) m.netns = { ...m.netns, pid };
    return;
  }
  const allowed = m.netns.allowed;
  m.netns = { pid, ino, allowed };
  const gap = NetworkCounter.open(pid, allowed, true);
  if (gap) o.violations.push(...gap.observe(turn));
  const un: Unobserved[] = [];
  if (m.tun && m.procs) {
    try {
      const r = await m.procs.observer.moveNet(m.procs.key, pid);
      if (r.ok) return;
      m.tun = false;
      m.net = openCounters({ unobserved: un }, pid, allowed, r.why);
    } catch (e) {
      m.tun = false;
      m.net = openCounters({ unobserved: un }, pid, allowed, (e as Error).message);
    }
  } else if (m.net) m.net = gap ?? openCounters({ unobserved: un }, pid, allowed, null);
  if (un.length > 0) o.unobserved = [...(o.unobserved ?? []), ...un];
}

/**
 * The fallback for network attempts: the namespace's no-route counters (network-counter.ts),
 * counts without addresses; `noTun` says why the addresses are not seen (null: not asked, the
 * spec allows the network).
 */
function openCounters(m: Pick<Monitors, 'unobserved'>, pid: number, allowed: boolean, noTun: string | null): NetworkCounter | null {
  const net = NetworkCounter.open(pid, allowed);
  if (!net) m.unobserved.push({ what: 'network', why: "the sandbox's network counters are not readable" });
  else if (noTun !== null) m.unobserved.push({ what: 'network', why: `attempts are counted without their address (${noTun})` });
  return net;
}

/**
 * The `network` violations of one action from the observer's TUN device: one per protocol and
 * destination (with how many attempts), at most {@link MAX_NET_ADDRESSES}; one more, without an
 * address, for the attempts past them or the packets a flood had dropped.
 */
export function networkViolations(turn: number, d: Pick<ProcessDrain, 'net' | 'netMore' | 'netDropped' | 'netCapped'>): IntegrityViolation[] {
  const out: IntegrityViolation[] = d.net.map((a) => ({
    kind: 'network',
    turn,
    address: a.address,
    proto: a.proto,
    detail: `${a.count} ${a.proto.toUpperCase()} attempt${a.count === 1 ? '' : 's'} to ${a.address}${a.name ? ` (a DNS query for ${a.name})` : ''} refused: the sandbox has no network`,
  }));
  if (d.netMore > 0 || d.netDropped > 0 || (d.netCapped && out.length > 0)) {
    const parts = [];
    if (d.netMore > 0) parts.push(`${d.netMore} more attempt${d.netMore === 1 ? '' : 's'} to destinations past the first ${MAX_NET_ADDRESSES}`);
    if (d.netDropped > 0) parts.push(`${d.netDropped} packet${d.netDropped === 1 ? '' : 's'} dropped unread`);
    if (d.netCapped) parts.push(`the observer's packet budget (${NET_PACKET_BUDGET} a second) was spent`);
    out.push({ kind: 'network', turn, detail: `${parts.join('; ')} (refused: the sandbox has no network)` });
  }
  return out;
}

/** Stops observing `sb` (its sandbox is closing): the observer forgets it and closes its TUN device. Never throws. */
export async function releaseIntegrity(sb: object): Promise<void> {
  const m = monitors.get(sb);
  monitors.delete(sb);
  // A sandbox's monitor ends with it: a failed unwatch leaves nothing to report to.
  if (m?.procs) await m.procs.observer.unwatch(m.procs.key).catch(() => undefined);
}

/** One violation per action for its secret reads: the first path, and how many (with the first few) in the detail. */
function readViolation(turn: number, read: string[]): IntegrityViolation {
  const shown = read.slice(0, 5).join(', ');
  return { kind: 'read-secret', turn, path: read[0]!, detail: `${read.length} secret path${read.length === 1 ? '' : 's'} opened by the sandbox's processes: ${shown}${read.length > 5 ? ', …' : ''}` };
}

/**
 * The directories to mark for opens: each known directory matching a secret glob and every
 * directory under it, and the parent of each matching file (a mark on a directory reports the
 * opens of its direct children; what is not secret among them is dropped at the drain).
 */
function secretDirs(workdir: string, files: FileMonitor, secret: GlobSet): { dirs: string[]; truncated: boolean } {
  const out = new Set<string>();
  if (secret.globs.length === 0) return { dirs: [], truncated: false };
  const walk = (rel: string): void => {
    const stack = [rel];
    while (stack.length > 0 && out.size < MAX_SECRET_DIRS) {
      const d = stack.pop()!;
      out.add(path.join(workdir, d));
      let list: fs.Dirent[];
      try {
        list = fs.readdirSync(path.join(workdir, d), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of list) if (e.isDirectory()) stack.push(`${d}/${e.name}`);
    }
  };
  for (const [rel, type] of files.known()) {
    if (out.size >= MAX_SECRET_DIRS) break;
    if (type === 'dir' && rel.split('/').pop() === '.git') {
      // Not descended by the file monitor: walk it here, marking what lies under a secret glob.
      if (secret.matches(rel)) walk(rel);
      continue;
    }
    if (!secret.matches(rel)) continue;
    if (type === 'dir') walk(rel);
    else out.add(path.join(workdir, path.dirname(rel)));
  }
  return { dirs: [...out], truncated: out.size >= MAX_SECRET_DIRS };
}
