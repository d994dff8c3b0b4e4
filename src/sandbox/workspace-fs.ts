import fs from 'node:fs';
import { promisify } from 'node:util';
import { TaskError } from '../errors.js';
import { readBounded } from './bounded-read.js';
import { toWorkspacePath, workspaceParts } from './workspace-path.js';

/**
 * File access confined to one sandbox's workspace, safe against a sandbox that swaps any path
 * component for a symlink (or a directory for a file) while the host works on it.
 *
 * How: Node has no `openat`, but `/proc/self/fd/<dirfd>/<name>` is one: the kernel resolves the
 * magic link to the very directory `dirfd` holds, then looks up `name` inside it. Every component
 * is opened that way with `O_NOFOLLOW` (directories also `O_DIRECTORY`), so the kernel never
 * follows a link and never re-walks a path a sandbox could change; a symlink is seen as ELOOP and
 * read with `readlink`, and its text is resolved here, lexically confined to the workspace (an
 * absolute target means `/workspace/...` as the sandbox sees it). Files are opened `O_NONBLOCK`
 * and their type checked with `fstat` on the open fd: only regular files are read or written,
 * so a FIFO or device never blocks the host. Reads are bounded; reads and writes of content go
 * through libuv's thread pool, off the host's event loop.
 *
 * Errors are {@link WorkspaceFsError}s whose messages name workspace paths only, never a host
 * path (Node's own messages carry the `/proc/self/fd/...` or host path; they are not passed on).
 */

const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK } = fs.constants;
const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
/** Symlinks followed in one resolution, as the kernel's own limit (MAXSYMLINKS). */
const MAX_LINKS = 40;
const CHUNK = 64 * 1024;

const writeAsync = promisify(fs.write);

/** A refused or failed workspace file operation; `message` is safe to show to a model. */
export class WorkspaceFsError extends Error {
  constructor(
    message: string,
    /** errno code when it came from the kernel (`ENOENT`, `ELOOP`, ...), else `REFUSED`. */
    readonly code: string,
  ) {
    super(message);
    this.name = 'WorkspaceFsError';
  }
}

/** What {@link WorkspaceFs.stat} found at a path. */
export type EntryKind = 'file' | 'dir' | 'other' | 'missing';

/** A regular file opened by {@link WorkspaceFs.openFile}; close it with {@link closeFd}. */
export interface OpenFile {
  fd: number;
  size: number;
  /** Where it was found, as the model sees it (links resolved). */
  shown: string;
}

/** How a {@link WorkspaceFs} reaches its root and whose rights it works with. */
export interface WorkspaceFsOptions {
  /**
   * An open fd of the workspace directory, held since before any sandboxed process ran: the root
   * is then reopened from it, never looked up by name, so a sandbox that renames an ancestor of
   * the workspace and puts a symlink in its place (`mv work work.old; ln -s /var work`) does not
   * move the host's file work to `/var`. Without it the root is opened by its path each time
   * (right only when no ancestor is writable by the sandbox). Not closed here.
   */
  rootFd?: number | null | undefined;
  /**
   * Work with the rights of this host uid (its gid the same, no groups: the sandbox's identity)
   * instead of this process's: every directory passed must be searchable by it, a file read
   * readable, a file written writable, a directory changed writable — checked on the open fds
   * (`fstat`) the kernel's way. Null or absent: this process's rights.
   */
  asUid?: number | null | undefined;
}

const R = 4;
const W = 2;
const X = 1;

/** One workspace, addressed by the host directory that is bound at /workspace. */
export class WorkspaceFs {
  private readonly hostRoot: string;
  private readonly rootFd: number | null;
  private readonly asUid: number | null;

  constructor(
    private readonly workdir: string,
    opts: WorkspaceFsOptions = {},
  ) {
    // Only used to accept the host form of paths (none/unshare drivers); never opened by name.
    this.hostRoot = safeRealpath(workdir);
    this.rootFd = opts.rootFd ?? null;
    this.asUid = opts.asUid ?? null;
  }

