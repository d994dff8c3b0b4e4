import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import type { SandboxLimits } from '../protocol/sandbox.js';
import { PY_SECCOMP_LOADER } from './seccomp.js';
import { INSIDE_UID } from './sandbox-user.js';

/** An isolation driver. `none` is for development only: the shell runs unconfined. */
export type DriverName = 'bwrap' | 'unshare' | 'none';

/** Which driver `auto` resolves to on this machine, and why. */
export interface DriverDetection {
  driver: DriverName;
  /** Human-readable reason, for the start-up log. */
  reason: string;
  /** True for `none`: callers log it as unsafe. */
  unsafe: boolean;
}

let cached: DriverDetection | null = null;

/** True when `bwrap` exists and can create the namespaces we use (tested once, ~6 ms). */
export function bwrapWorks(): boolean {
  const r = spawnSync('bwrap', ['--unshare-all', '--die-with-parent', '--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', 'true'], { stdio: 'ignore', timeout: 5000 });
  return r.status === 0;
}

/** True when util-linux `unshare` can make a user + pid + mount + net namespace here. */
export function unshareWorks(): boolean {
  const r = spawnSync('unshare', ['--user', '--map-root-user', '--pid', '--fork', '--mount', '--net', 'true'], { stdio: 'ignore', timeout: 5000 });
  return r.status === 0;
}

/**
 * Resolves `auto` to the strongest driver that works here: bwrap, then unshare, then none.
 * The probe runs once per process. An explicit driver is returned as is (not probed).
 */
export function detectDriver(requested: DriverName | 'auto' = 'auto'): DriverDetection {
  if (requested !== 'auto') return { driver: requested, reason: 'requested', unsafe: requested === 'none' };
  if (cached) return cached;
  if (bwrapWorks()) cached = { driver: 'bwrap', reason: 'bwrap is installed and works', unsafe: false };
  else if (unshareWorks()) cached = { driver: 'unshare', reason: 'bwrap missing or unusable; unshare works', unsafe: false };
  else cached = { driver: 'none', reason: 'neither bwrap nor unshare works: sandboxes are NOT isolated', unsafe: true };
  return cached;
}

/** Everything needed to lay out one sandbox's launch command. */
export interface LaunchPlan {
  driver: DriverName;
  /** Host directory shown as /workspace. */
  workdir: string;
  /** The runtime's state dir: hidden inside the sandbox. */
  stateDir: string;
  /** Host directory used as $HOME by the unshare and none drivers. */
  homeDir: string;
  rootfs: string | null;
  /**
   * An image sandbox: this writable copy-on-write root replaces `rootfs`; the shell starts in
   * `cwd` as the image's user (`uid`/`gid` inside the user namespace, `home` its $HOME). See
   * images/image-root.ts and images/image-user.ts.
   */
  imageRoot?: ImageRootPlan | null | undefined;
  network: boolean;
  limits: SandboxLimits;
  /** Host directory of the sandbox's control files (long commands, the REPL driver). */
  ctlDir: string;
  /** cgroup.procs file to join before exec, or null without a cgroup. */
  cgroupProcs: string | null;
  /** The memory cgroup's cgroup.procs to join as well, or null without one. */
  memoryCgroupProcs: string | null;
  /**
   * The freezer cgroup's cgroup.procs (a fork's freeze, #26) to join as well, before the driver
   * makes the sandbox's cgroup namespace (joined later, the group's path would show in the
   * sandbox's /proc/self/cgroup); null or absent without one.
   */
  freezerCgroupProcs?: string | null | undefined;
  /** Host uid/gid to run the sandbox as (the launcher drops to it before the driver); null keeps ours. */
  sandboxUid: number | null;
  /** The compiled seccomp filter (seccomp.ts), or null to run without one. */
  seccompFile: string | null;
  /** A resolv.conf to show as /etc/resolv.conf (the user-mode network's DNS), or null. */
  resolvConf: string | null;
  /**
   * The LLM proxy's host Unix socket for bwrap to bind at /run/rollout/llm.sock, or null (none,
   * or already mounted into the control dir by a root host: llm-proxy-forwarder.ts).
   */
  llmSocket?: string | null | undefined;
  /** Read-only binds (host path, path inside) under the control dir, whose mount points exist there: the harness store of a non-root host (harness-mount.ts). bwrap only. */
  roBinds?: Array<[string, string]> | undefined;
  /**
   * The sandbox's own PATH (the image's Env, the task's env), applied only at the last step
   * before its program: every host tool and every exec inside the root done with privileges or
   * before the seccomp filter is found on the trusted {@link TRUSTED_PATH} the launch is spawned
   * with, never on a PATH that may name a directory the policy writes (a venv in /workspace).
   */
  sandboxPath: string;
  /** The program to run inside (e.g. the shell). */
  command: string[];
  /**
   * bwrap only: a host file (readable by root alone) for bwrap's own arguments, which then reach
   * it through `--args` on an fd the launch prelude opens, instead of its command line. bwrap's
   * copy is pid 1 inside the sandbox, whose /proc/1/cmdline every sandboxed process can read: it
   * would name the state dir, the sandbox's directory and the overlay's. The caller writes
   * {@link Launch.argsData} there before spawning. Null or absent: the arguments stay inline.
   */
  argsFile?: string | null | undefined;
}

