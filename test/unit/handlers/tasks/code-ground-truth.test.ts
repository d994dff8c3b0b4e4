import { systemClock } from '../../../../src/clock.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TaskError } from '../../../../src/errors.js';
import { HandlerRegistry } from '../../../../src/handlers/registry.js';
import { builtinHandlers } from '../../../../src/handlers/builtin.js';
import { codeHandler } from '../../../../src/handlers/tasks/code.js';
import { testsFromGroundTruth } from '../../../../src/handlers/tasks/code-ground-truth.js';
import { InstanceSchema } from '../../../../src/protocol/instance.js';
import { runWithOracle } from './local-sandbox.js';

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'code-gt-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

const sh = (command: string) => ({ name: 'execute_bash', arguments: { command } });
const fin = () => ({ name: 'finish', arguments: {} });
/** A chat prompt as DeepCoder rows carry it, and a solution written by the oracle. */
const row = (data_source: string, ground_truth: unknown, solution: string) =>
  InstanceSchema.parse({
    data_source,
    prompt: [{ role: 'user', content: 'Solve it.' }],
    reward_model: { style: 'rule', ground_truth },
    oracle: [{ tool_calls: [sh(`cat > solution.py <<'EOF'\n${solution}\nEOF`), fin()] }],
  });

describe('code instances in the reference formats (#10.3)', () => {
  it('routes codecontests, apps, codeforces, taco and any deepcoder* data source to the code handler', () => {
    const reg = new HandlerRegistry(builtinHandlers);
    for (const ds of ['codecontests', 'apps', 'codeforces', 'taco', 'deepcoder', 'deepcoder_lcb', 'deepcoder-primeintellect']) expect(reg.resolve(ds).name, ds).toBe('code');
    expect(reg.keys()).toContain('deepcoder*');
    expect(() => reg.resolve('astrology')).toThrow(TaskError);
  });

  it('reads stdin tests from a JSON-string ground truth {inputs, outputs}', async () => {
    const gt = JSON.stringify({ inputs: ['2 3\n', '10 -4\n'], outputs: ['5\n', '6\n'] });
    const r = await runWithOracle(codeHandler, row('deepcoder', gt, 'a, b = map(int, input().split())\nprint(a + b)'), root);
    expect([r.reward, r.resolved]).toEqual([1, true]);
  });

  it('reads a list of {input, output} cases (LiveCodeBench / Codeforces rows)', async () => {
    const gt = [{ input: '3\n', output: '9\n', testtype: 'stdin' }, { input: '4\n', output: '16\n', testtype: 'stdin' }];
    const r = await runWithOracle(codeHandler, row('codeforces', gt, 'n = int(input())\nprint(n * n)'), root);
    expect(r.resolved).toBe(true);
  });

  it('calls fn_name with the case arguments, on a top-level function or a Solution method', async () => {
    const gt = { fn_name: 'add', inputs: [[1, 2], [5, 7]], outputs: [[3], 12] };
    const top = await runWithOracle(codeHandler, row('taco', gt, 'def add(a, b):\n    return a + b'), root);
    expect(top.resolved).toBe(true);
    const cls = await runWithOracle(codeHandler, row('apps', gt, 'class Solution:\n    def add(self, a, b):\n        return a + b'), root);
    expect(cls.resolved).toBe(true);
    const wrong = await runWithOracle(codeHandler, row('apps', gt, 'def add(a, b):\n    return a - b'), root);
    expect([wrong.reward, wrong.resolved]).toEqual([0, false]);
  }, 120_000);

  it('refuses unreadable ground truth as a task error naming the field', async () => {
    const bad = InstanceSchema.parse({ data_source: 'deepcoder', problem: 'p', reward_model: { ground_truth: '{not json' } });
    const err = await codeHandler
      .init({ rolloutId: 'r', instance: bad, sampling: {}, signal: new AbortController().signal, clock: systemClock, createSandbox: () => Promise.reject(new Error('no')) })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect((err as Error).message).toMatch(/reward_model\.ground_truth/);
    expect(() => testsFromGroundTruth({ inputs: [1], outputs: [] }, 'solution.py')).toThrow(/1 inputs for 0 outputs/);
    expect(() => testsFromGroundTruth({ fn_name: 'x; import os', inputs: [[]], outputs: [1] }, 'solution.py')).toThrow(/identifier/);
  });
});