  /** A new fd of the workspace root (from the held fd when there is one), searchable by the user. */
  private openRoot(): number {
    const fd = this.rootFd !== null ? fs.openSync(`/proc/self/fd/${this.rootFd}`, O_RDONLY | O_DIRECTORY) : fs.openSync(this.workdir, DIR_FLAGS);
    try {
      this.require(fd, X, []);
    } catch (err) {
      closeFd(fd);
      throw err;
    }
    return fd;
  }

  /**
   * Throws EACCES (a {@link WorkspaceFsError} naming `parts`) unless the user may `want` (R, W, X
   * bits) the open `fd`'s file, as the kernel decides for a process of uid = gid = `asUid` with no
   * groups and no capabilities: the owner's bits if it owns it, else the group's, else others'.
   */
  require(fd: number, want: number, parts: string[] | null, shown?: string): void {
    if (this.asUid === null) return;
    const st = fs.fstatSync(fd);
    const bits = st.uid === this.asUid ? (st.mode >> 6) & 7 : st.gid === this.asUid ? (st.mode >> 3) & 7 : st.mode & 7;
    if ((bits & want) !== want) throw fsError(Object.assign(new Error('EACCES'), { code: 'EACCES' }), parts, shown);
  }

  /** True when the user may list and enter the directory `fd` (always, without `asUid`). */
  mayList(fd: number): boolean {
    try {
      this.require(fd, R | X, null);
      return true;
    } catch {
      return false;
    }
  }

  /** Components of a model path, or throws REFUSED when it leaves the workspace. */
  parts(p: string): string[] {
    const parts = workspaceParts(p, this.hostRoot);
    if (!parts) throw new WorkspaceFsError(`The path ${p} is outside the workspace (/workspace); it was refused.`, 'REFUSED');
    return parts;
  }

  /** What is at `p` (links inside the workspace followed). Never opens a file. */
  stat(p: string): { kind: EntryKind; shown: string } {
    const parts = this.parts(p);
    let at: Located;
    try {
      at = this.locate(parts, false);
    } catch (err) {
      if (err instanceof WorkspaceFsError && (err.code === 'ENOENT' || err.code === 'ENOTDIR')) return { kind: 'missing', shown: toWorkspacePath(parts) };
      throw err;
    }
    try {
      if (at.name === null) return { kind: 'dir', shown: toWorkspacePath(at.parts) };
      const st = fs.lstatSync(entry(at.dirFd, at.name), { throwIfNoEntry: false });
      const shown = toWorkspacePath([...at.parts, at.name]);
      if (!st) return { kind: 'missing', shown };
      return { kind: st.isFile() ? 'file' : st.isDirectory() ? 'dir' : 'other', shown };
    } finally {
      closeFd(at.dirFd);
    }
  }

  /** Opens the directory at `p` (read-only fd). @throws WorkspaceFsError */
  openDir(p: string): { fd: number; shown: string } {
    const at = this.locate(this.parts(p), false);
    let out: { fd: number; shown: string };
    if (at.name === null) out = { fd: at.dirFd, shown: toWorkspacePath(at.parts) };
    else {
      try {
        out = { fd: openAt(at.dirFd, at.name, DIR_FLAGS, [...at.parts, at.name]), shown: toWorkspacePath([...at.parts, at.name]) };
      } finally {
        closeFd(at.dirFd);
      }
    }
    try {
      this.require(out.fd, R | X, null, out.shown);
    } catch (err) {
      closeFd(out.fd);
      throw err;
    }
    return out;
  }

