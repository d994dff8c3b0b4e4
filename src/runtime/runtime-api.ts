import type { RolloutEvent, RolloutState } from '../protocol/events.js';
import type { RolloutResult, Trajectory } from '../protocol/trajectory.js';
import type { ForkOptions } from './fork-types.js';
import type { RolloutTree, TreeOptions } from './rollout-tree.js';
import type { MaterializeOptions } from './trajectory-prefix.js';

export type { ForkOptions } from './fork-types.js';
export type { BranchPoint, RolloutTree, TreeNode, TreeOptions } from './rollout-tree.js';
export type { MaterializeOptions } from './trajectory-prefix.js';

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
   * rollout already started is never preempted. (A cluster passes it to BullMQ as the job's priority.)
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
  /**
   * A tree group (`tree` option, #26): resolves once every node has ended, with the tree's
   * nodes and shared prefixes. `results` then holds every node's result (roots first, then
   * branches as they were forked) and `cancel` ends every node, branches included.
   */
  readonly tree?: Promise<RolloutTree> | undefined;
}

/** Options of `submitGroup`. */
export interface GroupOptions {
  groupId?: string | undefined;
  /**
   * Grow each of the n rollouts into a tree (#26): `width` branches at each turn of
   * `branchTurns`. A node that forks stops there (`continueParent: false`: its children are
   * its continuations; it ends `truncated`, finish `forked`, reward null).
   */
  tree?: TreeOptions | undefined;
}

/** A fork that was made (#26). */
export interface ForkResult {
  parentId: string;
  /** The branches, in order; each a full rollout. */
  rollouts: RolloutHandle[];
  rolloutIds: string[];
  /** The turn boundary forked at: assistant turns sampled before it. */
  branchTurn: number;
  /** The shared prefix every branch's trajectory references (`prefix(id)`). */
  prefixId: string;
  /** What the branches did not get from the parent (each branch's policy is told in its first observation). */
  lost: string[];
  /** How long the parent's processes were frozen, ms. */
  frozenMs: number;
}

/** Forking live rollouts (#26); the embedded runtime has it. */
export interface ForkControl {
  /**
   * Forks live rollout `id` into `n` branches at its next turn boundary (see {@link ForkOptions});
   * resolves when the branches are admitted. Rejects with ValidationError (`n`, `atTurn`),
   * ForkError (`FORK_NOT_FOUND`, `FORK_ENDED`, `FORK_UNSUPPORTED`, `FORK_BUSY`), QueueFullError
   * (past capacity, nothing frozen) or the sandbox's SandboxError (`FREEZE_UNAVAILABLE`,
   * `FORK_FAILED`; the parent goes on untouched).
   */
  fork(id: string, opts: ForkOptions): Promise<ForkResult>;
  /** A stored shared prefix (its own part; a nested one references its base), while a branch referencing it is live or retained. */
  prefix(id: string): Trajectory | undefined;
  /**
   * The full token-exact trajectory of a branch's result (prefix + its own part); any other
   * trajectory as it is. Throws ValidationError `prefix.id` when the prefix is no longer held.
   */
  materialize(t: Trajectory, opts?: MaterializeOptions): Trajectory;
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
  /** A branch of a fork (#26): its parent and the turn boundary it was forked at. */
  parentId?: string | undefined;
  branchTurn?: number | undefined;
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
  submitGroup(instance: unknown, sampling: unknown, n: number, opts?: GroupOptions): GroupHandle;
  /** Forks a live rollout (#26); absent where the runtime cannot (a cluster gateway). */
  fork?: ForkControl['fork'] | undefined;
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
