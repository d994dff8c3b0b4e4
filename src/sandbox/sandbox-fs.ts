import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { SandboxError, ValidationError } from '../errors.js';
import { isRoot } from './sandbox-user.js';

/**
 * The files of one sandbox on the host: `<dir>/fs` holds `workspace/` (shown as /workspace),
 * `ctl/` (control files, read-only inside) and `home/` (the `none` driver's $HOME).
 *
 * As root, `<dir>/fs` is a tmpfs of `workdirBytes` (nosuid, nodev): the workspace's total size
 * is capped (a write past it fails with ENOSPC), removal is one unmount whatever the sandbox
 * built inside (deep trees, odd modes), and the mount root hides the host path from
 * /proc/self/mountinfo inside the sandbox. Sandbox hosts run in a private mount namespace (see
 * {@link privateMountsPrefix}), so a host that dies takes its mounts with it.
 * Without root the same layout is made of plain directories, uncapped.
 */
export interface SandboxFs {
  root: string;
  workdir: string;
  ctlDir: string;
  homeDir: string;
  /** True when `root` is a size-capped tmpfs. */
  capped: boolean;
}

/**
 * Makes `<dir>/fs` and its layout. `uid` (the sandbox's host uid, or null) gets the workspace
 * and home; every directory from `/` down to the workspace must be searchable by it, which is
 * checked here (and granted, o+x, on the state dir's own directories from `stateDir` down).
 * @throws SandboxError naming the directory that the sandbox's uid cannot pass, or when the
 *   tmpfs cannot be mounted although this process is root.
 */
export function makeSandboxFs(dir: string, opts: { bytes: number; uid: number | null; stateDir: string; lowerLayers?: readonly string[] | undefined }): SandboxFs {
  const root = path.join(dir, 'fs');
  fs.mkdirSync(root, { recursive: true });
  let capped = false;
  const layers = opts.lowerLayers;
  if (layers && !isRoot()) throw new SandboxError("a fork branch's workspace overlay needs root", { code: 'FORK_FAILED', stage: 'init' });
  if (layers) {
    // One process for the tmpfs and the overlay on it (a spawn from this process is the dearest step of a branch).
    const st = fs.statSync(layers[0]!);
    const r = spawnSync('/bin/sh', ['-c', BRANCH_MOUNT, 'sh', root, `size=${opts.bytes},mode=0711,nosuid,nodev`, `${st.uid}:${st.gid}`, (st.mode & 0o7777).toString(8), ...layers], { encoding: 'utf8' });
    if (r.status !== 0) throw new SandboxError(`cannot mount a fork branch's workspace: ${(r.stderr || r.error?.message || '').trim()}`, { code: 'FORK_FAILED', stage: 'init' });
    capped = true;
  } else if (isRoot()) {
    const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${opts.bytes},mode=0711,nosuid,nodev`, 'rollout-sandbox', root], { encoding: 'utf8' });
    if (r.status !== 0) throw new SandboxError(`cannot mount the sandbox's tmpfs: ${(r.stderr || r.error?.message || '').trim()}`, { code: 'SANDBOX_FS', stage: 'init' });
    capped = true;
  }
  const layout: SandboxFs = { root, workdir: path.join(root, 'workspace'), ctlDir: path.join(root, 'ctl'), homeDir: path.join(root, 'home'), capped };
  if (!layers) fs.mkdirSync(layout.workdir, { mode: 0o755 });
  fs.mkdirSync(layout.ctlDir, { mode: 0o755 });
  fs.mkdirSync(layout.homeDir, { mode: 0o755 });
  if (opts.uid !== null) {
    // A branch's merged root already shows its parent's owner and mode (a chown would copy it up for nothing).
    if (!layers) fs.chownSync(layout.workdir, opts.uid, opts.uid);
    fs.chownSync(layout.homeDir, opts.uid, opts.uid);
    grantSearch(opts.stateDir, root);
  }
  return layout;
}

/**
 * A fork branch's filesystem (#26), in one `sh` run with `$1` the root, `$2` the tmpfs options,
 * `$3`/`$4` the owner and octal mode of the top lower layer's root, then the lower layers, top
 * first: the branch's tmpfs at the root (size-capped: what the branch writes counts against it),
 * and on it the workspace, an overlay of the layers (read-only, shared) under `upper`. The upper
 * root takes the top layer root's owner and mode (the merged root shows the upper's). The
 * overlay's options name `l<i>`, links in the root to the layers, relative to it: they show in
 * the sandbox's mountinfo, which must name no host path.
 */
const BRANCH_MOUNT = [
  'set -e',
  'mount -t tmpfs -o "$2" rollout-sandbox "$1"',
  'cd "$1"',
  'mkdir -m 755 upper workspace',
  'mkdir -m 700 ovl-work',
  'chown "$3" upper',
  'chmod "$4" upper',
  'shift 4',
  'i=0',
  'lowers=',
  'for l; do ln -s -- "$l" "l$i"; lowers="${lowers:+$lowers:}l$i"; i=$((i + 1)); done',
  'mount -t overlay overlay -o "lowerdir=$lowers,upperdir=upper,workdir=ovl-work,index=off,xino=off" workspace',
].join('\n');

