import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { execFileSync } from 'node:child_process';

/**
 * Test images made in-process, in well under a second: raw tar layers (so a test can write any
 * entry, hostile ones included), OCI image layouts and docker-archive tarballs around them, and
 * a tiny root with busybox-static and the host's bash (the sandbox's tool shell).
 */

/** One tar entry. `type`: 0 file, 1 hard link, 2 symlink, 3 character device, 4 block device, 5 directory, 6 FIFO. */
export interface TarEntry {
  name: string;
  type?: '0' | '1' | '2' | '3' | '4' | '5' | '6';
  content?: string | Buffer;
  linkname?: string;
  mode?: number;
  /** Owner (default 0:0). */
  uid?: number;
  gid?: number;
  /** Device numbers of a type 3 or 4 entry. */
  devmajor?: number;
  devminor?: number;
}

function header(e: TarEntry, size: number): Buffer {
  const h = Buffer.alloc(512);
  const type = e.type ?? '0';
  h.write(e.name, 0, 100, 'utf8');
  h.write(`${(e.mode ?? (type === '5' ? 0o755 : 0o644)).toString(8).padStart(7, '0')}\0`, 100);
  h.write(`${(e.uid ?? 0).toString(8).padStart(7, '0')}\0`, 108);
  h.write(`${(e.gid ?? 0).toString(8).padStart(7, '0')}\0`, 116);
  h.write(`${size.toString(8).padStart(11, '0')}\0`, 124);
  h.write(`${Math.floor(Date.now() / 1000).toString(8).padStart(11, '0')}\0`, 136);
  h.write('        ', 148);
  h.write(type, 156);
  if (e.linkname) h.write(e.linkname, 157, 100, 'utf8');
  h.write('ustar\0', 257);
  h.write('00', 263);
  if (e.devmajor !== undefined) h.write(`${e.devmajor.toString(8).padStart(7, '0')}\0`, 329);
  if (e.devminor !== undefined) h.write(`${e.devminor.toString(8).padStart(7, '0')}\0`, 337);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  return h;
}

/** A tar archive (uncompressed) of `entries`, written byte by byte. */
export function tarOf(entries: TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const body = e.content === undefined ? Buffer.alloc(0) : Buffer.isBuffer(e.content) ? e.content : Buffer.from(e.content);
    parts.push(header(e, body.length), body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

/** `sha256:<hex>` of bytes. */
export function sha256(b: Buffer): string {
  return `sha256:${crypto.createHash('sha256').update(b).digest('hex')}`;
}

/** An image config (the `config` part) for a fixture. */
export interface FixtureConfig {
  Env?: string[];
  WorkingDir?: string;
  User?: string;
  Entrypoint?: string[];
}

function writeBlob(dir: string, b: Buffer): string {
  const d = sha256(b);
  fs.writeFileSync(path.join(dir, 'blobs', 'sha256', d.slice(7)), b);
  return d;
}

/**
 * Writes an OCI image layout at `dir` holding one image of `layers` (each an uncompressed tar,
 * stored gzip-compressed), tagged `tag`. Returns the digests for tests to tamper with.
 */
export function writeOciLayout(dir: string, layers: Buffer[], config: FixtureConfig = {}, tag = 'latest'): { manifest: string; config: string; layers: string[]; diffIds: string[] } {
  fs.mkdirSync(path.join(dir, 'blobs', 'sha256'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const diffIds = layers.map(sha256);
  const blobs = layers.map((l) => zlib.gzipSync(l));
  const layerDigests = blobs.map((b) => writeBlob(dir, b));
  const cfg = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config, rootfs: { type: 'layers', diff_ids: diffIds } }));
  const cfgDigest = writeBlob(dir, cfg);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: cfgDigest, size: cfg.length },
      layers: blobs.map((b, i) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: layerDigests[i], size: b.length })),
    }),
  );
  const mDigest = writeBlob(dir, manifest);
  fs.writeFileSync(path.join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: mDigest, size: manifest.length, annotations: { 'org.opencontainers.image.ref.name': tag } }] }));
  return { manifest: mDigest, config: cfgDigest, layers: layerDigests, diffIds };
}

/** Writes a `docker save`-style archive (manifest.json, `<id>.json`, `<n>/layer.tar`) to `file`. */
export function writeDockerArchive(file: string, layers: Buffer[], config: FixtureConfig = {}, repoTag = 'fixture:latest'): string {
  const diffIds = layers.map(sha256);
  const cfg = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config, rootfs: { type: 'layers', diff_ids: diffIds } }));
  const cfgName = `${sha256(cfg).slice(7)}.json`;
  const entries: TarEntry[] = [{ name: cfgName, content: cfg }];
  layers.forEach((l, i) => entries.push({ name: `${i}/`, type: '5' }, { name: `${i}/layer.tar`, content: l }));
  entries.push({ name: 'manifest.json', content: JSON.stringify([{ Config: cfgName, RepoTags: [repoTag], Layers: layers.map((_, i) => `${i}/layer.tar`) }]) });
  fs.writeFileSync(file, tarOf(entries));
  return sha256(cfg);
}

/**
 * A root with busybox-static (applets as symlinks) and the host's bash plus the libraries it
 * links, as a tar layer. Returns null (with the reason) when busybox is not installed.
 */
export function busyboxBashLayer(workDir: string): Buffer | null {
  let busybox: string;
  try {
    busybox = execFileSync('sh', ['-c', 'command -v busybox'], { encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
  const root = path.join(workDir, 'bb-root');
  fs.mkdirSync(path.join(root, 'bin'), { recursive: true });
  for (const d of ['etc', 'tmp', 'root', 'app', 'workspace']) fs.mkdirSync(path.join(root, d), { recursive: true });
  fs.copyFileSync(busybox, path.join(root, 'bin', 'busybox'));
  fs.chmodSync(path.join(root, 'bin', 'busybox'), 0o755);
  const apps = execFileSync(busybox, ['--list'], { encoding: 'utf8' }).split('\n').filter((a) => a && a !== 'busybox' && a !== 'bash');
  for (const a of apps) fs.symlinkSync('busybox', path.join(root, 'bin', a));
  const bash = execFileSync('sh', ['-c', 'command -v bash'], { encoding: 'utf8' }).trim();
  fs.copyFileSync(fs.realpathSync(bash), path.join(root, 'bin', 'bash'));
  fs.chmodSync(path.join(root, 'bin', 'bash'), 0o755);
  const libs = execFileSync('ldd', [bash], { encoding: 'utf8' }).match(/\/\S+/g) ?? [];
  for (const lib of libs) {
    const dest = path.join(root, lib);
    fs.mkdirSync(path.dirname(dest), { recursive: true });
    fs.copyFileSync(fs.realpathSync(lib), dest);
    fs.chmodSync(dest, 0o755);
  }
  fs.writeFileSync(path.join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  return tarOfDir(root);
}

/** A tar layer of a directory's content (files, dirs, symlinks), in a stable order. */
export function tarOfDir(root: string): Buffer {
  const entries: TarEntry[] = [];
  const walk = (rel: string): void => {
    for (const name of fs.readdirSync(path.join(root, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = fs.lstatSync(path.join(root, r));
      if (st.isSymbolicLink()) entries.push({ name: r, type: '2', linkname: fs.readlinkSync(path.join(root, r)) });
      else if (st.isDirectory()) {
        entries.push({ name: `${r}/`, type: '5', mode: st.mode & 0o7777 });
        walk(r);
      } else entries.push({ name: r, content: fs.readFileSync(path.join(root, r)), mode: st.mode & 0o7777 });
    }
  };
  walk('');
  return tarOf(entries);
}