/**
 * The PATH every launch and REPL entry is spawned with (host-sandbox.ts): root-owned system
 * directories only, on the host and inside a sandbox's root alike.
 */
export const TRUSTED_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** What the launch needs of an image sandbox's root (host-sandbox.ts fills it in after mounting). */
export interface ImageRootPlan {
  merged: string;
  cwd: string;
  /** The image's User inside the sandbox's user namespace; the host uid stays `sandboxUid`. */
  uid: number;
  gid: number;
  home: string;
  /**
   * The pid holding the user + mount namespace the overlay is mounted in (unprivileged: see
   * images/overlay-mount.ts), which the driver is started in; null when the overlay is ours.
   */
  enterPid?: number | null | undefined;
}

/** The argv to spawn (first element is the file) plus the cwd and $HOME seen inside. */
export interface Launch {
  argv: string[];
  /** cwd for the spawn on the host. */
  hostCwd: string;
  /** $HOME inside the sandbox. */
  home: string;
  /** The control directory as seen inside the sandbox (read-only there under bwrap). */
  ctlInside: string;
  /** With {@link LaunchPlan.argsFile}: bwrap's arguments, NUL-terminated, to write to that file before the spawn. */
  argsData?: string | undefined;
}

/**
 * Runs inside `unshare` (root of a new user + mount namespace, mapped to the sandbox's
 * unprivileged host uid) and builds what bwrap builds: a tmpfs root holding read-only binds of
 * the host's top-level directories, fresh /proc, /dev and /sys binds (with tmpfs over
 * /dev/shm and /sys/fs/cgroup), size-capped tmpfs /tmp, tmpfs /run, the control dir read-only
 * at /run/rollout, the workdir at /workspace, tmpfs over the host's home and the state dir;
 * then chroots there and drops every capability (setpriv: empty bounding and inheritable sets,
 * no_new_privs) before the command, loading the seccomp filter with Python when there is one.
 * With a rootfs, that directory (bound read-only) replaces the host's directories; with an
 * image root (writable flag set) it stays writable and its /root is the image's.
 * Arguments: root mount point, workdir, control dir, host home, state dir, rootfs or '',
 * /tmp size in bytes, seccomp filter path inside or '', the Python loader, writable root ('1'
 * or ''), the directory to start in, the sandbox's PATH, the host's python3 or '', command...
 * Everything up to the command is found on the spawn's trusted PATH; the sandbox's own PATH is
 * set for the command alone, once the filter is in. With a host python3 that Python does the
 * last steps ({@link PY_UNSHARE_FINISH}), so the sandbox's root needs neither python3 nor
 * setpriv; without one they are the root's setpriv and python3 ({@link SECCOMP_EXEC}).
 */
