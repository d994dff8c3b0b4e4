import { describe, expect, it } from 'vitest';

// The page's reward aggregates are a plain browser ES module with no DOM: run it here.
interface Member { id: string; trajectoryId: unknown; outcome: string | null; reward: number | null; advantage: number | null }
interface GroupView { id: string; mean: number | null; std: number | null; complete: boolean; noSignal: boolean; members: Member[] }
interface Hist { lo: number; hi: number; bins: number; sources: Array<{ name: string; n: number; mean: number; counts: number[] }> }
interface Stats {
  completedZero: number;
  add(r: { id: string; dataSource: string; groupId: string | null; trajectoryId: unknown; outcome: string | null; reward: number | null }, ts: number): void;
  join(r: { id: string; dataSource: string; groupId: string | null; trajectoryId: unknown; outcome: string | null; reward: number | null }): void;
  histogram(bins?: number): Hist;
  overTime(): Array<{ t: number; mean: number; n: number }>;
  group(id: string): GroupView | null;
  groupSummary(): { groups: number; complete: number; noSignal: number };
}
const pageModule = async <T>(name: string): Promise<T> => (await import(/* @vite-ignore */ `../../../visualizer/${name}`)) as T;
const mod = await pageModule<{
  RewardStats: new (opts?: { bucketMs?: number; maxGroups?: number }) => Stats;
  describeGroup: (id: string, members: Array<Omit<Member, 'advantage'>>) => GroupView;
}>('rewards.js');
const { outcomeCountsByReward } = await pageModule<{
  outcomeCountsByReward: (counts: Record<string, number>, zero: number) => Record<string, number>;
}>('charts.js');

const ended = (id: string, dataSource: string, reward: number | null, extra: Partial<{ groupId: string; trajectoryId: unknown; outcome: string }> = {}) => ({
  id, dataSource, groupId: extra.groupId ?? null, trajectoryId: extra.trajectoryId ?? null, outcome: extra.outcome ?? 'completed', reward,
});

describe('RewardStats', () => {
  it('bins rewards per data source over [0, 1] and keeps each source’s mean and count', () => {
    const s = new mod.RewardStats();
    for (const [i, r] of [0, 0, 1, 1, 1].entries()) s.add(ended(`m${i}`, 'math', r), 0);
    s.add(ended('c0', 'code', 0.55), 0);
    const h = s.histogram(10);
    expect(h).toMatchObject({ lo: 0, hi: 1, bins: 10 });
    const math = h.sources.find((x) => x.name === 'math')!;
    expect(math.n).toBe(5);
    expect(math.mean).toBeCloseTo(0.6);
    expect(math.counts[0]).toBe(2);
    expect(math.counts[9]).toBe(3);
    expect(h.sources.find((x) => x.name === 'code')!.counts[5]).toBe(1);
  });

  it('widens the range to negative and large rewards instead of dropping them', () => {
    const s = new mod.RewardStats();
    s.add(ended('a', 'x', -1), 0);
    s.add(ended('b', 'x', 3), 0);
    const h = s.histogram(4);
    expect([h.lo, h.hi]).toEqual([-1, 3]);
    expect(h.sources[0]!.counts).toEqual([1, 0, 0, 1]);
  });

  it('counts completed rollouts with reward 0 so the outcome chart can split them out', () => {
    const s = new mod.RewardStats();
    s.add(ended('a', 'math', 0), 0);
    s.add(ended('b', 'math', 1), 0);
    s.add(ended('c', 'math', 0, { outcome: 'truncated' }), 0);
    expect(s.completedZero).toBe(1);
    expect(outcomeCountsByReward({ completed: 2, truncated: 1 }, s.completedZero)).toEqual({ 'completed · reward>0': 1, 'completed · reward 0': 1, truncated: 1 });
  });

  it('averages rewards per time bucket, oldest first', () => {
    const s = new mod.RewardStats({ bucketMs: 1000 });
    s.add(ended('a', 'm', 1), 2500);
    s.add(ended('b', 'm', 0), 500);
    s.add(ended('c', 'm', 0), 2900);
    expect(s.overTime()).toEqual([{ t: 0, mean: 0, n: 1 }, { t: 2000, mean: 0.5, n: 2 }]);
  });

  it('ignores a missing reward in the histogram but still lists the member in its group', () => {
    const s = new mod.RewardStats();
    s.add(ended('a', 'm', null, { groupId: 'g', outcome: 'infra-error' }), 0);
    expect(s.histogram().sources).toEqual([]);
    expect(s.group('g')!.members.map((m) => m.id)).toEqual(['a']);
  });
});

