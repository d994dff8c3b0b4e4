import { systemClock } from '../../../../src/clock.js';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TaskError } from '../../../../src/errors.js';
import type { HandlerContext } from '../../../../src/proxy/agent-contract.js';
import { builtinHandlers } from '../../../../src/handlers/builtin.js';
import { codeHandler } from '../../../../src/handlers/tasks/code.js';
import { mathHandler } from '../../../../src/handlers/tasks/math.js';
import { shellHandler } from '../../../../src/handlers/tasks/shell.js';
import { stemHandler } from '../../../../src/handlers/tasks/stem.js';
import { sweHandler } from '../../../../src/handlers/tasks/swe.js';
import { InstanceSchema } from '../../../../src/protocol/instance.js';
import { runWithOracle } from './local-sandbox.js';

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tasks-handlers-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

const inst = (v: Record<string, unknown>) => InstanceSchema.parse(v);
function ctx(instance: Record<string, unknown>): HandlerContext {
  return {
    rolloutId: 'r',
    instance: inst(instance),
    sampling: {},
    signal: new AbortController().signal,
    clock: systemClock,
    createSandbox: () => Promise.reject(new Error('no sandbox expected')),
  };
}
const sh = (command: string) => ({ name: 'execute_bash', arguments: { command } });
const fin = (message?: string) => ({ name: 'finish', arguments: message === undefined ? {} : { message } });

describe('builtin handlers', () => {
  it('route every data_source named in the issue', () => {
    const names = builtinHandlers.flatMap((h) => [h.name, ...(h.aliases ?? [])]);
    expect(names).toEqual(expect.arrayContaining(['math', 'deepscaler', 'code', 'deepcoder', 'swe', 'swebench', 'stem', 'shell']));
  });
  it('offer tools with the OpenHands names', async () => {
    const r = await shellHandler.init({ ...ctx({ data_source: 'shell', prompt: 'p', eval_command: 'true' }), createSandbox: async () => ({}) as never });
    expect(r.tools.map((t) => t.function.name)).toEqual(['execute_bash', 'str_replace_editor', 'finish']);
  });
});

describe('instance validation', () => {
  it('rejects a math instance without a ground truth with a TaskError naming the field', async () => {
    const err = await mathHandler.init(ctx({ data_source: 'math', problem: '1+1?' })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect((err as Error).message).toContain("field 'answer'");
  });
  it('rejects a shell instance whose eval_command is not a string', async () => {
    const err = await shellHandler.init(ctx({ data_source: 'shell', prompt: 'p', eval_command: 3 })).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/field 'eval_command'/);
  });
  it('rejects a stem answer that names no choice', async () => {
    const err = await stemHandler.init(ctx({ data_source: 'stem', question: 'q', choices: ['a', 'b'], answer: 'E' })).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/field 'answer'.*A, B/);
  });
  it('rejects a code solution_file that leaves the workspace', async () => {
    const err = await codeHandler.init(ctx({ data_source: 'code', problem: 'p', tests: [{ input: '', output: '' }], solution_file: '../x.py' })).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/field 'solution_file'/);
  });
  it('rejects a swe instance without a repository', async () => {
    const err = await sweHandler.init(ctx({ data_source: 'swe', problem_statement: 'p', test_command: 'true' })).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/field 'files'/);
  });
});

describe('veRL-style instances', () => {
  it('scores a math instance with a chat-message prompt and reward_model.ground_truth', async () => {
    const r = await runWithOracle(
      mathHandler,
      inst({
        data_source: 'deepscaler',
        prompt: [{ role: 'user', content: 'What is 6 * 7? Put the answer in \\boxed{}.' }],
        reward_model: { ground_truth: '42' },
        oracle: [{ content: 'It is \\boxed{42}.' }],
      }),
      root,
    );
    expect([r.resolved, r.messages.slice(0, 2).map((m) => m.role)]).toEqual([true, ['system', 'user']]);
  });
});

