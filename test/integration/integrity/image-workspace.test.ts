import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bwrapWorks } from '../../../src/sandbox/drivers.js';
import { ImageStore } from '../../../src/sandbox/images/image-store.js';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';

/**
 * The file monitor (#27) in an image sandbox (the copy-on-write overlay SWE-bench rows run in):
 * the host scans the workspace through the overlay, and sees what the agent changes there. The
 * Python test image is built the first time (scripts/build-test-images.sh python), so this runs
 * with ROLLOUT_TEST_PYTHON_IMAGE=1, as the image tests do.
 */
const why = process.env.ROLLOUT_TEST_PYTHON_IMAGE !== '1' ? 'set ROLLOUT_TEST_PYTHON_IMAGE=1 (builds the Python test image with scripts/build-test-images.sh python)' : process.getuid?.() !== 0 ? 'needs root (kernel overlayfs)' : !bwrapWorks() ? 'needs bwrap (apt-get install bubblewrap)' : null;
if (process.env.ROLLOUT_TEST_PYTHON_IMAGE === '1' && why) throw new Error(`ROLLOUT_TEST_PYTHON_IMAGE=1 but the image integrity test cannot run: ${why}`);

let dir: string;
let provider: HostSandboxProvider;

describe.skipIf(why !== null)(`the file monitor in an image sandbox${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'integrity-img-'));
    fs.chmodSync(dir, 0o711);
    const layout = execFileSync(path.resolve('scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim().split('\n').pop()!;
    const store = new ImageStore(path.join(dir, 'store'));
    await store.import(layout, { name: 'py' });
    provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir });
  }, 600_000);

  afterAll(async () => {
    await provider?.close();
    if (dir) {
      expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(dir);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reports a conftest.py written in the image workspace, an edit and a deletion, each at its turn', async () => {
    const sb = await provider.create({ image: 'py', setup: ["printf 'def test_a():\\n    assert 0\\n' > test_a.py"] }, { rolloutId: 'integrity-img' });
    try {
      const start = await sb.integrity!({ op: 'start', protect: ['test_a.py', 'conftest.py'] });
      expect(start.truncated).toBe(false);
      await sb.bash({ command: "echo 'import pytest' > conftest.py" });
      expect((await sb.integrity!({ op: 'observe', turn: 0 })).violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['create-protected', 0, 'conftest.py']]);
      await sb.bash({ command: "sed -i 's/assert 0/assert 1/' test_a.py" });
      expect((await sb.integrity!({ op: 'observe', turn: 1 })).violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['edit-protected', 1, 'test_a.py']]);
      await sb.bash({ command: 'rm test_a.py' });
      expect((await sb.integrity!({ op: 'observe', turn: 2 })).violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['delete-protected', 2, 'test_a.py']]);
    } finally {
      await sb.close();
    }
  });

  it('sees, through the overlay, secret reads, the programs run and a network attempt, each at its turn', async () => {
    const sb = await provider.create({ image: 'py', setup: ['mkdir -p .git/objects/ab && echo blob > .git/objects/ab/cdef && echo ref > .git/HEAD'] }, { rolloutId: 'integrity-img-procs' });
    try {
      const start = await sb.integrity!({ op: 'start', protect: [], secret: ['.git'] });
      expect(start.unobserved ?? []).toEqual([]);
      await sb.bash({ command: 'ls -a >/dev/null' });
      const o0 = await sb.integrity!({ op: 'observe', turn: 0 });
      expect(o0.violations).toEqual([]);
      expect(o0.execs?.map((e) => e.argv?.[0]?.split('/').pop())).toEqual(['ls']);
      await sb.bash({ command: 'cat .git/objects/ab/cdef' });
      const o1 = await sb.integrity!({ op: 'observe', turn: 1 });
      expect(o1.violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['read-secret', 1, '.git/objects/ab/cdef']]);
      await sb.bash({ command: "python3 -c \"import socket\ntry: socket.create_connection(('198.51.100.7', 80), 2)\nexcept OSError: pass\"" });
      const o2 = await sb.integrity!({ op: 'observe', turn: 2 });
      expect(o2.violations.map((v) => [v.kind, v.turn])).toEqual([['network', 2]]);
      expect(o2.execs?.[0]?.argv?.[0]).toMatch(/python3/);
    } finally {
      await sb.close();
    }
  });

  it("reports a sitecustomize.py and a .pth file in the user's site-packages and a pytest put on PATH, outside the workspace", async () => {
    const sb = await provider.create({ image: 'py' }, { rolloutId: 'integrity-img-root' });
    try {
      await sb.integrity!({ op: 'start', protect: [] });
      // The image's own site-packages is root's; the user's site directory (in HOME, in the overlay) is the agent's.
      const site = (await sb.bash({ command: 'python3 -m site --user-site' })).output.trim();
      const w = await sb.bash({ command: `mkdir -p ${site} && printf 'import sys\\nsys.exit = lambda *a: None\\n' > ${site}/sitecustomize.py && echo 'import os' > ${site}/hack.pth && echo ok` });
      expect(w.output.trim()).toBe('ok');
      expect((await sb.integrity!({ op: 'observe', turn: 0 })).violations.map((v) => [v.kind, v.turn, v.path]).sort()).toEqual([
        ['create-protected', 0, `${site}/hack.pth`],
        ['create-protected', 0, `${site}/sitecustomize.py`],
      ]);
      const home = (await sb.bash({ command: 'echo $HOME' })).output.trim();
      await sb.bash({ command: "mkdir -p ~/.local/bin && printf '#!/bin/sh\\nexit 0\\n' > ~/.local/bin/pytest && chmod +x ~/.local/bin/pytest" });
      expect((await sb.integrity!({ op: 'observe', turn: 1 })).violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['create-protected', 1, `${home}/.local/bin/pytest`]]);
      await sb.bash({ command: 'touch /tmp/x notes.txt' });
      expect((await sb.integrity!({ op: 'observe', turn: 2 })).violations).toEqual([]);
    } finally {
      await sb.close();
    }
  });
});
