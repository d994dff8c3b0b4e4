import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, type AgentHandler, type EmbeddedRuntime } from '../../../src/index.js';
import { ValidationError } from '../../../src/errors.js';
import type { BufferedGroup, BufferEvent } from '../../../src/runtime/rollout-buffer.js';
import { allRewardsEqual, pickNext } from '../../../src/runtime/buffer-policy.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';
import { threeTurns } from './helpers.js';

/**
 * Rewards and latencies per member, from the instance: `rewards[i]` is member i's reward and
 * `lat[i]` the latency of each of its LLM calls (3 calls per rollout).
 */
interface Rig {
  rt: EmbeddedRuntime;
  clock: ManualClock;
  sandboxes: MemorySandboxProvider;
  llm: ScriptedPolicy;
}

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  if (r) expect(r.sandboxes.live).toBe(0);
  r = undefined;
});

function rig(o: { run?: number; maxQueued?: number } = {}): Rig {
  const clock = new ManualClock();
  const codec = new TestCodec();
  const sandboxes = new MemorySandboxProvider({ clock });
  const member = (inst: Record<string, unknown>) => Number(inst.trajectory_id ?? 0);
  const llm = new ScriptedPolicy({
    codec,
    clock,
    weightVersion: 0,
    latencyMs: (req) => ((req.instance as Record<string, unknown>).lat as number[] | undefined)?.[member(req.instance)] ?? 10,
  });
  const base = createTestHandler();
  const handler: AgentHandler = {
    ...base,
    eval: async (ctx) => {
      const rewards = (ctx.instance as Record<string, unknown>).rewards as number[] | undefined;
      const reward = rewards?.[member(ctx.instance)] ?? 1;
      return { reward, resolved: reward > 0 };
    },
  };
  const rt = createRuntime({ handlers: [handler], clock, codec, llm, sandboxes, stages: { init: o.run ?? 256, run: o.run ?? 256 }, ...(o.maxQueued ? { maxQueued: o.maxQueued } : {}) });
  return (r = { rt, clock, sandboxes, llm });
}

const prompt = (id: string, extra: Record<string, unknown> = {}) => ({ data_source: 'scripted', instance_id: id, oracle: threeTurns, ...extra });

/** Resolves `p` while advancing the manual clock in steps. */
async function until<T>(clock: ManualClock, p: Promise<T>, step = 10, max = 100_000): Promise<T> {
  let done = false;
  let value: T;
  void p.then((v) => {
    done = true;
    value = v;
  });
  for (let t = 0; !done && t < max; t += step) await clock.advance(step);
  await Promise.resolve();
  if (!done) throw new Error('timed out on the manual clock');
  return value!;
}

