import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { unshareWorks } from '../../../../src/sandbox/drivers.js';
import { missingTools } from '../../../helpers/system-tools.js';

/**
 * An unprivileged runtime's image sandbox: the store unpacks layers without root (user.*
 * opaque xattrs, 0:0 whiteouts), the overlay is kernel overlayfs inside a user namespace of its
 * own (userxattr), and bwrap starts inside that namespace. Run in a child process as uid 65534
 * (test/helpers/images/unprivileged-image-run.ts); as a non-root runner, as its own uid.
 */
const why = missingTools('bwrap', 'busybox');
const asRoot = process.getuid?.() === 0;
/**
 * The unshare driver needs python3 (its seccomp loader) and setpriv inside the image: the Python
 * test image (scripts/build-test-images.sh python, which needs root; .ci/run builds it and sets
 * ROLLOUT_TEST_PYTHON_IMAGE=1, so this runs in CI).
 */
const withPython = process.env.ROLLOUT_TEST_PYTHON_IMAGE === '1';
const whyNoPython = !withPython
  ? 'set ROLLOUT_TEST_PYTHON_IMAGE=1 (builds the Python test image with scripts/build-test-images.sh python)'
  : !asRoot
    ? 'needs root (to build the Python test image and hand a copy of it to uid 65534)'
    : !unshareWorks()
      ? 'needs unshare (apt-get install util-linux)'
      : null;
if (withPython && asRoot && whyNoPython) throw new Error(`ROLLOUT_TEST_PYTHON_IMAGE=1 but the unprivileged Python image test cannot run: ${whyNoPython}`);

let dir: string;

describe.skipIf(why !== null)(`image sandboxes without root${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-unpriv-'));
    if (asRoot) fs.chownSync(dir, 65534, 65534);
  });
  afterAll(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  // The child's TMPDIR is the test's own dir: tsx's compile cache (tsx-65534) goes with it.
  it('imports and runs an image as an unprivileged uid: kernel overlayfs in a user namespace, whiteouts and opaque dirs honoured, writes in the upper dir only, nothing left', () => {
    const child = [path.resolve('node_modules/.bin/tsx'), path.resolve('test/helpers/images/unprivileged-image-run.ts'), dir, 'bwrap'];
    const argv = asRoot ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--', 'env', `HOME=${dir}`, `TMPDIR=${dir}`, ...child] : child;
    const out = execFileSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 120_000, stdio: ['ignore', 'pipe', 'inherit'] });
    const r = JSON.parse(out.trim().split('\n').pop()!) as { bash?: string; editorError?: boolean; read?: string; layerKept?: string; sandboxesLeft?: string[]; error?: string };
    expect(r.error).toBeUndefined();
    const lines = r.bash!.split('\n');
    // The image's User (1000) inside; its WorkingDir; the lower layer's gone.txt whited out and
    // old/ made opaque by the top layer; the seed written into the overlay.
    expect(lines.slice(0, 2)).toEqual(['1000', '/app']);
    expect(r.bash).not.toContain('gone.txt');
    expect(r.bash).not.toContain('stale.txt');
    expect(r.bash).toContain('/app/old:\nfresh.txt\n');
    expect(r.bash).toContain('kept\nseeded\nmine\nw\n');
    // The root is kernel overlayfs mounted in a user namespace (userxattr), not fuse-overlayfs.
    expect(r.bash).toMatch(/ \/ \/ rw\S* - overlay overlay .*userxattr/);
    expect(r.editorError).toBe(false);
    expect(r.read).toBe('edited\n');
    expect(r.layerKept).toBe('kept\n');
    expect(r.sandboxesLeft).toEqual([]);
  }, 150_000);

  it.skipIf(whyNoPython !== null)(`the unshare driver runs the Python image's shell, pytest, git and REPL as an unprivileged uid, in its own user namespace's overlay${whyNoPython ? ` (skipped: ${whyNoPython})` : ''}`, () => {
    const layout = execFileSync(path.resolve('scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim().split('\n').pop()!;
    // uid 65534 reads neither root's cache nor umoci's 0600 blobs: its own copy of the layout.
    const own = path.join(dir, 'py');
    fs.mkdirSync(own);
    execFileSync('cp', ['-a', layout, path.join(own, 'layout')]);
    execFileSync('chown', ['-R', '65534:65534', own]);
    const child = [path.resolve('node_modules/.bin/tsx'), path.resolve('test/helpers/images/unprivileged-image-run.ts'), own, 'unshare', path.join(own, 'layout')];
    const argv = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--', 'env', `HOME=${own}`, `TMPDIR=${own}`, ...child];
    const out = execFileSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 300_000, stdio: ['ignore', 'pipe', 'inherit'] });
    const r = JSON.parse(out.trim().split('\n').pop()!) as { bash?: string; python?: string; pythonError?: unknown; sandboxesLeft?: string[]; error?: string };
    expect(r.error).toBeUndefined();
    // Root of the sandbox's namespace (the image has no User), no capabilities, at its
    // WorkingDir; the sample repo's tests pass and git sees the new file; the root is kernel
    // overlayfs mounted in a user namespace (userxattr).
    expect(r.bash).toMatch(/^0\n\/testbed\nhi\n5 passed in [\d.]+s\n\?\? new\.txt\nCapEff:\s+0+\n/);
    expect(r.bash).toMatch(/ \/ \/ rw\S* - overlay overlay .*userxattr/);
    expect(r.pythonError).toBeNull();
    expect(r.python).toBe('0 hi\n');
    expect(r.sandboxesLeft).toEqual([]);
  }, 600_000);
});
