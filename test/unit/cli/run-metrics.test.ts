import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RunMetrics } from '../../../src/cli/commands/run-metrics.js';
import { crc32c, eventFile } from '../../../src/cli/tfevents.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { readEvents } from '../../helpers/read-tfevents.js';

/** A finished rollout with only what the metrics read. */
function result(o: { reward: number | null; resolved: boolean; ds?: string; version?: number | string | null; staleness?: number | null; sampled?: number[]; outcome?: RolloutResult['outcome'] }): RolloutResult {
  const turns = (o.sampled ?? [4]).map((n) => ({ outputIds: Array<number>(n).fill(7) }));
  return {
    outcome: o.outcome ?? 'completed',
    resolved: o.resolved,
    reward: o.reward,
    dataSource: o.ds ?? 'math',
    error: null,
    timing: { queueMs: 0, initMs: 0, runMs: 0, evalMs: 0, wallMs: 0 },
    trajectory: { turns, tokens: Array<number>(20).fill(1), maxWeightVersion: o.version ?? null, staleness: o.staleness ?? null },
  } as unknown as RolloutResult;
}

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('tfevents', () => {
  it('computes CRC-32C as the Castagnoli check value says (crc32c("123456789") = 0xe3069283)', () => {
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
  });

  it('writes records an independent reader decodes, CRCs checked: the file version first, then each step with its scalars', async () => {
    dir = await mkdtemp(join(tmpdir(), 'tfevents-'));
    const path = join(dir, 'events.out.tfevents.1.test');
    await writeFile(path, eventFile(1_700_000_000, [
      { step: 3, wallTime: 1_700_000_010.5, scalars: [{ tag: 'reward/mean', value: 0.25 }, { tag: 'pass@1', value: 0.5 }] },
      { step: 200, wallTime: 1_700_000_020, scalars: [{ tag: 'reward/mean', value: 0.75 }] },
    ]));
    const events = await readEvents(path);
    expect(events).toEqual([
      { step: 0, wall_time: 1_700_000_000, file_version: 'brain.Event:2', scalars: {} },
      { step: 3, wall_time: 1_700_000_010.5, scalars: { 'reward/mean': 0.25, 'pass@1': 0.5 } },
      { step: 200, wall_time: 1_700_000_020, scalars: { 'reward/mean': 0.75 } },
    ]);
  });

  it('refuses a non-finite scalar or a negative step, naming it', () => {
    expect(() => eventFile(0, [{ step: 1, wallTime: 0, scalars: [{ tag: 'reward/mean', value: Number.NaN }] }])).toThrow(/'reward\/mean' at step 1 is not finite/);
    expect(() => eventFile(0, [{ step: -1, wallTime: 0, scalars: [] }])).toThrow(/non-negative integer \(got -1\)/);
  });
});

describe('RunMetrics', () => {
  it('charts each weight version as a step: reward per family, response length, pass@k, staleness; cancelled rollouts nowhere', async () => {
    const m = new RunMetrics(2, (ds) => (ds === 'deepscaler' ? 'math' : ds), () => 1_700_000_000_000);
    // Step 1: task 0 resolved once of two, task 1 never.
    m.add('0', result({ reward: 1, resolved: true, version: 1, staleness: 0, sampled: [4, 6] }));
    m.add('0', result({ reward: 0, resolved: false, ds: 'deepscaler', version: 1, staleness: 2, sampled: [2] }));
    m.add('1', result({ reward: 0.5, resolved: false, ds: 'stem', version: 1, staleness: 1, sampled: [8] }));
    m.add('1', result({ reward: 0.5, resolved: false, ds: 'stem', version: 1, staleness: 1, sampled: [8] }));
    m.add('1', result({ reward: 1, resolved: true, ds: 'stem', version: 1, outcome: 'cancelled' }));
    // Step 5: one task, both resolved; no staleness known.
    m.add('2', result({ reward: 1, resolved: true, version: 5, sampled: [10] }));
    m.add('2', result({ reward: 1, resolved: true, version: 5, sampled: [10] }));
    dir = await mkdtemp(join(tmpdir(), 'run-metrics-'));
    const path = await m.write(dir, 1_699_999_999_000);
    expect(path).toMatch(/events\.out\.tfevents\.1699999999\./);
    const [head, s1, s5, ...rest] = await readEvents(path);
    expect([head?.file_version, rest]).toEqual(['brain.Event:2', []]);
    expect(s1).toMatchObject({ step: 1, wall_time: 1_700_000_000 });
    expect(s1!.scalars).toEqual({
      'rollouts/finished': 4,
      'rollouts/resolved_rate': 0.25,
      'pass@1': expect.closeTo(0.25, 6),
      'pass@2': 0.5,
      'groups/no_signal_fraction': 0.5,
      'reward/mean': 0.5,
      'reward/math': 0.5,
      'reward/stem': 0.5,
      'response_length/mean': 7,
      'response_length/per_turn': expect.closeTo(28 / 5, 5),
      'staleness/mean': 1,
      'staleness/max': 2,
    });
    expect(s5!.scalars).toEqual({
      'rollouts/finished': 2,
      'rollouts/resolved_rate': 1,
      'pass@1': 1,
      'pass@2': 1,
      'groups/no_signal_fraction': 1,
      'reward/mean': 1,
      'reward/math': 1,
      'response_length/mean': 10,
      'response_length/per_turn': 10,
    });
  });

  it('counts a label version, or none, at step 0', async () => {
    const m = new RunMetrics(1, (d) => d);
    m.add('0', result({ reward: 1, resolved: true, version: 'v2' }));
    m.add('1', result({ reward: 0, resolved: false, version: null }));
    expect(m.steps().map((s) => [s.step, s.scalars.find((x) => x.tag === 'rollouts/finished')?.value])).toEqual([[0, 2]]);
  });
});
