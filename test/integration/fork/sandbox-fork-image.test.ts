import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { freezerMounted, run } from './fork-kit.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { ImageStore } from '../../../src/sandbox/images/image-store.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';
import { missingTools } from '../../helpers/system-tools.js';
import { pooledIds } from './pool-dirs.js';

/**
 * Forks of image sandboxes (#26): the parent's overlay upper dir (its changes to the image root,
 * deletions as whiteouts) becomes the top lower layer of each branch's own overlay. Needs the
 * Python test image (ROLLOUT_TEST_PYTHON_IMAGE=1, as the other image tests), root and the freezer.
 */
const withPython = process.env.ROLLOUT_TEST_PYTHON_IMAGE === '1';
const why = !withPython
  ? 'set ROLLOUT_TEST_PYTHON_IMAGE=1 (builds the Python test image with scripts/build-test-images.sh python)'
  : process.getuid?.() !== 0
    ? 'needs root (kernel overlayfs)'
    : !freezerMounted()
      ? 'needs the cgroup v1 freezer controller (/sys/fs/cgroup/freezer)'
      : missingTools('bwrap');
if (withPython && why) throw new Error(`ROLLOUT_TEST_PYTHON_IMAGE=1 but the image fork tests cannot run: ${why}`);

let dir: string;
let provider: HostSandboxProvider & { warmPoolStats?: () => Array<{ hits: number; ready: number }> };

describe.skipIf(why !== null)(`image sandbox forks${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-fork-'));
    fs.chmodSync(dir, 0o711);
    const layout = execFileSync(path.resolve('scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim().split('\n').pop()!;
    const store = new ImageStore(path.join(dir, 'store'));
    await store.import(layout, { name: 'py' });
    // A warm pool for the image: a pooled sandbox forks like any other (the pool hands out the provider's own clients).
    provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir, warmPools: { py: 1 }, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  }, 600_000);

  afterAll(async () => {
    await provider?.close();
    if (dir) {
      expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(dir);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a fork prewarm of an image sandbox answers 0 and parks nothing (its branches are made after the snapshot: no pool)', async () => {
    const sb = await provider.create({ image: 'py' }, { rolloutId: 'r-img-prewarm' });
    onTestFinished(() => sb.close());
    expect(await sb.prewarmFork!(2)).toBe(0);
    expect(pooledIds(path.join(dir, 'state'))).toEqual([]);
  });

  it.each([true, false])('keepParent %s: branches see the parent changes to the image root (a new file, an edit, a deletion) and diverge', async (keepParent) => {
    const parent = await provider.create({ image: 'py' }, { rolloutId: `r-img-${keepParent}` });
    onTestFinished(() => parent.close());
    // An image file deleted (a whiteout in the upper dir), a new file in the workspace and one in HOME.
    expect(await run(parent, 'ls -1 /workspace')).toBe('minilib\ntests');
    await run(parent, 'echo made > /workspace/made.txt && echo x >> ~/home-file && rm -r /workspace/tests && cd minilib && export IMG_VAR=1');
    const cwd = await run(parent, 'pwd');
    const fork = await parent.fork!({ rolloutIds: ['r-i0', 'r-i1'], keepParent });
    const [b0, b1] = fork.branches as [Sandbox, Sandbox];
    onTestFinished(async () => {
      await Promise.all([b0.close(), b1.close()]);
    });
    expect(keepParent ? fork.copiedBytes > 0 : fork.copiedBytes === 0).toBe(true);
    for (const b of [b0, b1]) {
      expect(await run(b, 'cat /workspace/made.txt ~/home-file; test -e /workspace/tests || echo deleted; echo $IMG_VAR; pwd; python3 -c "print(6*7)"')).toBe(`made\nx\ndeleted\n1\n${cwd}\n42`);
    }
    await run(b0, 'echo b0 > /workspace/b0.txt && rm /workspace/made.txt');
    expect(await run(b1, 'ls -1 /workspace')).toBe('made.txt\nminilib');
    expect(await run(b0, 'ls -1 /workspace')).toBe('b0.txt\nminilib');
    // A fork of a branch stacks on its snapshot: the root parent's changes and the branch's.
    const grand = (await b0.fork!({ rolloutIds: ['r-i0-g'] })).branches[0]!;
    onTestFinished(() => grand.close());
    expect(await run(grand, 'ls -1 /workspace; cat ~/home-file; echo $IMG_VAR')).toBe('b0.txt\nminilib\nx\n1');
    // The mount options the branch sees name no host path.
    expect(await run(b1, 'cat /proc/self/mountinfo')).not.toContain(dir);
    if (keepParent) expect(await run(parent, 'ls -1 /workspace; cat /workspace/made.txt')).toBe('made.txt\nminilib\nmade');
  });

  it('forks a sandbox handed out by the warm pool', async () => {
    // A spec of its own: its own pool, learned from this first request and refilled after it.
    const spec = { image: 'py', env: { WARM: '1' } };
    const first = await provider.create(spec, { rolloutId: 'r-warm-0' });
    onTestFinished(() => first.close());
    // This spec's pool is the newest (the earlier tests' pools of image 'py' refill too).
    const pool = (): { hits: number; ready: number } => provider.warmPoolStats!().at(-1)!;
    const hits = (): number => pool().hits;
    const before = hits();
    await expect.poll(() => pool().ready > 0).toBe(true);
    const warm = await provider.create(spec, { rolloutId: 'r-warm-1' });
    onTestFinished(() => warm.close());
    expect(hits()).toBe(before + 1);
    await run(warm, 'echo warm > /workspace/w.txt');
    const fork = await warm.fork!({ rolloutIds: ['r-w0'] });
    onTestFinished(() => fork.branches[0]!.close());
    expect(await run(fork.branches[0]!, 'cat /workspace/w.txt')).toBe('warm');
  });
});
