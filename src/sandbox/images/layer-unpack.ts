import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { Parser, type ReadEntry } from 'tar';
import { RolloutError } from '../../errors.js';
import { imageInfraError, imageTaskError, isDiskFull, type ImageWhere } from './image-errors.js';
import { at, closeQuietly, DIR_FLAGS, openNoSymlinks, SymlinkInPathError } from './root-fs.js';

/** What {@link unpackLayer} checks and where it writes. */
export interface UnpackLayerInput {
  /** The layer blob on disk (tar, tar+gzip or tar+zstd; detected by its first bytes). */
  blobPath: string;
  /** Directory to create (must not exist); its parent must exist. Removed again on any failure. */
  dest: string;
  /** `sha256:<hex>` the blob's bytes must hash to (the manifest's layer digest), if known. */
  blobDigest?: string | undefined;
  /** `sha256:<hex>` the uncompressed tar must hash to (the config's `rootfs.diff_ids` entry), if known. */
  diffId?: string | undefined;
  /** For error messages. */
  where: ImageWhere;
}

/** What one unpacked layer holds. */
export interface UnpackedLayer {
  /** `sha256:<hex>` of the uncompressed tar stream. */
  diffId: string;
  /** Bytes of regular-file content written. */
  bytes: number;
  entries: number;
  whiteouts: number;
  opaqueDirs: number;
}

const WH = '.wh.';
const OPAQUE = '.wh..wh..opq';

/**
 * Unpacks one OCI / Docker layer into `dest` in the form overlayfs reads as a lower directory:
 * a whiteout `.wh.NAME` becomes a 0:0 character device `NAME`, an opaque marker `.wh..wh..opq`
 * becomes the `trusted.overlay.opaque=y` xattr on its directory (`user.overlay.opaque` when not root) (both per the OCI image spec's
 * "Representing Changesets", and what containerd's overlayfs snapshotter writes).
 *
 * node-tar only parses; every entry is made here, below a directory fd of `dest`, each parent
 * opened component by component with `O_NOFOLLOW` (root-fs.ts, as `openat2` with
 * `RESOLVE_NO_SYMLINKS`): an entry — file, directory, link, whiteout, opaque marker or FIFO —
 * whose parent is a symlink is refused whatever order the tar lists them in, so a hostile layer
 * never writes, removes or marks anything outside `dest` even when this runs as root. Before that,
 * this refuses — for the whole layer — any entry with an absolute path or a `..` component, a hard
 * link whose target is not a plain path inside the layer, and a symlink whose relative target
 * climbs above the root (absolute targets are kept as written: they resolve in the image's own
 * root). Owners (as root), modes and mtimes are kept, except that setuid/setgid bits are dropped
 * from files and device nodes are not made (sandboxes mount nosuid, nodev: they could only serve
 * someone reaching the store on the host). Both digests are checked on the fly.
 *
 * On any failure `dest` is removed: a half-written layer never exists under its final name
 * because callers unpack into a temporary name and rename.
 *
 * @throws TaskError (`IMAGE_CORRUPT`, `IMAGE_DIGEST_MISMATCH`, `IMAGE_UNSAFE_ENTRY`) naming image
 *   and layer; InfraError `IMAGE_DISK_FULL` when the disk fills, `IMAGE_IO` for other I/O faults.
 */
export async function unpackLayer(input: UnpackLayerInput): Promise<UnpackedLayer> {
  fs.mkdirSync(input.dest, { mode: 0o755 });
  try {
    return await unpackInto(input);
  } catch (err) {
    fs.rmSync(input.dest, { recursive: true, force: true });
    throw err;
  }
}

/** One entry whose making waits for the end of the layer (it needs mknod or setfattr). */
interface Deferred {
  /** Parent directory's components. */
  dir: string[];
  /** The name in it; '' for an opaque marker (the directory itself). */
  name: string;
  kind: 'whiteout' | 'opaque' | 'fifo';
  mode?: number;
  uid?: number;
  gid?: number;
}

