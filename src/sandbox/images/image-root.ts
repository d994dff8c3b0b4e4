import fs from 'node:fs';
import path from 'node:path';
import type { ResolvedImage } from '../../protocol/image.js';
import { TaskError, toRolloutError } from '../../errors.js';
import { removeSandboxFs } from '../sandbox-fs.js';
import { WORKSPACE } from '../workspace-path.js';
import { mountOverlay, overlayDirs, releaseOverlay, type MountedOverlay } from './overlay-mount.js';
import { imageUser, type ImageUser } from './image-user.js';

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

/**
 * Host path of the workspace of an image sandbox (inside the merged overlay), seen through
 * `via` (MountedOverlay.via: '' unless the overlay lives in a user namespace of its own).
 */
export function imageWorkdir(sandboxDir: string, image: ResolvedImage, via = ''): string {
  return via + path.join(overlayDirs(sandboxDir).merged, imageCwd(image));
}

/** A mounted image root: the overlay and the image's user. */
export interface ImageMount extends MountedOverlay {
  user: ImageUser;
}

/**
 * Mounts the overlay, creates the working directory in it (in the upper dir) and resolves the
 * image's `User` against the image's /etc/passwd. The user's home directory itself (not its
 * contents) is given to `hostUid`, the sandbox's host uid, which is that user inside: so the
 * user may create ~/.gitconfig, ~/.cache and the like, as in the image's own container.
 * On a failure after mounting, the overlay is released; with `removeOnFailure` (a sandbox being
 * made) the sandbox's fs and directory are removed as well.
 * @throws SandboxError `OVERLAY_FAILED` when no overlay can be mounted; TaskError
 *   `IMAGE_USER_UNKNOWN` when the User names no user of the image.
 */
export async function mountImageRoot(sandboxDir: string, image: ResolvedImage, hostUid: number | null, opts: { removeOnFailure?: boolean } = {}): Promise<ImageMount> {
  try {
    const ov = await mountOverlay(image.lowerDirs, overlayDirs(sandboxDir));
    try {
      return { ...ov, user: await prepareRoot(sandboxDir, image, hostUid, ov.via) };
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

async function prepareRoot(sandboxDir: string, image: ResolvedImage, hostUid: number | null, via: string): Promise<ImageUser> {
  fs.mkdirSync(imageWorkdir(sandboxDir, image, via), { recursive: true });
  // bwrap runs as the sandbox's unprivileged uid and cannot create mount points in a root-owned
  // image root: make them now, as root (into the sandbox's upper dir, never the cache). `sys`
  // and `root` are the unshare driver's.
  const merged = via + overlayDirs(sandboxDir).merged;
  for (const d of ['dev', 'proc', 'tmp', 'run', 'workspace', 'etc', 'sys']) fs.mkdirSync(path.join(merged, d), { recursive: true });
  const resolv = path.join(merged, 'etc', 'resolv.conf');
  if (!fs.existsSync(resolv)) fs.writeFileSync(resolv, '');
  const user = await imageUser(merged, image);
  if (hostUid !== null && user.home !== '/') {
    // lstat of each component: a home that is (or passes) a symlink is left alone, never followed out of the root.
    const rel = user.home.split('/').filter(Boolean);
    let p = merged;
    let ok = true;
    for (const c of rel) {
      p = path.join(p, c);
      const st = fs.lstatSync(p, { throwIfNoEntry: false });
      if (!st || !st.isDirectory()) {
        ok = false;
        break;
      }
    }
    if (ok && rel.length && !rel.includes('..')) fs.lchownSync(p, hostUid, hostUid);
  }
  return user;
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
