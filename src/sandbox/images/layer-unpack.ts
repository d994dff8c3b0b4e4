import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { Unpack, type ReadEntry } from 'tar';
import { RolloutError } from '../../errors.js';
import { imageInfraError, imageTaskError, isDiskFull, type ImageWhere } from './image-errors.js';

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
 * Extraction is node-tar's (owners, modes, mtimes, hard links and symlinks kept, absolute
 * symlink targets as written). Before node-tar sees an entry, this refuses — for the whole layer —
 * any entry with an absolute path or a `..` component, a hard link whose target is not a plain
 * path inside the layer, a symlink whose relative target climbs above the root, and any entry
 * below a symlink of the same layer. Both digests are checked on the fly.
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

async function unpackInto(input: UnpackLayerInput): Promise<UnpackedLayer> {
  const w = input.where;
  const blobHash = crypto.createHash('sha256');
  const diffHash = crypto.createHash('sha256');
  const whiteouts: { dir: string; name: string }[] = [];
  const symlinks = new Set<string>();
  // node-tar does not make device nodes or FIFOs: made afterwards with mknod / mkfifo (as root).
  const specials: { rel: string; kind: 'c' | 'b' | 'p'; major: number; minor: number; mode: number; uid: number; gid: number }[] = [];
  let bytes = 0;
  let entries = 0;
  let violation: Error | null = null;

  const unpack = new Unpack({
    cwd: input.dest,
    strict: true,
    // Unprivileged, owners cannot be kept: every file is ours, root inside the overlay's user namespace.
    preserveOwner: process.getuid?.() === 0,
    chmod: true,
    processUmask: 0,
    unlink: false,
    // Our filter (checkEntry) refuses absolute and '..' entry paths and writes through symlinks;
    // node-tar's own guard would also rewrite absolute symlink targets (`/usr/bin/python3` →
    // relative to the link), which breaks images, whose absolute links resolve in their own root.
    preservePaths: true,
    // Layers of real images compress well; the default ratio guard would refuse a sparse file.
    maxDecompressionRatio: Number.MAX_SAFE_INTEGER,
    filter: (_p: string, entry: ReadEntry | fs.Stats) => {
      const e = entry as ReadEntry;
      if (violation) return false;
      const problem = checkEntry(e, symlinks);
      if (problem) {
        violation = imageTaskError('IMAGE_UNSAFE_ENTRY', w, problem);
        unpack.abort(violation);
        return false;
      }
      entries++;
      const rel = clean(e.path);
      const base = path.posix.basename(rel);
      if (base.startsWith(WH)) {
        whiteouts.push({ dir: path.posix.dirname(rel), name: base === OPAQUE ? '' : base.slice(WH.length) });
        return false;
      }
      if (e.type === 'SymbolicLink') symlinks.add(rel);
      if (e.type === 'CharacterDevice' || e.type === 'BlockDevice' || e.type === 'FIFO') {
        const h = e.header;
        specials.push({ rel, kind: e.type === 'FIFO' ? 'p' : e.type === 'CharacterDevice' ? 'c' : 'b', major: h.devmaj ?? 0, minor: h.devmin ?? 0, mode: (e.mode ?? 0o644) & 0o7777, uid: e.uid ?? 0, gid: e.gid ?? 0 });
        return false;
      }
      if (e.type === 'File' || e.type === 'OldFile' || e.type === 'ContiguousFile') bytes += e.size;
      return true;
    },
  });

  const source = await decompressed(input.blobPath, blobHash, w);
  await new Promise<void>((resolve, reject) => {
    let settled = false;
    const fail = (err: unknown): void => {
      if (settled) return;
      settled = true;
      source.destroy();
      reject(err);
    };
    unpack.on('error', fail);
    unpack.on('abort', fail);
    unpack.on('close', () => {
      if (settled) return;
      settled = true;
      resolve();
    });
    source.on('error', fail);
    source.on('data', (chunk: Buffer) => {
      diffHash.update(chunk);
      if (!unpack.write(chunk)) {
        source.pause();
        unpack.once('drain', () => source.resume());
      }
    });
    source.on('end', () => unpack.end());
  }).catch((err: unknown) => {
    if (violation) throw violation;
    throw classify(err, w);
  });
  if (violation) throw violation;

  const gotBlob = `sha256:${blobHash.digest('hex')}`;
  const gotDiff = `sha256:${diffHash.digest('hex')}`;
  if (input.blobDigest && gotBlob !== input.blobDigest) {
    throw imageTaskError('IMAGE_DIGEST_MISMATCH', w, `digest mismatch: the manifest says ${input.blobDigest}, the blob hashes to ${gotBlob}`);
  }
  if (input.diffId && gotDiff !== input.diffId) {
    throw imageTaskError('IMAGE_DIGEST_MISMATCH', w, `diff_id mismatch: the config says ${input.diffId}, the uncompressed layer hashes to ${gotDiff}`);
  }
  await applyWhiteouts(input.dest, whiteouts, specials, w);
  return { diffId: gotDiff, bytes, entries, whiteouts: whiteouts.filter((x) => x.name).length, opaqueDirs: whiteouts.filter((x) => !x.name).length };
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

/**
 * Writes the layer's whiteouts in overlayfs form. Node has no mknod or setxattr: one `sh` runs
 * every `mknod` / `setfattr` (Debian packages coreutils and attr), each path quoted.
 */
async function applyWhiteouts(
  dest: string,
  list: { dir: string; name: string }[],
  specials: { rel: string; kind: 'c' | 'b' | 'p'; major: number; minor: number; mode: number; uid: number; gid: number }[],
  w: ImageWhere,
): Promise<void> {
  if (list.length === 0 && specials.length === 0) return;
  // An unprivileged store cannot write trusted.* xattrs: it writes user.overlay.opaque, which
  // the overlay reads when mounted with `userxattr` inside a user namespace (overlay-mount.ts).
  const asRoot = process.getuid?.() === 0;
  const lines: string[] = ['set -e'];
  for (const sp of specials) {
    const target = path.join(dest, sp.rel);
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.rmSync(target, { force: true });
    lines.push(sp.kind === 'p' ? `mkfifo -- ${q(target)}` : `mknod -- ${q(target)} ${sp.kind} ${sp.major} ${sp.minor}`);
    // Unprivileged, every file is ours (the owner root inside the overlay's user namespace).
    if (asRoot) lines.push(`chown -h ${sp.uid}:${sp.gid} -- ${q(target)}`);
    lines.push(`chmod ${sp.mode.toString(8)} -- ${q(target)}`);
  }
  for (const { dir, name } of list) {
    const d = path.join(dest, dir);
    fs.mkdirSync(d, { recursive: true });
    if (name) {
      const target = path.join(d, name);
      fs.rmSync(target, { recursive: true, force: true });
      // Unprivileged too: a 0:0 whiteout needs no CAP_MKNOD (Linux 5.8+).
      lines.push(`mknod -- ${q(target)} c 0 0`);
    } else lines.push(`setfattr -n ${asRoot ? 'trusted' : 'user'}.overlay.opaque -v y -- ${q(d)}`);
  }
  await new Promise<void>((resolve, reject) => {
    const sh = spawn('/bin/sh', ['-s'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    sh.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    sh.on('error', reject);
    sh.on('close', (code) => {
      if (code === 0) resolve();
      else if (/No space left/i.test(stderr)) reject(imageInfraError('IMAGE_DISK_FULL', w, `no space left on device while writing whiteouts: ${stderr.trim()}`));
      else reject(imageInfraError('IMAGE_IO', w, `could not write whiteouts (needs root, mknod and setfattr from Debian's attr): ${stderr.trim()}`));
    });
    sh.stdin.end(lines.join('\n') + '\n');
  });
}

function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