const { O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

async function unpackInto(input: UnpackLayerInput): Promise<UnpackedLayer> {
  const w = input.where;
  const blobHash = crypto.createHash('sha256');
  const diffHash = crypto.createHash('sha256');
  const symlinks = new Set<string>();
  const deferred: Deferred[] = [];
  const asRoot = process.getuid?.() === 0;
  let bytes = 0;
  let entries = 0;
  let whiteouts = 0;
  let opaqueDirs = 0;
  let violation: Error | null = null;
  /** Files whose last writes may still be in flight when the parser ends. */
  const pendingFiles: Promise<void>[] = [];
  /** Their streams by fd: an aborted parse never ends them, so the failure path closes them. */
  const openFiles = new Map<number, fs.WriteStream>();
  const rootFd = fs.openSync(input.dest, DIR_FLAGS);
  const parser = new Parser({ strict: true, maxDecompressionRatio: Number.MAX_SAFE_INTEGER } as never);
  const fail = (err: unknown): void => {
    if (violation) return;
    violation = err instanceof RolloutError ? err : classify(err, w);
    parser.abort(violation);
  };

  parser.on('entry', (e: ReadEntry) => {
    if (violation) return void e.resume();
    try {
      const problem = checkEntry(e, symlinks);
      if (problem) throw imageTaskError('IMAGE_UNSAFE_ENTRY', w, problem);
      entries++;
      const rel = clean(e.path);
      const parts = rel === '' ? [] : rel.split('/');
      const base = parts.at(-1) ?? '';
      const dir = parts.slice(0, -1);
      if (base.startsWith(WH)) {
        if (base === OPAQUE) opaqueDirs++;
        else whiteouts++;
        deferred.push(base === OPAQUE ? { dir, name: '', kind: 'opaque' } : { dir, name: base.slice(WH.length), kind: 'whiteout' });
        return void e.resume();
      }
      if (e.type === 'SymbolicLink') symlinks.add(rel);
      const made = makeEntry(rootFd, e, parts, asRoot, w);
      if (made === 'fifo') deferred.push({ dir, name: base, kind: 'fifo', mode: safeMode(e.mode ?? 0o644, false), uid: e.uid ?? 0, gid: e.gid ?? 0 });
      if (made && typeof made === 'object') {
        bytes += e.size;
        // Content streams into the file off the event loop (a write stream: its backpressure
        // pauses the entry, the parser and the decompression). The parser may go on to the next
        // entries while the last writes are in flight: the file is finished when its stream is.
        const out = fs.createWriteStream('', { fd: made.fd, autoClose: false, highWaterMark: 1 << 20 });
        openFiles.set(made.fd, out);
        pendingFiles.push(
          new Promise<void>((resolve) => {
            out.on('error', (err) => {
              fail(err);
              e.resume();
              resolve();
            });
            out.on('finish', () => {
              try {
                if (!violation) finishFile(made.fd, e, asRoot);
              } catch (err) {
                fail(err);
              }
              resolve();
            });
          }).finally(() => {
            openFiles.delete(made.fd);
            closeQuietly(made.fd);
          }),
        );
        e.pipe(out);
        return;
      }
      e.resume();
    } catch (err) {
      e.resume();
      fail(err);
    }
  });

  const source = await decompressed(input.blobPath, blobHash, w);
  try {
    await new Promise<void>((resolve, reject) => {
      let settled = false;
      const done = (err?: unknown): void => {
        if (settled) return;
        settled = true;
        if (err !== undefined) {
          source.destroy();
          reject(err);
        } else resolve();
      };
      parser.on('error', (err: unknown) => done(violation ?? err));
      parser.on('abort', (err: unknown) => done(violation ?? err));
      parser.on('end', () => done());
      parser.on('close', () => done());
      source.on('error', (err) => done(err));
      source.on('data', (chunk: Buffer) => {
        diffHash.update(chunk);
        if (!parser.write(chunk)) {
          source.pause();
          parser.once('drain', () => source.resume());
        }
      });
      source.on('end', () => parser.end());
    }).catch((err: unknown) => {
      if (violation) throw violation;
      throw classify(err, w);
    });
    await Promise.all(pendingFiles);
    if (violation) throw violation;

    const gotBlob = `sha256:${blobHash.digest('hex')}`;
    const gotDiff = `sha256:${diffHash.digest('hex')}`;
    if (input.blobDigest && gotBlob !== input.blobDigest) {
      throw imageTaskError('IMAGE_DIGEST_MISMATCH', w, `digest mismatch: the manifest says ${input.blobDigest}, the blob hashes to ${gotBlob}`);
    }
    if (input.diffId && gotDiff !== input.diffId) {
      throw imageTaskError('IMAGE_DIGEST_MISMATCH', w, `diff_id mismatch: the config says ${input.diffId}, the uncompressed layer hashes to ${gotDiff}`);
    }
    await applyDeferred(rootFd, deferred, asRoot, w);
    return { diffId: gotDiff, bytes, entries, whiteouts, opaqueDirs };
  } finally {
    for (const [fd, out] of openFiles) {
      out.destroy();
      closeQuietly(fd);
    }
    closeQuietly(rootFd);
  }
}

/**
 * The directory `parts` of the layer, opened without following any link (created when
 * missing): an entry whose parent is a symlink is refused, whatever order the tar lists them in.
 */
function parentDir(rootFd: number, parts: string[], raw: string, w: ImageWhere): number {
  try {
    return openNoSymlinks(rootFd, parts, { mkdirs: true, mode: 0o755 });
  } catch (err) {
    if (err instanceof SymlinkInPathError) throw imageTaskError('IMAGE_UNSAFE_ENTRY', w, `entry '${raw}' is written through the symlink '${err.link}' of the same layer`);
    throw err;
  }
}

/** Removes whatever is at `name` in `dirFd` (a tree too, never following a link); nothing there is fine. */
function removeAt(dirFd: number, name: string): void {
  const st = fs.lstatSync(at(dirFd, name), { throwIfNoEntry: false });
  if (!st) return;
  // The magic link is resolved once, to the layer's own directory; rm never follows a link below it.
  if (st.isDirectory()) fs.rmSync(at(dirFd, name), { recursive: true, force: true });
  else fs.unlinkSync(at(dirFd, name));
}

/**
 * Makes one entry below the layer root, every parent opened from the root's fd without
 * following links. Returns the open fd of a regular file whose content follows, 'fifo' for a
 * FIFO (made at the end), or null when the entry is done (or skipped: device nodes are never
 * made, see {@link safeMode}).
 */
function makeEntry(rootFd: number, e: ReadEntry, parts: string[], asRoot: boolean, w: ImageWhere): { fd: number } | 'fifo' | null {
  const raw = e.path;
  const mode = e.mode ?? (e.type === 'Directory' ? 0o755 : 0o644);
  if (parts.length === 0) {
    // The layer root itself ('./'): its mode and owner only.
    if (e.type === 'Directory') setOwnerMode(rootFd, e, safeMode(mode, true), asRoot);
    return null;
  }
  const name = parts.at(-1)!;
  if (e.type === 'CharacterDevice' || e.type === 'BlockDevice') return null;
  if (e.type === 'FIFO') return 'fifo';
  const dirFd = parentDir(rootFd, parts.slice(0, -1), raw, w);
  try {
    const p = at(dirFd, name);
    switch (e.type) {
      case 'Directory': {
        const st = fs.lstatSync(p, { throwIfNoEntry: false });
        if (st && !st.isDirectory()) fs.unlinkSync(p);
        if (!st || !st.isDirectory()) fs.mkdirSync(p, 0o700);
        const fd = fs.openSync(p, DIR_FLAGS);
        try {
          setOwnerMode(fd, e, safeMode(mode, true), asRoot);
        } finally {
          closeQuietly(fd);
        }
        return null;
      }
      case 'File':
      case 'OldFile':
      case 'ContiguousFile': {
        removeAt(dirFd, name);
        return { fd: fs.openSync(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0o600) };
      }
      case 'SymbolicLink': {
        removeAt(dirFd, name);
        fs.symlinkSync(e.linkpath ?? '', p);
        // lchown/lutimes act on the link itself, never its target.
        if (asRoot) fs.lchownSync(p, e.uid ?? 0, e.gid ?? 0);
        if (e.mtime) fs.lutimesSync(p, e.mtime, e.mtime);
        return null;
      }
      case 'Link': {
        const target = clean(e.linkpath ?? '').split('/');
        const tdir = parentDir(rootFd, target.slice(0, -1), raw, w);
        try {
          const tname = target.at(-1)!;
          const st = fs.lstatSync(at(tdir, tname), { throwIfNoEntry: false });
          if (!st) throw imageTaskError('IMAGE_CORRUPT', w, `hard link '${raw}' names '${e.linkpath}', which the layer has not written`);
          if (st.isDirectory()) throw imageTaskError('IMAGE_UNSAFE_ENTRY', w, `hard link '${raw}' names the directory '${e.linkpath}'`);
          removeAt(dirFd, name);
          // link(2) never follows a symlink at its source: a link to a symlink is a second symlink.
          fs.linkSync(at(tdir, tname), p);
        } finally {
          closeQuietly(tdir);
        }
        return null;
      }
      default:
        // Extended headers are the parser's; other types (GNU sparse, volume labels) carry no file.
        return null;
    }
  } finally {
    closeQuietly(dirFd);
  }
}

/**
 * A mode as the store keeps it: setuid and setgid dropped from everything but directories (a
 * setgid directory only passes its group on), so no file in the store runs with its owner's
 * rights, whoever reaches it; sandboxes mount the store nosuid anyway.
 */
function safeMode(mode: number, isDir: boolean): number {
  return isDir ? mode & 0o3777 : mode & 0o1777;
}

function setOwnerMode(fd: number, e: ReadEntry, mode: number, asRoot: boolean): void {
  // Owner first: chown clears set-id bits, chmod then sets the mode as kept.
  if (asRoot) fs.fchownSync(fd, e.uid ?? 0, e.gid ?? 0);
  fs.fchmodSync(fd, mode);
}

function finishFile(fd: number, e: ReadEntry, asRoot: boolean): void {
  setOwnerMode(fd, e, safeMode(e.mode ?? 0o644, false), asRoot);
  if (e.mtime) fs.futimesSync(fd, e.mtime, e.mtime);
}

/** A normalized relative path: no leading `./` or `/`, no trailing `/`. */
function clean(p: string): string {
  const n = path.posix.normalize(p.replace(/^(\.\/)+/, ''));
  return n === '.' ? '' : n.replace(/\/+$/, '');
}

/** Why an entry is refused, or null when it is safe to extract. */
export function checkEntry(e: Pick<ReadEntry, 'path' | 'type' | 'linkpath'>, symlinks: ReadonlySet<string>): string | null {
  const raw = e.path;
  if (raw.startsWith('/')) return `entry '${raw}' has an absolute path`;
  if (raw.split('/').includes('..')) return `entry '${raw}' climbs out of the layer ('..')`;
  const rel = clean(raw);
  const parts = rel.split('/');
  for (let i = 1; i < parts.length; i++) {
    const prefix = parts.slice(0, i).join('/');
    if (symlinks.has(prefix)) return `entry '${raw}' is written through the symlink '${prefix}' of the same layer`;
  }
  if (e.type === 'Link') {
    const target = e.linkpath ?? '';
    if (target.startsWith('/') || target.split('/').includes('..') || clean(target) === '') return `hard link '${raw}' points outside the layer ('${target}')`;
    const tparts = clean(target).split('/');
    for (let i = 1; i <= tparts.length; i++) {
      const prefix = tparts.slice(0, i).join('/');
      if (symlinks.has(prefix)) return `hard link '${raw}' goes through the symlink '${prefix}' of the same layer`;
    }
  }
  if (e.type === 'SymbolicLink') {
    const target = e.linkpath ?? '';
    // An absolute target resolves inside the image's own root at run time; a relative one must
    // not climb above that root.
    if (!target.startsWith('/')) {
      const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(rel), target));
      if (resolved === '..' || resolved.startsWith('../')) return `symlink '${raw}' points outside the image root ('${target}')`;
    }
  }
  const base = path.posix.basename(rel);
  if (base.startsWith(WH) && base !== OPAQUE && (base.length === WH.length || base.slice(WH.length) === '.' || base.slice(WH.length) === '..')) {
    return `whiteout '${raw}' names no file`;
  }
  return null;
}

