import { describe, expect, it } from 'vitest';

// The pure parts of the token view, the groups table and the trend charts (#30 §4), run in Node.
// The modules are plain browser JavaScript (typed by JSDoc, checked by visualizer/tsconfig.json).

type Range = { start: number; end: number; turn: number };
type Row = { id: string; size: number; rewarded: number; mean: number | null; std: number | null; spread: number | null; noSignal: boolean };
type Series = { name: string; n: number; points: Array<{ t: number; mean: number; n: number }> };
type Point = { t: number; reward: number | null; length: number | null; source: string; version: string | null };

const pageModule = async <T>(name: string): Promise<T> => (await import(/* @vite-ignore */ `../../../visualizer/${name}`)) as T;
const tokens = await pageModule<{
  sampledRanges(t: unknown): Range[];
  turnOf(ranges: Range[], i: number): { turn: number; prompt: boolean } | null;
  logprobColor(lp: number): string;
  tokenInfo(t: unknown, ranges: Range[], text: string[] | null, i: number): string;
}>('tokens.js');
const table = await pageModule<{ groupRows(groups: Iterable<unknown>): Row[]; sortGroupRows(rows: Row[], key: string, dir: 1 | -1): Row[] }>('groups-table.js');
const trends = await pageModule<{ trendSeries(points: Point[], opts: { metric: 'reward' | 'length'; split: 'source' | 'version'; t0: number; t1: number; buckets?: number }): Series[] }>('trends.js');
const charts = await pageModule<{ niceTicks(lo: number, hi: number, count?: number): number[]; timeTicks(t0: number, t1: number): Array<{ t: number; label: string }> }>('charts.js');

describe('token view model', () => {
  // Turn 0: prompt [0,4), sampled [4,7); tool tokens [7,9); turn 1 sampled [9,11).
  const t = {
    tokens: [1, 2, 3, 4, 10, 11, 12, 5, 6, 20, 21],
    lossMask: [0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1],
    logprobs: [0, 0, 0, 0, -0.01, -0.5, -6, 0, 0, -0.2, -3],
    turns: [
      { promptIds: [1, 2, 3, 4], outputIds: [10, 11, 12], weightVersion: 3, backendId: 'b0' },
      { promptIds: [1, 2, 3, 4, 10, 11, 12, 5, 6], outputIds: [20, 21], weightVersion: 4, backendId: 'b1' },
    ],
  };

  it('maps every token to its turn: sampled by it, or in its prompt', () => {
    const ranges = tokens.sampledRanges(t);
    expect(ranges).toEqual([{ start: 4, end: 7, turn: 0 }, { start: 9, end: 11, turn: 1 }]);
    expect([0, 4, 6, 7, 8, 9, 10].map((i) => tokens.turnOf(ranges, i))).toEqual([
      { turn: 0, prompt: true },
      { turn: 0, prompt: false },
      { turn: 0, prompt: false },
      { turn: 1, prompt: true },
      { turn: 1, prompt: true },
      { turn: 1, prompt: false },
      { turn: 1, prompt: false },
    ]);
    expect(tokens.turnOf(ranges, 11)).toBeNull();
  });

  it('offsets turns per segment when a harness agent rewrote its history', () => {
    const seg = {
      tokens: [1, 2, 10, 3, 20, 21],
      turns: [{ promptIds: [1, 2], outputIds: [10] }, { promptIds: [3], outputIds: [20, 21] }],
      segments: [{ tokenStart: 0, tokenEnd: 3, turnStart: 0, turnEnd: 1 }, { tokenStart: 3, tokenEnd: 6, turnStart: 1, turnEnd: 2 }],
    };
    expect(tokens.sampledRanges(seg)).toEqual([{ start: 2, end: 3, turn: 0 }, { start: 4, end: 6, turn: 1 }]);
  });

  it('colours logprobs on one scale, sure blue to unlikely red, clamped at the floor', () => {
    expect(tokens.logprobColor(0)).toBe('hsl(220, 65%, 32%)');
    expect(tokens.logprobColor(-10)).toBe('hsl(0, 65%, 32%)');
    expect(tokens.logprobColor(-50)).toBe(tokens.logprobColor(-10));
    expect(tokens.logprobColor(-0.5)).not.toBe(tokens.logprobColor(-2));
  });

  it('writes the hover line: id, text, logprob, turn and weight version', () => {
    const ranges = tokens.sampledRanges(t);
    const text = t.tokens.map((id) => `t${id}`);
    expect(tokens.tokenInfo(t, ranges, text, 10)).toBe('token #10 · id 21 · "t21"\nsampled (mask 1) · logprob -3.000 (p 0.050)\nturn 1 · weight version 4 · backend b1');
    expect(tokens.tokenInfo(t, ranges, null, 7)).toBe('token #7 · id 5\nprompt / tool (mask 0)\nturn 1 (its prompt) · weight version – · backend b1');
  });
});