  /**
   * Opens the regular file at `p` for reading, or reading and writing. Refuses anything else
   * (directory, FIFO, socket, device) after the open, by `fstat` of the fd.
   * @throws WorkspaceFsError
   */
  openFile(p: string, mode: 'read' | 'write'): OpenFile {
    const at = this.locate(this.parts(p), false);
    if (at.name === null) {
      closeFd(at.dirFd);
      throw new WorkspaceFsError(`The path ${brief(toWorkspacePath(at.parts))} is a directory, not a file.`, 'EISDIR');
    }
    const parts = [...at.parts, at.name];
    try {
      const fd = openAt(at.dirFd, at.name, (mode === 'read' ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_NONBLOCK, parts);
      const file = checkedFile(fd, toWorkspacePath(parts));
      try {
        this.require(fd, mode === 'read' ? R : R | W, parts);
      } catch (err) {
        closeFd(fd);
        throw err;
      }
      return file;
    } finally {
      closeFd(at.dirFd);
    }
  }

  /**
   * Creates the file at `p` with `content`, making missing parent directories. With
   * `exclusive`, an existing entry of any kind (a symlink too) is an EEXIST error; without,
   * an existing regular file is overwritten in place and anything else refused. New entries
   * get the owner of the workspace root (the sandbox's user). Returns the path as shown.
   * @throws WorkspaceFsError
   */
  async writeFile(p: string, content: string, opts: { exclusive: boolean }): Promise<{ shown: string; created: boolean }> {
    const parts = this.parts(p);
    if (parts.length === 0) throw new WorkspaceFsError('The path /workspace is a directory, not a file.', 'EISDIR');
    const at = this.locate(parts, true);
    // A link whose text ends at a directory (`tests -> .`) leaves no name to write: refuse it
    // rather than write a file called "null" in that directory.
    if (at.name === null) {
      closeFd(at.dirFd);
      throw new WorkspaceFsError(`The path ${brief(toWorkspacePath(parts))} is a directory, not a file.`, 'EISDIR');
    }
    const shownParts = [...at.parts, at.name];
    const shown = toWorkspacePath(shownParts);
    let fd: number;
    let created = false;
    try {
      const exists = fs.lstatSync(entry(at.dirFd, at.name!), { throwIfNoEntry: false }) !== undefined;
      // Creating needs the directory writable by the user; an existing entry is checked below.
      if (!exists) this.require(at.dirFd, W, at.parts);
      try {
        fd = openAt(at.dirFd, at.name!, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, shownParts, 0o644);
        created = true;
        this.giveToOwner(fd);
      } catch (err) {
        if (opts.exclusive || !(err instanceof WorkspaceFsError) || err.code !== 'EEXIST') throw err;
        fd = openAt(at.dirFd, at.name!, O_WRONLY | O_NOFOLLOW | O_NONBLOCK, shownParts);
      }
    } finally {
      closeFd(at.dirFd);
    }
    try {
      if (!created) {
        checkedFile(fd, shown);
        this.require(fd, W, null, shown);
      }
      await overwrite(fd, content, shown);
      return { shown, created };
    } finally {
      closeFd(fd);
    }
  }

  /** Removes the file (or link) at `p`; a missing entry is fine. Never removes a directory. */
  unlink(p: string): void {
    // The final component is not followed: a link put in place of the file goes, not its target.
    const at = this.locate(this.parts(p), false, false);
    try {
      if (at.name === null) throw new WorkspaceFsError('The workspace root cannot be removed.', 'EISDIR');
      this.require(at.dirFd, W | X, at.parts);
      try {
        fs.unlinkSync(entry(at.dirFd, at.name));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(err, [...at.parts, at.name]);
      }
    } finally {
      closeFd(at.dirFd);
    }
  }

  /** Owner of the workspace root: what new files and directories are given. */
  private owner(): { uid: number; gid: number } {
    const st = this.rootFd !== null ? fs.fstatSync(this.rootFd) : fs.statSync(this.workdir);
    return { uid: st.uid, gid: st.gid };
  }

  private giveToOwner(fd: number): void {
    const { uid, gid } = this.owner();
    const st = fs.fstatSync(fd);
    if (st.uid !== uid || st.gid !== gid) fs.fchownSync(fd, uid, gid);
  }

  /**
   * Walks `parts` from the root, each directory opened relative to its parent's fd without
   * following links; a link met on the way is read and its target resolved here (confined to
   * the workspace). Returns the fd of the last directory and the final name (null when the
   * path is a directory reached in full and `parts` named it). With `mkdirs`, missing parent
   * directories are created; without `followLast`, a link in the last place is not followed.
   */
  private locate(parts: string[], mkdirs: boolean, followLast = true): Located {
    let fd = this.openRoot();
    let cur: string[] = [];
    const queue = [...parts];
    let links = 0;
    let retries = 0;
    try {
      while (queue.length) {
        const name = queue.shift()!;
        if (name === '..') {
          // Only from a link's text: go back up by re-walking from the root (no `..` lookup).
          if (cur.length === 0) throw new WorkspaceFsError(`A symbolic link under ${brief(toWorkspacePath(parts))} points outside the workspace; it was refused.`, 'REFUSED');
          cur = cur.slice(0, -1);
          const up = this.walkPlain(cur);
          closeFd(fd);
          fd = up;
          continue;
        }
        if (queue.length === 0) {
          // The final component: a link to be followed, or the name to hand back.
          if (!followLast) return { dirFd: fd, name, parts: cur };
          const target = readLinkAt(fd, name);
          if (target === null) {
            if (!mkdirs) {
              const st = fs.lstatSync(entry(fd, name), { throwIfNoEntry: false });
              if (st?.isDirectory()) {
                const next = openAt(fd, name, DIR_FLAGS, [...cur, name]);
                closeFd(fd);
                fd = next;
                cur = [...cur, name];
                this.require(fd, X, cur);
                return { dirFd: fd, name: null, parts: cur };
              }
            }
            return { dirFd: fd, name, parts: cur };
          }
          if (++links > MAX_LINKS) throw new WorkspaceFsError(`Too many levels of symbolic links in ${brief(toWorkspacePath(parts))}.`, 'ELOOP');
          const next = this.linkTarget(target, parts);
          if (next.absolute) {
            closeFd(fd);
            fd = this.openRoot();
            cur = [];
          }
          queue.unshift(...next.parts);
          continue;
        }
        let next: number;
        try {
          next = fs.openSync(entry(fd, name), DIR_FLAGS);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOENT' && mkdirs) {
            this.require(fd, W, cur);
            // A sandbox racing rmdir against our mkdir could otherwise keep this loop going.
            if (!this.mkdirAt(fd, name, [...cur, name]) && ++retries > 16) throw new WorkspaceFsError(`The path ${brief(toWorkspacePath(parts))} kept changing while it was being created; it was refused.`, 'EAGAIN');
            queue.unshift(name);
            continue;
          }
          if (code !== 'ELOOP' && code !== 'ENOTDIR') throw fsError(err, [...cur, name]);
          const target = readLinkAt(fd, name);
          if (target === null) throw fsError(err, [...cur, name]);
          if (++links > MAX_LINKS) throw new WorkspaceFsError(`Too many levels of symbolic links in ${brief(toWorkspacePath(parts))}.`, 'ELOOP');
          const t = this.linkTarget(target, parts);
          if (t.absolute) {
            closeFd(fd);
            fd = this.openRoot();
            cur = [];
          }
          queue.unshift(...t.parts);
          continue;
        }
        closeFd(fd);
        fd = next;
        cur = [...cur, name];
        this.require(fd, X, cur);
      }
      return { dirFd: fd, name: null, parts: cur };
    } catch (err) {
      closeFd(fd);
      throw err;
    }
  }

