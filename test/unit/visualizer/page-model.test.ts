import { describe, expect, it } from 'vitest';
import { rolloutMachineGraph } from '../../../src/server/visualizer-assets.js';
import { syntheticRollout } from '../../e2e/visualizer/fixture-server.js';

// The page's pure modules are plain browser ES modules with no DOM at import time, so they run
// here too. They are JavaScript without declarations: these interfaces type what the tests use.
interface Rollout { id: string; state: string; turn: number; tokens: number; outcome: string | null; reward: number | null; endTs: number | null; events: unknown[]; droppedEvents: number }
interface StoreLike {
  lastSeq: number;
  rollouts: Map<string, Rollout>;
  stateCounts: Record<string, number>;
  apply(msg: unknown): Rollout | null;
  filter(f: { state?: string; outcome?: string; task?: string }): Rollout[];
}
type StoreCtor = new (opts?: { maxEventsPerRollout?: number }) => StoreLike;
interface Span { lane: string; label: string; start: number; end: number | null }
interface Step { command: string; output: string | null; exitCode: number | null }
interface Layout { nodes: Array<{ id: string; x: number; y: number; type: string }>; edges: Array<{ source: string; target: string; labels: string[] }>; global: Array<{ label: string; target: string }> }

const pageModule = async <T>(name: string): Promise<T> => (await import(/* @vite-ignore */ `../../../visualizer/${name}`)) as T;
const { Store } = await pageModule<{ Store: StoreCtor }>('store.js');
const { timelineSpans } = await pageModule<{ timelineSpans: (events: unknown[]) => Span[] }>('timeline.js');
const { bashSteps } = await pageModule<{ bashSteps: (events: unknown[]) => Step[] }>('terminal.js');
const { layoutGraph } = await pageModule<{ layoutGraph: (g: unknown) => Layout }>('graph.js');

const T0 = 1_800_000_000_000;
const stamp = (events: ReturnType<typeof syntheticRollout>, from = 1) => events.map((e, i) => ({ ...e, seq: from + i, rseq: i + 1 }));

describe('Store', () => {
  it('folds a rollout from its events into the table fields', () => {
    const store = new Store();
    for (const ev of stamp(syntheticRollout('r', T0, { turns: 2 }))) store.apply({ type: 'event', sub: 'viz', event: ev });
    expect(store.rollouts.get('r')).toMatchObject({ state: 'done', turn: 2, tokens: 240, outcome: 'completed', reward: 1 });
    expect(store.stateCounts['done']).toBe(1);
  });

  it('ignores events at or below the last seq, so a resume overlap is not applied twice', () => {
    const store = new Store();
    const events = stamp(syntheticRollout('r', T0));
    for (const ev of events) store.apply(ev);
    const count = store.rollouts.get('r')!.events.length;
    for (const ev of events.slice(-3)) store.apply({ type: 'event', event: ev });
    expect(store.rollouts.get('r')!.events.length).toBe(count);
    expect(store.lastSeq).toBe(events.length);
  });

  it('accepts events of an announced gap after later ones and refolds the rollout in seq order', () => {
    const store = new Store() as StoreLike & { expect(from: number, to: number): void };
    const events = stamp(syntheticRollout('r', T0, { turns: 2 }));
    const hole = events.slice(5, 12);
    for (const ev of events) if (!hole.includes(ev)) store.apply(ev);
    store.expect(hole[0]!.seq, hole.at(-1)!.seq);
    for (const ev of [...hole].reverse()) store.apply(ev);
    const r = store.rollouts.get('r')!;
    expect(r.events.map((e) => (e as { seq: number }).seq)).toEqual(events.map((e) => e.seq));
    expect(r).toMatchObject({ state: 'done', turn: 2, tokens: 240, outcome: 'completed' });
    // Once filled, the same seqs are duplicates again.
    expect(store.apply(hole[0])).toBeNull();
  });

  it('forgets everything when hello names a new epoch', () => {
    const store = new Store();
    store.apply({ type: 'hello', epoch: 1, seq: 0, heartbeat_ms: 1000 });
    for (const ev of stamp(syntheticRollout('r', T0))) store.apply(ev);
    store.apply({ type: 'hello', epoch: 2, seq: 0, heartbeat_ms: 1000 });
    expect([store.rollouts.size, store.lastSeq]).toEqual([0, 0]);
  });

  it('takes a rollout seeded from the listing over from its events once they arrive', () => {
    const store = new Store() as StoreLike & { seed(s: unknown): void };
    store.seed({ id: 'r', instance_id: 'i', data_source: 'swe-lite', state: 'done', turn: 2, tokens: 9, submitted_at: T0, outcome: 'completed', reward: 1 });
    expect(store.rollouts.get('r')).toMatchObject({ state: 'done', endTs: T0 });
    const events = stamp(syntheticRollout('r', T0 + 10, { finish: false }));
    for (const ev of events) store.apply(ev);
    expect(store.rollouts.get('r')).toMatchObject({ state: 'acting', endTs: null });
    expect(store.stateCounts['done']).toBe(0);
  });

  it('keeps at most maxEventsPerRollout events per rollout, dropping the oldest', () => {
    const store = new Store({ maxEventsPerRollout: 5 });
    for (const ev of stamp(syntheticRollout('r', T0, { turns: 3 }))) store.apply(ev);
    const r = store.rollouts.get('r')!;
    expect(r.events.length).toBe(5);
    expect(r.droppedEvents).toBeGreaterThan(0);
    expect(r.state).toBe('done');
  });

  it('filters by live / ended, outcome and task substring', () => {
    const store = new Store();
    let seq = 1;
    for (let i = 0; i < 6; i++) {
      const evs = stamp(syntheticRollout(`r${i}`, T0, { finish: i < 2, task: i % 2 ? 'math' : 'swe' }), seq);
      seq += evs.length;
      for (const ev of evs) store.apply(ev);
    }
    expect(store.filter({ state: 'live' }).map((r) => r.id)).toEqual(['r2', 'r3', 'r4', 'r5']);
    expect(store.filter({ state: 'ended', outcome: 'completed' }).length).toBe(2);
    expect(store.filter({ task: 'MATH' }).map((r) => r.id)).toEqual(['r1', 'r3', 'r5']);
  });
});