describe('rollout buffer: groups in flight and consumption', () => {
  it('keeps at most B groups running or waiting to be taken, and starts the next prompt as one is taken', async () => {
    const { rt, clock, sandboxes } = rig();
    const buf = rt.buffer({ groups: 2, n: 3 });
    buf.add(['a', 'b', 'c', 'd', 'e'].map((id) => prompt(id)));
    buf.end();
    expect(buf.stats()).toMatchObject({ inFlight: 2, queuedPrompts: 3, started: 2 });
    await clock.advance(1_000);
    // Both groups are complete and untaken: they hold their places, nothing more starts.
    expect(buf.stats()).toMatchObject({ inFlight: 0, ready: 2, started: 2 });
    expect(sandboxes.created).toBe(6);
    const got: BufferedGroup[] = [];
    for (;;) {
      const g = await until(clock, buf.next());
      if (!g) break;
      expect(buf.stats().inFlight + buf.stats().ready).toBeLessThanOrEqual(2);
      got.push(g);
    }
    expect(got.map((g) => g.instanceId)).toEqual(['a', 'b', 'c', 'd', 'e']);
    for (const g of got) {
      expect(g.results).toHaveLength(3);
      expect(g.complete).toBe(true);
      expect(g.results.map((x) => x.trajectoryId)).toEqual(['0', '1', '2']);
      expect(new Set(g.results.map((x) => x.groupId))).toEqual(new Set([g.groupId]));
    }
    expect(buf.stats()).toMatchObject({ started: 5, delivered: 5, done: true });
    expect(await buf.next()).toBeNull();
  });

  async function ordered(order: 'completion' | 'oldest-version'): Promise<(string | null)[]> {
    const { rt, clock, llm } = rig();
    const buf = rt.buffer({ groups: 4, n: 2, order });
    // a: slow, sampled at version 0. b and c start after the update, at version 1, and finish first.
    buf.add([prompt('a', { lat: [100, 100] })]);
    await clock.advance(150); // a's turn 0 was answered at 100, at version 0; its later turns at 1
    llm.setWeightVersion(1);
    buf.add([prompt('b', { lat: [10, 10] }), prompt('c', { lat: [20, 20] })]);
    buf.end();
    await clock.advance(1_000);
    expect(buf.stats().ready).toBe(3);
    const out: BufferedGroup[] = [];
    for (let g = await buf.next(); g; g = await buf.next()) out.push(g);
    expect(out.find((g) => g.instanceId === 'a')!.minWeightVersion).toBe(0);
    expect(out.find((g) => g.instanceId === 'b')!.minWeightVersion).toBe(1);
    return out.map((g) => g.instanceId);
  }

  it('hands out complete groups in completion order', async () => {
    expect(await ordered('completion')).toEqual(['b', 'c', 'a']);
  });

  it('hands out the group sampled at the oldest weight version first when asked', async () => {
    expect(await ordered('oldest-version')).toEqual(['a', 'b', 'c']);
  });

  it('picks the oldest version first, unknown versions last, ties in completion order (table)', () => {
    const gs = [
      { seq: 1, minWeightVersion: 3 },
      { seq: 2, minWeightVersion: null },
      { seq: 3, minWeightVersion: 1 },
      { seq: 4, minWeightVersion: 1 },
    ];
    expect(pickNext(gs, 'oldest-version')!.seq).toBe(3);
    expect(pickNext(gs, 'completion')!.seq).toBe(1);
    expect(pickNext([gs[1]!, gs[0]!], 'oldest-version')!.seq).toBe(1);
    expect(pickNext([], 'completion')).toBeUndefined();
  });

  it('streams each group to listeners the moment it completes', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 2, n: 2 });
    const seen: BufferEvent[] = [];
    buf.onEvent((e) => seen.push(e));
    buf.add([prompt('a', { lat: [10, 10] }), prompt('b', { lat: [300, 300] })]);
    await clock.advance(100);
    expect(seen.map((e) => e.type === 'group.ready' && e.group.instanceId)).toEqual(['a']);
    await clock.advance(2_000);
    expect(seen).toHaveLength(2);
  });
});

describe('rollout buffer: over-provisioning and early stop', () => {
  it('starts n + k members, keeps exactly the first n to finish, and has closed the others\' sandboxes when the group is handed out', async () => {
    const { rt, clock, sandboxes } = rig();
    const buf = rt.buffer({ groups: 1, n: 2, overProvision: 2 });
    buf.add([prompt('a', { lat: [50, 10, 30, 500] })]);
    await clock.advance(1);
    expect(sandboxes.created).toBe(4);
    const g = (await until(clock, buf.next()))!;
    expect(g.results.map((x) => x.trajectoryId)).toEqual(['1', '2']);
    expect(g.results.every((x) => x.outcome === 'completed')).toBe(true);
    expect(g).toMatchObject({ complete: true, cancelled: 2 });
    expect(sandboxes.live).toBe(0);
    expect(rt.list({ groupId: g.groupId, outcome: 'cancelled' })).toHaveLength(2);
    expect(buf.stats().cancelledMembers).toBe(2);
  });

  it('stops a group early: the members still running are cancelled and the group comes out with what finished', async () => {
    const { rt, clock, sandboxes } = rig();
    const buf = rt.buffer({ groups: 1, n: 3 });
    buf.add([prompt('a', { lat: [10, 500, 500] })]);
    await clock.advance(100);
    const [id] = rt.list({ state: 'llmCalling' }).map((s) => s.groupId);
    expect(await buf.stopGroup(id!)).toBe(true);
    expect(await buf.stopGroup(id!)).toBe(false);
    const g = (await buf.next())!;
    expect(g).toMatchObject({ stopped: true, complete: false, cancelled: 2 });
    expect(g.results.map((x) => x.trajectoryId)).toEqual(['0']);
    expect(sandboxes.live).toBe(0);
    expect(buf.stats().stopped).toBe(1);
  });

  it('closing the buffer cancels every running member and leaves no sandbox', async () => {
    const { rt, clock, sandboxes } = rig();
    const buf = rt.buffer({ groups: 3, n: 2, overProvision: 1 });
    buf.add([prompt('a'), prompt('b'), prompt('c'), prompt('d')]);
    await clock.advance(15);
    const waiting = buf.next();
    await buf.close();
    expect(await waiting).toBeNull();
    expect(sandboxes.live).toBe(0);
    expect(rt.status().live).toBe(0);
  });
});