/**
 * Gives the sandbox uid the workspace's seeded files (seeding runs as root, before any sandboxed
 * process exists, so nothing can swap a path under `chown -R`, which never follows links).
 * @throws SandboxError when chown fails.
 */
export function chownTree(p: string, uid: number): void {
  const r = spawnSync('chown', ['-R', '--no-dereference', `${uid}:${uid}`, p], { encoding: 'utf8' });
  if (r.status !== 0) throw new SandboxError(`cannot chown the workspace: ${(r.stderr || '').trim()}`, { code: 'SANDBOX_FS', stage: 'init' });
}

/**
 * Unmounts `<dir>/fs` (lazily: a process still holding a file there cannot block it). Never
 * throws; a missing or unmounted directory is fine.
 */
export function removeSandboxFs(dir: string): void {
  const root = path.join(dir, 'fs');
  if (!isRoot() || !isMountPoint(root)) return;
  spawnSync('umount', ['-l', root], { stdio: 'ignore' });
}

/**
 * Bind-mounts the directory `fd` holds onto `target` (created here, mode 0755), as root: the
 * mount names that very directory, resolved once through the fd's magic link, whatever its path
 * becomes afterwards (`mount --no-canonicalize`: mount(8) does not re-walk the path itself).
 * @throws SandboxError when the mount fails.
 */
export function pinDir(fd: number, target: string): void {
  fs.mkdirSync(target, { mode: 0o755 });
  const r = spawnSync('mount', ['--no-canonicalize', '--bind', `/proc/${process.pid}/fd/${fd}`, target], { encoding: 'utf8' });
  if (r.status !== 0) throw new SandboxError(`cannot bind the workspace: ${(r.stderr || r.error?.message || '').trim()}`, { code: 'SANDBOX_FS', stage: 'init' });
}

/** Undoes {@link pinDir} (lazily: a process still in it cannot block it). Never throws. */
export function unpinDir(target: string): void {
  if (isMountPoint(target)) spawnSync('umount', ['-l', target], { stdio: 'ignore' });
}

/** True when `p` is a mount point (its device differs from its parent's). */
export function isMountPoint(p: string): boolean {
  try {
    return fs.statSync(p).dev !== fs.statSync(path.dirname(p)).dev;
  } catch {
    return false;
  }
}

/**
 * The argv prefix that starts a sandbox host in its own mount namespace when this process is
 * root (`unshare --mount --propagation private`, which execs in place: the host keeps its pid).
 * The hosts' tmpfs workdirs then exist only there and vanish with the host, even on SIGKILL.
 */
export function privateMountsPrefix(): string[] {
  return isRoot() ? ['unshare', '--mount', '--propagation', 'private'] : [];
}

/**
 * Checks that `rootfs` can be the root of a sandbox: a directory that, as root, the sandboxes'
 * unprivileged uid can reach (every directory from / down to it searchable by others; bwrap
 * binds it as that uid).
 * @throws ValidationError naming `rootfs` otherwise (e.g. a rootfs under /root, mode 0700).
 */
export function checkRootfs(rootfs: string): void {
  const bad = (message: string): ValidationError => new ValidationError(`rootfs ${rootfs}: ${message}`, [{ path: 'rootfs', message }]);
  let real: string;
  try {
    real = fs.realpathSync(rootfs);
    if (!fs.statSync(real).isDirectory()) throw bad('not a directory');
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    throw bad('no such directory');
  }
  if (!isRoot()) return;
  for (let p = real; ; p = path.dirname(p)) {
    if (!(fs.statSync(p).mode & 0o001)) {
      throw bad(`sandboxed processes run as an unprivileged uid and cannot pass ${p} (chmod o+x ${p}, or keep the rootfs under a searchable path: scripts/make-rootfs.sh puts it in /var/cache/rollout-runtime/rootfs as root)`);
    }
    if (p === '/' || p === path.dirname(p)) break;
  }
}

/**
 * Adds o+x to `stateDir` and each directory below it down to `target`, and checks that every
 * directory above `stateDir` is searchable by others: bwrap runs as the sandbox's uid and must
 * reach the workspace to bind it. Search (x) without read (r) lets no one list the directory.
 */
export function grantSearch(stateDir: string, target: string): void {
  const top = path.resolve(stateDir);
  for (let p = path.dirname(path.resolve(target)); ; p = path.dirname(p)) {
    const st = fs.statSync(p);
    if (p === top || p.startsWith(`${top}/`)) {
      if (!(st.mode & 0o001)) fs.chmodSync(p, (st.mode & 0o7777) | 0o001);
    } else if (!(st.mode & 0o001)) {
      throw new SandboxError(`sandboxed processes run as an unprivileged uid and cannot pass ${p} on the way to the state dir; choose a state dir under a searchable path (chmod o+x ${p}, or e.g. /var/lib/rollout)`, { code: 'STATE_DIR_UNREACHABLE', stage: 'init' });
    }
    if (p === '/' || p === path.dirname(p)) break;
  }
}