const UNSHARE_PRELUDE = `set -e
R=$1; W=$2; C=$3; H=$4; S=$5; F=$6; T=$7; P=$8; X=$9; O=\${10}; D=\${11}; Q=\${12}; Y=\${13}; shift 13
if [ -n "$F" ]; then
  mount --rbind "$F" "$R"
else
  mount -t tmpfs -o mode=0755 rollout-root "$R"
  for e in /*; do
    n=\${e#/}
    case "$n" in proc|dev|tmp|run|sys|workspace|lost+found) continue;; esac
    if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$R/$n"
    elif [ -d "$e" ]; then mkdir "$R/$n"; mount --rbind "$e" "$R/$n"; mount -o remount,bind,ro "$R/$n"
    fi
  done
  mkdir "$R/proc" "$R/dev" "$R/tmp" "$R/run" "$R/workspace" "$R/sys"
fi
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
if [ -d "$R/dev/shm" ]; then mount -t tmpfs -o size=$T,nosuid,nodev tmpfs "$R/dev/shm"; fi
mount --rbind /sys "$R/sys"
if [ -d "$R/sys/fs/cgroup" ]; then mount -t tmpfs -o size=4k,ro tmpfs "$R/sys/fs/cgroup"; fi
mount -t tmpfs -o size=$T,nosuid,nodev tmpfs "$R/tmp"
mount -t tmpfs tmpfs "$R/run"
mkdir "$R/run/rollout"
mount --rbind "$C" "$R/run/rollout"
mount -o remount,bind,ro "$R/run/rollout"
mount --bind "$W" "$R/workspace"
if [ -f "$C/resolv.conf" ] && [ -f "$R/etc/resolv.conf" ]; then mount --bind "$C/resolv.conf" "$R/etc/resolv.conf"; fi
if [ -z "$F" ] && [ -d "$R$H" ]; then mount -t tmpfs tmpfs "$R$H"; fi
if [ -z "$F" ] && [ -d "$R$S" ]; then mount -t tmpfs tmpfs "$R$S"; fi
if [ -n "$F" ] && [ -z "$O" ]; then mount -t tmpfs tmpfs "$R/root"; fi
if [ -z "$O" ]; then mount -o remount,bind,ro "$R"; fi
if [ -n "$Y" ]; then
  exec "$Y" -I -S -c "$X" "$R" "$D" "$P" "$Q" "$@"
fi
if [ -n "$P" ]; then
  exec chroot "$R" setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- python3 -c "$X" "$P" "$Q" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$D" "$@"
fi
exec chroot "$R" setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- /bin/sh -c 'cd "$1" && PATH=$2 && shift 2 && exec "$@"' sh "$D" "$Q" "$@"`;

/**
 * What both host-Python programs below start with ({@link PY_UNSHARE_FINISH}, {@link PY_ENTER}):
 * every module they use imported at once — `os.execvp` imports `warnings` on first use, which
 * after their chroot would load it from the sandbox's root — the C library, `fail`, and the
 * bounding set's drop (all 64 bits; EINVAL past the kernel's last capability).
 */
const PY_HOST_PRELUDE = String.raw`
import ctypes, os, signal, sys
import warnings
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
def fail(what):
    raise SystemExit('rollout sandbox: %s: %s' % (what, os.strerror(ctypes.get_errno())))
def drop_bounding_set():
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            fail('PR_CAPBSET_DROP %d' % cap)
`;

/**
 * The unshare driver's last steps in the host's Python (`-I -S`, everything imported before the
 * chroot; no library is looked up after it): chroot to argv[1] and enter argv[2]; empty the
 * bounding, ambient and inheritable sets, as setpriv would; no_new_privs; install the filter at
 * argv[3] (if any); then exec argv[5:] on PATH argv[4]. A sandbox root without python3 (a
 * distroless or busybox image) gets its filter all the same.
 */
const PY_UNSHARE_FINISH = String.raw`${PY_HOST_PRELUDE}
root, cwd, bpf, path, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
os.chroot(root)
os.chdir(cwd)
drop_bounding_set()
if libc.prctl(47, 4, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
    fail('PR_CAP_AMBIENT_CLEAR_ALL')
class Header(ctypes.Structure):
    _fields_ = [('version', ctypes.c_uint32), ('pid', ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [('effective', ctypes.c_uint32), ('permitted', ctypes.c_uint32), ('inheritable', ctypes.c_uint32)]
hdr, data = Header(0x20080522, 0), (Data * 2)()
if libc.capget(ctypes.byref(hdr), data) != 0:
    fail('capget')
data[0].inheritable = data[1].inheritable = 0
if libc.capset(ctypes.byref(hdr), data) != 0:
    fail('capset')
if libc.prctl(38, 1, 0, 0, 0) != 0:
    fail('PR_SET_NO_NEW_PRIVS')
if bpf:
    prog = open(bpf, 'rb').read()
    if not prog or len(prog) % 8:
        raise SystemExit('rollout sandbox: bad seccomp filter ' + bpf)
    class Fprog(ctypes.Structure):
        _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_char_p)]
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_char_p))
    if libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:
        fail('PR_SET_SECCOMP')
os.environ['PATH'] = path
os.execvp(cmd[0], cmd)
`;