describe('groups table model', () => {
  const group = (id: string, rewards: Array<number | null>) => ({
    id,
    members: new Map(rewards.map((reward, i) => [`${id}-${i}`, { id: `${id}-${i}`, trajectoryId: String(i), outcome: reward === null ? null : 'completed', reward }])),
  });

  it('computes size, mean, std, advantage spread and the no-signal flag per group', () => {
    const rows = table.groupRows([group('a', [1, 0, 0, 1]), group('b', [1, 1, 1]), group('c', [0.5, null])]);
    expect(rows.map((r) => [r.id, r.size, r.rewarded, r.mean, r.std, r.spread, r.noSignal])).toEqual([
      ['a', 4, 4, 0.5, 0.5, 1, false],
      ['b', 3, 3, 1, 0, 0, true],
      ['c', 2, 1, 0.5, 0, 0, false],
    ]);
  });

  it('sorts by any column either way, groups without a value last', () => {
    const rows = table.groupRows([group('a', [1, 0]), group('b', [null]), group('c', [0.2, 0.4]), group('d', [1, 1])]);
    expect(table.sortGroupRows(rows, 'spread', -1).map((r) => r.id)).toEqual(['a', 'c', 'd', 'b']);
    expect(table.sortGroupRows(rows, 'spread', 1).map((r) => r.id)).toEqual(['d', 'c', 'a', 'b']);
    expect(table.sortGroupRows(rows, 'mean', -1).map((r) => r.id)).toEqual(['d', 'a', 'c', 'b']);
    expect(table.sortGroupRows(rows, 'noSignal', -1)[0]!.id).toBe('d');
    expect(table.sortGroupRows(rows, 'id', -1).map((r) => r.id)).toEqual(['d', 'c', 'b', 'a']);
  });
});

describe('trend series', () => {
  const pts: Point[] = [
    { t: 0, reward: 1, length: 10, source: 'math', version: '1' },
    { t: 5, reward: 0, length: 30, source: 'math', version: '1' },
    { t: 50, reward: 0.5, length: 100, source: 'code', version: '2' },
    { t: 95, reward: 1, length: null, source: 'math', version: '10' },
    { t: 99, reward: null, length: 7, source: 'code', version: null },
  ];

  it('averages each series per time bucket, per data source or per weight version', () => {
    const bySource = trends.trendSeries(pts, { metric: 'reward', split: 'source', t0: 0, t1: 100, buckets: 10 });
    expect(bySource).toEqual([
      { name: 'code', n: 1, points: [{ t: 55, mean: 0.5, n: 1 }] },
      { name: 'math', n: 3, points: [{ t: 5, mean: 0.5, n: 2 }, { t: 95, mean: 1, n: 1 }] },
    ]);
    // Versions sort numerically (v2 before v10); unknown ones are named so.
    const byVersion = trends.trendSeries(pts, { metric: 'length', split: 'version', t0: 0, t1: 100, buckets: 10 });
    expect(byVersion.map((s) => [s.name, s.n])).toEqual([['v1', 2], ['v2', 1], ['unknown', 1]]);
    expect(byVersion[0]!.points).toEqual([{ t: 5, mean: 20, n: 2 }]);
  });

  it('keeps only the points inside the time range', () => {
    const s = trends.trendSeries(pts, { metric: 'reward', split: 'source', t0: 40, t1: 100, buckets: 6 });
    expect(s.map((x) => [x.name, x.n])).toEqual([['code', 1], ['math', 1]]);
  });
});

describe('chart axes', () => {
  it('picks round ticks inside the range', () => {
    expect(charts.niceTicks(0, 1, 4)).toEqual([0, 0.5, 1]);
    expect(charts.niceTicks(0, 1, 8)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(charts.niceTicks(-0.3, 0.9, 6)).toEqual([-0.2, 0, 0.2, 0.4, 0.6, 0.8]);
    expect(charts.niceTicks(0, 30_000, 4)).toEqual([0, 10_000, 20_000, 30_000]);
  });

  it('labels a time axis at round steps, with seconds only when the step is under a minute', () => {
    const t0 = new Date(2026, 0, 1, 12, 0, 0).getTime();
    const ten = charts.timeTicks(t0, t0 + 10 * 60_000);
    expect(ten.map((x) => x.label)).toEqual(['12:00', '12:02', '12:04', '12:06', '12:08', '12:10']);
    const short = charts.timeTicks(t0 + 1000, t0 + 31_000);
    expect(short[0]!.label).toBe('12:00:05');
    expect(short.every((x) => /^\d\d:\d\d:\d\d$/.test(x.label))).toBe(true);
  });
});
