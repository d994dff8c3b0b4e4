import { compareVersions, type WeightVersion } from '../llm/weight-versions.js';
import type { RolloutResult } from '../protocol/trajectory.js';

/**
 * True when every reward is the same (nulls included): the group has zero advantage for GRPO,
 * so DAPO's dynamic sampling drops it. One reward or none counts as all equal.
 */
export function allRewardsEqual(rewards: readonly (number | null)[]): boolean {
  return rewards.every((r) => r === rewards[0]);
}

/** The oldest known weight version among the results' tokens, or null when none is known. */
export function groupVersion(results: readonly Pick<RolloutResult, 'trajectory'>[]): WeightVersion | null {
  let min: WeightVersion | null = null;
  for (const r of results) {
    const v = r.trajectory.minWeightVersion ?? null;
    if (v !== null && (min === null || compareVersions(v, min) < 0)) min = v;
  }
  return min;
}

/** The largest known staleness among the results, or null. */
export function groupStaleness(results: readonly Pick<RolloutResult, 'trajectory'>[]): number | null {
  let max: number | null = null;
  for (const r of results) {
    const s = r.trajectory.staleness ?? null;
    if (s !== null && (max === null || s > max)) max = s;
  }
  return max;
}

/**
 * Which ready group to hand out next: the first completed (`completion`), or the one sampled at
 * the oldest weight version (`oldest-version`; unknown versions last, ties in completion order),
 * so the most off-policy data is trained on before it grows staler.
 */
export function pickNext<G extends { seq: number; minWeightVersion: WeightVersion | null }>(ready: readonly G[], order: 'completion' | 'oldest-version'): G | undefined {
  let best: G | undefined;
  for (const g of ready) {
    if (!best) best = g;
    else if (order === 'completion') {
      if (g.seq < best.seq) best = g;
    } else {
      const a = g.minWeightVersion;
      const b = best.minWeightVersion;
      const c = a === null ? (b === null ? 0 : 1) : b === null ? -1 : compareVersions(a, b);
      if (c < 0 || (c === 0 && g.seq < best.seq)) best = g;
    }
  }
  return best;
}