describe('rollout buffer: dynamic sampling (DAPO)', () => {
  it('drops a group whose rewards are all equal, counts it, and starts the next prompt at once', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 1, n: 2, dynamicSampling: true });
    const events: string[] = [];
    buf.onEvent((e) => e.type === 'group.dropped' && events.push(`${e.type}:${e.instanceId}`));
    buf.add([prompt('same', { rewards: [1, 1], lat: [10, 10] }), prompt('mixed', { rewards: [0, 1], lat: [10, 10] })]);
    buf.end();
    expect(buf.stats().started).toBe(1);
    await clock.advance(40);
    // The drop made room: the replacement is already running.
    expect(events).toEqual(['group.dropped:same']);
    expect(buf.stats()).toMatchObject({ dropped: 1, started: 2, inFlight: 1 });
    const g = (await until(clock, buf.next()))!;
    expect(g.instanceId).toBe('mixed');
    expect(g.rewards).toEqual([0, 1]);
    expect(await buf.next()).toBeNull();
  });

  it('never returns an all-equal group, drops exactly those, and leaves no sandbox (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          n: fc.integer({ min: 2, max: 4 }),
          k: fc.integer({ min: 0, max: 2 }),
          B: fc.integer({ min: 1, max: 3 }),
          order: fc.constantFrom('completion' as const, 'oldest-version' as const),
          prompts: fc.array(fc.array(fc.record({ reward: fc.constantFrom(0, 1, 0.5), lat: fc.integer({ min: 1, max: 80 }) }), { minLength: 6, maxLength: 6 }), { minLength: 1, maxLength: 8 }),
        }),
        async ({ n, k, B, order, prompts }) => {
          const { rt, clock, sandboxes } = rig();
          const buf = rt.buffer({ groups: B, n, overProvision: k, order, dynamicSampling: true });
          buf.add(prompts.map((p, i) => prompt(`p${i}`, { rewards: p.map((x) => x.reward), lat: p.map((x) => x.lat) })));
          buf.end();
          const got: BufferedGroup[] = [];
          for (;;) {
            const g = await until(clock, buf.next(), 5);
            if (!g) break;
            expect(sandboxes.live).toBeLessThanOrEqual(B * (n + k));
            got.push(g);
          }
          for (const g of got) {
            expect(allRewardsEqual(g.rewards)).toBe(false);
            expect(g.results).toHaveLength(n);
          }
          const s = buf.stats();
          expect(s.delivered + s.dropped).toBe(prompts.length);
          // A prompt whose every member has one reward can only be dropped.
          for (const [i, p] of prompts.entries()) {
            if (allRewardsEqual(p.slice(0, n + k).map((x) => x.reward))) expect(got.some((g) => g.instanceId === `p${i}`)).toBe(false);
          }
          expect(sandboxes.live).toBe(0);
          await rt.close();
          r = undefined;
        },
      ),
      { numRuns: 30, seed: 1313 },
    );
  });
});

describe('rollout buffer: staleness at consumption (maxStaleness)', () => {
  it('drops a complete group staler than the bound when it would be handed out, counts it and starts the next prompt', async () => {
    const { rt, clock, llm } = rig();
    rt.setTrainerVersion(0);
    const buf = rt.buffer({ groups: 1, n: 2, maxStaleness: 1 });
    const seen: string[] = [];
    buf.onEvent((e) => e.type === 'group.dropped' && seen.push(`${e.instanceId}:${e.reason}`));
    buf.add([prompt('old'), prompt('fresh')]);
    buf.end();
    await clock.advance(500);
    expect(buf.stats()).toMatchObject({ ready: 1, started: 1 });
    // The trainer moves 2 versions on while the group waits untaken.
    llm.setWeightVersion(2);
    rt.setTrainerVersion(2);
    const g = (await until(clock, buf.next()))!;
    expect(g.instanceId).toBe('fresh');
    expect(g.minWeightVersion).toBe(2);
    expect(seen).toEqual(['old:stale']);
    expect(buf.stats()).toMatchObject({ stale: 1, delivered: 1 });
  });

  it('take(max) stops at the groups still ready when the rest of them are too stale, without waiting', async () => {
    const { rt, clock, llm } = rig();
    rt.setTrainerVersion(0);
    const buf = rt.buffer({ groups: 2, n: 1, maxStaleness: 1 });
    buf.add([prompt('old', { lat: [100] })]);
    await clock.advance(250); // old's first two turns at version 0, its last after the update
    llm.setWeightVersion(2);
    rt.setTrainerVersion(2);
    buf.add([prompt('fresh', { lat: [5] })]);
    buf.end();
    await clock.advance(1_000);
    expect(buf.stats().ready).toBe(2);
    const got = await buf.take(2);
    expect(got.map((g) => g.instanceId)).toEqual(['fresh']);
    expect(buf.stats()).toMatchObject({ stale: 1, delivered: 1, done: true });
  });
});

