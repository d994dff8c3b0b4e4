import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { imageRefForms } from './image-ref.js';
import { imageInfraError, imageTaskError, isDiskFull } from './image-errors.js';
import { ImageRecordSchema, type ImageRecord, type ResolvedImage } from './image-record.js';
import type { UnpackLayerInput } from './layer-unpack.js';

/**
 * The image store directory: `ROLLOUT_IMAGE_STORE`, else `$XDG_CACHE_HOME/rollout-runtime/images`,
 * else `~/.cache/rollout-runtime/images`. One per machine, shared by every `rollout` command.
 */
export function defaultImageStoreDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.ROLLOUT_IMAGE_STORE) return path.resolve(env.ROLLOUT_IMAGE_STORE);
  const base = env.XDG_CACHE_HOME ? env.XDG_CACHE_HOME : path.join(os.homedir(), '.cache');
  return path.join(base, 'rollout-runtime', 'images');
}

/** An image as `rollout image ls` shows it. */
export interface ImageListing extends ImageRecord {
  lastUsedAt: string;
}

/** What {@link ImageStore.prune} removed. */
export interface PruneReport {
  images: string[];
  layers: string[];
  bytesFreed: number;
  bytesLeft: number;
}

const HEX = /^[0-9a-f]{64}$/;

/**
 * A content-addressed image store: each layer is unpacked once into `layers/<diff_id hex>/`
 * (an overlayfs lower directory, whiteouts in overlay form), images are small JSON records
 * naming their layers (`images/<config hex>.json`), names are `refs/<encoded name>` files
 * holding an image id, and `used/<config hex>` files carry the last use in their mtime.
 *
 * Crash safety: a layer is unpacked into `tmp/` and renamed into place; records and refs are
 * written to a temporary name and renamed. Concurrency: one unpack per layer per process (a
 * promise map) and per machine (a `locks/<hex>` file holding the owner's pid; a dead owner's
 * lock is taken over).
 */
export class ImageStore {
  private readonly inflight = new Map<string, Promise<{ bytes: number }>>();

  /** @param dir the store directory; created on first write. */
  constructor(readonly dir: string = defaultImageStoreDir()) {}

  private sub(name: string): string {
    return path.join(this.dir, name);
  }

  /** Absolute path of a layer's unpacked directory. */
  layerDir(diffId: string): string {
    return path.join(this.dir, 'layers', hexOf(diffId));
  }

  /**
   * Imports an image from an OCI layout dir (optionally `DIR:TAG`) or a docker-archive tarball,
   * under `name` (default: the names the image carries, else its short id). Layers already in
   * the store are not unpacked again.
   * @throws TaskError `IMAGE_*` naming the image and layer; InfraError `IMAGE_DISK_FULL`.
   */
  async import(source: string, opts: { name?: string | undefined } = {}): Promise<ImageRecord> {
    this.makeDirs();
    // Loaded on first import only: node-tar and the unpacker stay off every CLI start.
    const { readImageSource } = await import('./image-source.js');
    const src = await readImageSource(source, this.sub('tmp'));
    try {
      const label = opts.name ?? src.names[0] ?? source;
      let bytes = 0;
      for (const [i, layer] of src.layers.entries()) {
        const w = { image: label, layer: `${i + 1}/${src.layers.length} ${layer.diffId}` };
        if (!HEX.test(hexOf(layer.diffId))) throw imageTaskError('IMAGE_CORRUPT', w, 'diff_id is not a sha256 digest');
        bytes += (await this.ensureLayer(layer.diffId, () => ({ blobPath: layer.blobPath, blobDigest: layer.blobDigest, diffId: layer.diffId, where: w }))).bytes;
      }
      const id = src.configDigest;
      const prev = this.readRecord(id);
      const names = [...new Set([...(prev?.names ?? []), ...(opts.name ? [opts.name] : src.names.length ? src.names : [hexOf(id).slice(0, 12)])])];
      const record: ImageRecord = {
        id,
        ...(src.manifestDigest ? { manifestDigest: src.manifestDigest } : {}),
        names,
        config: src.config,
        layers: src.layers.map((l) => l.diffId),
        bytes,
        importedAt: prev?.importedAt ?? new Date().toISOString(),
        source: path.resolve(source),
      };
      try {
        atomicWrite(path.join(this.sub('images'), `${hexOf(id)}.json`), JSON.stringify(record, null, 1));
        for (const n of names) atomicWrite(this.refFile(n), id);
        this.touch(id);
      } catch (err) {
        if (isDiskFull(err)) throw imageInfraError('IMAGE_DISK_FULL', { image: label }, 'no space left on device while writing the image record', err);
        throw err;
      }
      return record;
    } finally {
      src.cleanup();
    }
  }

