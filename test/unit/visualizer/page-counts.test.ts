import { describe, expect, it } from 'vitest';
import { syntheticRollout } from '../../e2e/visualizer/fixture-server.js';

// The page model's counts (#30 §3): every figure on one screen comes from the rollout records,
// so they agree however rollouts arrive (events, the listing, retries) and whatever is forgotten.

interface Rollout { id: string; state: string; outcome: string | null; endTs: number | null; submittedTs: number; elapsedKnown: boolean; violations: Record<string, number> | null }
interface StoreLike {
  rollouts: Map<string, Rollout>;
  stateCounts: Record<string, number>;
  outcomeCounts: Record<string, number>;
  endedCount: number;
  flaggedCount: number;
  evicted: number;
  gaps: number;
  lostEvents: number;
  windowFrom: number;
  rewards: { completedZero: number; setFamilies(a: Record<string, string>): void; histogram(): { sources: Array<{ name: string; n: number; mean: number }> } };
  apply(msg: unknown): Rollout | null;
  seed(summary: unknown): void;
  filter(f: { state?: string; flagged?: boolean }): Rollout[];
}
type StoreCtor = new (opts?: { maxRollouts?: number }) => StoreLike;

const pageModule = async <T>(name: string): Promise<T> => (await import(/* @vite-ignore */ `../../../visualizer/${name}`)) as T;
const { Store } = await pageModule<{ Store: StoreCtor }>('store.js');
const T0 = 1_800_000_000_000;
let seq = 0;
const feed = (store: StoreLike, events: ReturnType<typeof syntheticRollout>) => {
  for (const e of events) store.apply({ type: 'event', sub: 'viz', event: { ...e, seq: ++seq, rseq: 1 } });
};
const sum = (r: Record<string, number>) => Object.values(r).reduce((a, n) => a + n, 0);
const finalStates = (s: StoreLike) => ['done', 'failed', 'timedOut', 'cancelled'].reduce((a, k) => a + (s.stateCounts[k] ?? 0), 0);

describe('Store counts', () => {
  it('keeps outcome counts, ended and final states equal as rollouts end, are seeded and are forgotten', () => {
    const store = new Store({ maxRollouts: 10 });
    for (let i = 0; i < 25; i++) {
      if (i % 5 === 0) store.seed({ id: `s-${i}`, data_source: 'math', state: 'done', submitted_at: T0 + i, outcome: 'completed', reward: 0, wall_ms: 50 });
      else feed(store, syntheticRollout(`r-${i}`, T0 + i * 100, { reward: i % 2, task: 'math' }));
      expect(store.endedCount).toBe(sum(store.outcomeCounts));
      expect(store.endedCount).toBe(finalStates(store));
      expect(store.filter({ state: 'ended' })).toHaveLength(store.endedCount);
    }
    expect(store.rollouts.size).toBe(10);
    expect(store.evicted).toBe(15);
    expect(store.endedCount).toBe(10);
    // The reward figures cover the same rollouts as the table.
    expect(store.rewards.histogram().sources.reduce((a, s) => a + s.n, 0)).toBe(10);
    const zero = [...store.rollouts.values()].filter((r) => r.outcome === 'completed' && (r as unknown as { reward: number }).reward === 0).length;
    expect(store.rewards.completedZero).toBe(zero);
  });

  it('puts a retried rollout back to live, and times it from its first submission', () => {
    const store = new Store();
    const id = 'r';
    const err = { name: 'InfraError', code: 'X', message: 'x', retryable: true };
    feed(store, [
      { type: 'rollout.submitted', rolloutId: id, ts: T0, instanceId: 'i', trajectoryId: '0', groupId: null, dataSource: 'math', attempt: 1 },
      { type: 'rollout.state', rolloutId: id, ts: T0 + 1000, state: 'failed', prev: 'initializing', turn: 0 },
    ]);
    expect(store.rollouts.get(id)!.endTs).toBe(T0 + 1000);
    feed(store, [
      { type: 'rollout.retry', rolloutId: id, ts: T0 + 1000, attempt: 2, delayMs: 500, error: err },
      { type: 'rollout.submitted', rolloutId: id, ts: T0 + 1500, instanceId: 'i', trajectoryId: '0', groupId: null, dataSource: 'math', attempt: 2 },
    ]);
    const r = store.rollouts.get(id)!;
    expect([r.state, r.endTs, r.submittedTs]).toEqual(['queued', null, T0]);
    expect(store.filter({ state: 'live' })).toHaveLength(1);
  });

  it('reads a retention gap on the first subscription as the window, and one after a resume as a loss', () => {
    const store = new Store();
    store.apply({ type: 'gap', sub: 'viz-1', from: 1, to: 99, reason: 'retention' });
    expect([store.gaps, store.windowFrom]).toEqual([0, 100]);
    feed(store, syntheticRollout('a', T0));
    store.apply({ type: 'gap', sub: 'viz-2', from: seq + 1, to: seq + 50, reason: 'retention' });
    expect([store.gaps, store.lostEvents]).toEqual([1, 50]);
    // A slow-client gap is replayed by the page: not a loss.
    store.apply({ type: 'gap', sub: 'viz-2', from: seq + 51, to: seq + 60, reason: 'slow-client' });
    expect(store.gaps).toBe(1);
  });

  it('merges data-source aliases, also what arrived before the alias table', () => {
    const store = new Store();
    feed(store, syntheticRollout('a', T0, { task: 'deepscaler', reward: 1 }));
    store.rewards.setFamilies({ deepscaler: 'math' });
    feed(store, syntheticRollout('b', T0 + 100, { task: 'math', reward: 0 }));
    feed(store, syntheticRollout('c', T0 + 200, { task: 'deepscaler', reward: 1 }));
    expect(store.rewards.histogram().sources.map((s) => [s.name, s.n])).toEqual([['math', 3]]);
  });

  it('counts flagged rollouts from result events and the listing', () => {
    const store = new Store();
    const events = syntheticRollout('h', T0);
    events[events.length - 1] = { ...events.at(-1)!, violations: { 'read-secret': 2 } } as (typeof events)[number];
    feed(store, events);
    feed(store, syntheticRollout('clean', T0 + 100));
    store.seed({ id: 'old', data_source: 'swe', state: 'done', submitted_at: T0, outcome: 'completed', reward: 1, violations: { 'edit-protected': 1 } });
    store.seed({ id: 'unknown', data_source: 'swe', state: 'failed', submitted_at: T0, outcome: 'infra-error', reward: 0 });
    expect(store.flaggedCount).toBe(2);
    expect(store.filter({ flagged: true }).map((r) => r.id)).toEqual(['h', 'old']);
    expect(store.rollouts.get('unknown')!.elapsedKnown).toBe(false);
    expect(store.rollouts.get('old')!.violations).toEqual({ 'edit-protected': 1 });
  });
});
