import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forkSkip } from './fork-kit.js';
import { parseTreeFlag } from '../../../src/cli/commands/run-tree.js';

/** `rollout run --tree` (#26) as a real child process on bwrap sandboxes and the oracle backend. */
const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const ok = forkSkip('the rollout run --tree test') === null;

function rollout(args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [bin, ...args], { cwd, timeout: 180_000, env: { ...process.env, NO_COLOR: '1' } }, (err, stdout, stderr) => {
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const bash = (command: string) => ({ tool_calls: [{ name: 'execute_bash', arguments: { command } }] });

describe('--tree RxW@T[,T…]', () => {
  it('parses roots, width and strictly increasing turns, and names the flag on a bad one', () => {
    expect(parseTreeFlag('2x4@3')).toEqual({ roots: 2, tree: { branchTurns: [3], width: 4 } });
    expect(parseTreeFlag('1x2@1,3')).toEqual({ roots: 1, tree: { branchTurns: [1, 3], width: 2 } });
    for (const bad of ['2x4', 'x4@3', '2x0@1', '0x2@1', '1x2@3,1', '1x2@a']) expect(() => parseTreeFlag(bad)).toThrow(/--tree must be RxW@T/);
  });
});

describe.skipIf(!ok)('rollout run --tree', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cli-tree-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('grows each task into trees, prints them with per-branch-point statistics, and writes trees and prefixes', async () => {
    const task = { data_source: 'shell', instance_id: 'tree-task', prompt: 'make done.txt', eval_command: 'test -f done.txt', oracle: [bash('echo a > a.txt'), bash('echo d > done.txt'), { tool_calls: [{ name: 'finish', arguments: { message: 'ok' } }] }] };
    await writeFile(join(dir, 'tasks.jsonl'), `${JSON.stringify(task)}\n`);
    const out = await rollout(['run', 'tasks.jsonl', '--tree', '2x2@1', '--out', join(dir, 'out')], dir);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/trees:\n {2}task 0 \(6 rollouts\)/);
    expect(out.stdout.match(/^ {4}root \S+ truncated \(forked\) reward – turns 1$/gm)).toHaveLength(2);
    expect(out.stdout.match(/^ {6}@1 \S+ completed reward 1 turns 3$/gm)).toHaveLength(4);
    expect(out.stdout.match(/branch point \S+@1: 2 children, mean 1 ± 0 \(rewards 1 1\)/g)).toHaveLength(2);
    const lines = (await readFile(join(dir, 'out', 'trajectories.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(lines).toHaveLength(6);
    const prefixes = (await readFile(join(dir, 'out', 'prefixes.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(prefixes).toHaveLength(2);
    for (const l of lines.filter((x) => x.parentId)) expect(prefixes.map((p) => p.id)).toContain(l.trajectory.prefix.id);
    const trees = JSON.parse(await readFile(join(dir, 'out', 'trees.json'), 'utf8'));
    expect(trees[0].nodes).toHaveLength(6);
  }, 180_000);
});
