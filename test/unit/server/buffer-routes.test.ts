import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { AgentHandler } from '../../../src/handlers/agent-handler.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createTestHandler, MemorySandboxProvider, TestCodec } from '../../../src/testing/index.js';
import { get, post } from './harness.js';

const threeTurns = [
  { content: 'write', tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi > a.txt' } }] },
  { content: 'read', tool_calls: [{ name: 'execute_bash', arguments: { command: 'cat a.txt' } }] },
  { tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] },
];
/** `rewards[i]`: member i's reward (the test handler's eval reads it). */
const prompt = (id: string, rewards?: number[]) => ({ data_source: 'scripted', instance_id: id, oracle: threeTurns, ...(rewards ? { rewards } : {}) });

let service: RolloutService | undefined;
let sandboxes: MemorySandboxProvider[] = [];
afterEach(async () => {
  await service?.close();
  service = undefined;
  expect(sandboxes.every((s) => s.live === 0)).toBe(true);
  sandboxes = [];
});

async function start(): Promise<string> {
  const base = createTestHandler();
  const handler: AgentHandler = {
    ...base,
    eval: async (ctx) => {
      const rewards = (ctx.instance as Record<string, unknown>).rewards as number[] | undefined;
      const reward = rewards?.[Number(ctx.instance.trajectory_id)] ?? 1;
      return { reward, resolved: reward > 0 };
    },
  };
  service = createService(
    {
      createRuntime: serviceRuntimeFactory({
        codec: new TestCodec(),
        sandboxes: () => {
          const p = new MemorySandboxProvider();
          sandboxes.push(p);
          return p;
        },
        handlers: [handler],
        runtime: { sandboxDriver: 'none' },
      }),
      backends: [{ address: 'oracle', weightVersion: 3 }],
    },
    { port: 0, backendsIntervalMs: 0 },
  );
  return service.listen();
}

async function del(url: string): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'DELETE' });
  return { status: res.status, body: await res.json() };
}

