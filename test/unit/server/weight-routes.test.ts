import { afterEach, describe, expect, it } from 'vitest';
import { get, post, startHarness, type Harness } from './harness.js';

const threeTurns = [
  { content: 'write', tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi > a.txt' } }] },
  { content: 'read', tool_calls: [{ name: 'execute_bash', arguments: { command: 'cat a.txt' } }] },
  { tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] },
];

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** The real service runtime with the oracle backend at weight version 1 (see harness.ts). */
async function start(): Promise<string> {
  h = await startHarness({}, { backends: [{ address: 'oracle', weightVersion: 1 }] });
  return h.url;
}

/** The result of rollout `id` once it has one. */
async function result(url: string, id: string): Promise<any> {
  await h!.until(() => h!.rt().get(id)?.result != null);
  return (await get(`${url}/v1/rollouts/${id}`)).body.result;
}

describe('/v1/weights', () => {
  it('updates the backends\' version and the trainer\'s, and results carry versions and staleness', async () => {
    const url = await start();
    const upd = await post(`${url}/v1/weights`, { version: 4, trainer_version: 2 });
    expect(upd).toMatchObject({ status: 200, body: { paused: false, trainer_version: 2, backends: [{ id: 'oracle', weight_version: 4 }] } });
    const sub = await post(`${url}/v1/rollouts`, { instance: { data_source: 'scripted', instance_id: 'w1', oracle: threeTurns } });
    expect(sub.status).toBe(202);
    const res = await result(url, sub.body.id);
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.turns.map((t: { weightVersion: unknown }) => t.weightVersion)).toEqual([4, 4, 4]);
    expect(res.trajectory.weightVersions).toHaveLength(1);
    expect(res.trajectory.minWeightVersion).toBe(4);
    expect(res.trajectory.staleness).toBe(-2);
  });

  it('holds new LLM calls between /v1/weights/pause and /v1/weights/resume', async () => {
    const url = await start();
    expect((await post(`${url}/v1/weights/pause`)).body.paused).toBe(true);
    const sub = await post(`${url}/v1/rollouts`, { instance: { data_source: 'scripted', instance_id: 'w2', oracle: threeTurns } });
    // Reaches its first LLM call (the sandbox is up) and stays there: the call waits, and a
    // minute of waiting neither times it out nor counts toward its budget.
    await h!.until(() => h!.rt().get(sub.body.id)?.state === 'llmCalling');
    await h!.clock.advance(60_000);
    const held = (await get(`${url}/v1/rollouts/${sub.body.id}`)).body;
    expect(held).toMatchObject({ state: 'llmCalling', tokens: expect.any(Number), outcome: null });
    expect(held.turn).toBe(0);
    await post(`${url}/v1/weights`, { version: 'v2' });
    expect((await post(`${url}/v1/weights/resume`)).body.paused).toBe(false);
    const res = await result(url, sub.body.id);
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.maxWeightVersion).toBe('v2');
    expect((await get(`${url}/v1/weights`)).body).toMatchObject({ paused: false, trainer_version: null });
    expect(res.timing.countedMs).toBe(0);
  });

  it('answers 400 naming the field for a bad body and 404 for an unknown backend, changing nothing', async () => {
    const url = await start();
    const bad = await post(`${url}/v1/weights`, { version: { x: 1 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.issues[0].path).toBe('version');
    expect((await post(`${url}/v1/weights`, { version: 2, extra: 1 })).status).toBe(400);
    expect((await post(`${url}/v1/weights`, { version: '' })).status).toBe(400);
    const unknown = await post(`${url}/v1/weights`, { version: 9, backends: ['oracle', 'nope'] });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.message).toMatch(/nope/);
    expect((await get(`${url}/v1/weights`)).body.backends).toMatchObject([{ id: 'oracle', weight_version: 1 }]);
    expect((await post(`${url}/v1/weights/pause`, { now: true })).status).toBe(400);
  });
});