/** Python: install the filter at argv[1], then exec argv[3:] on PATH argv[2] (the unshare driver's loader). */
const SECCOMP_EXEC = `${PY_SECCOMP_LOADER}
import os, sys
_rollout_seccomp(sys.argv[1])
os.environ["PATH"] = sys.argv[2]
os.execvp(sys.argv[3], sys.argv[3:])
`;

/**
 * Joins the sandbox's cgroups (pids, memory, freezer) and opens the seccomp filter as fd 9 for
 * bwrap, then execs the rest. Fails closed: a cgroup that cannot be joined stops the launch
 * rather than running the sandbox unlimited. Arguments: pids procs, memory procs, filter,
 * freezer procs ('/dev/null' for none of each), command...
 */
const LAUNCH_PRELUDE = 'echo $$ > "$0" && echo $$ > "$1" && echo $$ > "$3" && exec 9<"$2" && shift 3 && exec "$@"';

/** {@link LAUNCH_PRELUDE} that also opens bwrap's argument file (`$4`) as fd 8 (bwrap reads and closes it). */
const LAUNCH_PRELUDE_ARGS = 'echo $$ > "$0" && echo $$ > "$1" && echo $$ > "$3" && exec 9<"$2" 8<"$4" && shift 4 && exec "$@"';

/**
 * Host root's way into a bwrap sandbox for the REPL, in the host's Python (`-I -S`: no site, no
 * PYTHON* variables; everything it uses is imported before it enters): join the target's
 * cgroup, ipc, uts, net, pid and mount namespaces, then its user namespace last; take its root
 * and cwd; empty the bounding set — possible only here, with the capabilities a user namespace
 * grants on entry (setns resets the set to full) and before the uid change ends them; become
 * uid/gid argv[2]/argv[3] with no groups and no_new_privs; fork (a pid namespace holds for
 * children) and exec argv[4:], forwarding SIGINT/SIGTERM and exiting with the child's status
 * (the child dies with it). nsenter leaves the bounding set full; this is what bwrap's
 * `--cap-drop ALL` gives the shell.
 */
const PY_ENTER = String.raw`${PY_HOST_PRELUDE}
def ok(r, what):
    if r != 0:
        fail(what)
pid, uid, gid, cmd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
fds = {n: os.open('/proc/%s/ns/%s' % (pid, n), os.O_RDONLY) for n in ('cgroup', 'ipc', 'uts', 'net', 'pid', 'mnt', 'user')}
root = os.open('/proc/%s/root' % pid, os.O_RDONLY)
cwd = os.open('/proc/%s/cwd' % pid, os.O_RDONLY)
os.setgroups([])
for n in ('cgroup', 'ipc', 'uts', 'net', 'pid', 'mnt', 'user'):
    ok(libc.setns(fds[n], 0), 'setns ' + n)
    os.close(fds[n])
os.fchdir(root)
os.chroot('.')
os.fchdir(cwd)
os.close(root)
os.close(cwd)
drop_bounding_set()
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
ok(libc.prctl(38, 1, 0, 0, 0), 'no_new_privs')
child = os.fork()
if child == 0:
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    os.execvp(cmd[0], cmd)
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda n, f: os.kill(child, n))
while True:
    try:
        _, status = os.waitpid(child, 0)
        break
    except InterruptedError:
        pass
sys.exit(os.waitstatus_to_exitcode(status))
`;

/** The host's python3 on the trusted PATH, or null (then the REPL is entered with nsenter). */
let hostPython: string | null | undefined;
function trustedHostPython(): string | null {
  if (hostPython === undefined) hostPython = TRUSTED_PATH.split(':').map((d) => path.join(d, 'python3')).find((p) => fs.existsSync(p)) ?? null;
  return hostPython;
}

/** setpriv argv that turns host root into the sandbox's uid with no capabilities left. */
function dropTo(uid: number, keepBounding = false): string[] {
  return [
    'setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--inh-caps=-all',
    // The unshare driver still needs its capabilities inside its own user namespace for the
    // prelude's mounts; it drops the bounding set itself after chroot.
    ...(keepBounding ? [] : ['--bounding-set=-all']),
    '--no-new-privs', '--',
  ];
}

