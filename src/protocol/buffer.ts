import { z } from 'zod';

/**
 * The rollout buffer's options as every surface takes them (embedded camelCase here; the HTTP
 * body of `POST /v1/buffers` is {@link BufferCreateRequestSchema}, snake_case, mapped onto it).
 */
export const RolloutBufferOptionsSchema = z
  .object({
    /** B: groups the buffer holds at once, running plus completed-and-not-yet-taken. */
    groups: z.number().int().min(1).max(10_000),
    /** Members kept per group (GRPO's n). */
    n: z.number().int().min(1).max(1_024),
    /** k: extra members started per group; the first n to finish are kept, the rest cancelled (their sandboxes closed). */
    overProvision: z.number().int().min(0).max(1_024).default(0),
    /** Which completed group `next()` gives first: the one finished first, or the one sampled at the oldest weight version. */
    order: z.enum(['completion', 'oldest-version']).default('completion'),
    /** DAPO's dynamic sampling: a group whose rewards are all equal (zero advantage) is dropped and replaced at once by the next prompt. */
    dynamicSampling: z.boolean().default(false),
    /**
     * η at consumption: a complete group whose oldest token is more than this many versions
     * behind the trainer's version when it would be handed out is dropped instead (counted as
     * `stale`) and the next prompt starts in its place. Absent: no bound (numeric versions only).
     */
    maxStaleness: z.number().int().min(0).optional(),
  })
  .strict()
  .superRefine((o, ctx) => {
    // One member has no advantage to compare against: every such group would be dropped.
    if (o.dynamicSampling && o.n < 2) ctx.addIssue({ code: 'custom', path: ['dynamicSampling'], message: 'dynamic sampling needs groups of n >= 2' });
  });
/** Parsed buffer options. */
export type RolloutBufferOptions = z.infer<typeof RolloutBufferOptionsSchema>;
/** Buffer options as a caller writes them (defaults optional). */
export type RolloutBufferOptionsInput = z.input<typeof RolloutBufferOptionsSchema>;

const Instances = z.array(z.record(z.string(), z.unknown())).max(10_000);
const Sampling = z.record(z.string(), z.unknown());

/** `POST /v1/buffers`: the buffer's options and, optionally, its first prompts. */
export const BufferCreateRequestSchema = z
  .object({
    groups: z.number().int().min(1).max(10_000),
    n: z.number().int().min(1).max(1_024),
    over_provision: z.number().int().min(0).max(1_024).optional(),
    order: z.enum(['completion', 'oldest-version']).optional(),
    dynamic_sampling: z.boolean().optional(),
    max_staleness: z.number().int().min(0).optional(),
    /** Sampling params of every prompt added without its own. */
    sampling_params: Sampling.optional(),
    instances: Instances.optional(),
    /** No prompts will follow: once these are consumed, `take` answers `done`. */
    end: z.boolean().optional(),
  })
  .strict()
  .superRefine((o, ctx) => {
    if (o.dynamic_sampling && o.n < 2) ctx.addIssue({ code: 'custom', path: ['dynamic_sampling'], message: 'dynamic sampling needs groups of n >= 2' });
  });
export type BufferCreateRequest = z.infer<typeof BufferCreateRequestSchema>;

/** `POST /v1/buffers/:id/instances`: more prompts (and/or the end of them). */
export const BufferAddRequestSchema = z
  .object({ instances: Instances.default([]), sampling_params: Sampling.optional(), end: z.boolean().optional() })
  .strict();

/**
 * `POST /v1/buffers/:id/take`: up to `max` completed groups, waiting up to `wait_ms` for the
 * first. With `lease_ms` they are leased (at-least-once): each comes with a `lease_id` to ack,
 * and goes back in line when it is not acked within `lease_ms`.
 */
export const BufferTakeRequestSchema = z
  .object({
    max: z.number().int().min(1).max(1_000).default(1),
    wait_ms: z.number().int().min(0).max(600_000).default(0),
    lease_ms: z.number().int().min(1).max(86_400_000).optional(),
  })
  .strict();

/** Lease ids of groups taken with `lease_ms` (or by a manual-ack WebSocket subscription), 1 to 1,000 of them. */
export const LeaseIdsSchema = z.array(z.string().min(1).max(200)).min(1).max(1_000);

/** `POST /v1/buffers/:id/ack` and `/release`. */
export const BufferLeasesRequestSchema = z.object({ leases: LeaseIdsSchema }).strict();

/** The buffer's counters as `/v1` answers them. */
export const BufferStatsSchema = z.object({
  id: z.string(),
  groups: z.number().int(),
  n: z.number().int(),
  over_provision: z.number().int(),
  order: z.enum(['completion', 'oldest-version']),
  dynamic_sampling: z.boolean(),
  queued_prompts: z.number().int(),
  in_flight: z.number().int(),
  ready: z.number().int(),
  /** Groups handed out on a lease and not yet acked. */
  leased: z.number().int(),
  started: z.number().int(),
  /** Groups taken, or leased and acked. */
  delivered: z.number().int(),
  /** Leased groups that came back in line unacked (released, expired, or their subscription closed). */
  returned: z.number().int(),
  /** Groups dropped by dynamic sampling (all rewards equal). */
  dropped: z.number().int(),
  /** Complete groups dropped as staler than max_staleness when they would have been handed out. */
  stale: z.number().int(),
  /** Groups the trainer stopped early. */
  stopped: z.number().int(),
  /** Members cancelled because their group had its n (over-provisioning) or was stopped. */
  cancelled_members: z.number().int(),
  ended: z.boolean(),
  done: z.boolean(),
});
export type BufferStats = z.infer<typeof BufferStatsSchema>;
