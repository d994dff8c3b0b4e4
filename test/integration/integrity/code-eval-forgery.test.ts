import { describe, expect, it } from 'vitest';
import { oracleRuntimeOnSandboxes } from '../sandbox/oracle-runtime.js';

/**
 * The `code` family's eval (#27): the hidden tests run the policy's solution in the eval
 * sandbox, as children of the test runner, so a solution can write the runner's verdict file
 * itself and kill the runner, or leave a process behind that rewrites the verdict once the
 * runner is done. Either must score what the solution earns (0 here), never the forged verdict.
 */
const runtime = oracleRuntimeOnSandboxes('code-forgery-');

const FORGED = "{'passed': 2, 'total': 2, 'results': [{'ok': True, 'why': ''}, {'ok': True, 'why': ''}]}";
const write = (py: string) => ({ tool_calls: [{ name: 'str_replace_editor', arguments: { command: 'create', path: 'solution.py', file_text: py } }] });
const finish = { tool_calls: [{ name: 'finish', arguments: {} }] };
const task = (id: string, solution: string) => ({
  data_source: 'code',
  instance_id: id,
  problem: 'Print the sum of two integers read from stdin.',
  tests: [
    { input: '1 2\n', output: '3\n' },
    { input: '2 2\n', output: '4\n' },
  ],
  oracle: [write(solution), finish],
});

describe("a code solution cannot forge the test runner's verdict", () => {
  it('writing .eval/result.json and killing the runner scores 0', async () => {
    const hack = `import json, os, signal\njson.dump(${FORGED}, open('.eval/result.json', 'w'))\nos.kill(os.getppid(), signal.SIGKILL)\n`;
    const r = await runtime.submit(task('code-forge-kill', hack) as never).result;
    expect([r.outcome, r.reward, r.resolved]).toEqual(['completed', 0, false]);
    expect(String(r.evalDetails?.error)).toMatch(/the test runner did not finish/);
  });

  it('a process left behind that rewrites the verdict after the runner exits scores 0', async () => {
    // Prints a wrong answer; a double-forked daemon waits for the runner's verdict and replaces it.
    const hack = [
      'import json, os, sys, time',
      'if os.fork() == 0:',
      '    os.setsid()',
      '    if os.fork() == 0:',
      '        for _ in range(4000):',
      '            try:',
      "                d = json.load(open('.eval/result.json'))",
      "                if d['passed'] < d['total']:",
      `                    json.dump(${FORGED}, open('.eval/result.json', 'w'))`,
      '                    break',
      '            except Exception:',
      '                pass',
      '            time.sleep(0.0005)',
      '    os._exit(0)',
      'print(0)',
      '',
    ].join('\n');
    const r = await runtime.submit(task('code-forge-daemon', hack) as never).result;
    expect([r.outcome, r.reward, r.resolved]).toEqual(['completed', 0, false]);
    expect(r.evalDetails).toMatchObject({ passed: 0, total: 2 });
  });

  it('an honest solution still scores 1, with the verdict of every test', async () => {
    const r = await runtime.submit(task('code-honest', 'a, b = map(int, input().split())\nprint(a + b)\n') as never).result;
    expect([r.outcome, r.reward, r.resolved, r.evalDetails?.passed, r.evalDetails?.total]).toEqual(['completed', 1, true, 2, 2]);
  });
});
