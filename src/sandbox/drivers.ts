import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import type { SandboxLimits } from '../protocol/sandbox.js';

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
  /** An image sandbox (bwrap): this writable copy-on-write root replaces `rootfs`; the shell starts in `cwd`. See images/image-root.ts. */
  imageRoot?: { merged: string; cwd: string } | null | undefined;
  network: boolean;
  limits: SandboxLimits;
  /** Host directory of the sandbox's control files (long commands, the REPL driver). */
  ctlDir: string;
  /** cgroup.procs file to join before exec, or null without a cgroup. */
  cgroupProcs: string | null;
  /** The program to run inside (e.g. the shell). */
  command: string[];
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
}

/**
 * Runs inside `unshare` (root of a new user + mount namespace) and builds what bwrap builds:
 * a tmpfs root holding read-only binds of the host's top-level directories, fresh /proc,
 * /dev and /sys binds, tmpfs /tmp and /run, the control dir read-only at /run/rollout, the
 * workdir at /workspace, tmpfs over the host's home and the state dir; then chroots there.
 * With a rootfs, that directory (bound read-only) replaces the host's directories.
 * Arguments: root mount point, workdir, control dir, host home, state dir, rootfs or '', command...
 */
const UNSHARE_PRELUDE = `set -e
R=$1; W=$2; C=$3; H=$4; S=$5; F=$6; shift 6
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
mount --rbind /sys "$R/sys"
mount -t tmpfs tmpfs "$R/tmp"
mount -t tmpfs tmpfs "$R/run"
mkdir "$R/run/rollout"
mount --bind "$C" "$R/run/rollout"
mount -o remount,bind,ro "$R/run/rollout"
mount --bind "$W" "$R/workspace"
if [ -z "$F" ] && [ -d "$R$H" ]; then mount -t tmpfs tmpfs "$R$H"; fi
if [ -z "$F" ] && [ -d "$R$S" ]; then mount -t tmpfs tmpfs "$R$S"; fi
if [ -n "$F" ]; then mount -t tmpfs tmpfs "$R/root"; mount -o remount,bind,ro "$R"; else mount -o remount,ro "$R"; fi
exec chroot "$R" /bin/sh -c 'cd /workspace && exec "$@"' sh "$@"`;

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
 * Builds the launch command of a sandbox: a `/bin/sh` prelude that joins the pids cgroup,
 * then `prlimit` for memory / file size / CPU (and processes when there is no cgroup), then
 * the driver, then `plan.command`.
 *
 * Why the prelude: joining the cgroup before exec means nothing the sandbox starts can be
 * created outside it. Why `prlimit` before the driver: rlimits are inherited through bwrap's
 * exec, and the driver itself never needs more.
 */
export function buildLaunch(plan: LaunchPlan): Launch {
  const hostHome = os.homedir();
  const prlimit = [
    'prlimit',
    `--as=${plan.limits.memoryBytes}`,
    `--fsize=${plan.limits.fileSizeBytes}`,
    `--cpu=${plan.limits.cpuSeconds}`,
    `--core=0`,
  ];
  // RLIMIT_NPROC counts per real uid and is ignored for root: it is only a fallback.
  if (!plan.cgroupProcs) prlimit.push(`--nproc=${plan.limits.maxProcesses}`);
  prlimit.push('--');
  let driverArgs: string[];
  let home: string;
  const hostCwd = plan.workdir;
  let ctlInside = plan.ctlDir;
  if (plan.driver === 'bwrap') {
    home = plan.rootfs || plan.imageRoot ? '/root' : hostHome;
    driverArgs = ['bwrap', '--unshare-all', ...(plan.network ? ['--share-net'] : []), '--die-with-parent'];
    if (plan.imageRoot) driverArgs.push('--bind', plan.imageRoot.merged, '/');
    else if (plan.rootfs) driverArgs.push('--ro-bind', plan.rootfs, '/');
    else driverArgs.push(...hostRootArgs(topLevel(hostHome)));
    driverArgs.push('--dev', '/dev', '--proc', '/proc', '--tmpfs', '/tmp', '--tmpfs', '/run');
    if (plan.imageRoot) {
      // The image's own /root stays (its writes go to the sandbox's upper dir).
    } else if (!plan.rootfs) {
      // The host's home and the runtime's state dir must not be visible: a tmpfs over each.
      driverArgs.push('--tmpfs', hostHome);
      if (!isUnder(plan.stateDir, '/tmp') && !isUnder(plan.stateDir, '/run')) driverArgs.push('--tmpfs', plan.stateDir);
    } else driverArgs.push('--tmpfs', '/root');
    ctlInside = '/run/rollout';
    driverArgs.push('--ro-bind', plan.ctlDir, ctlInside);
    driverArgs.push('--bind', plan.workdir, '/workspace', '--hostname', 'sandbox', ...(plan.imageRoot ? [] : ['--remount-ro', '/']), '--chdir', plan.imageRoot?.cwd ?? '/workspace', '--');
  } else if (plan.driver === 'unshare') {
    home = hostHome;
    ctlInside = '/run/rollout';
    driverArgs = [
      'unshare', '--user', '--map-root-user', '--pid', '--fork', '--kill-child', '--mount', '--ipc', '--uts', ...(plan.network ? [] : ['--net']), '--',
      '/bin/sh', '-c', UNSHARE_PRELUDE, 'sh', path.join(path.dirname(plan.ctlDir), 'root'), plan.workdir, plan.ctlDir, hostHome, plan.stateDir, plan.rootfs ?? '',
    ];
    if (plan.rootfs) home = '/root';
  } else {
    home = plan.homeDir;
    driverArgs = [];
  }
  const argv = ['/bin/sh', '-c', 'echo $$ > "$0" 2>/dev/null; exec "$@"', plan.cgroupProcs ?? '/dev/null', ...prlimit, ...driverArgs, ...plan.command];
  return { argv, hostCwd, home, ctlInside };
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
 * sandbox. Used for the Python REPL, so it shares the shell's /tmp, /workspace and network.
 * With the `none` driver there is nothing to enter and `command` runs as is under the limits.
 */
export function buildEnter(plan: Pick<LaunchPlan, 'driver' | 'limits' | 'cgroupProcs'>, targetPid: number, command: string[]): string[] {
  const prlimit = ['prlimit', `--as=${plan.limits.memoryBytes}`, `--fsize=${plan.limits.fileSizeBytes}`, `--cpu=${plan.limits.cpuSeconds}`, '--core=0'];
  if (!plan.cgroupProcs) prlimit.push(`--nproc=${plan.limits.maxProcesses}`);
  prlimit.push('--');
  const enter = plan.driver === 'none' ? [] : ['nsenter', '-t', String(targetPid), '-a', '-r', '-w', '--'];
  return ['/bin/sh', '-c', 'echo $$ > "$0" 2>/dev/null; exec "$@"', plan.cgroupProcs ?? '/dev/null', ...prlimit, ...enter, ...command];
}