describe('rollout buffer: leases (at-least-once delivery)', () => {
  it('keeps a leased group in B until it is acked; the ack delivers it and starts the next prompt', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 1, n: 2 });
    buf.add([prompt('a'), prompt('b')]);
    buf.end();
    await clock.advance(500);
    const [la] = await buf.lease(4);
    expect(la!.group).toMatchObject({ instanceId: 'a', deliveries: 1 });
    expect(buf.stats()).toMatchObject({ ready: 0, leased: 1, delivered: 0, started: 1, done: false });
    expect(buf.ack([la!.leaseId, 'lease-nope'])).toEqual({ done: [la!.leaseId], unknown: ['lease-nope'] });
    expect(buf.stats()).toMatchObject({ leased: 0, delivered: 1, started: 2 });
    expect(buf.ack([la!.leaseId])).toEqual({ done: [], unknown: [la!.leaseId] });
    const [lb] = await until(clock, buf.lease(1));
    const waiting = buf.next();
    buf.ack([lb!.leaseId]);
    // The last ack leaves the ended buffer done: the waiting next() answers null.
    expect(await waiting).toBeNull();
    expect(buf.stats()).toMatchObject({ delivered: 2, returned: 0, done: true });
  });

  it('puts released groups back in line in completion order, handed out again with deliveries 2 under new lease ids', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 3, n: 2 });
    const returned: string[] = [];
    buf.onEvent((e) => e.type === 'group.returned' && returned.push(`${e.groupId}:${e.reason}`));
    buf.add([prompt('a', { lat: [10, 10] }), prompt('b', { lat: [20, 20] })]);
    await clock.advance(500);
    const first = await buf.lease(2);
    expect(first.map((l) => l.group.instanceId)).toEqual(['a', 'b']);
    expect(buf.release([first[1]!.leaseId, first[0]!.leaseId, 'lease-nope'])).toEqual({ done: [first[1]!.leaseId, first[0]!.leaseId], unknown: ['lease-nope'] });
    expect(buf.stats()).toMatchObject({ ready: 2, leased: 0, returned: 2, delivered: 0 });
    expect(returned).toEqual([`${first[1]!.group.groupId}:released`, `${first[0]!.group.groupId}:released`]);
    const again = await buf.lease(2);
    expect(again.map((l) => [l.group.instanceId, l.group.deliveries])).toEqual([['a', 2], ['b', 2]]);
    expect(again.map((l) => l.leaseId)).not.toContain(first[0]!.leaseId);
    // What the first holder was handed is its own: the redelivery did not change it.
    expect(first[0]!.group.deliveries).toBe(1);
    expect(again[0]!.group.results).toEqual(first[0]!.group.results);
    expect(buf.ack([first[0]!.leaseId]).unknown).toEqual([first[0]!.leaseId]);
  });

  it('returns a group whose lease runs out unacked, and a waiting next() gets it', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 1, n: 2 });
    const returned: string[] = [];
    buf.onEvent((e) => e.type === 'group.returned' && returned.push(e.reason));
    buf.add([prompt('a')]);
    buf.end();
    await clock.advance(500);
    const [l] = await buf.lease(1, { leaseMs: 1_000 });
    const waiting = buf.next();
    await clock.advance(999);
    expect(buf.stats()).toMatchObject({ leased: 1, ready: 0 });
    await clock.advance(1);
    const g = (await waiting)!;
    expect(g).toMatchObject({ instanceId: 'a', deliveries: 2 });
    expect(returned).toEqual(['expired']);
    expect(buf.ack([l!.leaseId])).toEqual({ done: [], unknown: [l!.leaseId] });
    expect(buf.stats()).toMatchObject({ delivered: 1, returned: 1, leased: 0, done: true });
  });

  it('expires leases of different times each at its own time, and one acked in between never', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 3, n: 2 });
    const returned: string[] = [];
    buf.onEvent((e) => e.type === 'group.returned' && returned.push(e.leaseId));
    buf.add([prompt('a', { lat: [10, 10] }), prompt('b', { lat: [20, 20] }), prompt('c', { lat: [30, 30] })]);
    await clock.advance(500);
    const [la] = await buf.lease(1, { leaseMs: 1_000 });
    const [lb] = await buf.lease(1, { leaseMs: 300 });
    const [lc] = await buf.lease(1, { leaseMs: 600 });
    await clock.advance(300);
    expect(returned).toEqual([lb!.leaseId]);
    buf.ack([lc!.leaseId]);
    await clock.advance(700);
    expect(returned).toEqual([lb!.leaseId, la!.leaseId]);
    expect(buf.stats()).toMatchObject({ leased: 0, ready: 2, returned: 2, delivered: 1 });
  });

  it('checks staleness again when a returned group is handed out anew', async () => {
    const { rt, clock, llm } = rig();
    rt.setTrainerVersion(0);
    const buf = rt.buffer({ groups: 1, n: 2, maxStaleness: 1 });
    buf.add([prompt('old')]);
    await clock.advance(500);
    const [l] = await buf.lease(1);
    llm.setWeightVersion(2);
    rt.setTrainerVersion(2);
    buf.release([l!.leaseId]);
    expect(await buf.lease(1, { signal: AbortSignal.abort() }).catch((e: Error) => e.name)).toBe('CancelledError');
    expect(buf.stats()).toMatchObject({ stale: 1, ready: 0, delivered: 0 });
  });

  it('refuses a lease time that is not a positive whole number of ms, naming leaseMs; close ends the leases', async () => {
    const { rt, clock } = rig();
    const buf = rt.buffer({ groups: 1, n: 2 });
    await expect(buf.lease(1, { leaseMs: 0 })).rejects.toThrow(/leaseMs/);
    await expect(buf.lease(1, { leaseMs: 1.5 })).rejects.toBeInstanceOf(ValidationError);
    buf.add([prompt('a')]);
    await clock.advance(500);
    const [l] = await buf.lease(1, { leaseMs: 100 });
    await buf.close();
    expect(buf.stats().leased).toBe(0);
    await clock.advance(200);
    expect(buf.stats()).toMatchObject({ ready: 0, returned: 0 });
    expect(buf.release([l!.leaseId]).unknown).toEqual([l!.leaseId]);
  });
});

