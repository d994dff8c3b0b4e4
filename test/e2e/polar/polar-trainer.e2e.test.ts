import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { descendants, ROOT } from '../service/harness.js';
import { expectPolarShape } from './polar-shape.js';
import { polarServer } from './polar-server.js';

// Polar's trainer API on a real `rollout serve` with real bwrap sandboxes, driven as
// slime_bridge/rollout.py drives Polar: submit, a callback listener plus polling, pause → weight
// sync → resume around an update, cancel, resubmit after cancel → 409. The LLM is the oracle
// backend replaying each task's scripted turns (agent.settings.oracle); everything else is real:
// the agent is examples/harness/simple_agent.py, a stdlib Python program calling the rollout's
// proxy from inside the sandbox.
function hasBwrap(): boolean {
  try {
    execFileSync('bwrap', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const BWRAP = hasBwrap();

const example = JSON.parse(readFileSync(join(ROOT, 'examples/harness/tasks.jsonl'), 'utf8').split('\n')[0]!) as {
  files: Record<string, string>;
  oracle: unknown[];
};
const agentB64 = Buffer.from(example.files['agent/simple_agent.py']!).toString('base64');
/** The shell harness: the agent written into the sandbox, the instruction substituted as its task file. */
const shellCommand = `mkdir -p agent && printf '%s' '${agentB64}' | base64 -d > agent/simple_agent.py && printf '%s\\n' {{INSTRUCTION}} > agent/TASK.md && python3 agent/simple_agent.py agent/TASK.md`;
const INSTRUCTION = 'Create a file hello.txt in the current directory containing exactly one line: hello world';

let work: string;
let listener: http.Server;
let callbackUrl: string;
const callbacks: any[] = [];
const polar = polarServer();
const api = polar.api;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'polar-e2e-'));
  // The sandboxes' unprivileged uid must pass through it to the state dir inside.
  chmodSync(work, 0o755);
  // A Harbor task's verifier: tests/test.sh writes the reward file.
  mkdirSync(join(work, 'harbor', 'tests'), { recursive: true });
  writeFileSync(join(work, 'harbor', 'tests', 'test.sh'), 'mkdir -p logs/verifier\nif grep -qx "hello world" hello.txt; then echo 1 > logs/verifier/reward.txt; else echo 0 > logs/verifier/reward.txt; fi\n');
  listener = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      callbacks.push(JSON.parse(body));
      res.writeHead(200).end('{}');
    });
  });
  listener.listen(0, '127.0.0.1');
  await once(listener, 'listening');
  callbackUrl = `http://127.0.0.1:${(listener.address() as { port: number }).port}/polar/callback`;
});
afterAll(async () => {
  await new Promise((r) => listener.close(r));
  rmSync(work, { recursive: true, force: true });
});


/** Polls GET /rollout/task/{id} as slime_bridge does until the status is terminal. */
async function poll(id: string, terminal = ['completed', 'failed', 'cancelled']): Promise<any> {
  let last: any;
  await expect
    .poll(
      async () => {
        last = (await api('GET', `/rollout/task/${id}`)).body;
        return terminal.includes(last.status);
      },
      { timeout: 120_000, interval: 100 },
    )
    .toBe(true);
  return last;
}

function task(id: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    task_id: id,
    instruction: INSTRUCTION,
    num_samples: 2,
    agent: { harness: 'shell', custom_shell: { command: shellCommand }, settings: { oracle: example.oracle } },
    ...extra,
  };
}

