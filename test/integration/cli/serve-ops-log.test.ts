import { afterAll, describe, expect, it } from 'vitest';
import { startServerProcess, stopServerProcesses } from '../../helpers/server-process.js';

/**
 * `rollout serve`'s operational log (#30): a stats line while work flows, one line when a
 * backend goes down, JSON with --log-format json. A real serve process and real HTTP traffic.
 */

afterAll(async () => {
  await stopServerProcesses();
});

const instance = (i: number) => ({
  data_source: 'math',
  instance_id: `ops-${i}`,
  problem: 'What is 1+1?',
  answer: '2',
  oracle: [{ content: 'Easy.', tool_calls: [{ name: 'finish', arguments: { message: '\\boxed{2}' } }] }],
});

describe('rollout serve operational log', { timeout: 120_000 }, () => {
  it('prints a stats line with the rate and outcomes while rollouts flow, and a line when a backend goes down', async () => {
    const serve = await startServerProcess('serve', ['--port', '0', '--backend', 'oracle', '--sandbox', 'none', '--stats-every', '1']);
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        fetch(`${serve.url}/process`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instance: instance(i), sampling_params: { max_iterations: 4 } }) }).then((r) => r.status),
      ),
    );
    expect(answers.every((s) => s === 200)).toBe(true);
    const finished = () => serve.stderr().split('\n').filter((l) => / rollouts\/s, /.test(l)).map((l) => Number(/, (\d+) finished/.exec(l)![1])).reduce((a, b) => a + b, 0);
    // Every finished rollout is counted once over the stats lines, with its outcome.
    await expect.poll(finished, { timeout: 30_000 }).toBe(12);
    expect(serve.stderr()).toMatch(/rollout serve: \S+Z \d+\.\d\d rollouts\/s, \d+ finished \(completed \d+\), \d+ live, \d+ queued, backends 1\/1 up\n/);
    // A dead backend registered now: the pool's probes mark it degraded, and the log says so once.
    const add = await fetch(`${serve.url}/add_llm_server`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ address: 'http://127.0.0.1:9' }) });
    expect(add.status).toBe(200);
    await expect.poll(() => serve.stderr(), { timeout: 30_000 }).toMatch(/rollout serve: \S+Z backend 127\.0\.0\.1:9 down\n/);
    expect(serve.stderr().match(/backend 127\.0\.0\.1:9 down/g)).toHaveLength(1);
  });

  it('writes one JSON object a line with --log-format json', async () => {
    const serve = await startServerProcess('serve', ['--port', '0', '--backend', 'oracle', '--sandbox', 'none', '--stats-every', '1', '--log-format', 'json']);
    const r = await fetch(`${serve.url}/process`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instance: instance(99), sampling_params: {} }) });
    expect(r.status).toBe(200);
    await expect.poll(() => serve.stderr(), { timeout: 30_000 }).toContain('"finished":1');
    const line = serve.stderr().split('\n').find((l) => l.includes('"finished":1'))!;
    expect(JSON.parse(line)).toMatchObject({ event: 'stats', finished: 1, outcomes: { completed: 1 }, backends_up: 1 });
  });

  it('refuses an unknown --log-format naming the choices', async () => {
    await expect(startServerProcess('serve', ['--port', '0', '--log-format', 'xml'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('--log-format must be one of text, json') });
  });
});
