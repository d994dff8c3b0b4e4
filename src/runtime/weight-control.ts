import { CancelledError } from '../errors.js';
import { compareVersions, type WeightVersion } from '../llm/weight-versions.js';

/** What the supervisor's parts add for async RL (optional: a supervisor without it never waits). */
export interface WeightParts {
  weights: WeightControl;
}

/**
 * The runtime's side of an asynchronous trainer: whether new LLM calls may start (`pause` /
 * `resume` around an in-place weight sync), the trainer's version (`setTrainerVersion`), and the
 * bounded-staleness gate (`maxStaleness`, AReaL's η): a rollout's first LLM call waits while the
 * version it would sample at (the newest version of any backend) is more than η ahead of the
 * trainer's. The gate applies only when both versions are numbers; labels are not a distance.
 *
 * A waiting call holds its slots but is not an LLM call yet: {@link AttemptSteps} takes the wait
 * out of the rollout's time budget and its no-progress limit (the wall-clock cap still counts).
 * Waiters are re-checked on every change, not polled.
 */
export class WeightControl {
  private paused = false;
  private trainer: WeightVersion | null = null;
  private readonly waiters = new Set<{ first: boolean; resolve: () => void }>();

  constructor(
    /** η; null: no bound. */
    readonly maxStaleness: number | null,
    /** The newest weight version a new call could be sampled at (null: unknown). */
    private readonly currentVersion: () => WeightVersion | null,
  ) {}

  /** True while new LLM calls wait. */
  get isPaused(): boolean {
    return this.paused;
  }

  /** The version the trainer has consumed up to (set by the trainer), or null. */
  get trainerVersion(): WeightVersion | null {
    return this.trainer;
  }

  /** New LLM calls wait from now on; calls in flight go on. */
  pause(): void {
    this.paused = true;
  }

  /** Waiting calls go on (those the staleness bound allows). */
  resume(): void {
    this.paused = false;
    this.changed();
  }

  setTrainerVersion(v: WeightVersion): void {
    this.trainer = v;
    this.changed();
  }

  /** How far the would-be version is ahead of the trainer's, when both are numbers; else null. */
  ahead(): number | null {
    const cur = this.currentVersion();
    const t = this.trainer;
    return typeof cur === 'number' && typeof t === 'number' ? cur - t : null;
  }

  /** Whether a call may start now; `first`: the rollout's first LLM call, which the staleness bound gates. */
  admits(first: boolean): boolean {
    if (this.paused) return false;
    if (!first || this.maxStaleness === null) return true;
    const a = this.ahead();
    return a === null || a <= this.maxStaleness;
  }

  /**
   * Resolves when {@link admits} holds (at once if it does). Rejects with CancelledError when
   * `signal` aborts, and forgets the waiter then.
   */
  wait(first: boolean, signal: AbortSignal): Promise<void> {
    if (this.admits(first)) return Promise.resolve();
    if (signal.aborted) return Promise.reject(new CancelledError('rollout ended while waiting for generation'));
    return new Promise<void>((resolve, reject) => {
      const w = {
        first,
        resolve: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.waiters.delete(w);
        reject(new CancelledError('rollout ended while waiting for generation'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.add(w);
    });
  }

  /** Waiting calls now; for status and tests. */
  get waiting(): number {
    return this.waiters.size;
  }

  /** A version changed (backend or trainer) or generation resumed: lets go every waiter that may start. */
  changed(): void {
    for (const w of this.waiters) {
      if (!this.admits(w.first)) continue;
      this.waiters.delete(w);
      w.resolve();
    }
  }
}

/** The newest known version of `backends` that can take calls (not removed), by {@link compareVersions}. */
export function newestVersion(backends: readonly { state: string; weightVersion: WeightVersion | null }[]): WeightVersion | null {
  let max: WeightVersion | null = null;
  for (const b of backends) {
    if (b.state === 'removed' || b.weightVersion === null) continue;
    if (max === null || compareVersions(b.weightVersion, max) > 0) max = b.weightVersion;
  }
  return max;
}