  /** Opens the directory at `parts` with no link following at all (a re-walk after `..`). */
  private walkPlain(parts: string[]): number {
    let fd = this.openRoot();
    for (let i = 0; i < parts.length; i++) {
      try {
        const next = openAt(fd, parts[i]!, DIR_FLAGS, parts.slice(0, i + 1));
        closeFd(fd);
        fd = next;
        this.require(fd, X, parts.slice(0, i + 1));
      } catch (err) {
        closeFd(fd);
        throw err;
      }
    }
    return fd;
  }

  /** A link's text as workspace components: absolute ones are paths as the sandbox sees them. */
  private linkTarget(target: string, asked: string[]): { absolute: boolean; parts: string[] } {
    if (target.startsWith('/')) {
      const parts = workspaceParts(target, this.hostRoot);
      if (!parts) throw new WorkspaceFsError(`A symbolic link under ${brief(toWorkspacePath(asked))} points outside the workspace; it was refused.`, 'REFUSED');
      return { absolute: true, parts };
    }
    // Relative: kept raw, `..` handled by the walk (it may not climb above the root).
    return { absolute: false, parts: target.split('/').filter((c) => c !== '' && c !== '.') };
  }

  /** Makes directory `name` in `dirFd`; false when something appeared there first (a race: re-opened next). */
  private mkdirAt(dirFd: number, name: string, parts: string[]): boolean {
    try {
      fs.mkdirSync(entry(dirFd, name), 0o755);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw fsError(err, parts);
    }
    const fd = openAt(dirFd, name, DIR_FLAGS, parts);
    try {
      this.giveToOwner(fd);
    } finally {
      closeFd(fd);
    }
    return true;
  }
}

