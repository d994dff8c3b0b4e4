import fs from 'node:fs';
import path from 'node:path';
import type { ResolvedImage } from '../../protocol/image.js';
import { WORKSPACE } from '../workspace-path.js';
import { mountOverlay, overlayDirs, type OverlayKind } from './overlay-mount.js';

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

/** Host path of the workspace of an image sandbox (inside the merged overlay). */
export function imageWorkdir(sandboxDir: string, image: ResolvedImage): string {
  return path.join(overlayDirs(sandboxDir).merged, imageCwd(image));
}

/**
 * Mounts the overlay and creates the working directory in it (in the upper dir).
 * @throws SandboxError `OVERLAY_FAILED` when no overlay can be mounted.
 */
export async function mountImageRoot(sandboxDir: string, image: ResolvedImage): Promise<OverlayKind> {
  const kind = await mountOverlay(image.lowerDirs, overlayDirs(sandboxDir));
  fs.mkdirSync(imageWorkdir(sandboxDir, image), { recursive: true });
  // bwrap runs as the sandbox's unprivileged uid and cannot create mount points in a root-owned
  // image root: make them now, as root (into the sandbox's upper dir, never the cache).
  const merged = overlayDirs(sandboxDir).merged;
  for (const d of ['dev', 'proc', 'tmp', 'run', 'workspace', 'etc']) fs.mkdirSync(path.join(merged, d), { recursive: true });
  const resolv = path.join(merged, 'etc', 'resolv.conf');
  if (!fs.existsSync(resolv)) fs.writeFileSync(resolv, '');
  return kind;
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
