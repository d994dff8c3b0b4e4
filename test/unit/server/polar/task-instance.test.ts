import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskRequestSchema, type TaskRequest } from '../../../../src/server/polar/polar-models.js';
import { harborReward, normalizeNodeId, shellQuote, toInstance, type TaskUploads } from '../../../../src/server/polar/task-instance.js';
import { HarnessInstanceSchema } from '../../../../src/handlers/tasks/harness.js';

const none: TaskUploads = { prepare: new Map(), harborTests: null };
const req = (extra: Record<string, unknown> = {}): TaskRequest =>
  TaskRequestSchema.parse({ task_id: 't1', instruction: "fix it's bug", agent: { harness: 'shell', custom_shell: { command: 'agent --task {{INSTRUCTION}}' } }, ...extra });

/** Runs a script with the system's sh in a temp dir; answers its exit code and output. */
function sh(script: string, files: Record<string, string> = {}): { code: number; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'polar-sh-'));
  try {
    for (const [p, c] of Object.entries(files)) writeFileSync(join(dir, p), c);
    try {
      return { code: 0, out: execFileSync('sh', ['-c', script], { cwd: dir, encoding: 'utf8' }) };
    } catch (e) {
      const err = e as { status: number; stdout: string };
      return { code: err.status, out: err.stdout };
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('toInstance', () => {
  it('maps the shell harness onto a harness instance the harness handler accepts, the instruction one quoted word', () => {
    const { instance } = toInstance(req({ agent: { harness: 'shell', custom_shell: { command: 'printf "%s" {{INSTRUCTION}}', cwd: '/work', env: { A: 'x y' } }, env: { B: '1' } } }), none);
    expect(instance).toMatchObject({ data_source: 'harness', instance_id: 't1', eval_command: 'true' });
    expect(HarnessInstanceSchema.safeParse(instance).success).toBe(true);
    expect(instance['command']).toBe(`cd '/work' && export B='1'; export A='x y'; printf "%s" 'fix it'\\''s bug'`);
    expect(sh(String(instance['command']).replace("cd '/work' && ", '')).out).toBe("fix it's bug");
  });

  it.each([
    ['codex', 'codex'],
    ['claude_code', 'claude-code'],
    ['qwen_code', 'qwen-code'],
    ['pi', 'pi'],
    ['gemini_cli', 'gemini-cli'],
    ['opencode', 'opencode'],
  ])("maps Polar's %s onto the harness preset %s with the instruction, env and model", (polar, preset) => {
    const { instance } = toInstance(req({ agent: { harness: polar, model_name: 'Qwen3-4B', env: { K: 'v' } }, runtime: { image: 'swe:1', env: { R: 'r' }, workdir: '/testbed' } }), none);
    expect(instance).toEqual({ data_source: 'harness', instance_id: 't1', preset, instruction: "fix it's bug", env: { R: 'r', K: 'v' }, model: 'Qwen3-4B', cwd: '/testbed', eval_command: 'true' });
    // The harness schema carries the preset's cwd (it dropped it once).
    expect(HarnessInstanceSchema.parse(instance).cwd).toBe('/testbed');
  });

  it("carries the task's image (an image-store name) in the instance's image, and none for the default root", () => {
    for (const agent of [{ harness: 'shell', custom_shell: { command: 'x' } }, { harness: 'codex' }]) {
      const r = req({ agent, runtime: { image: 'docker.io/library/python:3.11' } });
      expect(toInstance(r, none, 'py-test').instance['image']).toBe('py-test');
      expect(HarnessInstanceSchema.safeParse(toInstance(r, none, 'py-test').instance).success).toBe(true);
      expect(toInstance(r, none).instance).not.toHaveProperty('image');
    }
  });

  it('turns prepare steps into setup in order: uploads staged then copied, exec retried up to max_attempts', () => {
    const uploads: TaskUploads = { prepare: new Map([[0, new Map([['', 'cfg']])], [1, new Map([['a.txt', 'A'], ['sub/b.txt', 'B']])]]), harborTests: null };
    const { instance } = toInstance(
      req({ runtime: { image: 'img', prepare: [{ type: 'upload_file', source: '/h/c', target: 'etc/app.cfg' }, { type: 'upload_dir', source: '/h/d', target: 'data' }, { type: 'exec', command: 'test -f marker || { touch marker; false; }', max_attempts: 2 }] } }),
      uploads,
    );
    expect(instance['files']).toEqual({ '.polar-upload/0': 'cfg', '.polar-upload/1/a.txt': 'A', '.polar-upload/1/sub/b.txt': 'B' });
    const setup = instance['setup'] as string[];
    expect(setup).toHaveLength(3);
    // Run the steps as the sandbox would, in a workspace seeded with the files.
    const script = ['mkdir -p .polar-upload/1/sub', 'printf cfg > .polar-upload/0', 'printf A > .polar-upload/1/a.txt', 'printf B > .polar-upload/1/sub/b.txt', ...setup, 'cat etc/app.cfg data/a.txt data/sub/b.txt'].join(' && ');
    expect(sh(script)).toEqual({ code: 0, out: 'cfgAB' });
    // One attempt is not enough for a step that fails the first time.
    const once = toInstance(req({ runtime: { image: 'img', prepare: [{ type: 'exec', command: 'test -f marker || { touch marker; false; }' }] } }), none);
    expect(sh((once.instance['setup'] as string[])[0]!).code).not.toBe(0);
  });

  it('maps model_kwargs, the sampling seed, max_turns and the scripted oracle', () => {
    const m = toInstance(req({ agent: { harness: 'shell', custom_shell: { command: 'x' }, settings: { model_kwargs: { temperature: 0.7, top_p: 0.9, max_tokens: 512, extra_body: { top_k: 20 } }, sampling_seed: 5, max_turns: 8, oracle: [{ content: 'hi' }] } } }), none);
    expect(m.sampling).toEqual({ temperature: 0.7, top_p: 0.9, max_tokens: 512, top_k: 20, seed: 5 });
    expect(m.instance).toMatchObject({ max_llm_calls: 8, oracle: [{ content: 'hi' }] });
  });
});

describe('evaluators as eval commands', () => {
  const expected = { 'tests/test_calc.py::TestAdd::test_two': 'PASSED', 'tests/test_calc.py::test_neg': 'FAILED' };
  const testOnOutput = (output: string): { code: number; out: string } => {
    const { instance } = toInstance(req({ evaluator: { strategy: 'test_on_output', config: { test_command: 'cat pytest.log', expected_output_json: JSON.stringify(expected), repo_dir: '.' } } }), none);
    return sh(String(instance['eval_command']), { 'pytest.log': output });
  };

  it('test_on_output resolves when the parsed statuses equal the expected ones, ids normalised as Polar does', () => {
    const log = '\u001b[32mPASSED\u001b[0m tests/test_calc.py::TestAdd::test_two\nsome noise\nFAILED tests/test_calc.py::test_neg - AssertionError\n';
    expect(testOnOutput(log).code).toBe(0);
  });

  it.each([
    ['a status differs', 'PASSED tests/test_calc.py::TestAdd::test_two\nPASSED tests/test_calc.py::test_neg\n'],
    ['a test is missing', 'PASSED tests/test_calc.py::TestAdd::test_two\n'],
    ['an extra test ran', 'PASSED tests/test_calc.py::TestAdd::test_two\nFAILED tests/test_calc.py::test_neg\nPASSED t.py::extra\n'],
    ['nothing was parsed', 'collected 0 items\n'],
  ])('test_on_output does not resolve when %s', (_name, log) => {
    expect(testOnOutput(log).code).not.toBe(0);
  });

  it.each([
    ['a::b::C::m', 'C.m'],
    ['tests/x.py::test_f', 'test_f'],
    ['test_f - reason', 'test_f'],
  ])('normalises the node id %s to %s', (id, want) => expect(normalizeNodeId(id)).toBe(want));

  it('harbor writes the tests only at eval time, runs the verifier and reports the reward file', () => {
    const tests = new Map([['test.sh', 'mkdir -p logs/verifier; if [ -f done.txt ]; then echo 0.75 > logs/verifier/reward.txt; fi\n'], ['lib/helper.txt', 'x']]);
    const { instance } = toInstance(req({ evaluator: { strategy: 'harbor', config: { tests_dir: '/h/tests', tests_target: 'tests', verifier_dir: 'logs/verifier', test_command: 'bash tests/test.sh', verifier_timeout: 30 } } }), { prepare: new Map(), harborTests: tests });
    expect(instance['eval_timeout_s']).toBe(30);
    const done = sh(String(instance['eval_command']), { 'done.txt': '' });
    expect(harborReward(done.out)).toBe(0.75);
    expect(harborReward(sh(String(instance['eval_command'])).out)).toBeNull();
  });

  it.each([
    ['POLAR_HARBOR_REWARD_TXT=1\nPOLAR_HARBOR_REWARD_JSON=\n', 1],
    ['POLAR_HARBOR_REWARD_TXT=7\r\n', 1],
    [`POLAR_HARBOR_REWARD_TXT=\nPOLAR_HARBOR_REWARD_JSON=${Buffer.from('{"a": 1, "b": 0}').toString('base64')}\n`, 0.5],
    // A line the verifier printed before ours does not count: the last marker is the eval's.
    ['POLAR_HARBOR_REWARD_TXT=1\nPOLAR_HARBOR_REWARD_TXT=0\n', 0],
    ['POLAR_HARBOR_REWARD_TXT=abc\nPOLAR_HARBOR_REWARD_JSON=\n', null],
  ])('reads the Harbor reward from %j as %s', (out, want) => expect(harborReward(out)).toBe(want));

  it('quotes any text as one shell word', () => {
    for (const s of ["a'b", '$(id)', '`x`', 'a\nb', '']) expect(sh(`printf '%s' ${shellQuote(s)}`).out).toBe(s);
  });
});
