import { z } from 'zod';
import { ValidationError } from '../errors.js';

/** Options of the {@link BackendPool}, each with its default. */
export const BackendPoolOptionsSchema = z
  .object({
    /**
     * How a backend is chosen. `least-loaded` (default): fewest requests in flight, then
     * registration order. `cumulative-count`: fewest requests ever assigned (the reference
     * server's heap; round-robin in effect). `round-robin`: the backend picked longest ago.
     * The last two exist for comparison (bench/backends.ts).
     */
    policy: z.enum(['least-loaded', 'cumulative-count', 'round-robin']).default('least-loaded'),
    /**
     * A rollout stays on its previous backend (prefix-cache hits) while that backend is healthy
     * and its load is at most the least loaded one's plus this slack.
     */
    stickySlack: z.number().int().min(0).default(2),
    /** Retries of a failed call (refused, reset, 5xx, timeout, malformed answer) on other backends; 4xx are never retried. */
    retries: z.number().int().min(0).max(100).default(2),
    /** Per-call timeout; a call that takes longer fails as a timeout and is retried elsewhere. 0 disables it. */
    callTimeoutMs: z.number().min(0).default(600_000),
    /**
     * Time from sending a call to the first byte of the answer; longer fails as a timeout and is
     * retried elsewhere. 0 (default) disables it. The token protocols answer in one piece, so their
     * first byte comes when the turn is done: set it above the longest turn you expect.
     */
    firstByteTimeoutMs: z.number().min(0).default(0),
    /**
     * Longest silence between two chunks of an answer once it has started (a server that froze
     * mid-answer); longer fails as a timeout and is retried elsewhere. 0 disables it.
     */
    stallTimeoutMs: z.number().min(0).default(30_000),
    /** Health-probe period. 0 disables probes: backends start healthy and come back on their own. */
    probeIntervalMs: z.number().min(0).default(5_000),
    probeTimeoutMs: z.number().positive().default(2_000),
    /**
     * Consecutive failures (calls or probes) that evict a healthy backend until a probe passes.
     * Its in-flight calls are then aborted and re-sent to another backend (when one is healthy):
     * a frozen backend costs about `failureThreshold` probe periods, not `callTimeoutMs`.
     */
    failureThreshold: z.number().int().min(1).default(2),
    /** Weight of the newest sample in the latency moving average. */
    latencyAlpha: z.number().gt(0).max(1).default(0.2),
  })
  .strict();

/** Options as a caller writes them (all optional). */
export type BackendPoolOptionsInput = z.input<typeof BackendPoolOptionsSchema>;
/** Options after defaults. */
export type BackendPoolOptions = Readonly<z.output<typeof BackendPoolOptionsSchema>>;

/**
 * Validates and fills defaults once; the result is frozen.
 * @throws ValidationError naming each bad field.
 */
export function parseBackendPoolOptions(input: unknown = {}): BackendPoolOptions {
  const r = BackendPoolOptionsSchema.safeParse(input ?? {});
  if (!r.success) {
    const issues = r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
    throw new ValidationError(`invalid backend pool options: ${issues.map((i) => `${i.path || '(root)'}: ${i.message}`).join('; ')}`, issues);
  }
  return Object.freeze(r.data);
}
