import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PidsCgroup } from '../../../src/sandbox/cgroup.js';

/**
 * The fork hold of a sandbox's pids cgroup (the kill sweep's guard), on the real cgroup v1
 * hierarchy: needs root and the pids controller (the CI machine runs as root).
 */
const name = `hold-test-${process.pid}-${Date.now()}`;
const group = PidsCgroup.create(name, 64);
const limit = (): string => fs.readFileSync(path.join(group!.dir, 'pids.max'), 'utf8').trim();


describe.skipIf(!group)('PidsCgroup.holdForks (skipped without root and the pids cgroup controller)', () => {
  it('refuses forks in the group while held, and restores the limit once the last of two overlapping holds is released', async () => {
    const g = group!;
    try {
      const first = g.holdForks();
      const second = g.holdForks();
      expect(limit()).toBe('0');
      // A shell that joins the group, then tries to fork: refused while held.
      const forks = (): number | null => spawnSync('sh', ['-c', `echo $$ > ${g.procsFile}; /bin/true`]).status;
      expect(forks()).not.toBe(0);
      first();
      first();
      expect(limit()).toBe('0');
      second();
      expect(limit()).toBe('64');
      expect(forks()).toBe(0);
    } finally {
      await g.killAllAndRemove();
    }
    expect(fs.existsSync(g.dir)).toBe(false);
  });
});
