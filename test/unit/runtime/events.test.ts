import { afterEach, describe, expect, it } from 'vitest';
import { rig, task, retained, type Rig } from './helpers.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

describe('runtime events', () => {
  it('emits each rollout event with a gap-free rseq from 1 and a strictly increasing seq', async () => {
    r = rig({ runtime: { events: { retain: 10_000 } } });
    const hs = [r.rt.submit(task()), r.rt.submit(task())];
    await r.clock.advance(1);
    await Promise.all(hs.map((h) => h.result));
    const all = await retained(r.rt);
    const seqs = all.map((e) => e.seq as number);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    for (const h of hs) {
      const mine = all.filter((e) => e.rolloutId === h.id);
      expect(mine.map((e) => e.rseq)).toEqual(mine.map((_, i) => i + 1));
    }
  });

  it('orders one rollout as submitted, states, llm start/end, tool call/result, then one result', async () => {
    r = rig({ runtime: { events: { retain: 10_000 } } });
    const h = r.rt.submit(task({ oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi' } }] }] }), { max_iterations: 1 });
    await r.clock.advance(1);
    await h.result;
    const types = (await retained(r.rt, h.id)).map((e) => (e.type === 'rollout.state' ? `state:${e.state as string}` : e.type));
    expect(types).toEqual([
      'rollout.submitted',
      'state:queued',
      'state:initializing',
      'state:llmCalling',
      'llm.start',
      'llm.end',
      'state:acting',
      'tool.call',
      'tool.result',
      'state:evaluating',
      'state:done',
      'rollout.result',
    ]);
  });

  it('carries token counts on llm.end and the observation on tool.result', async () => {
    r = rig({ runtime: { events: { retain: 10_000 } } });
    const h = r.rt.submit(task({ oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi' } }] }] }), { max_iterations: 1 });
    await r.clock.advance(1);
    const res = await h.result;
    const evs = await retained(r.rt, h.id);
    const end = evs.find((e) => e.type === 'llm.end')!;
    expect(end.outputTokens).toBe(res.trajectory.turns[0]!.outputIds.length);
    expect(end.promptTokens).toBe(res.trajectory.turns[0]!.promptIds.length);
    expect(evs.find((e) => e.type === 'tool.result')!.output).toContain('hi');
  });

  it('resumes after a cursor with exactly the events that followed it', async () => {
    r = rig({ runtime: { events: { retain: 10_000 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    await h.result;
    const all = await retained(r.rt);
    const cursor = all[6]!.seq as number;
    const it = r.rt.events({ after: cursor })[Symbol.asyncIterator]();
    const tail = [];
    for (let i = 0; i < all.length - 7; i++) tail.push((await it.next()).value);
    await it.return?.();
    expect(tail).toEqual(all.slice(7));
  });

  it('reports a gap when the cursor is older than the retention', async () => {
    r = rig({ runtime: { events: { retain: 5 } } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    await h.result;
    const items = await retained(r.rt);
    expect(items[0]).toMatchObject({ type: 'gap', from: 1 });
    expect(items.slice(1)).toHaveLength(5);
    expect(items[0]!.to).toBe((items[1]!.seq as number) - 1);
  });

  it('gives a slow subscriber a gap instead of blocking the rollout or growing its buffer', async () => {
    r = rig();
    const it = r.rt.events({ bufferSize: 3 })[Symbol.asyncIterator]();
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    expect((await h.result).outcome).toBe('completed');
    const first = (await it.next()).value as { type: string; from: number; to: number };
    expect(first.type).toBe('gap');
    const rest = [(await it.next()).value, (await it.next()).value, (await it.next()).value] as { type: string; seq: number }[];
    // The three newest survive: evaluating, done, result.
    expect(rest.map((e) => e.type)).toEqual(['rollout.state', 'rollout.state', 'rollout.result']);
    expect(first.to + 1).toBe(rest[0]!.seq);
    await it.return?.();
  });

  it('filters by rollout id and by group id', async () => {
    r = rig({ runtime: { events: { retain: 10_000 } } });
    const g = r.rt.submitGroup(task(), {}, 2, { groupId: 'g1' });
    const other = r.rt.submit(task());
    await r.clock.advance(1);
    await Promise.all([g.results, other.result]);
    const ac = new AbortController();
    const it = r.rt.events({ after: 0, groupId: 'g1', signal: ac.signal })[Symbol.asyncIterator]();
    const ids = new Set<string>();
    for (;;) {
      const n = await Promise.race([it.next(), new Promise<null>((res) => setImmediate(() => res(null)))]);
      if (!n || n.done) break;
      ids.add((n.value as { rolloutId: string }).rolloutId);
    }
    ac.abort();
    expect([...ids].sort()).toEqual(g.rollouts.map((x) => x.id).sort());
    expect((await retained(r.rt, other.id)).every((e) => e.rolloutId === other.id)).toBe(true);
  });

  it('ends open event streams when the runtime closes', async () => {
    r = rig();
    const it = r.rt.events()[Symbol.asyncIterator]();
    const next = it.next();
    await r.rt.close();
    expect((await next).done).toBe(true);
  });
});