function prlimitArgs(plan: Pick<LaunchPlan, 'limits' | 'cgroupProcs'>): string[] {
  const args = ['prlimit', `--as=${plan.limits.memoryBytes}`, `--fsize=${plan.limits.fileSizeBytes}`, `--cpu=${plan.limits.cpuSeconds}`, '--core=0'];
  // RLIMIT_NPROC counts per real uid and is ignored for root: it is only a fallback.
  if (!plan.cgroupProcs) args.push(`--nproc=${plan.limits.maxProcesses}`);
  args.push('--');
  return args;
}

const SKIP_TOP = new Set(['proc', 'dev', 'tmp', 'run', 'workspace', 'lost+found']);

/** `--ro-bind` / `--symlink` for each top-level entry of the host's root, skipping the ones we replace. */
function hostRootArgs(hideHome: string): string[] {
  const args: string[] = [];
  for (const name of fs.readdirSync('/')) {
    if (SKIP_TOP.has(name)) continue;
    const p = `/${name}`;
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', fs.readlinkSync(p), p);
    else if (st.isDirectory() && p !== hideHome) args.push('--ro-bind', p, p);
  }
  return args;
}

/**
 * Builds the launch command of a sandbox: a `/bin/sh` prelude that joins the cgroups and opens
 * the seccomp filter, then `prlimit` for memory / file size / CPU (and processes when there is
 * no cgroup), then — as root — `setpriv` down to the sandbox's unprivileged uid, then the
 * driver, then `plan.command`.
 *
 * Why the prelude: joining the cgroups before exec means nothing the sandbox starts can be
 * created outside them. Why `prlimit` and `setpriv` before the driver: rlimits and credentials
 * are inherited through bwrap's exec, and the driver itself never needs more. bwrap then runs
 * unprivileged: its user namespace maps uid/gid 1000 inside to the sandbox's host uid and
 * nothing else, so host root's files are "nobody"'s inside and out of reach.
 */
