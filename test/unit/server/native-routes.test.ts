import { afterEach, describe, expect, it } from 'vitest';
import { startHarness, post, get, task, heldTask, evalFaultTask, type Harness } from './harness.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

describe('native /v1 routes', () => {
  it('accepts one rollout with 202 and its id at once', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, { instance: heldTask(), id: 'a1' });
    // The real supervisor admits it at once: the answer already shows it holding its INIT slot.
    expect(r).toMatchObject({ status: 202, body: { id: 'a1', group_id: null, state: 'initializing' } });
  });

  it('answers a rollout with its state and, once ended, its result', async () => {
    h = await startHarness();
    await post(`${h.url}/v1/rollouts`, { instance: task({}, 2_000), id: 'a2' });
    await h.until(() => h.rt().get('a2')?.state === 'acting');
    expect((await get(`${h.url}/v1/rollouts/a2`)).body).toMatchObject({ id: 'a2', state: 'acting', outcome: null, result: null });
    await h.clock.advance(2_000);
    await h.until(() => h.rt().get('a2')?.result != null);
    const r = await get(`${h.url}/v1/rollouts/a2`);
    expect(r.body).toMatchObject({ id: 'a2', state: 'done', outcome: 'completed', reward: 1 });
    const traj = r.body.result.trajectory;
    expect(traj.turns).toHaveLength(2);
    expect(traj.lossMask).toHaveLength(traj.tokens.length);
    expect(traj.lossMask.filter((m: number) => m === 1)).toHaveLength(traj.turns[0].outputIds.length + traj.turns[1].outputIds.length);
  });

  it('answers 404 for an unknown rollout', async () => {
    h = await startHarness();
    expect((await get(`${h.url}/v1/rollouts/none`)).status).toBe(404);
  });

  it('submits a batch as GRPO groups of n with trajectory ids', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/batches`, { instances: [task({ instance_id: 'x' }), task({ instance_id: 'y' })], n: 4 });
    expect(r.status).toBe(202);
    expect(r.body.groups).toHaveLength(2);
    expect(r.body.rollout_ids).toHaveLength(8);
    expect(r.body.groups[1].instance_id).toBe('y');
    const members = h.rt().list({ groupId: r.body.groups[0].group_id });
    expect(members.map((m) => m.trajectoryId)).toEqual(['0', '1', '2', '3']);
  });

  it('refuses a whole batch naming the index of an unknown data source, admitting nothing', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/batches`, { instances: [task(), { data_source: 'nope' }], n: 2 });
    expect(r.status).toBe(400);
    expect(r.body.error.issues[0].path).toBe('instances.1.data_source');
    expect(h.rt().list()).toEqual([]);
  });

  it('lists rollouts filtered by group and outcome', async () => {
    h = await startHarness();
    const b = await post(`${h.url}/v1/batches`, { instances: [task()], n: 2 });
    await post(`${h.url}/v1/rollouts`, { instance: evalFaultTask() });
    await h.until(() => h.rt().list().every((r) => r.result !== null) && h.rt().list().length === 3);
    const byGroup = await get(`${h.url}/v1/rollouts?group=${b.body.groups[0].group_id}`);
    expect(byGroup.body.total).toBe(2);
    const failed = await get(`${h.url}/v1/rollouts?outcome=infra-error`);
    expect(failed.body.rollouts.map((x: { outcome: string }) => x.outcome)).toEqual(['infra-error']);
  });

  it('refuses an unknown list filter with 400 naming it', async () => {
    h = await startHarness();
    const r = await get(`${h.url}/v1/rollouts?state=sleeping`);
    expect(r.status).toBe(400);
    expect(r.body.error.issues[0].path).toBe('state');
  });

  it('cancels a live rollout', async () => {
    h = await startHarness();
    await post(`${h.url}/v1/rollouts`, { instance: heldTask(), id: 'c1' });
    await h.until(() => h.rt().get('c1')?.state === 'acting');
    expect((await post(`${h.url}/v1/rollouts/c1/cancel`)).body).toEqual({ id: 'c1', cancelled: true });
    expect(h.rt().get('c1')?.state).toBe('cancelled');
    expect(h.sandboxes[0]!.live).toBe(0);
  });

  it('adds, lists, drains and removes backends', async () => {
    h = await startHarness({}, { backends: [] });
    const add = await post(`${h.url}/v1/backends`, { address: 'http://127.0.0.1:9100', id: 'b1', weight_version: 3 });
    expect(add).toMatchObject({ status: 201, body: { id: 'b1', weightVersion: 3 } });
    await post(`${h.url}/v1/backends`, { address: 'http://127.0.0.1:9101', id: 'b2' });
    expect((await get(`${h.url}/v1/backends`)).body.backends.map((b: { id: string }) => b.id)).toEqual(['b1', 'b2']);
    // The real pool retires a draining backend as soon as nothing is in flight on it.
    expect((await post(`${h.url}/v1/backends/b1/drain`)).status).toBe(200);
    expect((await get(`${h.url}/v1/backends`)).body.backends.map((b: { id: string }) => b.id)).toEqual(['b2']);
    const del = await fetch(`${h.url}/v1/backends/b2`, { method: 'DELETE' });
    expect(del.status).toBe(200);
    expect((await get(`${h.url}/v1/backends`)).body.backends).toEqual([]);
  });

  it('does not re-apply a deleted backend after a restart', async () => {
    h = await startHarness({}, { backends: [] });
    await post(`${h.url}/v1/backends`, { address: 'http://127.0.0.1:9100', id: 'b1' });
    await fetch(`${h.url}/v1/backends/b1`, { method: 'DELETE' });
    await post(`${h.url}/stop`);
    await post(`${h.url}/start`);
    expect(h.rt().listBackends()).toEqual([]);
  });

  it('mounts the visualizer hook under /visualizer, open without the token (static files; its data calls carry the token, #28 §5.8)', async () => {
    const hook = (req: { url?: string }, res: { writeHead(s: number): void; end(b: string): void }): boolean => {
      if (!req.url?.startsWith('/visualizer')) return false;
      res.writeHead(200);
      res.end('page');
      return true;
    };
    h = await startHarness({ token: 't' }, { visualizer: hook as never });
    expect(await get(`${h.url}/visualizer/`)).toMatchObject({ status: 200, body: 'page' });
    expect(await get(`${h.url}/visualizer/?token=t`)).toMatchObject({ status: 200, body: 'page' });
    expect((await get(`${h.url}/v1/rollouts`)).status).toBe(401);
  });

  it('answers /healthz with the runtime state', async () => {
    h = await startHarness();
    expect((await get(`${h.url}/healthz`)).body).toMatchObject({ status: 'ok', runtime: 'running' });
  });
});
