import fs from 'node:fs';
import path from 'node:path';
import type { ResolvedImage } from '../../protocol/image.js';
import { TaskError, toRolloutError } from '../../errors.js';
import { removeSandboxFs } from '../sandbox-fs.js';
import { WORKSPACE } from '../workspace-path.js';
import { mountOverlay, overlayDirs, releaseOverlay, type MountedOverlay } from './overlay-mount.js';
import { imageUser, type ImageUser } from './image-user.js';
import { at, closeQuietly, DIR_FLAGS, openFileInRoot, openNoSymlinks, resolveInRoot } from './root-fs.js';

/**
 * A sandbox made from an image, as the sandbox host lays it out: the image's layers under a
 * per-sandbox upper dir, mounted at `<sandbox dir>/ov/merged` and bound as the sandbox's
 * writable root. The image's WorkingDir (else /workspace) is the sandbox's workspace: the shell
 * starts there, the editor and file calls work there, and it is also bound at /workspace so the
 * tools' /workspace paths reach it.
 */

/** The image's working directory inside the sandbox: its WorkingDir, else /workspace. */
export function imageCwd(image: ResolvedImage): string {
  const wd = image.workingDir && path.posix.isAbsolute(image.workingDir) ? path.posix.normalize(image.workingDir) : WORKSPACE;
  return wd === '/' ? WORKSPACE : wd;
}

/** A mounted image root: the overlay, the image's user and its working directory. */
export interface ImageMount extends MountedOverlay {
  user: ImageUser;
  /**
   * Host path of the workspace (the image's WorkingDir resolved inside the image root, every
   * symlink followed as the sandbox's own root would: `w -> /var/tmp/X` leads to the image's
   * /var/tmp/X, never the host's). At the time of mounting no component of it is a symlink; the
   * sandbox can change that later, so it is used only before any sandboxed process runs.
   */
  workdir: string;
}

/**
 * Mounts the overlay, creates the working directory in it (in the upper dir) and resolves the
 * image's `User` against the image's /etc/passwd. The user's home directory itself (not its
 * contents) is given to `hostUid`, the sandbox's host uid, which is that user inside: so the
 * user may create ~/.gitconfig, ~/.cache and the like, as in the image's own container.
 *
 * Every path the host touches in the image (the WorkingDir, the mount points bwrap needs,
 * /etc/resolv.conf, the home) is resolved from a directory fd of the overlay's root, each
 * component opened with `O_NOFOLLOW` and each symlink resolved inside the root as a chroot
 * would (root-fs.ts): an image whose links point at host paths makes the host write only its
 * own upper dir.
 *
 * On a failure after mounting, the overlay is released; with `removeOnFailure` (a sandbox being
 * made) the sandbox's fs and directory are removed as well. `top`: a fork branch's snapshot
 * layers, above the image's (overlay-mount.ts).
 * @throws SandboxError `OVERLAY_FAILED` when no overlay can be mounted; TaskError
 *   `IMAGE_USER_UNKNOWN` when the User names no user of the image, `IMAGE_WORKDIR` when the
 *   WorkingDir cannot be made a directory in it.
 */
export async function mountImageRoot(sandboxDir: string, image: ResolvedImage, hostUid: number | null, opts: { removeOnFailure?: boolean; top?: readonly string[] | undefined } = {}): Promise<ImageMount> {
  try {
    const ov = await mountOverlay(image.lowerDirs, overlayDirs(sandboxDir), { top: opts.top });
    try {
      return { ...ov, ...(await prepareRoot(sandboxDir, image, hostUid, ov.via)) };
    } catch (err) {
      await releaseOverlay(sandboxDir);
      throw err;
    }
  } catch (err) {
    // A new sandbox (nothing else made yet but its fs): its directory goes too.
    if (opts.removeOnFailure) {
      removeSandboxFs(sandboxDir);
      fs.rmSync(sandboxDir, { recursive: true, force: true });
    }
    throw err;
  }
}