/** The layer's tar stream: gzip and zstd detected by their magic bytes; the blob hash fed on the way. */
async function decompressed(blobPath: string, blobHash: crypto.Hash, w: ImageWhere): Promise<Readable> {
  const head = Buffer.alloc(4);
  let fd: number;
  try {
    fd = fs.openSync(blobPath, 'r');
  } catch (err) {
    throw imageTaskError('IMAGE_CORRUPT', w, `layer blob ${path.basename(blobPath)} is missing or unreadable: ${(err as Error).message}`, err);
  }
  const n = fs.readSync(fd, head, 0, 4, 0);
  fs.closeSync(fd);
  const raw = fs.createReadStream(blobPath, { highWaterMark: 1 << 20 });
  raw.on('data', (c) => blobHash.update(c as Buffer));
  if (n >= 2 && head[0] === 0x1f && head[1] === 0x8b) {
    const gunzip = zlib.createGunzip();
    raw.on('error', (e) => gunzip.destroy(e));
    return raw.pipe(gunzip);
  }
  if (n === 4 && head.readUInt32LE(0) === 0xfd2fb528) {
    // Node 20's zlib has no zstd; Debian's zstd binary decodes it.
    const z = spawn('zstd', ['-dc', '-q'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    z.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    raw.pipe(z.stdin);
    // zstd that exits early (bad input) closes its stdin: the EPIPE is not the error, its exit code and stderr are.
    z.stdin.on('error', () => undefined);
    z.on('error', (e) => z.stdout.destroy(imageInfraError('IMAGE_IO', w, `cannot run zstd (apt-get install zstd): ${e.message}`)));
    z.on('close', (code) => {
      if (code !== 0) z.stdout.destroy(imageTaskError('IMAGE_CORRUPT', w, `zstd could not decode the layer: ${stderr.trim()}`));
    });
    return z.stdout;
  }
  return raw;
}

function classify(err: unknown, w: ImageWhere): Error {
  if (err instanceof RolloutError && err.code.startsWith('IMAGE_')) return err;
  if (isDiskFull(err)) return imageInfraError('IMAGE_DISK_FULL', w, 'no space left on device while unpacking the layer', err);
  const e = err as { code?: string; message?: string };
  if (e.code === 'Z_DATA_ERROR' || e.code === 'Z_BUF_ERROR' || e.code === 'TAR_BAD_ARCHIVE' || e.code === 'TAR_ENTRY_INVALID' || e.code === 'TAR_ABORT' || /unexpected end|incorrect header|invalid|checksum/i.test(e.message ?? '')) {
    return imageTaskError('IMAGE_CORRUPT', w, `the layer archive is corrupt: ${e.message ?? String(err)}`, err);
  }
  if (e.code === 'TAR_SYMLINK_ERROR' || /symbolic link/i.test(e.message ?? '')) return imageTaskError('IMAGE_UNSAFE_ENTRY', w, e.message ?? String(err), err);
  return imageInfraError('IMAGE_IO', w, `unpacking failed: ${e.message ?? String(err)}`, err);
}

/** How many directory fds one `sh` gets (each passed as an fd of its own). */
const FDS_PER_SHELL = 200;

/**
 * Writes the layer's whiteouts (0:0 character devices), opaque markers (the overlay's xattr) and
 * FIFOs. Node has no mknod or setxattr: `sh` runs `mknod` / `setfattr` / `mkfifo` (coreutils and
 * Debian's attr), but never on a path built from the layer's names: each parent directory is
 * opened here from the root fd without following links and passed to `sh` as an open fd, and the
 * commands name `/proc/self/fd/<n>/<name>` (the magic link is the directory itself; mknod and
 * mkfifo do not follow a link in `name`'s place, they fail on it).
 */
async function applyDeferred(rootFd: number, list: Deferred[], asRoot: boolean, w: ImageWhere): Promise<void> {
  for (let i = 0; i < list.length; ) {
    const fds = new Map<string, number>();
    const lines: string[] = ['set -e'];
    try {
      for (; i < list.length && fds.size < FDS_PER_SHELL; i++) {
        const d = list[i]!;
        const key = d.dir.join('/');
        let fd = fds.get(key);
        if (fd === undefined) {
          fd = parentDir(rootFd, d.dir, d.dir.concat(d.name || '.wh..wh..opq').join('/'), w);
          fds.set(key, fd);
        }
        const n = 3 + [...fds.keys()].indexOf(key);
        if (d.kind === 'opaque') {
          // An unprivileged store cannot write trusted.* xattrs: it writes user.overlay.opaque,
          // which the overlay reads when mounted with `userxattr` (overlay-mount.ts).
          lines.push(`setfattr -n ${asRoot ? 'trusted' : 'user'}.overlay.opaque -v y /proc/self/fd/${n}`);
          continue;
        }
        const target = q(`/proc/self/fd/${n}/${d.name}`);
        if (d.kind === 'whiteout') {
          // A whiteout hides the name in the layers below only (OCI image spec, "Whiteouts"): an
          // entry this layer made under it stays; a directory of its own then hides the lower
          // one's content as an opaque directory, anything else hides it by being there.
          const mine = fs.lstatSync(at(fd, d.name), { throwIfNoEntry: false });
          if (mine?.isDirectory()) lines.push(`setfattr -n ${asRoot ? 'trusted' : 'user'}.overlay.opaque -v y -- ${target}`);
          // Unprivileged too: a 0:0 whiteout needs no CAP_MKNOD (Linux 5.8+).
          else if (!mine) lines.push(`mknod -- ${target} c 0 0`);
        } else {
          removeAt(fd, d.name);
          lines.push(`mkfifo -- ${target}`);
          if (asRoot) lines.push(`chown -h ${d.uid}:${d.gid} -- ${target}`);
          lines.push(`chmod ${d.mode!.toString(8)} -- ${target}`);
        }
      }
      await runShell(lines, [...fds.values()], w);
    } finally {
      for (const fd of fds.values()) closeQuietly(fd);
    }
  }
}

function runShell(lines: string[], fds: number[], w: ImageWhere): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const sh = spawn('/bin/sh', ['-s'], { stdio: ['pipe', 'ignore', 'pipe', ...fds] });
    let stderr = '';
    sh.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    sh.on('error', reject);
    sh.on('close', (code) => {
      if (code === 0) resolve();
      else if (/No space left/i.test(stderr)) reject(imageInfraError('IMAGE_DISK_FULL', w, `no space left on device while writing whiteouts: ${stderr.trim()}`));
      else reject(imageInfraError('IMAGE_IO', w, `could not write whiteouts (needs mknod and setfattr from Debian's attr): ${stderr.trim()}`));
    });
    sh.stdin!.end(lines.join('\n') + '\n');
  });
}

function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
