import type { RolloutEvent, RolloutState } from '../protocol/events.js';
import type { RolloutResult } from '../protocol/trajectory.js';

/** A submitted rollout. */
export interface RolloutHandle {
  readonly id: string;
  /** Resolves with the result for every outcome (a failed rollout is a result, not a rejection). */
  readonly result: Promise<RolloutResult>;
  /** Cancels the rollout in whatever state it is; resolves once its slots and sandboxes are released. */
  cancel(reason?: string): Promise<void>;
}

export interface SubmitOptions {
  /** An id to use (ProRL's `job_id`); generated when absent. Duplicate live ids are refused. */
  id?: string | undefined;
  /** A GRPO group the rollout belongs to. */
  groupId?: string | undefined;
  /**
   * Orders the wait for an INIT slot: higher first, FIFO within one priority, default 0. A
   * rollout already started is never preempted. (The embedded runtime; a cluster ignores it.)
   */
  priority?: number | undefined;
}

/** A GRPO group: n rollouts of one instance, with trajectory ids `0..n-1`. */
export interface GroupHandle {
  readonly groupId: string;
  readonly rollouts: RolloutHandle[];
  /** Resolves with all n results, in trajectory order. */
  readonly results: Promise<RolloutResult[]>;
  cancel(reason?: string): Promise<void>;
}

/** Queue depth and stage occupancy. */
export interface RuntimeStatus {
  state: 'running' | 'closing' | 'closed';
  queued: number;
  stages: { init: { active: number; waiting: number; limit: number }; run: { active: number; waiting: number; limit: number }; eval: { active: number; waiting: number; limit: number } };
  live: number;
  completed: number;
  outcomes: Record<string, number>;
  /**
   * Ended attempts whose sandboxes did not finish closing within `closeTimeoutMs` (their
   * results were not held back): a provider that hangs on close shows here.
   */
  stuckCloses: number;
}

/** A live rollout's summary, for listings. */
export interface RolloutSummary {
  id: string;
  instanceId: string | null;
  groupId: string | null;
  trajectoryId: string | null;
  dataSource: string;
  state: RolloutState;
  turn: number;
  tokens: number;
  attempt: number;
  submittedAt: number;
  result: RolloutResult | null;
}

export interface EventsOptions {
  /** Only this rollout's events. */
  rolloutId?: string | undefined;
  /** Only this group's events. */
  groupId?: string | undefined;
  /** Resume after this runtime-wide `seq` (events still retained are replayed first). */
  after?: number | undefined;
  /** Per-subscriber buffer; when full, the oldest events are dropped and a gap is reported. */
  bufferSize?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** The embedded runtime. */
export interface Runtime {
  /** Validates and admits one rollout. Throws ValidationError, QueueFullError, RuntimeClosedError. */
  submit(instance: unknown, sampling?: unknown, opts?: SubmitOptions): RolloutHandle;
  /** Submits n rollouts of one instance as a GRPO group. */
  submitGroup(instance: unknown, sampling: unknown, n: number, opts?: { groupId?: string }): GroupHandle;
  /** Cancels by id; false when no such live rollout. */
  cancel(id: string, reason?: string): Promise<boolean>;
  /** A live or retained rollout's summary. */
  get(id: string): RolloutSummary | undefined;
  /** Live and retained rollouts. */
  list(filter?: { state?: RolloutState; groupId?: string; outcome?: string }): RolloutSummary[];
  /**
   * Events as an async iterable. A `{type:'gap', from, to}` item is yielded when the cursor is
   * older than the retention or the subscriber's buffer overflowed.
   */
  events(opts?: EventsOptions): AsyncIterable<RolloutEvent | { type: 'gap'; from: number; to: number }>;
  status(): RuntimeStatus;
  /** Stops admitting; with `drain` waits for live rollouts, else cancels them; releases everything. */
  close(opts?: { drain?: boolean }): Promise<void>;
}
