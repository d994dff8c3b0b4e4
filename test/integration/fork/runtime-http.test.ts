import { afterEach, describe, expect, it } from 'vitest';
import { get, post, startHarness, type Harness } from '../../unit/server/harness.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

const bash = (command: string) => ({ tool_calls: [{ name: 'execute_bash', arguments: { command } }] });
const finish = { tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] };

describe('POST /v1/rollouts/{id}/fork', () => {
  it('answers 202 with the branch ids once the action in flight reaches the turn boundary, and the branches run as rollouts', async () => {
    h = await startHarness();
    await post(`${h.url}/v1/rollouts`, { id: 'p1', instance: { data_source: 'scripted', oracle: [bash('X=kept'), bash('sleep 5'), bash('echo $X'), finish] } });
    // Acting on turn 1 (the sleep, parked on the manual clock): the next boundary is 2.
    await h.until(() => h.rt().get('p1')?.state === 'acting' && h.rt().get('p1')?.turn === 2);
    const fork = post(`${h.url}/v1/rollouts/p1/fork`, { n: 2, atTurn: 2 });
    await h.clock.advance(5_000);
    const r = await fork;
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({ parent_id: 'p1', branch_turn: 2, lost: [] });
    expect(r.body.rollout_ids).toHaveLength(2);
    await h.until(() => h.rt().list().length === 3 && h.rt().list().every((s) => s.result !== null));
    for (const id of r.body.rollout_ids) {
      const b = (await get(`${h.url}/v1/rollouts/${id}`)).body;
      expect(b).toMatchObject({ outcome: 'completed', reward: 1, parent_id: 'p1', branch_turn: 2, turn: 4 });
      expect(b.result.trajectory.prefix).toMatchObject({ id: r.body.prefix_id, turns: 2 });
      expect(b.result.trajectory.turns).toHaveLength(2);
    }
    const p = await get(`${h.url}/v1/prefixes/${r.body.prefix_id}`);
    expect(p.status).toBe(200);
    expect(p.body.trajectory.turns).toHaveLength(2);
    const tree = (await get(`${h.url}/v1/groups/none/tree`)).status;
    expect(tree).toBe(404);
  });

  it('refuses an unknown id (404), a bad n (400 naming n), an ended rollout (409)', async () => {
    h = await startHarness();
    expect((await post(`${h.url}/v1/rollouts/nope/fork`, { n: 1 })).body.error.code).toBe('FORK_NOT_FOUND');
    expect((await post(`${h.url}/v1/rollouts/nope/fork`, { n: 1 })).status).toBe(404);
    const bad = await post(`${h.url}/v1/rollouts/nope/fork`, { n: 0 });
    expect([bad.status, bad.body.error.issues[0].path]).toEqual([400, 'n']);
    await post(`${h.url}/v1/rollouts`, { id: 'e1', instance: { data_source: 'scripted', oracle: [finish] } });
    await h.until(() => h.rt().get('e1')?.result != null);
    const ended = await post(`${h.url}/v1/rollouts/e1/fork`, { n: 1 });
    expect([ended.status, ended.body.error.code]).toEqual([409, 'FORK_ENDED']);
  });
});

describe('tree batches', () => {
  it('grows a batch tree and answers it on GET /v1/groups/{id}/tree with branch-point statistics', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/batches`, { instances: [{ data_source: 'scripted', oracle: [bash('true'), bash('true'), finish] }], n: 2, tree: { branch_turns: [1], width: 3 } });
    expect(r.status).toBe(202);
    const gid = r.body.groups[0].group_id;
    await h.until(() => h.rt().list({ groupId: gid }).length === 8 && h.rt().list({ groupId: gid }).every((s) => s.result !== null));
    const t = (await get(`${h.url}/v1/groups/${gid}/tree`)).body;
    expect(t.complete).toBe(true);
    expect(t.roots).toEqual(r.body.rollout_ids);
    expect(t.nodes).toHaveLength(8);
    expect(t.branch_points).toHaveLength(2);
    for (const bp of t.branch_points) expect(bp).toMatchObject({ turn: 1, rewards: [1, 1, 1], mean: 1, std: 0 });
  });

  it('refuses a tree too large to grow (400 naming tree.width) before admitting anything', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/batches`, { instances: [{ data_source: 'scripted' }], n: 1, tree: { branch_turns: [1, 2, 3, 4, 5, 6], width: 10 } });
    expect(r.status).toBe(400);
    expect(r.body.error.issues[0].path).toBe('tree.width');
    expect(h.rt().list()).toEqual([]);
  });
});
