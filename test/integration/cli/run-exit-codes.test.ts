import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

/** `rollout run`'s exit status when the infrastructure, not the policy, fails (#16.3). */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const dir = mkdtempSync(join(tmpdir(), 'rr-run-exit-'));
let fake: ChildProcess | undefined;

afterAll(async () => {
  if (fake && fake.exitCode === null && fake.signalCode === null) {
    const gone = new Promise((r) => fake?.once('exit', r));
    fake.kill('SIGTERM');
    await gone;
  }
  rmSync(dir, { recursive: true, force: true });
});

describe('rollout run exit status', { timeout: 180_000 }, () => {
  it('exits 1 with one line when every rollout failed for infrastructure reasons (a backend that dies after the pre-flight)', async () => {
    const stem = join(repo, 'examples', 'stem.jsonl');
    // The fake answers its first generation request (the pre-flight probe), then goes away.
    fake = spawn(process.execPath, [bin, 'fake-llm', '--tasks', stem, '--exit-after', '1'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const url = await new Promise<string>((res, rej) => {
      let buf = '';
      fake?.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(buf);
        if (m?.[1]) res(m[1]);
      });
      fake?.once('exit', () => rej(new Error(`fake-llm exited: ${buf}`)));
    });
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