interface Located {
  dirFd: number;
  /** The final component, or null when the path itself is the directory `dirFd`. */
  name: string | null;
  /** Components of `dirFd`'s directory (links resolved). */
  parts: string[];
}

/** The `/proc/self/fd` path of `name` inside the directory held by `dirFd`. */
function entry(dirFd: number, name: string): string {
  return `/proc/self/fd/${dirFd}/${name}`;
}

function openAt(dirFd: number, name: string, flags: number, parts: string[], mode?: number): number {
  try {
    return fs.openSync(entry(dirFd, name), flags, mode);
  } catch (err) {
    throw fsError(err, parts);
  }
}

/** The text of the symlink `name` in `dirFd`, or null when it is not a symlink (or missing). */
function readLinkAt(dirFd: number, name: string): string | null {
  try {
    return fs.readlinkSync(entry(dirFd, name));
  } catch {
    return null;
  }
}

function checkedFile(fd: number, shown: string): OpenFile {
  const st = fs.fstatSync(fd);
  if (!st.isFile()) {
    closeFd(fd);
    const what = st.isDirectory() ? 'a directory' : st.isFIFO() ? 'a FIFO (named pipe)' : st.isSocket() ? 'a socket' : 'a device or special file';
    throw new WorkspaceFsError(`The path ${shown} is ${what}, not a regular file.`, st.isDirectory() ? 'EISDIR' : 'NOT_REGULAR');
  }
  return { fd, size: st.size, shown };
}

/** Closes an fd, ignoring errors (double close on a cleanup path). */
export function closeFd(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {
    // already closed
  }
}

/** Replaces the whole content of the open regular file `fd` (off the event loop). @throws WorkspaceFsError */
export async function overwrite(fd: number, content: string, shown: string): Promise<void> {
  const buf = Buffer.from(content);
  try {
    fs.ftruncateSync(fd, 0);
    for (let off = 0; off < buf.length; ) off += (await writeAsync(fd, buf, off, Math.min(CHUNK * 16, buf.length - off), off)).bytesWritten;
  } catch (err) {
    throw fsError(err, null, shown);
  }
}

/** Opens the subdirectory `name` of the directory `dirFd` without following a link; null when it is not one (any more). */
export function openChildDir(dirFd: number, name: string): number | null {
  try {
    return fs.openSync(entry(dirFd, name), DIR_FLAGS);
  } catch {
    return null;
  }
}

