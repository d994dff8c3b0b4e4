import { describe, expect, it } from 'vitest';
import { clock, progressLine } from '../../../src/cli/commands/run-progress.js';

describe('progressLine', () => {
  const base = { total: 100, done: 25, elapsedMs: 10_000, sampledTokens: 5000, outcomes: { completed: 20, 'infra-error': 5 }, rewardSum: 12, rewarded: 20, stages: { init: 2, run: 30, eval: 1 } };

  it('shows done/total, elapsed, the ETA from the rate so far, rollouts/s and tokens/s', () => {
    expect(progressLine(base)).toBe('25/100 · 0:10 elapsed · ETA 0:30 · 2.50 rollouts/s · 500 tok/s · init 2 run 30 eval 1 · ok 20 infra 5 · reward 0.600');
  });

  it('says the ETA is unknown before anything finished, and omits stages it does not know', () => {
    expect(progressLine({ ...base, done: 0, outcomes: {}, rewarded: 0, rewardSum: 0, stages: null })).toBe('0/100 · 0:10 elapsed · ETA ? · 0.00 rollouts/s · 500 tok/s · reward -');
  });

  it('formats long durations with hours', () => {
    expect([clock(65_000), clock(3_723_000), clock(-5)]).toEqual(['1:05', '1:02:03', '0:00']);
  });
});