describe('eval', () => {
  it('records the agent diff as git_patch for a swe task', async () => {
    const r = await runWithOracle(
      sweHandler,
      inst({
        data_source: 'swe',
        problem_statement: 'make x.txt say 2',
        files: { 'x.txt': '1\n' },
        test_command: 'grep -qx 2 x.txt',
        oracle: [{ tool_calls: [sh('echo 2 > x.txt'), fin()] }],
      }),
      root,
    );
    expect([r.resolved, r.details?.git_patch]).toEqual([true, expect.stringMatching(/-1\n\+2/)]);
  });
  it('scores 0 without an infra error when the agent deleted the repository', async () => {
    const r = await runWithOracle(
      sweHandler,
      inst({ data_source: 'swe', problem_statement: 'p', files: { 'a.txt': 'x\n' }, test_command: 'true', oracle: [{ tool_calls: [sh('rm -rf .git'), fin()] }] }),
      root,
    );
    expect([r.reward, r.details?.error]).toEqual([0, expect.stringContaining('is gone')]);
  });
  it('seeds a swe repository from repo_dir, keeping its git history', async () => {
    const repoDir = await mkdtemp(join(root, 'repo-'));
    await writeFile(join(repoDir, 'v.txt'), 'old\n');
    await new Promise<void>((res, rej) =>
      execFile('bash', ['-c', 'git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm first'], { cwd: repoDir }, (e) => (e ? rej(e) : res())),
    );
    const r = await runWithOracle(
      sweHandler,
      inst({
        data_source: 'swe',
        problem_statement: 'p',
        repo_dir: repoDir,
        test_command: 'grep -qx new v.txt && test "$(git log --format=%s)" = first',
        oracle: [{ tool_calls: [sh('echo new > v.txt'), fin()] }],
      }),
      root,
    );
    expect([r.resolved, r.details?.output]).toEqual([true, expect.any(String)]);
  });
  it('runs swe tests with test_files written over the agent edits', async () => {
    const r = await runWithOracle(
      sweHandler,
      inst({
        data_source: 'swe',
        problem_statement: 'p',
        files: { 'a.txt': 'bug\n', 't.sh': 'grep -qx fixed a.txt\n' },
        test_command: 'bash t.sh',
        test_files: { 't.sh': 'grep -qx fixed a.txt\n' },
        oracle: [{ tool_calls: [sh('echo true > t.sh'), fin()] }],
      }),
      root,
    );
    expect(r.resolved).toBe(false);
  });
  it('gives a fraction reward for code when reward_mode is fraction', async () => {
    const r = await runWithOracle(
      codeHandler,
      inst({
        data_source: 'code',
        problem: 'echo',
        reward_mode: 'fraction',
        tests: [
          { input: 'a\n', output: 'a\n' },
          { input: 'b\n', output: 'nope\n' },
        ],
        oracle: [{ tool_calls: [sh("printf 'print(input())\\n' > solution.py"), fin()] }],
      }),
      root,
    );
    expect([r.reward, r.resolved]).toEqual([0.5, false]);
  });
  it('keeps the hidden code tests out of the agent sandbox', async () => {
    const r = await runWithOracle(
      codeHandler,
      inst({
        data_source: 'code',
        problem: 'p',
        tests: [{ input: '', output: 'ok\n' }],
        // The solution is written from what the agent could see: 'ok' only if no test file was there.
        oracle: [{ tool_calls: [sh(`n=$(ls -aR | grep -c eval); printf "print('ok' if $n == 0 else 'leak')\\n" > solution.py`), fin()] }],
      }),
      root,
    );
    expect(r.resolved).toBe(true);
  });
  it('scores a shell task 0 with the exit code when eval_command fails', async () => {
    const r = await runWithOracle(shellHandler, inst({ data_source: 'shell', prompt: 'p', eval_command: 'exit 3', oracle: [{ tool_calls: [fin()] }] }), root);
    expect([r.reward, r.details?.exit_code]).toEqual([0, 3]);
  });
  it('answers an unknown tool with a policy error observation', async () => {
    const r = await runWithOracle(
      mathHandler,
      inst({ data_source: 'math', problem: 'p', answer: '1', oracle: [{ tool_calls: [{ name: 'rm_rf', arguments: {} }] }, { tool_calls: [fin('\\boxed{1}')] }] }),
      root,
    );
    expect(r.messages.find((m) => m.role === 'tool')?.content).toMatch(/unknown tool 'rm_rf'/);
  });
});