function fsError(err: unknown, parts: string[] | null, shownOverride?: string): WorkspaceFsError {
  const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
  const shown = brief(shownOverride ?? toWorkspacePath(parts ?? []));
  if (err instanceof WorkspaceFsError) return err;
  const why: Record<string, string> = {
    ENOENT: 'does not exist',
    ENOTDIR: 'has a component that is not a directory',
    ELOOP: 'is a symbolic link that changed while it was being opened; it was refused',
    EISDIR: 'is a directory, not a file',
    EEXIST: 'already exists',
    EACCES: 'is not accessible (permission denied)',
    EPERM: 'cannot be changed (operation not permitted)',
    ENOSPC: 'cannot be written: no space left on the device',
    EDQUOT: 'cannot be written: the disk quota is exhausted',
    EFBIG: 'cannot be written: the file would be too large',
    ENAMETOOLONG: 'has a name that is too long',
    EROFS: 'is on a read-only filesystem',
    ENXIO: 'is not a regular file',
  };
  return new WorkspaceFsError(`The path ${shown} ${why[code] ?? `could not be accessed (${code})`}.`, code);
}

/** A path for a message: a very deep one keeps its head and tail. */
function brief(shown: string): string {
  return shown.length <= 300 ? shown : `${shown.slice(0, 150)}...${shown.slice(-140)}`;
}

function safeRealpath(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return p;
  }
}

/** Largest file {@link readWorkspaceFile} returns (a handler reading a patch or a result file). */
export const MAX_READ_BYTES = 32 * 1024 * 1024;

/**
 * Reads a workspace file as UTF-8 for the runtime (`sandbox.read`), through {@link WorkspaceFs}.
 * @throws TaskError `PATH_OUTSIDE_WORKSPACE` or `READ_FAILED` (a message without host paths).
 */
export async function readWorkspaceFile(workdir: string, p: string, opts: WorkspaceFsOptions = {}): Promise<string> {
  const files = new WorkspaceFs(workdir, opts);
  let file: OpenFile;
  try {
    file = files.openFile(p, 'read');
  } catch (err) {
    throw asTaskError(err, 'READ_FAILED');
  }
  try {
    if (file.size > MAX_READ_BYTES) throw new TaskError(`cannot read ${file.shown}: ${file.size} bytes is over the ${MAX_READ_BYTES >> 20} MiB limit`, { code: 'READ_FAILED' });
    const { buf, truncated } = await readBounded(file.fd, MAX_READ_BYTES);
    if (truncated) throw new TaskError(`cannot read ${file.shown}: it grew past the ${MAX_READ_BYTES >> 20} MiB limit`, { code: 'READ_FAILED' });
    return buf.toString('utf8');
  } catch (err) {
    throw asTaskError(err, 'READ_FAILED');
  } finally {
    closeFd(file.fd);
  }
}

/**
 * Writes a workspace file for the runtime (`sandbox.write`, seed `files`), making parent
 * directories, through {@link WorkspaceFs}.
 * @throws TaskError `PATH_OUTSIDE_WORKSPACE` or `code` (a message without host paths).
 */
export async function writeWorkspaceFile(workdir: string, p: string, content: string, code = 'WRITE_FAILED', opts: WorkspaceFsOptions = {}): Promise<void> {
  try {
    await new WorkspaceFs(workdir, opts).writeFile(p, content, { exclusive: false });
  } catch (err) {
    throw asTaskError(err, code);
  }
}

function asTaskError(err: unknown, code: string): Error {
  if (err instanceof TaskError) return err;
  if (err instanceof WorkspaceFsError) return new TaskError(err.message, { code: err.code === 'REFUSED' ? 'PATH_OUTSIDE_WORKSPACE' : code });
  const errno = (err as NodeJS.ErrnoException).code;
  return new TaskError(`workspace file operation failed${errno ? ` (${errno})` : ''}`, { code });
}