export function buildLaunch(plan: LaunchPlan, hostPython: string | null = trustedHostPython()): Launch {
  const hostHome = os.homedir();
  const prlimit = prlimitArgs(plan);
  let driverArgs: string[];
  let home: string;
  // Both drivers change to the sandbox's directory themselves (bwrap's --chdir, the unshare
  // prelude's chdir after its chroot): started in /, the sandbox's pid 1 has no host path in its
  // $PWD or cwd. (Inside the overlay's namespace, imageRoot.enterPid, the workdir is not ours anyway.)
  const hostCwd = plan.driver === 'none' && !plan.imageRoot?.enterPid ? plan.workdir : '/';
  let argsData: string | undefined;
  let ctlInside = plan.ctlDir;
  let drop = plan.sandboxUid !== null ? dropTo(plan.sandboxUid) : [];
  if (plan.driver === 'bwrap') {
    home = plan.imageRoot ? plan.imageRoot.home : plan.rootfs ? '/root' : hostHome;
    // Never --share-net: a networked sandbox gets user-mode networking in its own namespace (network.ts).
    driverArgs = ['bwrap', '--unshare-all', '--unshare-user', '--die-with-parent', '--cap-drop', 'ALL'];
    // As root, uid/gid 1000 inside maps to the sandbox's host uid; otherwise our own uid is kept
    // (one user namespace, which our uid may enter for the REPL).
    // An image sandbox runs as the image's User instead (images/image-user.ts), also unprivileged.
    if (plan.imageRoot) driverArgs.push('--uid', String(plan.imageRoot.uid), '--gid', String(plan.imageRoot.gid));
    else if (plan.sandboxUid !== null) driverArgs.push('--uid', String(INSIDE_UID), '--gid', String(INSIDE_UID));
    if (plan.seccompFile) driverArgs.push('--seccomp', '9');
    else driverArgs.push('--disable-userns');
    if (plan.imageRoot) driverArgs.push('--bind', plan.imageRoot.merged, '/');
    else if (plan.rootfs) driverArgs.push('--ro-bind', plan.rootfs, '/');
    else driverArgs.push(...hostRootArgs(topLevel(hostHome)));
    const size = String(plan.limits.tmpBytes);
    driverArgs.push('--dev', '/dev', '--proc', '/proc', '--size', size, '--tmpfs', '/tmp', '--size', size, '--tmpfs', '/dev/shm', '--tmpfs', '/run');
    if (plan.imageRoot) {
      // The image's own /root stays (its writes go to the sandbox's upper dir).
    } else if (!plan.rootfs) {
      // The host's home and the runtime's state dir must not be visible: a tmpfs over each.
      driverArgs.push('--tmpfs', hostHome);
      if (!isUnder(plan.stateDir, '/tmp') && !isUnder(plan.stateDir, '/run')) driverArgs.push('--tmpfs', plan.stateDir);
      // The host's cgroup tree names every other sandbox: hide it.
      driverArgs.push('--tmpfs', '/sys/fs/cgroup');
    } else driverArgs.push('--tmpfs', '/root');
    if (plan.resolvConf) driverArgs.push('--ro-bind', plan.resolvConf, '/etc/resolv.conf');
    ctlInside = '/run/rollout';
    driverArgs.push('--ro-bind', plan.ctlDir, ctlInside);
    if (plan.llmSocket) driverArgs.push('--bind', plan.llmSocket, `${ctlInside}/llm.sock`);
    for (const [src, dest] of plan.roBinds ?? []) driverArgs.push('--ro-bind', src, dest);
    // bwrap finds the command on the sandbox's PATH, unprivileged and under the filter by then.
    driverArgs.push('--setenv', 'PATH', plan.sandboxPath);
    driverArgs.push('--bind', plan.workdir, '/workspace', '--hostname', 'sandbox', ...(plan.imageRoot ? [] : ['--remount-ro', '/']), '--chdir', plan.imageRoot?.cwd ?? '/workspace', '--');
    if (plan.argsFile) {
      // Everything between `bwrap` and `--` goes through the file (no NUL can be in an argument).
      argsData = driverArgs.slice(1, -1).map((a) => `${a}\0`).join('');
      driverArgs = ['bwrap', '--args', '8', '--'];
    }
  } else if (plan.driver === 'unshare') {
    home = hostHome;
    ctlInside = '/run/rollout';
    if (plan.sandboxUid !== null) drop = dropTo(plan.sandboxUid, true);
    const img = plan.imageRoot;
    // An image's non-root User: the namespace maps that uid/gid (not root) to ours, and
    // --keep-caps carries the namespace's capabilities through the prelude's execs (ambient set)
    // for its mounts; setpriv empties them before the command, as for root.
    const map = img && (img.uid !== 0 || img.gid !== 0) ? [`--map-user=${img.uid}`, `--map-group=${img.gid}`, '--keep-caps'] : ['--map-root-user'];
    driverArgs = [
      'unshare', '--user', ...map, '--pid', '--fork', '--kill-child', '--mount', '--ipc', '--uts', '--net', '--cgroup', '--',
      '/bin/sh', '-c', UNSHARE_PRELUDE, 'sh', img ? path.join(path.dirname(path.dirname(img.merged)), 'root') : path.join(path.dirname(plan.workdir), 'root'),
      plan.workdir, plan.ctlDir, hostHome, plan.stateDir, img?.merged ?? plan.rootfs ?? '',
      String(plan.limits.tmpBytes), plan.seccompFile ? `${ctlInside}/${path.basename(plan.seccompFile)}` : '', hostPython ? PY_UNSHARE_FINISH : SECCOMP_EXEC, img ? '1' : '', img?.cwd ?? '/workspace', plan.sandboxPath, hostPython ?? '',
    ];
    if (img) home = img.home;
    else if (plan.rootfs) home = '/root';
  } else {
    home = plan.homeDir;
    driverArgs = [];
    drop = [];
  }
  const argv = [
    '/bin/sh', '-c', argsData !== undefined ? LAUNCH_PRELUDE_ARGS : LAUNCH_PRELUDE,
    plan.cgroupProcs ?? '/dev/null', plan.memoryCgroupProcs ?? '/dev/null', (plan.driver === 'bwrap' && plan.seccompFile) || '/dev/null', plan.freezerCgroupProcs ?? '/dev/null',
    ...(argsData !== undefined ? [plan.argsFile!] : []),
    ...prlimit, ...drop, ...(plan.imageRoot?.enterPid ? ['nsenter', '-t', String(plan.imageRoot.enterPid), '-U', '-m', '--preserve-credentials', '--'] : []), ...driverArgs, ...plan.command,
  ];
  return { argv, hostCwd, home, ctlInside, ...(argsData !== undefined ? { argsData } : {}) };
}

function topLevel(p: string): string {
  const parts = path.resolve(p).split('/').filter(Boolean);
  return parts.length === 1 ? `/${parts[0]}` : '';
}

