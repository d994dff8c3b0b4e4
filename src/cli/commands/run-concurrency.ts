/** `rollout run`'s stage concurrency when `--concurrency` is not given. */
export const DEFAULT_CONCURRENCY = 16;

/** The concurrency a run uses and the words that say where it came from. */
export interface ConcurrencyChoice {
  concurrency: number;
  reason: string;
}

/**
 * Matches a run's INIT / RUN / EVAL limits to what its engines evaluate at once: the sum of the
 * usable backends' slots when every one of them reports its slots (more rollouts than slots only
 * queue at the engine while their time budget runs — the tiny engine's 4 slots against 16
 * rollouts timed out 12 of 20), else {@link DEFAULT_CONCURRENCY}. `given` (the flag) always wins.
 * Pure; `slots` holds one entry per usable real backend (none for the oracle).
 */
export function chooseConcurrency(given: number | undefined, slots: readonly (number | null)[]): ConcurrencyChoice {
  if (given !== undefined) return { concurrency: given, reason: '--concurrency' };
  if (slots.length > 0 && slots.every((s) => s !== null)) {
    const sum = (slots as number[]).reduce((a, b) => a + b, 0);
    return { concurrency: sum, reason: `the engines' slots (${slots.join(' + ')}); --concurrency N to change` };
  }
  const why = slots.length === 0 ? 'default' : `default: ${slots.filter((s) => s === null).length} of ${slots.length} backends do not report their slots`;
  return { concurrency: DEFAULT_CONCURRENCY, reason: `${why}; --concurrency N to change` };
}
