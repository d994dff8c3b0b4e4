import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { ROOT, serve, SHELL_TASKS, type Served } from './harness.js';
import { haveTools } from '../../helpers/system-tools.js';

const SANDBOX = process.env['ROLLOUT_E2E_SANDBOX'] ?? 'auto';

let llm: FakeLlmServer;
let server: Served;

beforeAll(async () => {
  llm = await startFakeLlmServer({ tasks: SHELL_TASKS, latencyMs: 5 });
  server = await serve(['--sandbox', SANDBOX, '--token', 'py-secret']);
});
afterAll(async () => {
  expect(await server.stop()).toBe(0);
  await llm.close();
});

function python(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn('python3', [join(ROOT, 'examples/python/client.py'), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' } });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('exit', (code) => resolve({ code, out, err }));
  });
}

describe.skipIf(!haveTools('python3'))('examples/python/client.py', () => {
  it('registers a backend, runs GRPO groups through /process and /v1 with WebSocket progress, and finds every token invariant holding', async () => {
    const r = await python(['--url', server.url, '--token', 'py-secret', '--backend', llm.url, '--tasks', SHELL_TASKS, '--groups', '2', '--n', '4', '--quiet']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out.trim().split('\n').pop()!)).toEqual({ ok: true, process: 8, v1: 8, problems: 0, failed: 0 });
  });

  it("reports every failed rollout's error on stderr and exits 1", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rr-pyfail-'));
    try {
      // A stem instance without its answer: a task-error for each of the 2 × 2 rollouts.
      const tasks = join(dir, 'bad.jsonl');
      writeFileSync(tasks, '{"data_source":"stem","instance_id":"no-answer","question":"q","choices":["a","b"]}\n');
      const r = await python(['--url', server.url, '--token', 'py-secret', '--backend', llm.url, '--tasks', tasks, '--groups', '1', '--n', '2', '--quiet']);
      expect(r.code).toBe(1);
      const failed = r.err.split('\n').filter((l) => l.startsWith('ROLLOUT FAILED: '));
      expect(failed).toHaveLength(4);
      expect(failed.filter((l) => l.includes('process no-answer/'))).toHaveLength(2);
      expect(failed.filter((l) => /rollout \S+ \(no-answer\): task-error: TASK: .*answer/.test(l))).toHaveLength(2);
      expect(JSON.parse(r.out.trim().split('\n').pop()!)).toMatchObject({ ok: false, failed: 4 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('flags a result whose loss mask does not cover exactly the sampled tokens', async () => {
    const code = [
      'import sys, json',
      `sys.path.insert(0, ${JSON.stringify(join(ROOT, 'examples/python'))})`,
      'import client',
      'turn = {"promptIds": [1, 2], "outputIds": [3, 4], "logprobs": [-0.1, -0.2]}',
      'res = {"outcome": "completed", "trajectory": {"turns": [turn], "tokens": [1, 2, 3, 4], "lossMask": [0, 1, 1, 1], "logprobs": [0, -0.1, -0.1, -0.2]}}',
      'p = []',
      'client.check_native(res, p, "r")',
      'print(json.dumps(p))',
    ].join('\n');
    const r = await new Promise<string>((resolve) => {
      const child = spawn('python3', ['-c', code], { env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' } });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.on('exit', () => resolve(out));
    });
    expect(JSON.parse(r)).toEqual(expect.arrayContaining(['r: 3 loss-mask ones for 2 sampled tokens']));
  });
});
