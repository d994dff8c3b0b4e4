import { execFileSync } from 'node:child_process';
import { copyFileSync, linkSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { sha256, tarOf } from '../../helpers/images/oci-fixture.js';
import { missingTools } from '../../helpers/system-tools.js';
import { ROOT } from '../service/harness.js';

/**
 * The Python test image (scripts/build-test-images.sh python: Debian bookworm, python3, git,
 * pytest, the sample repository at /testbed, WorkingDir /testbed) for Polar's image e2e tests,
 * and a Docker image derived from it. Built only when ROLLOUT_TEST_PYTHON_IMAGE=1 (.ci/run sets
 * it; the first build takes about a minute, cached after), as task-images.test.ts does.
 */
export const WITH_PYTHON_IMAGE = process.env['ROLLOUT_TEST_PYTHON_IMAGE'] === '1';

/** Null when the image tests can run here; else why not (root for the kernel overlay, bwrap). */
export function imageTestsMissing(): string | null {
  const why = process.getuid?.() !== 0 ? 'needs root (kernel overlayfs)' : missingTools('bwrap');
  if (WITH_PYTHON_IMAGE && why) throw new Error(`ROLLOUT_TEST_PYTHON_IMAGE=1 but the Polar image tests cannot run: ${why}`);
  return why;
}

/** Builds (or reuses) the Python test image; answers its OCI layout directory. */
export function pythonImageLayout(): string {
  const out = execFileSync(resolve(ROOT, 'scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 });
  return out.trim().split('\n').pop()!;
}

/** What the derived image's own layer holds at `/etc/polar-e2e-image`: only that image has it. */
export const DERIVED_MARKER = 'polar-e2e derived python image';

interface Descriptor {
  digest: string;
}

/**
 * Writes, as `docker save` writes it (an extracted archive: `manifest.json` naming the config
 * and the layer blobs, with `RepoTags`), the Python test image plus one layer: the host's
 * libstdc++ (which the runtime's own Node binary links, and which the Python image lacks: a
 * harness preset's `#!/usr/bin/env node` CLI needs it) and `/etc/polar-e2e-image`. The Python
 * image's blobs are hard-linked (copied across file systems), not rewritten. Answers the dir.
 */
export function writeDerivedDockerArchive(layout: string, dir: string, repoTag: string): string {
  const blobs = join(dir, 'blobs', 'sha256');
  mkdirSync(blobs, { recursive: true });
  const blobOf = (d: string): string => join(layout, 'blobs', 'sha256', d.slice('sha256:'.length));
  const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8')) as { manifests: Descriptor[] };
  const manifest = JSON.parse(readFileSync(blobOf(index.manifests[0]!.digest), 'utf8')) as { config: Descriptor; layers: Descriptor[] };
  const config = JSON.parse(readFileSync(blobOf(manifest.config.digest), 'utf8')) as { rootfs: { diff_ids: string[] } } & Record<string, unknown>;
  for (const l of manifest.layers) {
    const to = join(blobs, l.digest.slice('sha256:'.length));
    try {
      linkSync(blobOf(l.digest), to);
    } catch {
      copyFileSync(blobOf(l.digest), to);
    }
  }
  const lib = realpathSync('/usr/lib/x86_64-linux-gnu/libstdc++.so.6');
  const extra = tarOf([
    { name: 'etc/', type: '5' },
    { name: 'etc/polar-e2e-image', content: `${DERIVED_MARKER}\n` },
    { name: 'usr/', type: '5' },
    { name: 'usr/lib/', type: '5' },
    { name: 'usr/lib/x86_64-linux-gnu/', type: '5' },
    { name: 'usr/lib/x86_64-linux-gnu/libstdc++.so.6', content: readFileSync(lib), mode: 0o644 },
  ]);
  const extraDigest = sha256(extra);
  writeFileSync(join(blobs, extraDigest.slice('sha256:'.length)), extra);
  const derived = Buffer.from(JSON.stringify({ ...config, rootfs: { type: 'layers', diff_ids: [...config.rootfs.diff_ids, extraDigest] }, history: undefined }));
  const cfgDigest = sha256(derived);
  writeFileSync(join(blobs, cfgDigest.slice('sha256:'.length)), derived);
  const rel = (d: string): string => `blobs/sha256/${d.slice('sha256:'.length)}`;
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify([{ Config: rel(cfgDigest), RepoTags: [repoTag], Layers: [...manifest.layers.map((l) => rel(l.digest)), rel(extraDigest)] }]));
  return dir;
}

/** `rollout image import` as an operator runs it; answers its output. */
export function rolloutImageImport(source: string, storeDir: string, name?: string): string {
  return execFileSync(process.execPath, [join(ROOT, 'bin/rollout.js'), 'image', 'import', source, '--image-store', storeDir, ...(name ? ['--name', name] : [])], { encoding: 'utf8', timeout: 600_000 });
}
