/** A policy / weight version as backends and trainers report it: a step number or a label. */
export type WeightVersion = string | number;

/** One run of consecutive sampled tokens with the same weight version (null: unknown). */
export interface VersionRun {
  version: WeightVersion | null;
  tokens: number;
}

/**
 * Orders two versions: numerically when both are numbers, else as strings (so `"v10" < "v9"`:
 * a trainer that wants numeric order sends numbers). Negative, zero or positive like a sort
 * comparator.
 */
export function compareVersions(a: WeightVersion, b: WeightVersion): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  const x = String(a);
  const y = String(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * The run-length form of the sampled tokens' versions, turn by turn in order: adjacent turns
 * with the same version merge, empty turns add nothing. Its `tokens` sum to the sampled tokens.
 */
export function versionRuns(turns: readonly { weightVersion: WeightVersion | null; outputIds: { length: number } }[]): VersionRun[] {
  const runs: VersionRun[] = [];
  for (const t of turns) {
    const n = t.outputIds.length;
    if (n === 0) continue;
    const last = runs[runs.length - 1];
    if (last && last.version === t.weightVersion) last.tokens += n;
    else runs.push({ version: t.weightVersion, tokens: n });
  }
  return runs;
}

/** The oldest and newest known version of `runs` (unknown versions are skipped); nulls when none is known. */
export function versionRange(runs: readonly VersionRun[]): { min: WeightVersion | null; max: WeightVersion | null } {
  let min: WeightVersion | null = null;
  let max: WeightVersion | null = null;
  for (const r of runs) {
    const v = r.version;
    if (v === null) continue;
    if (min === null || compareVersions(v, min) < 0) min = v;
    if (max === null || compareVersions(v, max) > 0) max = v;
  }
  return { min, max };
}

/**
 * The index of the first turn whose known version is older than a version an earlier turn of
 * the same rollout already had, or -1. Versions must never go back within a rollout: a backend
 * that reports an older version (a stale replica, a rollback) is a fact the trainer must see.
 */
export function firstRegression(versions: readonly (WeightVersion | null)[]): number {
  let max: WeightVersion | null = null;
  for (let i = 0; i < versions.length; i++) {
    const v = versions[i]!;
    if (v === null) continue;
    if (max !== null && compareVersions(v, max) < 0) return i;
    if (max === null || compareVersions(v, max) > 0) max = v;
  }
  return -1;
}

/**
 * How many versions the trainer is past the rollout's oldest token: `trainer − oldest` when both
 * are numbers; 0 when they are equal labels; null when either is unknown or the labels differ
 * (a distance between strings means nothing).
 */
export function staleness(trainer: WeightVersion | null, oldest: WeightVersion | null): number | null {
  if (trainer === null || oldest === null) return null;
  if (typeof trainer === 'number' && typeof oldest === 'number') return trainer - oldest;
  return trainer === oldest ? 0 : null;
}

/** Parses a version sent as JSON: a finite number or a non-empty string of at most 200 chars; null otherwise. */
export function isWeightVersion(v: unknown): v is WeightVersion {
  return (typeof v === 'number' && Number.isFinite(v)) || (typeof v === 'string' && v.length > 0 && v.length <= 200);
}
