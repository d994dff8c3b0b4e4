import fs from 'node:fs';
import path from 'node:path';

/** Where the workspace appears inside every sandbox. */
export const WORKSPACE = '/workspace';

/**
 * Maps a path the model gave (absolute under /workspace, or relative to it) to the host path
 * inside `workdir`, resolving symlinks of every existing component.
 *
 * Returns null when the path escapes the workspace: `..`, an absolute path elsewhere, or a
 * symlink (at any depth, including dangling ones) pointing outside. A path that does not exist
 * yet is checked through its nearest existing ancestor.
 */
export function resolveInWorkspace(workdir: string, p: string): string | null {
  const root = fs.realpathSync(workdir);
  let rel: string;
  if (path.posix.isAbsolute(p)) {
    const norm = path.posix.normalize(p);
    if (norm === WORKSPACE) rel = '';
    else if (norm.startsWith(`${WORKSPACE}/`)) rel = norm.slice(WORKSPACE.length + 1);
    else if (norm === root || norm.startsWith(`${root}/`)) rel = norm.slice(root.length + 1); // host path (none/unshare drivers)
    else return null;
  } else rel = p;
  const target = path.resolve(root, rel);
  if (!inside(root, target)) return null;
  // Walk up to the nearest existing component and resolve symlinks there.
  let existing = target;
  const rest: string[] = [];
  for (;;) {
    try {
      fs.lstatSync(existing);
      break;
    } catch {
      rest.unshift(path.basename(existing));
      existing = path.dirname(existing);
    }
  }
  let real: string;
  try {
    real = fs.realpathSync(existing);
  } catch {
    return null; // a dangling symlink: its target is unknown, refuse
  }
  const resolved = path.join(real, ...rest);
  return inside(root, resolved) ? resolved : null;
}

/** The model-facing form of a host path inside `workdir`. */
export function toWorkspacePath(workdir: string, hostPath: string): string {
  const root = fs.realpathSync(workdir);
  const rel = path.relative(root, hostPath);
  return rel ? path.posix.join(WORKSPACE, rel.split(path.sep).join('/')) : WORKSPACE;
}

function inside(root: string, p: string): boolean {
  return p === root || p.startsWith(root + path.sep);
}
