import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { SandboxError } from '../../errors.js';

/**
 * How an overlay was mounted: `kernel` in this process's mount namespace (root), `userns` kernel
 * overlayfs inside a user + mount namespace of its own (unprivileged, Linux 5.11+), `fuse`
 * fuse-overlayfs (the unprivileged fallback).
 */
export type OverlayKind = 'kernel' | 'userns' | 'fuse';

/** A mounted overlay and how this process reaches it. */
export interface MountedOverlay {
  kind: OverlayKind;
  /**
   * Prefix of the host paths through which this process sees the merged dir: '' for `kernel` and
   * `fuse`; `/proc/<holder>/root` for `userns`, whose mount exists only in the holder's namespace.
   */
  via: string;
  /** For `userns`: the pid of the process holding the namespace (the sandbox's launch enters it). */
  holderPid: number | null;
}

/** Holders of `userns` overlays by merged dir: releaseOverlay ends them. */
const holders = new Map<string, ChildProcess>();

/** The directories of one sandbox's copy-on-write root, all under `<sandbox dir>/ov/`. */
export interface OverlayDirs {
  upper: string;
  work: string;
  merged: string;
}

/** The overlay directories of a sandbox directory (nothing is created). */
export function overlayDirs(sandboxDir: string): OverlayDirs {
  // Inside the sandbox's size-capped tmpfs (sandbox-fs.ts): an image sandbox's writes count
  // against the same disk cap as any other sandbox's.
  const ov = path.join(sandboxDir, 'fs', 'ov');
  return { upper: path.join(ov, 'upper'), work: path.join(ov, 'work'), merged: path.join(ov, 'merged') };
}

function run(argv: string[], cwd?: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'], ...(cwd ? { cwd } : {}) });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('error', (e) => resolve({ code: -1, stderr: e.message }));
    p.on('close', (code) => resolve({ code: code ?? -1, stderr: stderr.trim() }));
  });
}

/**
 * Mounts `lowerDirs` (top first, read-only: the image store's layers) with a fresh upper dir as
 * a copy-on-write root at `dirs.merged`: kernel overlayfs (root on the host), else
 * fuse-overlayfs. Writes land in `dirs.upper`; the layers are never written.
 *
 * Every directory is passed relative to the overlay's own directory (the lower dirs through a
 * link `l` to the store's `layers/`), with that as the working directory: the mount options must
 * fit one page (4 KiB), which a 30-layer image of absolute paths would not, and they show in the
 * sandbox's mountinfo, which must name no host path.
 *
 * `top`, a fork branch's snapshot layers (its parent's upper dir, then its grandparent's…:
 * fork-snapshot.ts), go above the layers, top first, named through links `t0`, `t1`… likewise.
 *
 * @throws SandboxError `OVERLAY_FAILED` with both tools' messages when neither mounts.
 */