describe('/v1/buffers', () => {
  it('takes complete groups as they finish, drops all-equal groups under dynamic sampling and counts them in /metrics', async () => {
    const url = await start();
    const made = await post(`${url}/v1/buffers`, { groups: 2, n: 2, over_provision: 1, dynamic_sampling: true, instances: [prompt('same', [1, 1, 1]), prompt('mixed', [0, 1, 1])], end: true });
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ groups: 2, n: 2, over_provision: 1, dynamic_sampling: true, order: 'completion', started: 2 });
    const id = made.body.id as string;
    const took = await post(`${url}/v1/buffers/${id}/take`, { max: 4, wait_ms: 20_000 });
    expect(took.status).toBe(200);
    expect(took.body.groups).toHaveLength(1);
    const g = took.body.groups[0];
    expect(g).toMatchObject({ instance_id: 'mixed', complete: true, min_weight_version: 3 });
    expect(g.results).toHaveLength(2);
    expect(new Set(g.rewards).size).toBe(2);
    expect(g.results.every((x: any) => x.groupId === g.group_id && x.outcome === 'completed')).toBe(true);
    // Nothing more will come: an empty take, at once.
    const after = await post(`${url}/v1/buffers/${id}/take`, { wait_ms: 5_000 });
    expect(after.body.groups).toEqual([]);
    expect(after.body.buffer).toMatchObject({ dropped: 1, delivered: 1, done: true, in_flight: 0 });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/rollout_buffer_groups_total\{event="dropped"\} 1/);
    expect(metrics).toMatch(/rollout_buffer_groups_total\{event="delivered"\} 1/);
    expect(metrics).toMatch(/rollout_buffer_cancelled_members_total \d/);
  });

  it('streams groups as NDJSON as they complete, then a done line', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 1, n: 2, instances: [prompt('a'), prompt('b')] })).body.id as string;
    const res = await fetch(`${url}/v1/buffers/${id}/stream`);
    expect(res.headers.get('content-type')).toBe('application/x-ndjson');
    const add = await post(`${url}/v1/buffers/${id}/instances`, { instances: [prompt('c')], end: true });
    expect(add.status).toBe(200);
    const lines = (await res.text()).trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.type)).toEqual(['group', 'group', 'group', 'done']);
    expect(lines.slice(0, 3).map((l) => l.group.instance_id)).toEqual(['a', 'b', 'c']);
    expect(lines[3].buffer).toMatchObject({ delivered: 3, done: true });
  });

  it('streams groups over the WebSocket as they complete (a buffer subscription takes them), then a done item', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 2, n: 2, instances: [prompt('a'), prompt('b'), prompt('c')], end: true })).body.id as string;
    const ws = new WebSocket(`${url.replace('http', 'ws')}/v1/events`);
    const msgs: any[] = [];
    const done = new Promise<void>((resolve, reject) => {
      ws.on('message', (d) => {
        const m = JSON.parse(d.toString());
        msgs.push(m);
        if (m.type === 'buffer' && m.item.type === 'done') resolve();
        if (m.type === 'error') reject(new Error(JSON.stringify(m)));
      });
      ws.on('error', reject);
    });
    await new Promise((r) => ws.once('open', r));
    ws.send(JSON.stringify({ type: 'subscribe', sub: 'b', buffer: id }));
    await done;
    const items = msgs.filter((m) => m.type === 'buffer').map((m) => m.item);
    expect(items.map((i) => i.type)).toEqual(['group', 'group', 'group', 'done']);
    expect(new Set(items.slice(0, 3).map((i) => i.group.instance_id))).toEqual(new Set(['a', 'b', 'c']));
    expect(items[0].group.results).toHaveLength(2);
    expect(items[3].buffer).toMatchObject({ delivered: 3, done: true });
    ws.send(JSON.stringify({ type: 'subscribe', sub: 'x', buffer: 'nope' }));
    await new Promise<void>((r) => ws.on('message', (d) => JSON.parse(d.toString()).type === 'error' && r()));
    expect(JSON.stringify(msgs.at(-1))).toMatch(/"path":"buffer"/);
    ws.close();
  });

  it('deletes a buffer: its running rollouts are cancelled and no sandbox is left', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 4, n: 3, over_provision: 2, instances: Array.from({ length: 8 }, (_, i) => prompt(`p${i}`)) })).body.id as string;
    const d = await del(`${url}/v1/buffers/${id}`);
    expect(d.status).toBe(200);
    expect(d.body.in_flight).toBe(0);
    expect((await get(`${url}/v1/buffers/${id}`)).status).toBe(404);
    const live = (await get(`${url}/v1/rollouts?state=llmCalling`)).body;
    expect(live.total ?? live.rollouts.length).toBe(0);
  });

  it('answers bad input with a 4xx naming the field', async () => {
    const url = await start();
    const bad = async (body: unknown, path: RegExp) => {
      const r = await post(`${url}/v1/buffers`, body);
      expect(r.status).toBe(400);
      expect(JSON.stringify(r.body.error.issues)).toMatch(path);
    };
    await bad({ groups: 0, n: 2 }, /"path":"groups"/);
    await bad({ groups: 1, n: 1, dynamic_sampling: true }, /"path":"dynamic_sampling"/);
    await bad({ groups: 1, n: 2, order: 'random' }, /"path":"order"/);
    await bad({ groups: 1, n: 2, surprise: 1 }, /surprise/);
    await bad({ groups: 1, n: 2, instances: [prompt('a'), { data_source: 5, instance_id: 'x' }] }, /instances\.1/);
    await bad({ groups: 1, n: 2, instances: [prompt('a'), { data_source: 'nope', instance_id: 'x' }] }, /instances\.1\.data_source/);
    expect((await post(`${url}/v1/buffers/nope/take`, {})).status).toBe(404);
    const id = (await post(`${url}/v1/buffers`, { groups: 1, n: 2 })).body.id as string;
    const t = await post(`${url}/v1/buffers/${id}/take`, { max: 0 });
    expect(t.status).toBe(400);
    expect(JSON.stringify(t.body.error.issues)).toMatch(/"path":"max"/);
    const s = await post(`${url}/v1/buffers/${id}/groups/nope/stop`);
    expect(s.status).toBe(404);
    expect(s.body.error.issues[0].path).toBe('group');
    // An empty take with nothing queued and wait_ms 0 answers at once.
    expect((await post(`${url}/v1/buffers/${id}/take`, {})).body.groups).toEqual([]);
    await del(`${url}/v1/buffers/${id}`);
  });
});
