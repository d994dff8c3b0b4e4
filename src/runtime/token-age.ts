import { InfraError } from '../errors.js';
import { compareVersions, staleness, type VersionRun, type WeightVersion } from '../llm/weight-versions.js';
import type { Attempt } from './attempt.js';

/**
 * The bound on a rollout's oldest token (runtime option `staleTokens`): before each LLM call after
 * the first, a rollout whose oldest sampled token is more than `maxAge` versions behind the
 * trainer's version gets `action` — `flag` (kept and marked in `diagnostics.staleTokens`),
 * `finish` (ended now as truncated with finish `stale_tokens`, then evaluated) or `restart` (the
 * attempt fails with the retryable InfraError `STALE_TOKENS` and starts over from its prompt on a
 * fresh sandbox, within the retry budget). Only numeric versions have an age.
 */
export interface TokenAgeBound {
  maxAge: number;
  action: 'flag' | 'finish' | 'restart';
}

/** What the check decided for one call. */
export type TokenAgeDecision = { kind: 'ok' } | { kind: 'flag' | 'finish'; age: number } | { kind: 'restart'; error: InfraError };

interface AgeState {
  oldest: WeightVersion | null;
  flagged: { turn: number; age: number } | null;
}

// Per attempt, so a restarted attempt (a fresh builder) starts with no tokens and no flag.
const states = new WeakMap<Attempt, AgeState>();

function stateOf(att: Attempt): AgeState {
  let s = states.get(att);
  if (!s) states.set(att, (s = { oldest: null, flagged: null }));
  return s;
}

/** Records the versions of a turn's sampled tokens (its runs when resumed, else its one version). */
export function observeTurn(att: Attempt, version: WeightVersion | null, runs: readonly VersionRun[] | undefined, tokens: number): void {
  const s = stateOf(att);
  const vs = runs ? runs.filter((r) => r.tokens > 0).map((r) => r.version) : tokens > 0 ? [version] : [];
  for (const v of vs) if (v !== null && (s.oldest === null || compareVersions(v, s.oldest) < 0)) s.oldest = v;
}

/** Decides, before turn `turn`'s call, what the bound says. Pure apart from remembering the first flag. */
export function checkTokenAge(att: Attempt, turn: number, trainer: WeightVersion | null, bound: TokenAgeBound | undefined): TokenAgeDecision {
  if (!bound || turn === 0) return { kind: 'ok' };
  const s = stateOf(att);
  const age = staleness(trainer, s.oldest);
  if (age === null || age <= bound.maxAge) return { kind: 'ok' };
  if (bound.action === 'restart') {
    return { kind: 'restart', error: new InfraError(`the rollout's oldest token is ${age} versions behind the trainer (staleTokens.maxAge ${bound.maxAge}): restarted`, { code: 'STALE_TOKENS', stage: 'run', details: { age, turn } }) };
  }
  if (bound.action === 'flag') s.flagged ??= { turn, age };
  return { kind: bound.action, age };
}

/** The first flag of the attempt (`diagnostics.staleTokens`), or null. */
export function staleFlag(att: Attempt): { turn: number; age: number } | null {
  return states.get(att)?.flagged ?? null;
}