function isUnder(p: string, dir: string): boolean {
  const rel = path.relative(dir, path.resolve(p));
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * The argv that runs `command` inside an already running sandbox: the same cgroup prelude and
 * rlimits, then `nsenter` into every namespace (and the root) of `targetPid`, a process of the
 * sandbox, ending as the sandbox's unprivileged user with no capabilities and no_new_privs.
 * Used for the Python REPL, so it shares the shell's /tmp, /workspace and network. The seccomp
 * filter is for `command` to load (the REPL driver does, before any cell).
 *
 * How each driver is entered, and why:
 * - bwrap as root: bwrap nests the shell's user namespace (uid 1000 → the sandbox uid) inside
 *   the one owning the other namespaces; the host's Python ({@link PY_ENTER}) enters those
 *   first, then the shell's user namespace last, empties the bounding set there and becomes uid
 *   1000 (or the image's User). Nothing from the sandbox's root ever runs as host root: a binary
 *   the policy wrote (say into a venv on the task's PATH) would otherwise run with every
 *   capability of the host. Without a host python3 the host's `nsenter` does the same entry
 *   (its two passes) but leaves the bounding set full — unusable still (no_new_privs, seccomp
 *   refuses new user namespaces), and the uid-0 image case then drops it with the image's
 *   setpriv.
 * - unshare: one user namespace owned by the sandbox uid, which therefore may enter it without
 *   privileges; `command` starts behind `setpriv`, which empties the bounding set first.
 * - bwrap not as root: one user namespace owned by our own uid, entered as is.
 * The time namespace is never entered: sandboxes share the host's, which no uid but root may join.
 * Spawned with the {@link TRUSTED_PATH}: `command` (the REPL's python3) is found on it too, as it
 * starts before its seccomp filter; the REPL driver takes the sandbox's PATH for its cells.
 * With the `none` driver there is nothing to enter and `command` runs as is under the limits.
 */
export function buildEnter(plan: Pick<LaunchPlan, 'driver' | 'limits' | 'cgroupProcs' | 'memoryCgroupProcs' | 'freezerCgroupProcs' | 'sandboxUid' | 'imageRoot'>, targetPid: number, command: string[], hostPython: string | null = trustedHostPython()): string[] {
  const t = String(targetPid);
  let enter: string[];
  // An image whose User is root: uid 0 in the sandbox's user namespace would keep that
  // namespace's capabilities across the exec of `command`, so the image's own setpriv (util-linux,
  // in every Debian-based image) empties them first, as bwrap's --cap-drop does for the shell.
  const img = plan.imageRoot;
  const rootDrop = img && img.uid === 0 && plan.driver === 'bwrap' ? ['setpriv', '--inh-caps=-all', '--bounding-set=-all', '--no-new-privs', '--'] : [];
  if (plan.driver === 'none') enter = [];
  else if (plan.driver === 'bwrap' && plan.sandboxUid !== null) {
    const uid = String(img ? img.uid : INSIDE_UID);
    const gid = String(img ? img.gid : INSIDE_UID);
    enter = hostPython
      ? [hostPython, '-I', '-S', '-c', PY_ENTER, t, uid, gid]
      : ['setpriv', '--no-new-privs', '--', 'nsenter', '-t', t, '-U', '-C', '-i', '-u', '-n', '-p', '-m', '-r', '-w', '-S', uid, '-G', gid, '--', ...rootDrop];
  } else if (plan.driver === 'unshare') {
    const drop = plan.sandboxUid !== null ? dropTo(plan.sandboxUid, true) : [];
    enter = [...drop, 'nsenter', '-t', t, '-U', '-C', '-i', '-u', '-n', '-p', '-m', '--preserve-credentials', '-r', '-w', '--', 'setpriv', '--inh-caps=-all', '--bounding-set=-all', '--no-new-privs', '--'];
  } else enter = ['nsenter', '-t', t, '-U', '-C', '-i', '-u', '-n', '-p', '-m', '--preserve-credentials', '-r', '-w', '--', ...rootDrop];
  return ['/bin/sh', '-c', LAUNCH_PRELUDE, plan.cgroupProcs ?? '/dev/null', plan.memoryCgroupProcs ?? '/dev/null', '/dev/null', plan.freezerCgroupProcs ?? '/dev/null', ...prlimitArgs(plan), ...enter, ...command];
}