describe('groups', () => {
  it('gives each member its GRPO advantage (reward − mean) / std, in trajectory order', () => {
    const g = mod.describeGroup('g', [
      { id: 'r2', trajectoryId: 2, outcome: 'completed', reward: 0 },
      { id: 'r10', trajectoryId: 10, outcome: 'completed', reward: 1 },
      { id: 'r1', trajectoryId: 1, outcome: 'completed', reward: 1 },
    ]);
    expect(g.members.map((m) => m.trajectoryId)).toEqual([1, 2, 10]);
    expect(g.mean).toBeCloseTo(2 / 3);
    const std = Math.sqrt(2 / 9);
    expect(g.members[0]!.advantage).toBeCloseTo((1 - 2 / 3) / std);
    expect(g.members[1]!.advantage).toBeCloseTo((0 - 2 / 3) / std);
    expect(g.noSignal).toBe(false);
  });

  it('flags a complete group whose rewards are all equal as carrying no signal, advantages 0', () => {
    const g = mod.describeGroup('g', [0, 1, 2, 3].map((i) => ({ id: `r${i}`, trajectoryId: i, outcome: 'completed', reward: 1 })));
    expect(g.noSignal).toBe(true);
    expect(g.members.every((m) => m.advantage === 0)).toBe(true);
  });

  it('does not flag a group while a member is still running', () => {
    const g = mod.describeGroup('g', [
      { id: 'a', trajectoryId: 0, outcome: 'completed', reward: 0 },
      { id: 'b', trajectoryId: 1, outcome: 'completed', reward: 0 },
      { id: 'c', trajectoryId: 2, outcome: null, reward: null },
    ]);
    expect(g.complete).toBe(false);
    expect(g.noSignal).toBe(false);
  });

  it('summarizes groups, counting complete ones and those with no signal', () => {
    const s = new mod.RewardStats();
    for (let i = 0; i < 4; i++) s.add(ended(`a${i}`, 'm', 1, { groupId: 'flat', trajectoryId: i }), 0);
    s.add(ended('b0', 'm', 0, { groupId: 'mixed', trajectoryId: 0 }), 0);
    s.add(ended('b1', 'm', 1, { groupId: 'mixed', trajectoryId: 1 }), 0);
    s.add(ended('c0', 'm', 1, { groupId: 'open', trajectoryId: 0 }), 0);
    s.join({ ...ended('c1', 'm', null, { groupId: 'open', trajectoryId: 1 }), outcome: null });
    expect(s.groupSummary()).toEqual({ groups: 3, complete: 2, noSignal: 1 });
  });

  it('forgets the oldest groups beyond its bound', () => {
    const s = new mod.RewardStats({ maxGroups: 2 });
    for (const g of ['g1', 'g2', 'g3']) s.add(ended(`${g}-0`, 'm', 1, { groupId: g }), 0);
    expect(s.group('g1')).toBeNull();
    expect(s.group('g3')).toMatchObject({ id: 'g3', mean: 1, members: [expect.anything()] });
  });
});

describe('backendStateLabel (the backend load chart)', () => {
  it('shows a degraded backend, one that fails its probes or never answered, as down', async () => {
    const fmt = await pageModule<{ backendStateLabel: (s: string) => string }>('format.js');
    expect(fmt.backendStateLabel('degraded')).toBe('down');
    expect(fmt.backendStateLabel('healthy')).toBe('healthy');
    expect(fmt.backendStateLabel('probing')).toBe('probing');
  });
});
