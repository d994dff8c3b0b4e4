import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmProcess, type ServerProcess } from '../helpers/server-process.js';
import { readEvents } from '../helpers/read-tfevents.js';

/** `rollout run` as a real child process: the README's first command, and its input errors. */

const repo = fileURLToPath(new URL('../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');

function rollout(args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [bin, ...args], { cwd, timeout: 120_000, env: { ...process.env, NO_COLOR: '1' } }, (err, stdout, stderr) => {
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cli-run-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('rollout run examples/tasks.jsonl (the README command)', () => {
  let out: { code: number; stdout: string; stderr: string };
  let lines: Record<string, unknown>[];
  let summary: Record<string, unknown>;
  beforeAll(async () => {
    out = await rollout(['run', join(repo, 'examples', 'tasks.jsonl'), '--out', join(dir, 'out')], dir);
    lines = (await readFile(join(dir, 'out', 'trajectories.jsonl'), 'utf8').catch(() => ''))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    summary = JSON.parse(await readFile(join(dir, 'out', 'summary.json'), 'utf8').catch(() => '{}')) as Record<string, unknown>;
  }, 120_000);

  it('exits 0', () => {
    expect(out.code, out.stderr).toBe(0);
  });
  it('says on stderr that it uses the oracle backend', () => {
    expect(out.stderr).toContain('oracle backend');
  });
  it('prints a plain progress line with rate, ETA, outcomes and mean reward when stderr is not a terminal', () => {
    expect(out.stderr).toMatch(/^rollout run: 20\/20 · \d+:\d\d elapsed · ETA 0:00 · [\d.]+ rollouts\/s · \d+ tok\/s · init \d+ run \d+ eval \d+ · ok 20 · reward 0\.750$/m);
  });
  it('prints a summary with outcomes, pass@1 and per-stage timings', () => {
    expect(out.stdout).toMatch(/outcomes\s+completed 20[\s\S]*pass@1\s+0\.750[\s\S]*eval\s+\S+ m?s/);
  });
  it('writes one trajectory line per rollout with its tokens and loss mask', () => {
    expect(lines.map((l) => [(l.trajectory as { tokens: unknown[]; lossMask: unknown[] }).tokens.length > 0, typeof l.outcome])).toEqual(Array(20).fill([true, 'string']));
  });
  it('writes summary.json with every rollout completed and the expected pass rates', () => {
    expect(summary).toMatchObject({ rollouts: 20, tasks: 20, n: 1, outcomes: { completed: 20 }, resolved: 15, passAt1: 0.75 });
  });
  it('writes a TensorBoard event file whose step-0 scalars (the oracle has no weight version) agree with summary.json', async () => {
    const files = (await readdir(join(dir, 'out'))).filter((f) => f.startsWith('events.out.tfevents.'));
    expect(files).toHaveLength(1);
    const events = await readEvents(join(dir, 'out', files[0]!));
    expect(events.map((e) => e.step)).toEqual([0, 0]);
    const sampled = (summary.tokens as { sampled: number }).sampled;
    expect(events[1]!.scalars).toMatchObject({ 'rollouts/finished': 20, 'pass@1': 0.75, 'rollouts/resolved_rate': 0.75, 'reward/mean': 0.75, 'response_length/mean': expect.closeTo(sampled / 20, 4) });
    expect(out.stdout).toContain(`metrics:      ${join(dir, 'out', files[0]!)}`);
  });
});

describe('rollout run --backend with a real HTTP inference server', { timeout: 120_000 }, () => {
  let fake: ServerProcess | undefined;
  afterAll(async () => {
    await fake?.stop();
  });
  it('completes the stem examples through rollout fake-llm replaying their oracles', async () => {
    const stem = join(repo, 'examples', 'stem.jsonl');
    fake = await startFakeLlmProcess(['--tasks', stem]);
    const url = fake.url;
    const r = await rollout(['run', stem, '--backend', url, '--out', join(dir, 'http-out')], dir);
    expect([r.code, r.stderr, r.stdout]).toEqual([0, expect.stringContaining(`prorl+${url}`), expect.stringMatching(/outcomes\s+completed 6[\s\S]*resolved\s+5\/6/)]);
  });
});

describe('rollout run with more rollouts than its submission window', { timeout: 120_000 }, () => {
  it('runs every rollout of 6 tasks × n=16 and counts pass@16 per task', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'stem.jsonl'), '--n', '16', '--out', join(dir, 'win-out')], dir);
    const summary = JSON.parse(await readFile(join(dir, 'win-out', 'summary.json'), 'utf8')) as Record<string, unknown>;
    expect([r.code, summary]).toEqual([0, expect.objectContaining({ rollouts: 96, resolved: 80, passAtN: 5 / 6 })]);
  });
});

describe('rollout run pre-flight', { timeout: 120_000 }, () => {
  it('gives up at once with one line and exit 1 when no backend answers', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'stem.jsonl'), '--backend', 'http://127.0.0.1:9', '--out', join(dir, 'dead-out')], dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/FAIL\s+backend http:\/\/127\.0\.0\.1:9 cannot reach/);
    expect(r.stderr).toContain('no backend answers (1 probed): giving up before starting any rollout');
  });
});

describe.concurrent('rollout run on bad input', { timeout: 120_000 }, () => {
  it('exits 2 naming the flag and its range for a bad sampling value', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'stem.jsonl'), '--temperature', '3'], dir);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining("--temperature must be a number in [0, 2], got '3'")]);
  });
  it('suggests the flag it guesses was meant', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'stem.jsonl'), '--max-token', '5'], dir);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining("unknown option '--max-token' (did you mean --max-tokens?)")]);
  });
  it('exits 0 and reports a task-error naming the field for an instance with bad fields', async () => {
    const f = join(dir, 'task-error.jsonl');
    await writeFile(f, '{"data_source":"stem","instance_id":"s1","question":"q","choices":["a","b"]}\n');
    const r = await rollout(['run', f, '--out', join(dir, 'te-out')], dir);
    expect([r.code, r.stdout]).toEqual([0, expect.stringMatching(/task-error 1[\s\S]*field 'answer'/)]);
  });
  it('exits 2 naming the line of bad JSON', async () => {
    const f = join(dir, 'bad.jsonl');
    await writeFile(f, '{"data_source":"math","problem":"p","answer":"1"}\n{"data_source": \n');
    const r = await rollout(['run', f, '--out', join(dir, 'bad-out')], dir);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining('bad JSON on line 2')]);
  });
  it('exits 2 naming an unknown data_source', async () => {
    const f = join(dir, 'unknown.jsonl');
    await writeFile(f, '{"data_source":"chess","instance_id":"c1"}\n');
    const r = await rollout(['run', f], dir);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining("unknown data_source 'chess'")]);
  });
  it('exits 2 when the task file is missing', async () => {
    const r = await rollout(['run', join(dir, 'nope.jsonl')], dir);
    expect([r.code, r.stderr]).toEqual([2, expect.stringMatching(/nope\.jsonl: no such file/)]);
  });
  it('exits 2 on a bad backend address', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'stem.jsonl'), '--backend', 'ftp://x:1'], dir);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining('ftp://x:1')]);
  });
});
