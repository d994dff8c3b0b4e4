import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveTools } from '../helpers/system-tools.js';

/**
 * `examples/python/async_train.py` (the asynchronous training loop over `/v1/buffers`) against a
 * real `rollout serve --backend oracle` child process.
 */

const repo = fileURLToPath(new URL('../../', import.meta.url));
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

let dir: string;
let serve: ChildProcess | undefined;
let url: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'py-async-'));
  // Math prompts the oracle answers with `finish` at once: the loop, not the tasks, is under test.
  const lines = (await readFile(join(repo, 'examples', 'math.jsonl'), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { oracle: { tool_calls?: { name: string }[] }[] });
  const quick = lines.filter((t) => t.oracle.length === 1);
  await writeFile(join(dir, 'tasks.jsonl'), quick.map((t) => JSON.stringify(t)).join('\n'));
  serve = spawn(process.execPath, [join(repo, 'bin', 'rollout.js'), 'serve', '--port', '0', '--backend', 'oracle', '--sandbox', 'none'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  serve.stderr!.resume();
  url = await new Promise<string>((res, rej) => {
    let out = '';
    const timer = setTimeout(() => rej(new Error('rollout serve did not start')), 110_000);
    serve!.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    serve!.once('exit', (code) => rej(new Error(`rollout serve exited ${code}`)));
  });
}, 120_000);

afterAll(async () => {
  if (serve && serve.exitCode === null) {
    const exited = new Promise((r) => serve!.once('exit', r));
    serve.kill('SIGTERM');
    await exited;
  }
  await rm(dir, { recursive: true, force: true });
});

function train(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(PYTHON, [join(repo, 'examples', 'python', 'async_train.py'), '--url', url, '--tasks', join(dir, 'tasks.jsonl'), ...args], { timeout: 170_000 }, (err, stdout, stderr) => {
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe.skipIf(!haveTools('python3'))('examples/python/async_train.py against rollout serve', { timeout: 180_000 }, () => {
  it('trains on complete groups from the buffer, bumps the weight version each step and reports staleness', async () => {
    const out = await train(['--steps', '3', '--batch', '2', '--groups', '4', '--n', '3', '--over-provision', '1', '--order', 'oldest-version', '--train-ms', '50', '--max-staleness', '4']);
    expect(out.code, out.stderr).toBe(0);
    const summary = JSON.parse(out.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
    expect(summary).toMatchObject({ steps: 3, groups_trained: 6, weight_version: 3, problems: [] });
    // Taken on a lease and acked after each step: every trained group was delivered once, none came back.
    expect(summary).toMatchObject({ groups_acked: 6, delivered: 6, returned: 0 });
    expect(summary.max_staleness).toEqual(expect.any(Number));
    expect(summary.max_staleness as number).toBeLessThanOrEqual(4);
    expect(out.stderr).toMatch(/^step 3: 2 groups/m);
    const w = (await (await fetch(`${url}/v1/weights`)).json()) as { trainer_version: number; backends: { weight_version: number }[] };
    expect(w.trainer_version).toBe(3);
    expect(w.backends[0]!.weight_version).toBe(3);
    // The loop deleted its buffer: nothing of it still runs.
    const live = (await (await fetch(`${url}/v1/rollouts?state=llmCalling`)).json()) as { rollouts: unknown[] };
    expect(live.rollouts).toHaveLength(0);
  });

  it('hands a group whose lease ran out unacked to the next take (the Python client\'s take / ack / release)', async () => {
    const script = [
      'import json, sys, time',
      `sys.path.insert(0, ${JSON.stringify(join(repo, 'examples', 'python'))})`,
      'from client import Api, RolloutBuffer',
      'tasks = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]',
      'buf = RolloutBuffer(Api(sys.argv[1]), groups=1, n=2, instances=tasks[:1], end=True)',
      'first = buf.take(1, wait_ms=60_000, lease_ms=200)[0]',
      'time.sleep(0.5)  # the trainer "dies": no ack',
      'again = buf.take(1, wait_ms=60_000, lease_ms=60_000)[0]',
      'late = buf.ack([first["lease_id"]])',
      'back = buf.release([again["lease_id"]])',
      'last = buf.take(1, wait_ms=60_000)[0]',
      'print(json.dumps({"same": first["group_id"] == again["group_id"] == last["group_id"], "deliveries": [first["deliveries"], again["deliveries"], last["deliveries"]], "late": late, "back": back["released"] == [again["lease_id"]], "stats": buf.stats}))',
      'buf.close()',
    ].join('\n');
    const out = await new Promise<{ code: number; stdout: string; stderr: string }>((res) => {
      execFile(PYTHON, ['-c', script, url, join(dir, 'tasks.jsonl')], { timeout: 120_000 }, (err, stdout, stderr) => res({ code: err ? 1 : 0, stdout, stderr }));
    });
    expect(out.code, out.stderr).toBe(0);
    const r = JSON.parse(out.stdout.trim()) as Record<string, unknown>;
    expect(r).toMatchObject({ same: true, deliveries: [1, 2, 3], back: true, stats: { delivered: 1, returned: 2, leased: 0, done: true } });
    expect((r.late as { unknown: string[] }).unknown).toHaveLength(1);
  });

  it('exits 2 with the server\'s message naming the field on a bad option', async () => {
    const out = await train(['--groups', '0']);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/HTTP 400 VALIDATION.*groups/);
  });
});