  /**
   * Creates the store and its directories mode 0700, and takes group and other access off a
   * store made before (or by hand): the layers hold whole root filesystems, and nobody but the
   * store's owner has business walking them. Sandboxes never do: the overlay reads its lower
   * dirs with the mounter's rights.
   */
  private makeDirs(): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    for (const d of ['layers', 'images', 'refs', 'used', 'tmp', 'locks']) fs.mkdirSync(this.sub(d), { recursive: true, mode: 0o700 });
    for (const d of [this.dir, this.sub('layers'), this.sub('tmp')]) {
      const st = fs.statSync(d);
      if (st.mode & 0o077 && st.uid === process.getuid?.()) fs.chmodSync(d, st.mode & 0o7700);
    }
  }

  /** Unpacks a layer unless it is there; one unpack at a time per layer, machine-wide. */
  private ensureLayer(diffId: string, input: () => Omit<UnpackLayerInput, 'dest'>): Promise<{ bytes: number }> {
    const hex = hexOf(diffId);
    const running = this.inflight.get(hex);
    if (running) return running;
    const p = (async () => {
      const final = path.join(this.sub('layers'), hex);
      const meta = `${final}.json`;
      for (;;) {
        if (fs.existsSync(final)) return readLayerMeta(meta);
        const lock = path.join(this.sub('locks'), hex);
        if (tryLock(lock)) {
          try {
            if (fs.existsSync(final)) return readLayerMeta(meta);
            const tmp = path.join(this.sub('tmp'), `layer-${hex.slice(0, 16)}-${crypto.randomBytes(4).toString('hex')}`);
            const { unpackLayer } = await import('./layer-unpack.js');
            const got = await unpackLayer({ ...input(), dest: tmp });
            try {
              atomicWrite(meta, JSON.stringify({ diffId, bytes: got.bytes, entries: got.entries }));
              fs.renameSync(tmp, final);
            } catch (err) {
              fs.rmSync(tmp, { recursive: true, force: true });
              fs.rmSync(meta, { force: true });
              if (isDiskFull(err)) throw imageInfraError('IMAGE_DISK_FULL', input().where, 'no space left on device while storing the layer', err);
              throw err;
            }
            return { bytes: got.bytes };
          } finally {
            fs.rmSync(lock, { force: true });
          }
        }
        await sleep(50);
      }
    })();
    this.inflight.set(hex, p);
    const clear = (): void => void this.inflight.delete(hex);
    p.then(clear, clear);
    return p;
  }

  private refFile(name: string): string {
    return path.join(this.sub('refs'), encodeURIComponent(name));
  }

  private readRecord(id: string): ImageRecord | null {
    try {
      return ImageRecordSchema.parse(JSON.parse(fs.readFileSync(path.join(this.sub('images'), `${hexOf(id)}.json`), 'utf8')));
    } catch {
      return null;
    }
  }

  /** Marks an image used now (prune removes the least recently used first). */
  private touch(id: string): void {
    const f = path.join(this.sub('used'), hexOf(id));
    const now = new Date();
    try {
      fs.utimesSync(f, now, now);
    } catch {
      try {
        fs.writeFileSync(f, '');
      } catch {
        // a read-only store still resolves
      }
    }
  }

  /**
   * The image id a reference names: an imported name (in any of its forms, {@link imageRefForms}:
   * with or without `:latest`, a `docker.io/` or `docker.io/library/` prefix, `docker://`), `sha256:<hex>` of the config or manifest, or
   * a unique hex prefix of at least 12 digits. Null when the store has none.
   */
  lookup(ref: string): string | null {
    for (const n of imageRefForms(ref)) {
      try {
        return fs.readFileSync(this.refFile(n), 'utf8').trim();
      } catch {
        // next form
      }
    }
    const hex = ref.replace(/^sha256:/, '');
    if (/^[0-9a-f]{12,64}$/.test(hex)) {
      const hits = this.list().filter((r) => hexOf(r.id).startsWith(hex) || (r.manifestDigest && hexOf(r.manifestDigest).startsWith(hex)));
      if (hits.length === 1) return hits[0]!.id;
    }
    return null;
  }

  /** True when {@link lookup} finds the image and all its layers are unpacked. */
  has(ref: string): boolean {
    const id = this.lookup(ref);
    const rec = id ? this.readRecord(id) : null;
    return !!rec && rec.layers.every((l) => fs.existsSync(this.layerDir(l)));
  }

  /**
   * What a sandbox needs of the image `ref`: lower dirs (top first) and config. Marks it used.
   * @throws TaskError `IMAGE_NOT_FOUND` naming the reference and the store.
   */
  resolve(ref: string): ResolvedImage {
    this.tighten();
    const id = this.lookup(ref);
    const rec = id ? this.readRecord(id) : null;
    if (!rec) throw imageTaskError('IMAGE_NOT_FOUND', { image: ref }, `not in the image store ${this.dir} (import it with: rollout image import PATH --name ${ref})`);
    const missing = rec.layers.find((l) => !fs.existsSync(this.layerDir(l)));
    if (missing) throw imageTaskError('IMAGE_NOT_FOUND', { image: ref, layer: missing }, `the layer was pruned from ${this.dir}; import the image again`);
    this.touch(rec.id);
    const env: Record<string, string> = {};
    for (const kv of rec.config.Env ?? []) {
      const i = kv.indexOf('=');
      if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
    }
    return {
      ref,
      id: rec.id,
      lowerDirs: rec.layers.map((l) => this.layerDir(l)).reverse(),
      env,
      workingDir: rec.config.WorkingDir || null,
      user: rec.config.User || null,
      entrypoint: rec.config.Entrypoint ?? null,
      cmd: rec.config.Cmd ?? null,
    };
  }

  /** A store made 0755 by an earlier version becomes 0700 on its next use by its owner. */
  private tighten(): void {
    try {
      const st = fs.statSync(this.dir);
      if (st.mode & 0o077 && st.uid === process.getuid?.()) fs.chmodSync(this.dir, st.mode & 0o7700);
    } catch {
      // no store yet: lookup says so
    }
  }

  /** Every image, most recently used first. */
  list(): ImageListing[] {
    let files: string[] = [];
    try {
      files = fs.readdirSync(this.sub('images')).filter((f) => f.endsWith('.json'));
    } catch {
      return [];
    }
    const out: ImageListing[] = [];
    for (const f of files) {
      const rec = this.readRecord(`sha256:${f.slice(0, -5)}`);
      if (!rec) continue;
      let used = new Date(rec.importedAt);
      try {
        used = fs.statSync(path.join(this.sub('used'), hexOf(rec.id))).mtime;
      } catch {
        // never used
      }
      out.push({ ...rec, lastUsedAt: used.toISOString() });
    }
    return out.sort((a, b) => b.lastUsedAt.localeCompare(a.lastUsedAt));
  }

  /**
   * Removes the name `ref` (or, given an id, every name of that image); the image record goes
   * with its last name. Layers stay until {@link prune}. Returns false when nothing matched.
   */
  remove(ref: string): boolean {
    const id = this.lookup(ref);
    if (!id) return false;
    const rec = this.readRecord(id);
    const isName = fs.existsSync(this.refFile(ref));
    const drop = isName ? [ref] : (rec?.names ?? []);
    for (const n of drop) fs.rmSync(this.refFile(n), { force: true });
    const left = (rec?.names ?? []).filter((n) => !drop.includes(n));
    if (rec && left.length > 0) atomicWrite(path.join(this.sub('images'), `${hexOf(id)}.json`), JSON.stringify({ ...rec, names: left }, null, 1));
    else {
      fs.rmSync(path.join(this.sub('images'), `${hexOf(id)}.json`), { force: true });
      fs.rmSync(path.join(this.sub('used'), hexOf(id)), { force: true });
    }
    return true;
  }

  /**
   * Bounds the cache: removes images not used for `unusedForMs` (default: never by age), then
   * the least recently used ones while the layers they alone hold keep the store over
   * `maxBytes`; then every layer no image names. A layer mounted by a live sandbox (it appears
   * in /proc/self/mountinfo) is never removed, nor the image holding it.
   */
  prune(opts: { maxBytes?: number | undefined; unusedForMs?: number | undefined; now?: number | undefined } = {}): PruneReport {
    const now = opts.now ?? Date.now();
    const mounted = mountedText();
    const images = this.list().reverse(); // least recently used first
    const report: PruneReport = { images: [], layers: [], bytesFreed: 0, bytesLeft: 0 };
    const layerBytes = (hex: string): number => readLayerMeta(path.join(this.sub('layers'), `${hex}.json`)).bytes;
    const inUse = (rec: ImageRecord): boolean => rec.layers.some((l) => mounted.includes(hexOf(l)));
    let kept = images;
    const total = (): number => {
      const live = new Set(kept.flatMap((r) => r.layers.map(hexOf)));
      let sum = 0;
      for (const h of live) sum += layerBytes(h);
      return sum;
    };
    for (const rec of images) {
      const old = opts.unusedForMs !== undefined && now - Date.parse(rec.lastUsedAt) > opts.unusedForMs;
      const over = opts.maxBytes !== undefined && total() > opts.maxBytes;
      if ((old || over) && !inUse(rec)) {
        for (const n of rec.names) fs.rmSync(this.refFile(n), { force: true });
        fs.rmSync(path.join(this.sub('images'), `${hexOf(rec.id)}.json`), { force: true });
        fs.rmSync(path.join(this.sub('used'), hexOf(rec.id)), { force: true });
        report.images.push(rec.names[0] ?? rec.id);
        kept = kept.filter((r) => r !== rec);
      }
    }
    const live = new Set(kept.flatMap((r) => r.layers.map(hexOf)));
    let names: string[] = [];
    try {
      names = fs.readdirSync(this.sub('layers')).filter((n) => HEX.test(n));
    } catch {
      // empty store
    }
    for (const hex of names) {
      if (live.has(hex) || mounted.includes(hex)) continue;
      report.bytesFreed += layerBytes(hex);
      fs.rmSync(path.join(this.sub('layers'), hex), { recursive: true, force: true });
      fs.rmSync(path.join(this.sub('layers'), `${hex}.json`), { force: true });
      report.layers.push(`sha256:${hex}`);
    }
    // Temp dirs of crashed imports (no live lock holder can be using one older than an hour).
    try {
      for (const t of fs.readdirSync(this.sub('tmp'))) {
        const p = path.join(this.sub('tmp'), t);
        if (now - fs.statSync(p).mtimeMs > 3_600_000) fs.rmSync(p, { recursive: true, force: true });
      }
    } catch {
      // no tmp
    }
    report.bytesLeft = total();
    return report;
  }
}

