import { describe, expect, it } from 'vitest';
import { oracleRuntimeOnSandboxes } from '../sandbox/oracle-runtime.js';

/**
 * Whatever the policy did inside its own sandbox is the policy's outcome (#28 §5.5): scored, with
 * reward 0 where it breaks the eval, never filtered as an infrastructure or task failure (which
 * would hide a losing episode from the trainer). Real sandboxes; the oracle backend replays the
 * policy's tool calls.
 */
const runtime = oracleRuntimeOnSandboxes('policy-outcomes-');

const call = (name: string, args: Record<string, unknown>, content = ''): Record<string, unknown> => ({ content, tool_calls: [{ name, arguments: args }] });
const bash = (command: string): Record<string, unknown> => call('execute_bash', { command });
const finish = (content = ''): Record<string, unknown> => call('finish', {}, content);

// Plants a .pth in the user site that ends any interpreter starting there, then ends the REPL so
// the next cell starts a new one.
const PLANT_EXIT_PTH = "import site, os; d = site.getusersitepackages(); os.makedirs(d, exist_ok=True); open(os.path.join(d, 'zz.pth'), 'w').write('import os; os._exit(3)\\n'); os._exit(0)";

function sweTask(id: string, commands: string[]): Record<string, unknown> {
  return {
    data_source: 'swe',
    instance_id: id,
    problem_statement: 'Make check.sh pass.',
    files: { 'lib.sh': 'echo broken\n', 'tests/check.sh': 'test "$(sh lib.sh)" = fixed\n' },
    test_command: 'sh tests/check.sh',
    test_files: { 'tests/check.sh': 'test "$(sh lib.sh)" = fixed\n' },
    oracle: [...commands.map(bash), finish()],
  };
}

describe('a policy cannot hide a losing episode (#28 §5.5)', () => {
  it('python tool: a .pth that ends every interpreter is scored (0), not an infra error', async () => {
    const r = await runtime.submit({
      data_source: 'math',
      instance_id: 'pth-exit',
      problem: 'What is 6 * 7?',
      answer: '42',
      oracle: [call('execute_ipython_cell', { code: PLANT_EXIT_PTH }), call('execute_ipython_cell', { code: 'print(6 * 7)' }), finish('\\boxed{41}')],
    } as never).result;
    expect([r.outcome, r.reward, r.error?.message ?? null]).toEqual(['completed', 0, null]);
    const tool = r.trajectory.messages.filter((m) => m.role === 'tool').map((m) => m.content);
    expect(tool[1]).toMatch(/Python REPL exited/);
  });

  it.each([
    ['a symlink to a directory', 'rm tests/check.sh; ln -s .. tests/check.sh'],
    ['a symlink to a host directory', 'rm tests/check.sh; ln -s /etc tests/check.sh'],
    ['a directory', 'rm tests/check.sh; mkdir -p tests/check.sh/x; touch tests/check.sh/x/y'],
    ['under a directory that is a symlink', 'rm -r tests; ln -s /tmp tests'],
  ])('swe: a test file the patch turned into %s is scored 0, not a task error', async (_what, command) => {
    const r = await runtime.submit(sweTask('swe-test-file', [command]) as never).result;
    expect([r.outcome, r.reward, r.error?.message ?? null]).toEqual(['completed', 0, null]);
    expect(r.evalDetails).toMatchObject({ applied: true });
  });

  it('swe: a workspace whose .git/rollout.patch is a directory is scored 0, not an infra error', async () => {
    const r = await runtime.submit(sweTask('swe-patch-dir', ['echo "echo fixed" > lib.sh; mkdir -p .git/rollout.patch']) as never).result;
    expect([r.outcome, r.reward, r.error?.message ?? null]).toEqual(['completed', 0, null]);
  });

  it('swe: a fix behind a test file turned into a symlink scores 1: the task\'s own test ran', async () => {
    const r = await runtime.submit(sweTask('swe-fix-and-link', ['echo "echo fixed" > lib.sh; rm tests/check.sh; ln -s .. tests/check.sh']) as never).result;
    expect([r.outcome, r.reward, r.resolved]).toEqual(['completed', 1, true]);
  });

  it('swe: an honest fix still scores 1', async () => {
    const r = await runtime.submit(sweTask('swe-honest', ['echo "echo fixed" > lib.sh']) as never).result;
    expect([r.outcome, r.reward, r.resolved]).toEqual(['completed', 1, true]);
  });

  it('code: a solution that kills the test runner is scored 0, not an infra error', async () => {
    const r = await runtime.submit({
      data_source: 'code',
      instance_id: 'code-kill-runner',
      problem: 'Print the sum of two integers read from stdin.',
      tests: [{ input: '1 2\n', output: '3\n' }],
      oracle: [bash("printf 'import os, signal\\nos.kill(os.getppid(), signal.SIGKILL)\\n' > solution.py"), finish()],
    } as never).result;
    expect([r.outcome, r.reward, r.error?.message ?? null]).toEqual(['completed', 0, null]);
  });

  it('shell: a policy that chmods its own /workspace to 000 is scored 0, not an infra error: the eval\'s fresh shell gets the workspace back', async () => {
    const r = await runtime.submit({
      data_source: 'shell',
      instance_id: 'shell-chmod-000',
      prompt: 'Make done.txt.',
      eval_command: 'test -f done.txt',
      oracle: [bash('chmod 000 /workspace'), finish()],
    } as never).result;
    expect([r.outcome, r.reward, r.error?.message ?? null]).toEqual(['completed', 0, null]);
  });
});
