import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { startFakeLlmProcess, type ServerProcess } from '../../helpers/server-process.js';

/** `rollout run`'s exit status when the infrastructure, not the policy, fails (#16.3). */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const dir = mkdtempSync(join(tmpdir(), 'rr-run-exit-'));
let fake: ServerProcess | undefined;

afterAll(async () => {
  await fake?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('rollout run exit status', { timeout: 180_000 }, () => {
  it('exits 1 with one line when every rollout failed for infrastructure reasons (a backend that dies after the pre-flight)', async () => {
    const stem = join(repo, 'examples', 'stem.jsonl');
    // The fake answers its first generation request (the pre-flight probe), then goes away.
    fake = await startFakeLlmProcess(['--tasks', stem, '--exit-after', '1']);
    const url = fake.url;
    const r = await new Promise<{ code: number; stdout: string; stderr: string }>((res) => {
      execFile(process.execPath, [bin, 'run', stem, '--backend', url, '--sandbox', 'none', '--out', join(dir, 'out')], { cwd: dir, timeout: 170_000 }, (err, stdout, stderr) =>
        res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
    expect(r.stdout).toMatch(/infra-error 6/);
    expect(r.stderr).toMatch(/rollout run: every rollout failed for infrastructure reasons \(/);
    expect(r.code).toBe(1);
  });
});
