import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';

/**
 * Removing a sandbox's directory, whatever a policy left in it: a tree thousands of levels deep,
 * directories with mode 000, immutable files, mounts.
 *
 * Why `rm -rf` in a child and not `fs.rmSync`: Node's recursive removal recurses on the JS stack
 * and builds full paths, so a 3,000-deep tree throws `RangeError` (and paths past PATH_MAX fail
 * with ENAMETOOLONG); GNU rm walks with directory fds (gnulib fts), so depth is unbounded, it
 * never follows a symlink, and it runs off the event loop — a host closing a sandbox with a
 * 100,000-file checkout keeps answering its other sandboxes meanwhile.
 *
 * Why mounts are unmounted first and the removal refused while any remains: a bind mount of a
 * host directory on the same filesystem has the same `st_dev`, so `--one-file-system` alone would
 * not stop rm from deleting host files through it. `--one-file-system` stays as a second guard for
 * a mount of another filesystem that appears after the check.
 */

/** What {@link removeTree} did. */
export type RemoveOutcome =
  | { removed: true }
  | { removed: false; quarantinedTo: string | null; reason: string };

/** Name of the state dir's directory that keeps trees that could not be removed. */
export const QUARANTINE_DIR = 'quarantine';

/**
 * Mount points at or under `dir` in this process's mount namespace, deepest first.
 * Reads /proc/self/mountinfo (field 5, octal escapes decoded).
 */
export function mountsUnder(dir: string): string[] {
  let info: string;
  try {
    info = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const root = realOrSelf(dir);
  const out: string[] = [];
  for (const line of info.split('\n')) {
    const field = line.split(' ')[4];
    if (!field) continue;
    const mp = field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp === root || mp.startsWith(`${root}/`)) out.push(mp);
  }
  // Deepest first, so a mount on top of another comes off before the one below it.
  return [...new Set(out)].sort((a, b) => b.split('/').length - a.split('/').length || b.length - a.length);
}

/**
 * Removes `dir` and everything under it. Never throws and never follows a link or a mount out
 * of `dir`: mounts inside are detached (`umount -l`, deepest first) and the removal is refused
 * while one remains. When the tree cannot be removed (a mount that will not come off, an
 * immutable file, an I/O error), what is left is moved to `<quarantineRoot>/<name>-<time>` when
 * `quarantineRoot` is given, so the caller's directory listing is clean again and start-up goes
 * on; the outcome says why.
 */
export async function removeTree(dir: string, quarantineRoot: string | null = null): Promise<RemoveOutcome> {
  try {
    fs.lstatSync(dir);
  } catch {
    return { removed: true };
  }
  let reason: string | null = null;
  const mounts = mountsUnder(dir);
  for (const mp of mounts) await run('umount', ['-l', '--', mp]);
  const left = mounts.length ? mountsUnder(dir) : [];
  if (left.length) reason = `mounts inside could not be unmounted (${left.length})`;
  else {
    const r = await run('rm', ['-rf', '--one-file-system', '--', dir]);
    let gone = false;
    try {
      fs.lstatSync(dir);
    } catch {
      gone = true;
    }
    if (gone) return { removed: true };
    reason = r.ok ? 'the directory is still there' : `rm failed: ${r.stderr.trim().split('\n').slice(0, 3).join('; ').slice(0, 500)}`;
  }
  return { removed: false, quarantinedTo: quarantine(dir, quarantineRoot), reason };
}

/** Moves `dir` into `root`; returns the new path or null when it could not be moved. */
function quarantine(dir: string, root: string | null): string | null {
  if (!root) return null;
  try {
    fs.mkdirSync(root, { recursive: true, mode: 0o700 });
    const to = path.join(root, `${path.basename(dir)}-${Date.now()}`);
    fs.renameSync(dir, to);
    return to;
  } catch {
    return null;
  }
}

function realOrSelf(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

function run(cmd: string, args: string[]): Promise<{ ok: boolean; stderr: string }> {
  return new Promise((resolve) => {
    let stderr = '';
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < 4000) stderr += d.toString();
    });
    child.once('error', (e) => resolve({ ok: false, stderr: e.message }));
    child.once('close', (code) => resolve({ ok: code === 0, stderr }));
  });
}
