import fs from 'node:fs';

/**
 * Paths inside a directory tree the host does not trust (a layer being unpacked, an image's
 * root), resolved from a directory fd one component at a time, the way `openat2(2)` does with
 * `RESOLVE_NO_SYMLINKS` ({@link openNoSymlinks}) or `RESOLVE_IN_ROOT` ({@link resolveInRoot}).
 *
 * Node has no `openat`/`openat2`, but `/proc/self/fd/<dirfd>/<name>` is one: the kernel resolves
 * the magic link to the very directory `dirfd` holds, then looks `name` up inside it; with
 * `O_NOFOLLOW | O_DIRECTORY` a symlink in `name`'s place is ELOOP (or ENOTDIR), never followed.
 * So no host path is ever built from the tree's own names and re-walked by the kernel: an
 * absolute symlink such as `etc -> /host/dir` in an image cannot make the host write `/host/dir`.
 */

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = fs.constants;
/** Flags of every directory opened here: read-only, must be a directory, never a link. */
export const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
/** Symlinks followed in one resolution, as the kernel's own limit (MAXSYMLINKS). */
const MAX_LINKS = 40;

/** The path naming `name` inside the directory held by `dirFd` (only ever used by this process). */
export function at(dirFd: number, name: string): string {
  return `/proc/self/fd/${dirFd}/${name}`;
}

/** A second fd on the directory `fd` holds (Node has no dup). */
export function reopenDir(fd: number): number {
  return fs.openSync(`/proc/self/fd/${fd}`, O_RDONLY | O_DIRECTORY);
}

/** Closes an fd, ignoring errors (a cleanup path). */
export function closeQuietly(fd: number | null | undefined): void {
  if (fd === null || fd === undefined) return;
  try {
    fs.closeSync(fd);
  } catch {
    // already closed
  }
}

/** A path component that is a symlink where {@link openNoSymlinks} needed a directory. */
export class SymlinkInPathError extends Error {
  constructor(
    /** The components up to and including the link, joined with `/`. */
    readonly link: string,
  ) {
    super(`'${link}' is a symbolic link`);
    this.name = 'SymlinkInPathError';
  }
}

/** The symlink text at `name` in `dirFd`, or null when it is not a symlink (or missing). */
export function readLinkAt(dirFd: number, name: string): string | null {
  try {
    return fs.readlinkSync(at(dirFd, name));
  } catch {
    return null;
  }
}

/**
 * Opens the directory `parts` below the directory `rootFd` holds, following no symlink at all
 * (`RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`). With `mkdirs`, a missing component is created
 * (`mode`, owned by this process) and something that is neither a directory nor a symlink in a
 * component's place (a file an earlier tar entry wrote) is replaced by a directory, as tar does.
 * Returns a new fd the caller closes.
 * @throws SymlinkInPathError when a component is a symlink; the fs error (ENOENT, ENOTDIR, ...) otherwise.
 */
export function openNoSymlinks(rootFd: number, parts: readonly string[], opts: { mkdirs?: boolean; mode?: number } = {}): number {
  let fd = reopenDir(rootFd);
  try {
    for (let i = 0; i < parts.length; i++) {
      const name = parts[i]!;
      if (name === '' || name === '.' || name === '..' || name.includes('/')) throw Object.assign(new Error(`bad path component '${name}'`), { code: 'EINVAL' });
      let next: number;
      try {
        next = fs.openSync(at(fd, name), DIR_FLAGS);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' && opts.mkdirs) {
          mkdirQuietly(fd, name, opts.mode ?? 0o755);
          next = fs.openSync(at(fd, name), DIR_FLAGS);
        } else if (code === 'ELOOP' || code === 'ENOTDIR') {
          const st = fs.lstatSync(at(fd, name));
          if (st.isSymbolicLink()) throw new SymlinkInPathError(parts.slice(0, i + 1).join('/'));
          if (!opts.mkdirs) throw err;
          fs.unlinkSync(at(fd, name));
          mkdirQuietly(fd, name, opts.mode ?? 0o755);
          next = fs.openSync(at(fd, name), DIR_FLAGS);
        } else throw err;
      }
      closeQuietly(fd);
      fd = next;
    }
    return fd;
  } catch (err) {
    closeQuietly(fd);
    throw err;
  }
}