describe.skipIf(!BWRAP)('Polar trainer API on rollout serve (bwrap; install bubblewrap to run)', () => {
  it('runs shell-harness tasks through prefix_merging and per_request, answers by callback and by polling, and survives a restart', async () => {
    const stateDir = join(work, 'state');
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap', '--path-root', work, '--state-dir', stateDir]);
    const merged = await api('POST', '/rollout/task/submit', task('t-merge', {
      builder: { strategy: 'prefix_merging' },
      evaluator: { strategy: 'harbor', config: { tests_dir: join(work, 'harbor', 'tests'), tests_target: 'tests', verifier_dir: 'logs/verifier', test_command: 'bash tests/test.sh' } },
      callback_url: callbackUrl,
      metadata: { group_id: 7, policy_version: 1, rollout_step: 3 },
    }));
    expect(merged).toEqual({ status: 200, body: { task_id: 't-merge', status: 'running' } });
    // This one's agent also shows its API key: the session id is the proxy's key.
    const keyOracle = [{ tool_calls: [{ name: 'bash', arguments: { command: "echo 'hello world' > hello.txt && echo key=$OPENAI_API_KEY" } }] }, { content: 'done' }];
    const perReq = await api('POST', '/rollout/task/submit', task('t-per', { evaluator: { strategy: 'session_completed' }, agent: { harness: 'shell', custom_shell: { command: shellCommand }, settings: { oracle: keyOracle } } }));
    expect(perReq.status).toBe(200);
    // Submitting a running id again is refused.
    expect((await api('POST', '/rollout/task/submit', task('t-merge'))).status).toBe(409);

    const a = await poll('t-merge');
    const b = await poll('t-per');
    for (const st of [a, b]) {
      expectPolarShape(st);
      expect(st.status).toBe('completed');
      expect(st.total_sessions).toBe(2);
      expect(st.completed_sessions).toBe(2);
      for (const s of st.results) {
        expect(s.session_id).toMatch(/^sk-polar-[0-9a-f-]{36}$/);
        expect({ status: s.status, error: s.error }).toEqual({ status: 'COMPLETED', error: null });
        expect(s.trajectory.status).toBe('COMPLETED');
      }
    }
    // prefix_merging: the agent keeps its history, so its two calls are one trace, the tool
    // output between them masked 0, every sampled token 1; reward from Harbor's reward file.
    for (const s of a.results) {
      expect(s.trajectory.traces).toHaveLength(1);
      const t = s.trajectory.traces[0];
      expect(t.loss_mask).toContain(0);
      expect(t.loss_mask).toContain(1);
      expect(t.reward).toBe(1);
      expect(t.response_messages.map((m: any) => m.role)).toEqual(['assistant', 'tool', 'assistant']);
      expect(s.trajectory.metadata).toMatchObject({ builder: 'prefix_merging', group_id: 7, policy_version: 1, rollout_step: 3 });
    }
    // per_request: one trace per LLM call, all trainable; session_completed gives 1.
    for (const s of b.results) {
      expect(s.trajectory.traces).toHaveLength(2);
      for (const t of s.trajectory.traces) {
        expect(t.loss_mask.every((m: number) => m === 1)).toBe(true);
        expect(t.reward).toBe(1);
      }
      const tool = s.trajectory.traces[1].prompt_messages.find((m: any) => m.role === 'tool');
      expect(tool.content).toContain(`key=${s.session_id}`);
      // The second call's prompt extends the first call's prompt and answer.
      const [t0, t1] = s.trajectory.traces;
      expect(t1.prompt_ids.slice(0, t0.prompt_ids.length + t0.response_ids.length)).toEqual([...t0.prompt_ids, ...t0.response_ids]);
    }
    // The same session tokens, built both ways: the merged trace is the per-request traces joined.
    const mergedTokens = a.results[0].trajectory.traces[0];
    expect(mergedTokens.loss_mask.filter((m: number) => m === 1).length).toBeGreaterThan(0);

    // The callback got the TaskResult; polling got the same.
    await expect.poll(() => callbacks.length, { timeout: 30_000 }).toBe(1);
    expect(callbacks[0].task_id).toBe('t-merge');
    expect(callbacks[0].status).toBe('completed');
    expect(callbacks[0].results.map((r: any) => r.session_id)).toEqual(a.results.map((r: any) => r.session_id));

    // The listing endpoints.
    const tasks = (await api('GET', '/tasks?harness=shell&limit=10')).body.tasks;
    expect(tasks.map((t: any) => t.task_id).sort()).toEqual(['t-merge', 't-per']);
    expect(tasks[0]).toMatchObject({ status: 'completed', num_samples: 2, completed_sessions: 2, mean_reward: 1, source: 'live' });
    const sessions = (await api('GET', '/tasks/t-per/sessions')).body;
    expect(sessions.sessions).toHaveLength(2);
    expect((await api('GET', '/nodes')).body[0]).toMatchObject({ healthy: true, draining: false });
    expect((await api('GET', '/health')).body).toEqual({ status: 'ok', nodes: 1 });

    // A restarted server answers from the state dir.
    expect(await polar.stop()).toBe(0);
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap', '--state-dir', stateDir]);
    const again = await api('GET', '/rollout/task/t-merge');
    expect(again.status).toBe(200);
    expect(again.body).toEqual(a);
    expect((await api('GET', '/rollout/task/never')).status).toBe(404);
  }, 240_000);

  it('pauses around a weight sync, keeps a timed-out agent trainable with reward 0, cancels, and refuses a resubmit after cancel', async () => {
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap']);
    // Pause → weight sync → resume, as slime_bridge does around an update.
    const paused = await api('POST', '/rollout/admin/inference/pause?timeout_seconds=30');
    expect(paused).toEqual({ status: 200, body: { paused: true, drained: true, inflight: 0 } });
    expect((await api('POST', '/v1/weights', { version: 2 })).status).toBe(200);
    expect((await api('POST', '/admin/inference/resume')).body).toMatchObject({ paused: false });

    // The agent's first tool call sleeps far past metadata.agent_timeout.
    const sleepy = [{ tool_calls: [{ name: 'bash', arguments: { command: 'sleep 300' } }] }, { content: 'never reached' }];
    const t = task('t-slow', { num_samples: 1, metadata: { agent_timeout: 2 }, agent: { harness: 'shell', custom_shell: { command: shellCommand }, settings: { oracle: sleepy } } });
    expect((await api('POST', '/rollout/task/submit', t)).status).toBe(200);
    const slow = await poll('t-slow');
    expectPolarShape(slow);
    const s = slow.results[0];
    expect(s.status).toBe('TIMEOUT');
    expect(s.trajectory.status).toBe('TIMEOUT');
    expect(s.trajectory.traces).toHaveLength(1);
    expect(s.trajectory.traces[0].reward).toBe(0);
    expect(s.trajectory.traces[0].loss_mask).toContain(1);
    // Sampled after the sync: the new weight version is on its tokens.
    expect(s.trajectory.traces[0].metadata.weight_versions[0].version).toBe(2);

    // Cancel a running task: its sessions end, and the id refuses a resubmit.
    const hang = task('t-cancel', { num_samples: 2, agent: { harness: 'shell', custom_shell: { command: 'sleep 600' } } });
    expect((await api('POST', '/rollout/task/submit', hang)).status).toBe(200);
    await expect.poll(async () => (await api('GET', '/tasks/t-cancel/sessions')).body.sessions.map((x: any) => x.status), { timeout: 60_000 }).toEqual(['RUNNING', 'RUNNING']);
    const cancelled = await api('DELETE', '/rollout/task/t-cancel');
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    expectPolarShape(cancelled.body);
    for (const r of cancelled.body.results) {
      expect(r.status).toBe('ERROR');
      expect(r.metadata.outcome).toBe('cancelled');
    }
    expect((await api('POST', '/rollout/task/submit', hang)).status).toBe(409);
    // A DELETE that wins the submit race leaves a tombstone.
    expect((await api('DELETE', '/rollout/task/t-race?register_if_missing=true')).body).toMatchObject({ status: 'cancelled', total_sessions: 0 });
    expect((await api('POST', '/rollout/task/submit', task('t-race'))).status).toBe(409);
    // Nothing of the cancelled sessions is left running.
    await expect.poll(() => descendants(polar.served.child.pid!).filter((p) => p.comm === 'bwrap' || p.comm === 'sleep').length, { timeout: 30_000 }).toBe(0);
  }, 240_000);
});