export async function mountOverlay(lowerDirs: string[], dirs: OverlayDirs, opts: { top?: readonly string[] | undefined } = {}): Promise<MountedOverlay> {
  for (const d of [dirs.upper, dirs.work, dirs.merged]) fs.mkdirSync(d, { recursive: true });
  const parents = new Set(lowerDirs.map((d) => path.dirname(d)));
  // Every path in the options is relative to the overlay's own directory (`l` a link to the
  // store's layers): the options show in /proc/self/mountinfo inside the sandbox, which must not
  // learn the host's state dir or store from them. Mixed parents (never made by the store) stay absolute.
  const ovDir = path.dirname(dirs.upper);
  const rel = parents.size === 1 && path.dirname(dirs.work) === ovDir;
  let cwd: string | undefined;
  let options: string;
  if (rel) {
    const link = path.join(ovDir, 'l');
    fs.rmSync(link, { force: true });
    fs.symlinkSync([...parents][0]!, link);
    cwd = ovDir;
    const top = (opts.top ?? []).map((d, i) => {
      fs.rmSync(path.join(ovDir, `t${i}`), { force: true });
      fs.symlinkSync(d, path.join(ovDir, `t${i}`));
      return `t${i}`;
    });
    options = `lowerdir=${[...top, ...lowerDirs.map((d) => `l/${path.basename(d)}`)].join(':')},upperdir=${path.basename(dirs.upper)},workdir=${path.basename(dirs.work)}`;
  } else options = `lowerdir=${[...(opts.top ?? []), ...lowerDirs].join(':')},upperdir=${dirs.upper},workdir=${dirs.work}`;
  // metacopy: the sandbox's uid takes over its working dir with a chown, which then copies up
  // metadata only, not every file of a repository. Kernels without it mount without.
  let kernel = await run(['mount', '-t', 'overlay', 'overlay', '-o', `${options},index=off,xino=off,redirect_dir=on,metacopy=on`, dirs.merged], cwd);
  if (kernel.code !== 0) kernel = await run(['mount', '-t', 'overlay', 'overlay', '-o', `${options},index=off,xino=off`, dirs.merged], cwd);
  if (kernel.code === 0) return { kind: 'kernel', via: '', holderPid: null };
  let userns = '';
  if (process.getuid?.() !== 0) {
    // Unprivileged: kernel overlayfs inside a user namespace of our own (userxattr: whiteouts and
    // opaque dirs as an unprivileged store writes them, layer-unpack.ts).
    const held = await holdUsernsOverlay(`${options},userxattr`, dirs.merged, cwd);
    if (typeof held !== 'string') return held;
    userns = held;
  }
  const fuse = await run(['fuse-overlayfs', '-o', options, dirs.merged], cwd);
  if (fuse.code === 0) return { kind: 'fuse', via: '', holderPid: null };
  throw new SandboxError(
    `cannot mount the image overlay: kernel overlayfs: ${kernel.stderr || `exit ${kernel.code}`}${userns ? `; in a user namespace: ${userns}` : ''}; fuse-overlayfs: ${fuse.stderr || `exit ${fuse.code}`}`,
    { code: 'OVERLAY_FAILED', stage: 'init' },
  );
}

/**
 * Mounts the overlay inside a new user + mount namespace held by one small process (`cat` on a
 * pipe from us: it ends when we do, and the namespace with it). Returns the mount, or the
 * error text when the kernel refuses (before 5.11, or user namespaces disabled).
 */
function holdUsernsOverlay(opts: string, merged: string, cwd: string | undefined): Promise<MountedOverlay | string> {
  return new Promise((resolve) => {
    const p = spawn('unshare', ['--user', '--map-root-user', '--mount', '--propagation', 'private', '--', '/bin/sh', '-c', 'mount -t overlay overlay -o "$1" "$2" && echo ready && exec cat', 'sh', opts, merged], {
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(cwd ? { cwd } : {}),
    });
    let out = '';
    let err = '';
    const done = (v: MountedOverlay | string): void => {
      p.stdout.removeAllListeners('data');
      resolve(v);
    };
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready\n')) {
        holders.set(path.resolve(merged), p);
        // Not what keeps this process alive; when it exits, the pipe closes and the holder ends.
        p.unref();
        for (const s of [p.stdin, p.stdout, p.stderr] as Array<{ unref?: () => void } | null>) s?.unref?.();
        done({ kind: 'userns', via: `/proc/${p.pid}/root`, holderPid: p.pid! });
      }
    });
    p.on('error', (e) => done(e.message));
    p.on('close', (code) => done(err.trim() || `exit ${code}`));
  });
}

/** True when `dir` is a mount point in this mount namespace. */
export function isMountPoint(dir: string): boolean {
  let info: string;
  try {
    info = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return false;
  }
  const target = ` ${escapeMountPath(path.resolve(dir))} `;
  return info.split('\n').some((l) => {
    const f = l.split(' ');
    return f.length > 4 && ` ${f[4]} ` === target;
  });
}

function escapeMountPath(p: string): string {
  return p.replace(/[ \t\n\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
}

/**
 * Unmounts a sandbox's overlay if it is mounted (plain, then lazy when something still holds
 * it). Safe to call on any sandbox dir, with or without an image. Never throws.
 */
export async function releaseOverlay(sandboxDir: string): Promise<void> {
  const { merged } = overlayDirs(sandboxDir);
  const holder = holders.get(path.resolve(merged));
  if (holder) {
    holders.delete(path.resolve(merged));
    // The namespace (and its mount) goes with its last process: the holder, after the sandbox's.
    const gone = new Promise<void>((resolve) => (holder.exitCode !== null || holder.signalCode !== null ? resolve() : holder.once('close', () => resolve())));
    holder.kill('SIGKILL');
    await gone;
  }
  for (let i = 0; i < 3 && isMountPoint(merged); i++) {
    const r = await run(['umount', merged]);
    if (r.code !== 0) await run(['umount', '-l', merged]);
  }
}