async function prepareRoot(sandboxDir: string, image: ResolvedImage, hostUid: number | null, via: string): Promise<{ user: ImageUser; workdir: string }> {
  const merged = via + overlayDirs(sandboxDir).merged;
  const rootFd = fs.openSync(merged, DIR_FLAGS);
  try {
    let workParts: string[];
    try {
      const wd = resolveInRoot(rootFd, imageCwd(image), { mkdirs: true });
      closeQuietly(wd.fd);
      workParts = wd.parts;
    } catch (err) {
      throw new TaskError(`image '${image.ref}': its WorkingDir ${imageCwd(image)} cannot be made a directory in the image (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { code: 'IMAGE_WORKDIR', stage: 'init', details: { image: image.ref } });
    }
    // bwrap runs as the sandbox's unprivileged uid and cannot create mount points in a root-owned
    // image root: make them now, as root (into the sandbox's upper dir, never the cache). `sys`
    // and `root` are the unshare driver's. Resolved in the root: `tmp -> /var/tmp` stays the image's.
    for (const d of ['dev', 'proc', 'tmp', 'run', 'workspace', 'etc', 'sys']) {
      try {
        closeQuietly(resolveInRoot(rootFd, d, { mkdirs: true }).fd);
      } catch {
        // a file in its place: bwrap says so when it needs the mount point
      }
    }
    requireShell(rootFd, image);
    ensureResolvConf(rootFd);
    const user = await imageUser(rootFd, image);
    if (hostUid !== null && user.home !== '/') giveHome(rootFd, user.home, hostUid);
    return { user, workdir: path.join(merged, ...workParts) };
  } finally {
    closeQuietly(rootFd);
  }
}

/**
 * The sandbox's shell is the image's `/bin/bash`, run by its absolute path (host-sandbox.ts). An
 * image without it would fail every shell start as an infrastructure fault, retried in vain: it
 * is the task's image that is wrong, so a TaskError `IMAGE_NO_SHELL` naming the image, at once.
 * Resolved in the image root (`bin -> usr/bin` is the image's, never the host's).
 */
function requireShell(rootFd: number, image: ResolvedImage): void {
  const fd = openFileInRoot(rootFd, '/bin/bash');
  const executable = fd !== null && (fs.fstatSync(fd).mode & 0o111) !== 0;
  closeQuietly(fd);
  if (!executable) {
    throw new TaskError(`image '${image.ref}' has no ${fd === null ? '' : 'executable '}/bin/bash: sandboxes run the image's bash (add it to the image, e.g. apt-get install bash or apk add bash)`, { code: 'IMAGE_NO_SHELL', stage: 'init', details: { image: image.ref } });
  }
}

/**
 * Makes /etc/resolv.conf a regular file in the image's upper dir when it is missing or is not
 * one (a symlink, absolute or not, is replaced, never written through): the DNS file of a
 * networked sandbox is bound on it.
 */
function ensureResolvConf(rootFd: number): void {
  let etc: number;
  try {
    etc = resolveInRoot(rootFd, 'etc', { mkdirs: true }).fd;
  } catch {
    return;
  }
  try {
    const st = fs.lstatSync(at(etc, 'resolv.conf'), { throwIfNoEntry: false });
    if (st?.isFile()) return;
    if (st && !st.isDirectory()) fs.unlinkSync(at(etc, 'resolv.conf'));
    if (!st || !st.isDirectory()) closeQuietly(fs.openSync(at(etc, 'resolv.conf'), fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o644));
  } finally {
    closeQuietly(etc);
  }
}

/** Gives the home directory (reached without following any link: one that passes a link is left alone) to `uid`. */
function giveHome(rootFd: number, home: string, uid: number): void {
  const parts = home.split('/').filter((c) => c !== '' && c !== '.');
  if (parts.length === 0 || parts.includes('..')) return;
  let fd: number;
  try {
    fd = openNoSymlinks(rootFd, parts);
  } catch {
    return;
  }
  try {
    fs.fchownSync(fd, uid, uid);
  } finally {
    closeQuietly(fd);
  }
}

/** The shell environment an image adds (its config's Env), under the sandbox's own defaults and above nothing else. */
export function imageEnv(image: ResolvedImage | null | undefined): Record<string, string> {
  return image ? { ...image.env } : {};
}

/**
 * Maps a path the model gave under the image's WorkingDir (e.g. `/testbed/x.py`) to the same
 * file under /workspace, which the editor and file calls understand. Other paths pass as they are.
 */
export function toWorkspaceAlias(image: ResolvedImage | null | undefined, p: string): string {
  if (!image || !path.posix.isAbsolute(p)) return p;
  const cwd = imageCwd(image);
  if (cwd === WORKSPACE) return p;
  const n = path.posix.normalize(p);
  if (n === cwd) return WORKSPACE;
  if (n.startsWith(`${cwd}/`)) return WORKSPACE + n.slice(cwd.length);
  return p;
}

/**
 * The error of a shell that did not start behind the image's Entrypoint: a TaskError
 * `IMAGE_ENTRYPOINT_FAILED` naming the image and the entrypoint (an entrypoint that exits, or
 * never runs its arguments, fails every start alike: retrying would not help). Without an
 * entrypoint, `err` as it is.
 */
export function entrypointFailed(image: ResolvedImage | null | undefined, err: unknown): unknown {
  if (!image?.entrypoint?.length || err instanceof TaskError) return err;
  const e = toRolloutError(err);
  return new TaskError(`image '${image.ref}': the shell did not start behind its Entrypoint ${JSON.stringify(image.entrypoint)} (it must run its arguments, e.g. exec "$@"): ${e.message}`, {
    code: 'IMAGE_ENTRYPOINT_FAILED',
    stage: 'init',
    details: { image: image.ref, entrypoint: image.entrypoint },
    cause: err,
  });
}
