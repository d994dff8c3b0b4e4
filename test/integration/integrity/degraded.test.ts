import { chmodSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';

/**
 * A sandbox whose host cannot observe programs, secret reads or network attempts (#27): the
 * `none` driver has no cgroup and no network namespace of its own. The monitor says so in
 * `unobserved` at start (the runtime then reports `degraded` for a policy that needs it) and
 * still watches the files; nothing fails.
 */
let root: string;
let provider: SandboxProvider;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'integrity-none-'));
  chmodSync(root, 0o711);
  provider = createSandboxProvider({ driver: 'none', stateDir: root, hosts: 1 });
});
afterAll(async () => {
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

describe('a sandbox without its own cgroup and network namespace (driver none)', () => {
  it('states what it cannot observe, and still reports protected files', async () => {
    const sb = await provider.create({ files: { 'test_a.py': 'def test_a():\n    assert 0\n' } }, { rolloutId: 'integrity-none' });
    try {
      const start = await sb.integrity!({ op: 'start', protect: ['test_a.py'], secret: ['.git'] });
      expect((start.unobserved ?? []).map((u) => u.what).sort()).toEqual(['exec', 'network', 'reads']);
      expect(start.unobserved!.find((u) => u.what === 'exec')!.why).toMatch(/driver none/);
      await sb.bash({ command: 'echo "def test_a(): pass" > test_a.py' });
      const o = await sb.integrity!({ op: 'observe', turn: 0 });
      expect(o.violations.map((v) => [v.kind, v.turn, v.path])).toEqual([['edit-protected', 0, 'test_a.py']]);
      expect(o.execs).toBeUndefined();
    } finally {
      await sb.close();
    }
  });
});