function hexOf(digest: string): string {
  return digest.replace(/^sha256:/, '');
}

function readLayerMeta(file: string): { bytes: number } {
  try {
    const m = JSON.parse(fs.readFileSync(file, 'utf8')) as { bytes?: unknown };
    return { bytes: typeof m.bytes === 'number' ? m.bytes : 0 };
  } catch {
    return { bytes: 0 };
  }
}

function atomicWrite(file: string, content: string): void {
  const tmp = `${file}.${process.pid}.${crypto.randomBytes(3).toString('hex')}.tmp`;
  try {
    fs.writeFileSync(tmp, content);
    fs.renameSync(tmp, file);
  } catch (err) {
    fs.rmSync(tmp, { force: true });
    throw err;
  }
}

/** Takes `lock` (O_EXCL); a lock whose holder pid is dead is removed and retaken. */
function tryLock(lock: string): boolean {
  try {
    fs.writeFileSync(lock, String(process.pid), { flag: 'wx' });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  let pid = 0;
  try {
    pid = Number(fs.readFileSync(lock, 'utf8'));
  } catch {
    return false; // released meanwhile: the caller retries
  }
  if (pid > 0 && pid !== process.pid && !alive(pid)) fs.rmSync(lock, { force: true });
  return false;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function mountedText(): string {
  try {
    return fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return '';
  }
}
