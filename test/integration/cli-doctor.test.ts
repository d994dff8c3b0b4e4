import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { startFakeLlmProcess, type ServerProcess } from '../helpers/server-process.js';

/** `rollout doctor` as a real child process, against a real `rollout fake-llm` and a dead port. */

const repo = fileURLToPath(new URL('../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');

function rollout(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [bin, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

let fake: ServerProcess | undefined;
afterAll(async () => {
  await fake?.stop();
});

describe('rollout doctor', { timeout: 120_000 }, () => {
  it('passes every check against a live fake-llm and prints one line per check', async () => {
    fake = await startFakeLlmProcess(['--tasks', join(repo, 'examples', 'stem.jsonl')]);
    const url = fake.url;
    const r = await rollout(['doctor', '--backend', url]);
    expect(r.stdout).toMatch(/^ok\s+node\s+node \d+/m);
    expect(r.stdout).toMatch(/^(ok|warn)\s+sandbox\s+/m);
    expect(r.stdout).toMatch(new RegExp(`^ok\\s+backend ${url.replace(/[./:]/g, '\\$&')}\\s+prorl at`, 'm'));
    expect([r.code, r.stdout]).toEqual([0, expect.stringContaining('all checks passed')]);
  });

  it("fails a prorl+ or sglang+ address at `fake-llm --protocol vllm` (which does not name itself) by probing the protocol's own route", async () => {
    const vllmOnly = await startFakeLlmProcess(['--protocol', 'vllm']);
    try {
      const host = new URL(vllmOnly.url).host;
      const r = await rollout(['doctor', '--backend', `prorl+http://${host}`, '--backend', `sglang+http://${host}`, '--backend', `vllm+http://${host}`]);
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(new RegExp(`^FAIL\\s+backend prorl\\+http://${host}\\s+the prorl route .* does not work \\(HTTP 400\\); its vllm route answers: use vllm\\+http://${host}$`, 'm'));
      expect(r.stdout).toMatch(new RegExp(`^FAIL\\s+backend sglang\\+http://${host}\\s+the sglang route .*use vllm\\+http://${host}$`, 'm'));
      expect(r.stdout).toMatch(new RegExp(`^ok\\s+backend vllm\\+http://${host}\\s+vllm at`, 'm'));
      expect(r.stdout).toContain('2 check(s) failed');
    } finally {
      await vllmOnly.stop();
    }
  });

  it('exits 1 with a FAIL line for a backend nothing answers at', async () => {
    const r = await rollout(['doctor', '--backend', 'http://127.0.0.1:9', '--timeout-ms', '2000']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^FAIL\s+backend http:\/\/127\.0\.0\.1:9\s+cannot reach/m);
    expect(r.stdout).toContain('1 check(s) failed');
  });

  it('exits 2 on a bad flag value, naming the flag', async () => {
    const r = await rollout(['doctor', '--timeout-ms', 'soon']);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining("--timeout-ms must be a positive integer, got 'soon'")]);
  });
});
