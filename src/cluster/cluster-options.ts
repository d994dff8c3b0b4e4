import { z } from 'zod';
import { ValidationError } from '../errors.js';

const positiveMs = z.number().int().positive();

/**
 * Options shared by the gateway and the workers of a Redis cluster. Every node of one cluster
 * must use the same `prefix`. Parsed once by {@link parseClusterOptions} and frozen.
 */
export const ClusterOptionsSchema = z
  .object({
    /** `redis://host:port[/db]` of the Redis holding the queue, the event stream and the results. */
    redis: z.string().regex(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL'),
    /** Key prefix of every key the cluster writes (BullMQ's prefix too). */
    prefix: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'letters, digits, _ . - only').default('rollout'),
    /** How long a result (and a rollout's summary) stays fetchable after it ended. */
    resultTtlSec: z.number().int().positive().default(86_400),
    /** Events kept in the stream for resume (XADD MAXLEN ~). */
    eventsMaxLen: z.number().int().positive().default(100_000),
    /**
     * A worker's job lock: a worker that stops renewing it (killed, frozen) loses its jobs to the
     * others after about `lockDurationMs + 2 × stalledIntervalMs`.
     */
    lockDurationMs: positiveMs.default(30_000),
    /** Period of BullMQ's stalled-job check on each worker. */
    stalledIntervalMs: positiveMs.default(15_000),
    /** Times a job may stall (its worker lost) before it fails as an infra error. */
    maxStalledCount: z.number().int().nonnegative().default(10),
    /** Period of a worker's heartbeat and of the gateway's result sweep. */
    heartbeatMs: positiveMs.default(1_000),
    /**
     * Period at which a worker publishes its in-flight LLM calls per backend and learns the other
     * workers' (the shared least-loaded key); also the staleness of what it knows.
     */
    loadShareMs: positiveMs.default(250),
    /** A worker's published load counts this long after its last publish: a killed worker's load is gone within it (+ one period). */
    loadTtlMs: positiveMs.default(2_000),
    /** Jobs waiting in the queue beyond which submit throws QueueFullError. */
    maxQueued: z.number().int().positive().default(1_000_000),
  })
  .strict();

export type ClusterOptionsInput = z.input<typeof ClusterOptionsSchema>;
export type ClusterOptions = Readonly<z.output<typeof ClusterOptionsSchema>>;

/** Validates cluster options; throws ValidationError naming each bad field. */
export function parseClusterOptions(input: unknown): ClusterOptions {
  const r = ClusterOptionsSchema.safeParse(input ?? {});
  if (!r.success) {
    const issues = r.error.issues.map((i) => ({ path: i.path.map(String).join('.') || '(root)', message: i.message }));
    throw new ValidationError(`invalid cluster options: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, issues);
  }
  return Object.freeze(r.data);
}
