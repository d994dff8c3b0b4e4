import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
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

/** A WebSocket client on /v1/events: `next(pred)` resolves with the first message (seen or to come) that matches and was not returned before. */
async function wsClient(url: string): Promise<{ ws: WebSocket; send(m: unknown): void; next(pred: (m: any) => boolean): Promise<any> }> {
  const ws = new WebSocket(`${url.replace('http', 'ws')}/v1/events`);
  const msgs: any[] = [];
  const used = new Set<any>();
  let wake: () => void = () => undefined;
  ws.on('message', (d) => {
    msgs.push(JSON.parse(d.toString()));
    wake();
  });
  await new Promise((r, j) => ws.once('open', r).once('error', j));
  return {
    ws,
    send: (m) => ws.send(JSON.stringify(m)),
    // Woken by each message, not by a timer; the test's own timeout bounds a message that never comes.
    async next(pred) {
      for (;;) {
        const m = msgs.find((x) => !used.has(x) && pred(x));
        if (m) {
          used.add(m);
          return m;
        }
        await new Promise<void>((r) => (wake = r));
      }
    },
  };
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

  it('leases groups with lease_ms: held until acked, back in line when released or expired, redelivered with deliveries 2', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 2, n: 2, instances: [prompt('a'), prompt('b')], end: true })).body.id as string;
    const first = (await post(`${url}/v1/buffers/${id}/take`, { max: 2, wait_ms: 20_000, lease_ms: 60_000 })).body;
    // The two complete in either order; wait for both.
    const more = first.groups.length < 2 ? (await post(`${url}/v1/buffers/${id}/take`, { max: 1, wait_ms: 20_000, lease_ms: 60_000 })).body.groups : [];
    const leased = [...first.groups, ...more];
    expect(leased).toHaveLength(2);
    for (const g of leased) expect(g).toMatchObject({ lease_id: expect.stringMatching(/^lease-/), deliveries: 1 });
    const [ga, gb] = [leased.find((g) => g.instance_id === 'a'), leased.find((g) => g.instance_id === 'b')];
    expect((await get(`${url}/v1/buffers/${id}`)).body).toMatchObject({ leased: 2, ready: 0, delivered: 0, done: false });
    const acked = await post(`${url}/v1/buffers/${id}/ack`, { leases: [ga.lease_id, 'lease-nope'] });
    expect(acked.status).toBe(200);
    expect(acked.body).toMatchObject({ acked: [ga.lease_id], unknown: ['lease-nope'], buffer: { leased: 1, delivered: 1 } });
    const released = await post(`${url}/v1/buffers/${id}/release`, { leases: [gb.lease_id] });
    expect(released.body).toMatchObject({ released: [gb.lease_id], unknown: [], buffer: { leased: 0, ready: 1, returned: 1 } });
    // b again, on a lease that runs out.
    const again = (await post(`${url}/v1/buffers/${id}/take`, { lease_ms: 50 })).body.groups;
    expect(again).toMatchObject([{ instance_id: 'b', deliveries: 2 }]);
    expect(again[0].lease_id).not.toBe(gb.lease_id);
    expect(again[0].results).toEqual(gb.results);
    const third = (await post(`${url}/v1/buffers/${id}/take`, { wait_ms: 20_000 })).body.groups;
    expect(third).toMatchObject([{ instance_id: 'b', deliveries: 3 }]);
    expect((await post(`${url}/v1/buffers/${id}/ack`, { leases: [again[0].lease_id] })).body.unknown).toEqual([again[0].lease_id]);
    expect((await get(`${url}/v1/buffers/${id}`)).body).toMatchObject({ leased: 0, delivered: 2, returned: 2, done: true });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/rollout_buffer_groups_total\{event="delivered"\} 2/);
    expect(metrics).toMatch(/rollout_buffer_groups_total\{event="returned"\} 2/);
  });

  it('answers bad lease input with a 4xx naming the field', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 1, n: 2 })).body.id as string;
    const bad = async (path: string, body: unknown, field: RegExp) => {
      const r = await post(`${url}/v1/buffers/${id}/${path}`, body);
      expect(r.status).toBe(400);
      expect(JSON.stringify(r.body.error.issues)).toMatch(field);
    };
    await bad('take', { lease_ms: 0 }, /"path":"lease_ms"/);
    await bad('take', { lease_ms: 'soon' }, /"path":"lease_ms"/);
    await bad('ack', { leases: [] }, /"path":"leases"/);
    await bad('ack', { leases: 'lease-1' }, /"path":"leases"/);
    await bad('release', {}, /"path":"leases"/);
    await bad('release', { leases: [''] }, /"path":"leases\.0"/);
    expect((await post(`${url}/v1/buffers/nope/ack`, { leases: ['x'] })).status).toBe(404);
    await del(`${url}/v1/buffers/${id}`);
  });

  it('gives a manual-ack WebSocket subscription\'s unacked group back when its socket closes; the next subscriber gets it and acks it', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 1, n: 2, instances: [prompt('a')], end: true })).body.id as string;
    const one = await wsClient(url);
    one.send({ type: 'subscribe', sub: 'b', buffer: id, ack: 'manual' });
    const g1 = (await one.next((m) => m.type === 'buffer')).item.group;
    expect(g1).toMatchObject({ instance_id: 'a', deliveries: 1, lease_id: expect.stringMatching(/^lease-/) });
    expect((await get(`${url}/v1/buffers/${id}`)).body).toMatchObject({ leased: 1, delivered: 0 });
    // Another connection cannot ack it: the lease is the subscription's.
    const two = await wsClient(url);
    two.send({ type: 'subscribe', sub: 'b', buffer: id, ack: 'manual' });
    await two.next((m) => m.type === 'subscribed');
    two.send({ type: 'ack', sub: 'b', leases: [g1.lease_id] });
    expect(await two.next((m) => m.type === 'acked')).toMatchObject({ acked: [], unknown: [g1.lease_id] });
    one.ws.close();
    const g2 = (await two.next((m) => m.type === 'buffer')).item.group;
    expect(g2).toMatchObject({ group_id: g1.group_id, deliveries: 2 });
    expect(g2.results).toEqual(g1.results);
    two.send({ type: 'ack', sub: 'b', leases: [g2.lease_id] });
    expect(await two.next((m) => m.type === 'acked')).toMatchObject({ acked: [g2.lease_id], unknown: [] });
    expect((await two.next((m) => m.type === 'buffer' && m.item.type === 'done')).item.buffer).toMatchObject({ delivered: 1, returned: 1, leased: 0, done: true });
    two.send({ type: 'ack', sub: 'nope', leases: ['x'] });
    expect(JSON.stringify(await two.next((m) => m.type === 'error'))).toMatch(/"path":"sub"/);
    two.send({ type: 'subscribe', sub: 'e', ack: 'manual' });
    expect(JSON.stringify(await two.next((m) => m.type === 'error' && JSON.stringify(m).includes('ack')))).toMatch(/"path":"ack"/);
    two.ws.close();
  });

  it('gives a group back when the socket fails to take its frame (auto acks), instead of losing it', async () => {
    const url = await start();
    const id = (await post(`${url}/v1/buffers`, { groups: 1, n: 2, instances: [prompt('a')], end: true })).body.id as string;
    await post(`${url}/v1/buffers/${id}/take`, { wait_ms: 20_000, lease_ms: 60_000 }).then((r) => post(`${url}/v1/buffers/${id}/release`, { leases: [r.body.groups[0].lease_id] }));
    const c = await wsClient(url);
    // The server's side of this socket fails every write of a group, as a connection dropped mid-send does.
    const serverSide = [...(service as any).hub.conns][0].ws;
    const send = serverSide.send.bind(serverSide);
    serverSide.send = (text: string, cb?: (err?: Error) => void) => (text.startsWith('{"type":"buffer"') ? setImmediate(() => cb?.(new Error('EPIPE'))) : send(text, cb));
    c.send({ type: 'subscribe', sub: 'b', buffer: id });
    await c.next((m) => m.type === 'subscribed');
    // The failed write ends the subscription: the group is back in line, taken by nobody.
    await expect.poll(async () => (await get(`${url}/v1/buffers/${id}`)).body.returned, { timeout: 20_000 }).toBe(2);
    expect((await get(`${url}/v1/buffers/${id}`)).body).toMatchObject({ ready: 1, leased: 0, delivered: 0 });
    c.ws.close();
    const g = (await post(`${url}/v1/buffers/${id}/take`, { wait_ms: 20_000 })).body.groups;
    expect(g).toMatchObject([{ instance_id: 'a', deliveries: 3 }]);
    expect((await get(`${url}/v1/buffers/${id}`)).body).toMatchObject({ delivered: 1, done: true });
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
