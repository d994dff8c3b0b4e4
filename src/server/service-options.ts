import { z } from 'zod';
import { ValidationError } from '../errors.js';

/**
 * Options of the HTTP + WebSocket service, parsed once and frozen. Every field has a default, so
 * `parseServiceOptions({})` is a working local service.
 */
export const ServiceOptionsSchema = z
  .object({
    /** Interface to bind. Loopback unless told otherwise: the API runs code in sandboxes. */
    host: z.string().min(1).default('127.0.0.1'),
    /** Port; 0 picks a free one (tests). */
    port: z.number().int().min(0).max(65_535).default(8006),
    /** When set, every route but `/healthz` needs `Authorization: Bearer <token>`. */
    token: z.string().min(1).optional(),
    /** Request body limit in bytes (413 above it). */
    bodyLimitBytes: z.number().int().positive().default(10 * 1024 * 1024),
    /** A request body must arrive within this long after its headers (408 otherwise). */
    bodyTimeoutMs: z.number().int().positive().default(60_000),
    /**
     * A connection with no request in progress (just accepted and silent, sending its headers
     * slowly, or kept alive between requests) is closed after this long. A request in progress
     * (a `/process` held for a whole rollout) is never cut by it.
     */
    connectionIdleMs: z.number().int().positive().default(30_000),
    /**
     * HTTP connections held at once (WebSockets have `wsMaxConnections`). At the cap a new
     * connection closes the one idle longest, so idle sockets cannot keep `/healthz` or a trainer
     * out; only when all are busy is it refused. Keep it under the process's open-file limit.
     */
    maxConnections: z.number().int().positive().default(4_096),
    /** Maximum JSON nesting of a body (400 above it). */
    maxJsonDepth: z.number().int().positive().default(64),
    /** WebSocket ping and app-level heartbeat interval. A peer silent for two intervals is dropped. */
    heartbeatMs: z.number().int().positive().default(15_000),
    /** How often backend load snapshots are pushed to WebSocket clients; 0 turns them off. */
    backendsIntervalMs: z.number().int().min(0).default(1_000),
    /** Bytes queued on one WebSocket above which its events are dropped and reported as a gap. */
    wsSoftLimitBytes: z.number().int().positive().default(1024 * 1024),
    /** A client that stays above the soft limit this long is closed (1008, "slow consumer"). */
    wsSlowCloseMs: z.number().int().positive().default(30_000),
    /** Events one subscription may hold inside the runtime before the oldest are dropped as a gap. */
    wsSubscriptionBuffer: z.number().int().positive().default(10_000),
    /** Subscriptions per WebSocket connection. */
    wsMaxSubscriptions: z.number().int().positive().default(64),
    /** Open WebSocket connections; more are refused with 503. */
    wsMaxConnections: z.number().int().positive().default(2_000),
    /** Largest WebSocket message a client may send. */
    wsMaxPayloadBytes: z.number().int().positive().default(64 * 1024),
    /**
     * WebSocket messages one connection may send per second, on average; `wsMessageBurst` more may
     * come at once. Beyond it the connection is closed (1008): a flooding client cannot take the
     * event loop from `/healthz` and the HTTP routes.
     */
    wsMessagesPerSecond: z.number().positive().default(100),
    /** Messages a WebSocket client may send in a burst above `wsMessagesPerSecond`. */
    wsMessageBurst: z.number().int().positive().default(200),
    /**
     * Rollouts one `/v1/batches` request may ask for (`n` × instances). Above it the request is
     * refused with 413 before any work; a batch under it that the admission queue cannot hold
     * whole is refused with 429, also before any work.
     */
    maxBatchRollouts: z.number().int().positive().default(65_536),
    /**
     * Host directories API clients may name in path-like fields (`instance.repo_dir`, a
     * path-like `sampling_params.custom_tokenizer` or `instance.image`). Empty (the default): no
     * host path may be named through the API at all. A named path must resolve (symlinks
     * followed) inside one of these roots.
     */
    pathRoots: z.array(z.string().min(1)).default([]),
    /**
     * Polar's `runtime.image` (docs/polar.md, "Images"): `strict` runs each session in that image
     * of the image store (after `imageAliases`) and refuses a task whose image is missing;
     * `ignore` drops it and runs sessions on the sandbox's default root.
     */
    polarImage: z.enum(['strict', 'ignore']).default('strict'),
    /**
     * Image names a Polar trainer sends (`runtime.image`, Docker references) → the image-store
     * names they run as; `*` maps every image no other entry names. `rollout serve --image-alias
     * FROM=TO`, repeatable.
     */
    imageAliases: z.record(z.string().min(1).max(500), z.string().min(1).max(500)).default({}),
    /** Rollouts a `/v1/rollouts` listing returns at most. */
    listLimit: z.number().int().positive().default(100_000),
  })
  .strict();

/** Options after defaults, frozen. */
export type ServiceOptions = Readonly<z.output<typeof ServiceOptionsSchema>>;
/** Options as a caller writes them (all optional). */
export type ServiceOptionsInput = z.input<typeof ServiceOptionsSchema>;

/** Parses and freezes service options. Throws ValidationError naming the bad field. */
export function parseServiceOptions(input: ServiceOptionsInput = {}): ServiceOptions {
  const r = ServiceOptionsSchema.safeParse(input);
  if (!r.success) {
    throw new ValidationError(
      'invalid service options',
      r.error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })),
    );
  }
  return Object.freeze(r.data);
}
