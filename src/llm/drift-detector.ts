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

/** How a new prompt relates to the tokens so far: see {@link continuationOf}. */
export type Continuation = { kind: 'extends' } | { kind: 'rewrite'; finding: DriftFinding };

/**
 * Whether `next` (a new prompt, fully rendered) extends `prev` (the previous prompt + the sampled
 * output) token for token — then only its tail is new, and the trajectory stays one sequence —
 * or rewrites it, with the first differing position as the finding (the harness summarised,
 * dropped or edited its history, or the template renders the turn differently from what was
 * sampled). O(length of `prev`); never throws.
 */
export function continuationOf(turn: number, prev: readonly number[], next: readonly number[]): Continuation {
  if (next.length >= prev.length) {
    let i = 0;
    while (i < prev.length && prev[i] === next[i]) i++;
    if (i === prev.length) return { kind: 'extends' };
  }
  return { kind: 'rewrite', finding: findDrift(turn, next, prev)! };
}
