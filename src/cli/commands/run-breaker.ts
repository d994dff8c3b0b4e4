import type { RolloutResult } from '../../protocol/trajectory.js';

/** Error codes that mean the backend refused the request itself: no rollout of this run can be sampled. */
const REJECTION_CODES: ReadonlySet<string> = new Set(['BACKEND_REJECTED', 'CONTEXT_LIMIT']);

/**
 * Stops a run whose backend rejects every request (a wrong protocol the pre-flight could not
 * tell, a model name it does not serve, a context it cannot hold): once the first `threshold`
 * finished rollouts were all rejections and nothing had been sampled by any rollout, the run
 * gives up with the backend's reason instead of scoring every task 0 with `pass@1 0.000`.
 * A single rollout that got an answer disarms it for the rest of the run: rejections after
 * that are the tasks' own (one over-long prompt), and the run goes on.
 */
export class RejectionBreaker {
  private rejected = 0;
  private answered = false;
  /** The first rejection's message, once tripped. */
  reason: string | null = null;

  constructor(private readonly threshold = 3) {}

  /** Feeds one finished rollout; true when this one trips the breaker. */
  observe(result: Pick<RolloutResult, 'outcome' | 'error' | 'trajectory'>): boolean {
    if (this.answered || this.reason !== null) return false;
    if (result.outcome === 'cancelled') return false;
    const code = result.error?.code;
    if (code === undefined || !REJECTION_CODES.has(code) || result.trajectory.turns.length > 0) {
      this.answered = true;
      return false;
    }
    this.rejected++;
    this.first ??= result.error?.message ?? code;
    if (this.rejected < this.threshold) return false;
    this.reason = `the backend rejected the first ${this.rejected} rollouts' requests and answered none: ${this.first}`;
    return true;
  }

  private first: string | undefined;
}