describe('rollout buffer: bad input', () => {
  it('refuses bad options naming the field', () => {
    const { rt } = rig();
    expect(() => rt.buffer({ groups: 0, n: 2 })).toThrow(/buffer\.groups/);
    expect(() => rt.buffer({ groups: 1, n: 1, dynamicSampling: true })).toThrow(/buffer\.dynamicSampling: dynamic sampling needs/);
    expect(() => rt.buffer({ groups: 1, n: 2, order: 'random' as never })).toThrow(ValidationError);
  });

  it('refuses a batch of prompts with a bad one, naming its index, and adds none of them', () => {
    const { rt } = rig();
    const buf = rt.buffer({ groups: 1, n: 2 });
    expect(() => buf.add([prompt('a'), { instance_id: 'x', data_source: 5 }])).toThrow(/instances\.1/);
    expect(buf.stats()).toMatchObject({ started: 0, queuedPrompts: 0 });
    buf.end();
    expect(() => buf.add([prompt('b')])).toThrow(/after end/);
  });

  it('rejects next() with the runtime\'s refusal when a group cannot start and none runs, and withdraws the part admitted', async () => {
    const { rt, sandboxes, clock } = rig({ maxQueued: 2, run: 1 });
    const buf = rt.buffer({ groups: 1, n: 4 });
    buf.add([prompt('a')]);
    await expect(buf.next()).rejects.toMatchObject({ code: 'QUEUE_FULL' });
    await clock.advance(100);
    expect(rt.status().live).toBe(0);
    expect(sandboxes.live).toBe(0);
  });
});
