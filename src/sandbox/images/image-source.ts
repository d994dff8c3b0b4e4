import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { extract as tarExtract } from 'tar';
import { z } from 'zod';
import { imageTaskError, imageInfraError, isDiskFull } from './image-errors.js';
import { checkEntry } from './layer-unpack.js';
import { ImageConfigSchema, type ImageConfig } from './image-record.js';

/** One layer of an image being imported. */
export interface SourceLayer {
  blobPath: string;
  /** The manifest's digest of the (possibly compressed) blob; absent for docker-archive `layer.tar` files. */
  blobDigest?: string | undefined;
  /** The config's `rootfs.diff_ids` entry: the digest of the uncompressed tar, and the layer's cache key. */
  diffId: string;
}

/** An image read from disk, ready to import. */
export interface ImageSource {
  format: 'oci-layout' | 'docker-archive';
  /** Names the image carried (OCI `ref.name` annotation, docker `RepoTags`). */
  names: string[];
  /** `sha256:<hex>` of the config blob: the image id. */
  configDigest: string;
  /** `sha256:<hex>` of the manifest, for OCI layouts. */
  manifestDigest?: string | undefined;
  config: ImageConfig;
  /** Bottom layer first. */
  layers: SourceLayer[];
  /** Removes what reading made (the extracted docker archive). Never throws. */
  cleanup(): void;
}

const DigestSchema = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'expected sha256:<64 hex digits>');
const DescriptorSchema = z.object({ mediaType: z.string().optional(), digest: DigestSchema, size: z.number().optional(), annotations: z.record(z.string(), z.string()).optional(), platform: z.object({ os: z.string().optional(), architecture: z.string().optional() }).passthrough().optional() });
const IndexSchema = z.object({ manifests: z.array(DescriptorSchema).min(1, 'the index lists no manifest') });
const ManifestSchema = z.object({ mediaType: z.string().optional(), config: DescriptorSchema, layers: z.array(DescriptorSchema), manifests: z.undefined().optional() });
const DockerManifestSchema = z.array(z.object({ Config: z.string(), RepoTags: z.array(z.string()).nullable().optional(), Layers: z.array(z.string()) })).min(1, 'manifest.json lists no image');
const ConfigFileSchema = z.object({
  config: ImageConfigSchema.nullable().optional(),
  rootfs: z.object({ type: z.string().optional(), diff_ids: z.array(DigestSchema) }),
});

const REF_NAME = 'org.opencontainers.image.ref.name';

/**
 * Reads an image from disk: an OCI image layout directory (`PATH` or `PATH:TAG` to pick one of
 * several manifests by its `org.opencontainers.image.ref.name`), or a `docker save` /
 * `docker-archive` tarball (extracted into `tmpDir` first, entries checked as layer entries are).
 * Multi-platform indexes resolve to linux/amd64 (then the first manifest).
 *
 * @throws TaskError `IMAGE_NOT_FOUND` (no such path), `IMAGE_CORRUPT` (a JSON file or blob missing
 *   or malformed, a tarball that is not one), `IMAGE_DIGEST_MISMATCH` (config blob);
 *   InfraError `IMAGE_DISK_FULL` when the archive does not fit on disk.
 */
export async function readImageSource(input: string, tmpDir: string): Promise<ImageSource> {
  const w = { image: input };
  let p = input;
  let tag: string | undefined;
  if (!fs.existsSync(p)) {
    const m = /^(.*):([^/:]+)$/.exec(input);
    if (m && fs.existsSync(m[1]!)) {
      p = m[1]!;
      tag = m[2];
    } else throw imageTaskError('IMAGE_NOT_FOUND', w, 'no such file or directory');
  }
  const st = fs.statSync(p);
  if (st.isDirectory()) {
    if (fs.existsSync(path.join(p, 'oci-layout'))) return readOciLayout(p, tag, input, () => undefined);
    if (fs.existsSync(path.join(p, 'manifest.json'))) return readDockerDir(p, input, () => undefined);
    throw imageTaskError('IMAGE_CORRUPT', w, 'the directory is neither an OCI image layout (no oci-layout file) nor an extracted docker archive (no manifest.json)');
  }
  fs.mkdirSync(tmpDir, { recursive: true });
  const dir = fs.mkdtempSync(path.join(tmpDir, 'archive-'));
  const cleanup = (): void => fs.rmSync(dir, { recursive: true, force: true });
  try {
    let unsafe: string | null = null;
    await tarExtract({
      file: p,
      cwd: dir,
      strict: true,
      preserveOwner: false,
      filter: (_p, e) => {
        const problem = checkEntry(e as never, new Set());
        if (problem) unsafe ??= problem;
        return problem === null;
      },
    });
    if (unsafe) throw imageTaskError('IMAGE_UNSAFE_ENTRY', w, `archive ${unsafe}`);
    if (fs.existsSync(path.join(dir, 'manifest.json'))) return readDockerDir(dir, input, cleanup);
    if (fs.existsSync(path.join(dir, 'oci-layout'))) return readOciLayout(dir, tag, input, cleanup);
    throw imageTaskError('IMAGE_CORRUPT', w, 'the tarball holds neither manifest.json (docker-archive) nor oci-layout (OCI archive)');
  } catch (err) {
    cleanup();
    if ((err as { code?: string }).code?.startsWith?.('IMAGE_')) throw err;
    if (isDiskFull(err)) throw imageInfraError('IMAGE_DISK_FULL', w, 'no space left on device while extracting the archive', err);
    throw imageTaskError('IMAGE_CORRUPT', w, `not a readable tar archive: ${(err as Error).message}`, err);
  }
}

