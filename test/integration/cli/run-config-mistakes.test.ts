import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { startFakeLlmProcess, type ServerProcess } from '../../helpers/server-process.js';

/**
 * A configuration mistake is never a reward (#30): `rollout run` against a real `fake-llm`
 * process refuses before any rollout starts, exits 1 and says why — instead of 20 rollouts
 * scored 0 and exit 0.
 */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const dir = mkdtempSync(join(tmpdir(), 'rr-run-config-'));
const fakes: ServerProcess[] = [];

afterAll(async () => {
  await Promise.all(fakes.map((f) => f.stop()));
  rmSync(dir, { recursive: true, force: true });
});

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [bin, 'run', join(repo, 'examples', 'math.jsonl'), '--sandbox', 'none', ...args], { cwd: dir, timeout: 120_000 }, (err, stdout, stderr) =>
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('rollout run refuses a configuration mistake before any rollout', { timeout: 150_000 }, () => {
  it('exits 1 with the numbers when --max-tokens does not fit the engine context it reports (max_model_len)', async () => {
    const fake = await startFakeLlmProcess(['--protocol', 'vllm', '--max-model-len', '2048']);
    fakes.push(fake);
    const out = join(dir, 'max-tokens');
    const r = await run(['--backend', `vllm+${fake.url}`, '--max-tokens', '100000', '--out', out]);
    expect(r.stderr).toContain("rollout run: --max-tokens 100000 does not fit the engine's context of 2048 tokens (prompt included): use a --max-tokens below 2048");
    expect(r.code).toBe(1);
    // Nothing ran: no trajectories were written.
    expect(() => readdirSync(out)).toThrow();
  });

  it('exits 1 naming the protocol that answers when the address prefix does not fit the server (prorl+ at a vLLM-only fake)', async () => {
    const fake = await startFakeLlmProcess(['--protocol', 'vllm']);
    fakes.push(fake);
    const host = new URL(fake.url).host;
    const r = await run(['--backend', `prorl+http://${host}`, '--out', join(dir, 'prefix')]);
    expect(r.stderr).toMatch(new RegExp(`FAIL\\s+backend prorl\\+http://${host}\\s+the prorl route at http://${host} does not work \\(HTTP 400\\); its vllm route answers: use vllm\\+http://${host}`));
    expect(r.stderr).toContain('no backend answers (1 probed): giving up before starting any rollout');
    expect(r.code).toBe(1);
  });
});
