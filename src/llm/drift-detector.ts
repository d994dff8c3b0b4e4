/** One drift finding, as `trajectory.diagnostics.drift` holds it. */
export interface DriftFinding {
  turn: number;
  /** First index where the two id lists differ. */
  position: number;
  /** The full re-render's id there (null past its end). */
  expected: number | null;
  /** The incremental (append-only) id there (null past its end). */
  actual: number | null;
}

/**
 * Compares the incremental prompt ids with a full re-render of the conversation and reports
 * the first position where they differ (everything after it is shifted, so later positions
 * add no information). Returns null when they are equal. O(length); never throws.
 */
export function findDrift(turn: number, expected: readonly number[], actual: readonly number[]): DriftFinding | null {
  const n = Math.min(expected.length, actual.length);
  for (let i = 0; i < n; i++) {
    if (expected[i] !== actual[i]) return { turn, position: i, expected: expected[i]!, actual: actual[i]! };
  }
  if (expected.length === actual.length) return null;
  return { turn, position: n, expected: expected[n] ?? null, actual: actual[n] ?? null };
}