function readJson<S extends z.ZodType>(file: string, schema: S, image: string, what: string): z.infer<S> {
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    throw imageTaskError('IMAGE_CORRUPT', { image }, `${what} is missing or not JSON: ${(err as Error).message}`, err);
  }
  const r = schema.safeParse(raw);
  if (!r.success) throw imageTaskError('IMAGE_CORRUPT', { image }, `${what}: ${r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
  return r.data;
}

function blobPath(layout: string, digest: string): string {
  return path.join(layout, 'blobs', 'sha256', digest.slice('sha256:'.length));
}

function sha256File(file: string): string {
  return `sha256:${crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex')}`;
}

function readConfig(file: string, image: string, expectDigest: string | undefined): { digest: string; config: ImageConfig; diffIds: string[] } {
  if (!fs.existsSync(file)) throw imageTaskError('IMAGE_CORRUPT', { image }, `config blob ${path.basename(file)} is missing`);
  const digest = sha256File(file);
  if (expectDigest && digest !== expectDigest) throw imageTaskError('IMAGE_DIGEST_MISMATCH', { image }, `config digest mismatch: the manifest says ${expectDigest}, the blob hashes to ${digest}`);
  const cfg = readJson(file, ConfigFileSchema, image, 'the image config');
  return { digest, config: cfg.config ?? {}, diffIds: cfg.rootfs.diff_ids };
}

function readOciLayout(dir: string, tag: string | undefined, image: string, cleanup: () => void): ImageSource {
  const index = readJson(path.join(dir, 'index.json'), IndexSchema, image, 'index.json');
  let candidates = index.manifests;
  if (tag) {
    candidates = candidates.filter((m) => m.annotations?.[REF_NAME] === tag);
    if (candidates.length === 0) throw imageTaskError('IMAGE_NOT_FOUND', { image }, `the layout has no manifest tagged '${tag}'`);
  }
  let desc = candidates[0]!;
  let names = candidates.map((m) => m.annotations?.[REF_NAME]).filter((n): n is string => !!n);
  // Nested image index (multi-platform): take linux/amd64, else the first.
  for (let depth = 0; depth < 4; depth++) {
    const raw = readJson(blobPath(dir, desc.digest), z.object({ manifests: z.array(DescriptorSchema).optional() }).passthrough(), image, `manifest ${desc.digest}`);
    if (!raw.manifests) break;
    desc = raw.manifests.find((m) => m.platform?.os === 'linux' && m.platform?.architecture === 'amd64') ?? raw.manifests[0] ?? desc;
  }
  const mfile = blobPath(dir, desc.digest);
  const manifestDigest = fs.existsSync(mfile) ? sha256File(mfile) : undefined;
  if (manifestDigest !== desc.digest) throw imageTaskError(manifestDigest ? 'IMAGE_DIGEST_MISMATCH' : 'IMAGE_CORRUPT', { image }, manifestDigest ? `manifest digest mismatch: the index says ${desc.digest}, the blob hashes to ${manifestDigest}` : `manifest blob ${desc.digest} is missing`);
  const manifest = readJson(mfile, ManifestSchema, image, `manifest ${desc.digest}`);
  const cfg = readConfig(blobPath(dir, manifest.config.digest), image, manifest.config.digest);
  if (cfg.diffIds.length !== manifest.layers.length) throw imageTaskError('IMAGE_CORRUPT', { image }, `the manifest lists ${manifest.layers.length} layers but the config ${cfg.diffIds.length} diff_ids`);
  names = names.length ? names : [];
  return {
    format: 'oci-layout',
    names,
    configDigest: cfg.digest,
    manifestDigest,
    config: cfg.config,
    layers: manifest.layers.map((l, i) => ({ blobPath: blobPath(dir, l.digest), blobDigest: l.digest, diffId: cfg.diffIds[i]! })),
    cleanup,
  };
}

function readDockerDir(dir: string, image: string, cleanup: () => void): ImageSource {
  const [m] = readJson(path.join(dir, 'manifest.json'), DockerManifestSchema, image, 'manifest.json');
  const inside = (rel: string): string => {
    const p = path.resolve(dir, rel);
    if (!p.startsWith(path.resolve(dir) + path.sep)) throw imageTaskError('IMAGE_UNSAFE_ENTRY', { image }, `manifest.json names a file outside the archive: ${rel}`);
    return p;
  };
  const cfg = readConfig(inside(m!.Config), image, /^(?:blobs\/sha256\/)?([0-9a-f]{64})(?:\.json)?$/.test(m!.Config) ? `sha256:${/([0-9a-f]{64})/.exec(m!.Config)![1]}` : undefined);
  if (cfg.diffIds.length !== m!.Layers.length) throw imageTaskError('IMAGE_CORRUPT', { image }, `manifest.json lists ${m!.Layers.length} layers but the config ${cfg.diffIds.length} diff_ids`);
  return {
    format: 'docker-archive',
    names: m!.RepoTags ?? [],
    configDigest: cfg.digest,
    config: cfg.config,
    // Docker's `Layers` are the uncompressed tars (diff_id = their digest); newer docker saves
    // name OCI blobs, whose digest is the blob's own.
    layers: m!.Layers.map((l, i) => {
      const blob = /^blobs\/sha256\/([0-9a-f]{64})$/.exec(l);
      return { blobPath: inside(l), blobDigest: blob ? `sha256:${blob[1]}` : undefined, diffId: cfg.diffIds[i]! };
    }),
    cleanup,
  };
}