function mkdirQuietly(dirFd: number, name: string, mode: number): void {
  try {
    fs.mkdirSync(at(dirFd, name), mode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

/** Where {@link resolveInRoot} ended: an open directory and its components below the root, links resolved. */
export interface InRoot {
  fd: number;
  parts: string[];
}

/**
 * Opens the directory at `p` (absolute or relative, as a process chrooted into the tree would
 * see it) below the directory `rootFd` holds, the way `openat2(RESOLVE_IN_ROOT)` does: symlinks
 * are followed, but an absolute target starts again at the root and `..` never climbs above it.
 * With `mkdirs`, missing directories are created where the resolution leads (`mode`, then
 * `onCreate(fd)` for each new one, e.g. to give it an owner). Returns the directory's fd (the
 * caller closes it) and its real components below the root, every link resolved: that path holds
 * no symlink at the time of the call.
 * @throws the fs error (ENOENT without `mkdirs`, ENOTDIR for a file on the way, ELOOP past 40 links).
 */
export function resolveInRoot(rootFd: number, p: string, opts: { mkdirs?: boolean; mode?: number; onCreate?: (fd: number) => void } = {}): InRoot {
  const queue = split(p);
  let fd = reopenDir(rootFd);
  let cur: string[] = [];
  let links = 0;
  try {
    while (queue.length) {
      const name = queue.shift()!;
      if (name === '..') {
        // Never a `..` lookup: re-walk the resolved components minus one from the root.
        cur = cur.slice(0, -1);
        const up = openNoSymlinks(rootFd, cur);
        closeQuietly(fd);
        fd = up;
        continue;
      }
      let next: number;
      try {
        next = fs.openSync(at(fd, name), DIR_FLAGS);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' && opts.mkdirs) {
          mkdirQuietly(fd, name, opts.mode ?? 0o755);
          next = fs.openSync(at(fd, name), DIR_FLAGS);
          if (opts.onCreate) opts.onCreate(next);
        } else if (code === 'ELOOP' || code === 'ENOTDIR') {
          const target = readLinkAt(fd, name);
          if (target === null) throw err;
          if (++links > MAX_LINKS) throw Object.assign(new Error(`too many levels of symbolic links resolving '${p}'`), { code: 'ELOOP' });
          if (target.startsWith('/')) {
            closeQuietly(fd);
            fd = reopenDir(rootFd);
            cur = [];
          }
          queue.unshift(...split(target));
          continue;
        } else throw err;
      }
      closeQuietly(fd);
      fd = next;
      cur = [...cur, name];
    }
    return { fd, parts: cur };
  } catch (err) {
    closeQuietly(fd);
    throw err;
  }
}

/** Path components, `.` and empty ones dropped, `..` kept (resolved by the walk). */
function split(p: string): string[] {
  return p.split('/').filter((c) => c !== '' && c !== '.');
}

/**
 * Opens the regular file at `p` inside the tree of `rootFd`, every symlink (its own name's too)
 * resolved in the root as {@link resolveInRoot} does: an image's `/etc/passwd ->
 * /usr/share/base-passwd/passwd.master` is the image's, never the host's. Opened `O_NOFOLLOW |
 * O_NONBLOCK` and checked with `fstat`: a FIFO or device never blocks the caller. Null when
 * there is no such regular file. The caller closes the fd.
 */
export function openFileInRoot(rootFd: number, p: string): number | null {
  let parts = split(p);
  for (let links = 0; links <= MAX_LINKS; links++) {
    const name = parts.at(-1);
    if (name === undefined || name === '..') return null;
    let dir: InRoot;
    try {
      dir = resolveInRoot(rootFd, parts.slice(0, -1).join('/'));
    } catch {
      return null;
    }
    try {
      const target = readLinkAt(dir.fd, name);
      if (target !== null) {
        // The link's text, from its own directory (relative) or from the root (absolute).
        parts = target.startsWith('/') ? split(target) : [...dir.parts, ...split(target)];
        continue;
      }
      let fd: number;
      try {
        fd = fs.openSync(at(dir.fd, name), O_RDONLY | O_NOFOLLOW | fs.constants.O_NONBLOCK);
      } catch {
        return null;
      }
      if (!fs.fstatSync(fd).isFile()) {
        closeQuietly(fd);
        return null;
      }
      return fd;
    } finally {
      closeQuietly(dir.fd);
    }
  }
  return null;
}
