import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { missingTools } from '../../helpers/system-tools.js';
import { ROOT } from '../service/harness.js';
import { expectPolarShape } from './polar-shape.js';
import { polarServer } from './polar-server.js';

// Polar's swebench_harness evaluator on a real `rollout serve` with real bwrap sandboxes, over
// the repository's SWE sample (examples/swe-sample: a small repo, SWE-bench rows with
// FAIL_TO_PASS / PASS_TO_PASS and a test_patch): the repository is uploaded by the task's
// runtime.prepare and checked in as the base, the agent (examples/harness/simple_agent.py, the
// oracle replaying its turns) edits it, and the evaluator grades the patch per test with the
// SWE family's parser. One session fixes the bug (resolved, reward 1), one does not (reward 0).
const skip = missingTools('bwrap', 'git', 'pytest');

const rows = readFileSync(join(ROOT, 'examples/swe-sample/tasks.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
const row = rows.find((r) => r['instance_id'] === 'minilib__minilib-1')!;
// What Polar's trainers send as the instance: the SWE-bench row (our host-root extras dropped).
const { oracle: _oracle, repo_dir: _repoDir, eval_timeout_s: _t, data_source: _d, ...instance } = row;
const example = JSON.parse(readFileSync(join(ROOT, 'examples/harness/tasks.jsonl'), 'utf8').split('\n')[0]!) as { files: Record<string, string> };
const agentB64 = Buffer.from(example.files['agent/simple_agent.py']!).toString('base64');
const shellCommand = `mkdir -p agent && printf '%s' '${agentB64}' | base64 -d > agent/simple_agent.py && printf '%s\\n' {{INSTRUCTION}} > agent/TASK.md && python3 agent/simple_agent.py agent/TASK.md`;
const GIT_ENV = { GIT_AUTHOR_NAME: 'polar', GIT_AUTHOR_EMAIL: 'polar@localhost', GIT_COMMITTER_NAME: 'polar', GIT_COMMITTER_EMAIL: 'polar@localhost', GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: 'safe.directory', GIT_CONFIG_VALUE_0: '*' };

let work: string;
const polar = polarServer();
const api = polar.api;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'polar-swe-e2e-'));
  chmodSync(work, 0o755);
  cpSync(join(ROOT, 'examples/swe-sample/repo'), join(work, 'repo'), { recursive: true });
});
afterAll(() => rmSync(work, { recursive: true, force: true }));


function task(id: string, oracle: unknown[]): Record<string, unknown> {
  return {
    task_id: id,
    instruction: String(row['problem_statement']),
    num_samples: 1,
    runtime: {
      image: 'ghcr.io/trainer/only-it-has:1',
      prepare: [
        { type: 'upload_dir', source: join(work, 'repo'), target: 'repo' },
        { type: 'exec', command: 'git init -q && git add -A && git commit -qm base', cwd: 'repo', env: GIT_ENV },
      ],
    },
    agent: { harness: 'shell', custom_shell: { command: shellCommand }, settings: { oracle } },
    evaluator: { strategy: 'swebench_harness', config: { instance, repo_dir: 'repo', test_timeout: 120 } },
  };
}

describe.skipIf(skip)('Polar swebench_harness on rollout serve (bwrap, git, pytest)', () => {
  it('grades the agent\'s patch per test: the fix resolves (reward 1), an unfixed tree does not (reward 0)', async () => {
    // On the host's root (its python3 and pytest): the trainer's image name is dropped (--polar-image ignore).
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap', '--path-root', work, '--polar-image', 'ignore']);
    const fix = [
      { tool_calls: [{ name: 'bash', arguments: { command: "sed -i 's/if out and start < out\\[-1\\]\\[1\\]:/if out and start <= out[-1][1]:/' repo/minilib/intervals.py && grep -n 'start <=' repo/minilib/intervals.py" } }] },
      { content: 'fixed' },
    ];
    // The unresolved one "fixes" the test instead of the code: the test patch resets it.
    const cheat = [
      { tool_calls: [{ name: 'bash', arguments: { command: "printf '\\n\\ndef test_merge_touching():\\n    assert True\\n' >> repo/tests/test_intervals.py" } }] },
      { content: 'done' },
    ];
    expect((await api('POST', '/rollout/task/submit', task('swe-fix', fix))).status).toBe(200);
    expect((await api('POST', '/rollout/task/submit', task('swe-cheat', cheat))).status).toBe(200);
    const done = async (id: string): Promise<any> => {
      let last: any;
      await expect.poll(async () => ['completed', 'failed'].includes((last = (await api('GET', `/rollout/task/${id}`)).body).status), { timeout: 180_000, interval: 200 }).toBe(true);
      return last;
    };
    const fixed = await done('swe-fix');
    const cheated = await done('swe-cheat');
    for (const st of [fixed, cheated]) {
      expectPolarShape(st);
      expect(st.status).toBe('completed');
      expect(st.results[0].status, JSON.stringify(st.results[0].metadata)).toBe('COMPLETED');
    }
    const good = fixed.results[0];
    expect(good.trajectory.traces.map((t: any) => t.reward)).toEqual([1, 1]);
    expect(good.trajectory.traces[0].reward_components).toEqual({ swebench_harness: 1 });
    expect(good.metadata.resolved).toBe(true);
    const bad = cheated.results[0];
    expect(bad.trajectory.traces.map((t: any) => t.reward)).toEqual([0, 0]);
    expect(bad.metadata.resolved).toBe(false);
    // The per-test report of the SWE grading, from the runtime's own record of the session.
    const record = async (s: any): Promise<any> => (await api('GET', `/v1/rollouts/${s.metadata.rollout_id}`)).body.result.evalDetails.report;
    expect((await record(good)).FAIL_TO_PASS).toEqual({ success: ['tests/test_intervals.py::test_merge_touching'], failure: [] });
    const badReport = await record(bad);
    expect(badReport.FAIL_TO_PASS.failure).toEqual(['tests/test_intervals.py::test_merge_touching']);
    expect(badReport.PASS_TO_PASS.failure).toEqual([]);
  }, 300_000);
});