describe('timelineSpans', () => {
  it('pairs LLM and tool calls with their ends and leaves a running one open', () => {
    const spans = timelineSpans(syntheticRollout('r', T0, { turns: 1, finish: false }).concat([
      { type: 'tool.call', rolloutId: 'r', ts: T0 + 999, turn: 1, callId: 'late', name: 'execute_bash', arguments: { command: 'sleep 9' } },
    ]));
    const llm = spans.filter((s) => s.lane === 'llm');
    expect(llm).toHaveLength(1);
    expect(llm[0]!.end! - llm[0]!.start).toBe(40);
    expect(spans.filter((s) => s.lane === 'tool').map((s) => s.end === null)).toEqual([false, true]);
  });
});

describe('bashSteps', () => {
  it('turns execute_bash calls and results into command / output steps, skipping other tools', () => {
    const events = syntheticRollout('r', T0, { turns: 2, finish: false }).concat([
      { type: 'tool.call', rolloutId: 'r', ts: T0 + 999, turn: 2, callId: 'f', name: 'finish', arguments: { answer: '42' } },
    ]);
    expect(bashSteps(events)).toEqual([
      { callId: 'c0', command: 'echo step-0-of-r', output: 'step-0-of-r\n', exitCode: 0, error: false },
      { callId: 'c1', command: 'echo step-1-of-r', output: 'step-1-of-r\n', exitCode: 0, error: false },
    ]);
  });
});

describe('layoutGraph', () => {
  it('lays out the rollout machine with its leaves as nodes and root transitions as global', async () => {
    const layout = layoutGraph(await rolloutMachineGraph());
    const ids = layout.nodes.map((n) => n.id);
    expect(ids).toContain('running.llmCalling');
    expect(ids).not.toContain('running');
    expect(layout.global.map((g) => g.target).sort()).toEqual(['cancelled', 'failed', 'timedOut']);
    // A transition into the compound state lands on its initial leaf.
    expect(layout.edges.some((e) => e.source === 'waitingRun' && e.target === 'running.llmCalling')).toBe(true);
  });

  it('puts final states on a row below the flow', async () => {
    const { nodes } = layoutGraph(await rolloutMachineGraph());
    const lowestFlow = Math.max(...nodes.filter((n) => n.type !== 'final').map((n) => n.y));
    for (const n of nodes.filter((n) => n.type === 'final')) expect(n.y).toBeGreaterThan(lowestFlow);
  });
});
