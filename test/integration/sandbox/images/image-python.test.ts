import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { unshareWorks } from '../../../../src/sandbox/drivers.js';
import { createSandboxProvider, type HostSandboxProvider } from '../../../../src/sandbox/index.js';
import { ImageStore } from '../../../../src/sandbox/images/image-store.js';
import { missingTools } from '../../../helpers/system-tools.js';

/**
 * Image sandboxes with the Python + git + pytest test image (Debian: bash, python3, util-linux),
 * under both drivers: the unshare driver (no bwrap) needs the image's own python3 (seccomp
 * loader) and setpriv, which the busybox fixture lacks. The image is built the first time
 * (scripts/build-test-images.sh python: needs root and Debian's mirror, ~1 min), so these run
 * with ROLLOUT_TEST_PYTHON_IMAGE=1, which .ci/run sets: then they are required, never skipped.
 */
const withPython = process.env.ROLLOUT_TEST_PYTHON_IMAGE === '1';
const why = !withPython
  ? 'set ROLLOUT_TEST_PYTHON_IMAGE=1 (builds the Python test image with scripts/build-test-images.sh python)'
  : process.getuid?.() !== 0
    ? 'needs root (kernel overlayfs)'
    : !unshareWorks()
      ? 'needs unshare (apt-get install util-linux)'
      : missingTools('bwrap');
if (withPython && why) throw new Error(`ROLLOUT_TEST_PYTHON_IMAGE=1 but the Python image tests cannot run: ${why}`);

let dir: string;
let store: ImageStore;
const providers: Record<'bwrap' | 'unshare', HostSandboxProvider | null> = { bwrap: null, unshare: null };

/** A copy of an OCI layout whose image config has `patch` applied (blobs hard-linked, not copied). */
function withConfig(src: string, dst: string, patch: Record<string, unknown>): void {
  fs.mkdirSync(path.join(dst, 'blobs', 'sha256'), { recursive: true });
  for (const b of fs.readdirSync(path.join(src, 'blobs', 'sha256'))) fs.linkSync(path.join(src, 'blobs', 'sha256', b), path.join(dst, 'blobs', 'sha256', b));
  fs.copyFileSync(path.join(src, 'oci-layout'), path.join(dst, 'oci-layout'));
  const blob = (d: string): Buffer => fs.readFileSync(path.join(src, 'blobs', 'sha256', d.slice(7)));
  const put = (b: Buffer): string => {
    const d = `sha256:${crypto.createHash('sha256').update(b).digest('hex')}`;
    fs.writeFileSync(path.join(dst, 'blobs', 'sha256', d.slice(7)), b);
    return d;
  };
  const index = JSON.parse(fs.readFileSync(path.join(src, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string; size: number }> };
  const manifest = JSON.parse(blob(index.manifests[0]!.digest).toString()) as { config: { digest: string; size: number } };
  const config = JSON.parse(blob(manifest.config.digest).toString()) as { config: Record<string, unknown> };
  config.config = { ...config.config, ...patch };
  const cfg = Buffer.from(JSON.stringify(config));
  manifest.config = { ...manifest.config, digest: put(cfg), size: cfg.length };
  const m = Buffer.from(JSON.stringify(manifest));
  index.manifests = [{ ...index.manifests[0]!, digest: put(m), size: m.length }];
  fs.writeFileSync(path.join(dst, 'index.json'), JSON.stringify(index));
}

describe.skipIf(why !== null)(`image sandboxes with the Python test image${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-py-'));
    fs.chmodSync(dir, 0o711);
    const layout = execFileSync(path.resolve('scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim().split('\n').pop()!;
    store = new ImageStore(path.join(dir, 'store'));
    await store.import(layout, { name: 'py' });
    // Debian's `nobody` (65534, home /nonexistent): a non-root User of a real image.
    withConfig(layout, path.join(dir, 'py-nobody'), { User: 'nobody' });
    await store.import(path.join(dir, 'py-nobody'), { name: 'py-nobody' });
    for (const driver of ['bwrap', 'unshare'] as const) {
      providers[driver] = createSandboxProvider({ driver, hosts: 1, stateDir: path.join(dir, `state-${driver}`), imageStore: store.dir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
    }
  }, 600_000);

  afterAll(async () => {
    await Promise.all(Object.values(providers).map((p) => p?.close()));
    if (dir) {
      expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(dir);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each(['bwrap', 'unshare'] as const)('%s: the image root is writable where its user may write (workdir, HOME), not over root-owned image files; the REPL runs in the image without capabilities', async (driver) => {
    const sb = await providers[driver]!.create({ image: 'py' }, { rolloutId: `r-py-${driver}` });
    try {
      const r = await sb.bash({ command: 'id -u; pwd; echo hi > /testbed/new.txt && cat /testbed/new.txt; echo x > /etc/os-release 2>&1 || echo etc-refused; touch ~/.gitconfig && echo "home-ok $HOME"; grep CapEff /proc/self/status' });
      expect(r.output).toMatch(/^0\n\/testbed\nhi\n/);
      expect(r.output).toContain('etc-refused');
      expect(r.output).toContain('home-ok /root');
      expect(r.output).toMatch(/CapEff:\s+0+\n/);
      const py = await sb.python('import os\nprint(os.getuid(), open("/testbed/new.txt").read().strip())\nprint([l for l in open("/proc/self/status") if l.startswith(("CapEff", "CapBnd"))])');
      expect(py.error).toBeNull();
      expect(py.output).toMatch(/^0 hi\n/);
      expect(py.output).toMatch(/'CapEff:\\t0+\\n', 'CapBnd:\\t0+\\n'/);
    } finally {
      await sb.close();
    }
  }, 120_000);

  it.each(['bwrap', 'unshare'] as const)("%s: a non-root User (Debian's nobody) runs the shell and the REPL", async (driver) => {
    const sb = await providers[driver]!.create({ image: 'py-nobody' }, { rolloutId: `r-py-nobody-${driver}` });
    try {
      const r = await sb.bash({ command: 'id -un; echo "$HOME"; echo w > /testbed/w.txt && echo work-ok; grep CapEff /proc/self/status' });
      expect(r.output).toMatch(/^nobody\n\/nonexistent\nwork-ok\nCapEff:\s+0+\n$/);
      const py = await sb.python('import os\nprint(os.getuid())');
      expect(py.output).toBe('65534\n');
    } finally {
      await sb.close();
    }
  }, 120_000);
});
