import type { ChatCodec } from '../llm/chat-codec.js';
import type { Instance, SamplingParams } from '../protocol/instance.js';
import type { RolloutState } from '../protocol/events.js';
import type { RolloutResult, TrajectoryPrefixRef } from '../protocol/trajectory.js';
import type { Attempt } from './attempt.js';
import type { RolloutSummary } from './runtime-api.js';
import type { BranchOrigin, BranchStart, TreePlan } from './fork-types.js';

/** What a session is made of; see {@link RolloutSession}. */
export interface RolloutSessionOptions {
  id: string;
  instance: Instance;
  sampling: SamplingParams;
  groupId: string | null;
  /** When it was admitted, on the runtime's clock. */
  submittedAt: number;
  /** Its wall-clock cap from `submittedAt` (retries and backoffs included). */
  wallClockMs: number;
  /** The rollout's tokenizer and chat template: the runtime's, or its job's `custom_tokenizer`. */
  codec: ChatCodec;
  /** Orders the wait for an INIT slot: higher first, FIFO within one (SubmitOptions.priority). Default 0. */
  priority?: number | undefined;
}

/**
 * A rollout across its attempts: identity, the result promise, timings and the current
 * {@link Attempt}. Held in the supervisor's Map; the machine context only has its id.
 *
 * Its lifecycle fields are private and change only through its transitions ({@link begin},
 * {@link enter}, {@link backOff} / {@link backoffEnded}, {@link requestCancel}, {@link settle},
 * {@link release}), its fork data through {@link startAsBranch}, {@link takeBranch} and
 * {@link takeTreeFork}; everyone else reads them through getters.
 *
 * Its {@link state} is the last state its machine reported entering (the machine's
 * `stateEntered` action calls {@link enter}), or `queued` while it backs off before a retry (no
 * machine runs then). It is a mirror, not read from the actor's snapshot, on purpose: XState
 * updates the snapshot only after a whole macrostep, so inside the entry actions (where the
 * `rollout.state` event and its `prev` are made) and after an eventless start (queued →
 * initializing in one step) the snapshot lags or skips the state just entered; and the state
 * must outlive the attempt, whose actor is dropped when it ends.
 */
export class RolloutSession {
  private rseqCount = 0;
  private current: RolloutState = 'queued';
  private att: Attempt | null = null;
  private attemptCount = 0;
  private decided: RolloutResult | null = null;
  private backoffTimer: unknown = null;
  private cancelWhy: string | null = null;
  private resolveResult!: (r: RolloutResult) => void;
  private readonly stageMs = { initMs: 0, runMs: 0, evalMs: 0 };
  private branchOrigin: BranchOrigin | null = null;
  private branchStart: BranchStart | null = null;
  private plan: TreePlan | null = null;
  readonly id: string;
  readonly instance: Instance;
  readonly sampling: SamplingParams;
  readonly groupId: string | null;
  readonly submittedAt: number;
  /** The rollout's tokenizer and chat template: the runtime's, or its job's `custom_tokenizer`. */
  readonly codec: ChatCodec;
  /** Orders the wait for an INIT slot: higher first, FIFO within one (SubmitOptions.priority). */
  readonly priority: number;
  /** When its wall-clock cap passes. */
  readonly wallAt: number;
  readonly promise: Promise<RolloutResult>;

  constructor(o: RolloutSessionOptions) {
    this.id = o.id;
    this.instance = o.instance;
    this.sampling = o.sampling;
    this.groupId = o.groupId;
    this.submittedAt = o.submittedAt;
    this.codec = o.codec;
    this.priority = o.priority ?? 0;
    this.wallAt = o.submittedAt + o.wallClockMs;
    this.promise = new Promise<RolloutResult>((r) => (this.resolveResult = r));
  }

  /** Budget time used per stage, over all attempts (a read-only view). */
  get timing(): Readonly<{ initMs: number; runMs: number; evalMs: number }> {
    return this.stageMs;
  }

  /** An attempt's stage `stage` ended after `ms` of budget time. */
  stageTimed(stage: 'init' | 'run' | 'eval', ms: number): void {
    this.stageMs[stage === 'init' ? 'initMs' : stage === 'run' ? 'runMs' : 'evalMs'] += ms;
  }

  /** The machine state the rollout is in (`queued` while it backs off before a retry). */
  get state(): RolloutState {
    return this.current;
  }

  /** The current attempt; null once the result is released. */
  get attempt(): Attempt | null {
    return this.att;
  }

  /** Attempts started so far (1 plus the retries). */
  get attempts(): number {
    return this.attemptCount;
  }

  /** True once the outcome is decided (the result may still wait for sandboxes to close). */
  get settled(): boolean {
    return this.decided !== null;
  }

  get result(): RolloutResult | null {
    return this.decided;
  }

  /** The clock's handle of the backoff wait before a retry; null when not backing off. */
  get retryTimer(): unknown {
    return this.backoffTimer;
  }

  get cancelReason(): string | null {
    return this.cancelWhy;
  }

  /** The next per-rollout event number (rseq), for the event hub. */
  nextRseq(): number {
    return ++this.rseqCount;
  }

  /** Starts attempt `att`; returns its number. */
  begin(att: Attempt): number {
    this.att = att;
    return ++this.attemptCount;
  }

  /** The machine entered `state`; returns the state it left. */
  enter(state: RolloutState): RolloutState {
    const prev = this.current;
    this.current = state;
    return prev;
  }

  /** Waits before a retry: back to `queued`, with the clock's timer handle. */
  backOff(timer: unknown): void {
    this.current = 'queued';
    this.backoffTimer = timer;
  }

  /** The backoff ended (fired or cancelled); returns its timer handle (null when none). */
  backoffEnded(): unknown {
    const t = this.backoffTimer;
    this.backoffTimer = null;
    return t;
  }

  /** Asks for a cancel for `reason` (a later ask's reason replaces it); returns it. */
  requestCancel(reason: string): string {
    return (this.cancelWhy = reason);
  }

  /** Decides the outcome: `result` is final (a second call is ignored). */
  settle(result: RolloutResult): void {
    this.decided ??= result;
  }

  /** Hands the result out (after the sandboxes closed) and drops the per-attempt data. */
  release(): void {
    this.att = null;
    this.resolveResult(this.decided!);
  }

  get instanceId(): string | null {
    return this.instance.instance_id ?? null;
  }

  get trajectoryId(): string | null {
    return this.instance.trajectory_id ?? null;
  }

  get dataSource(): string {
    return this.instance.data_source;
  }

  /** Makes this new session a branch of a fork (#26), or a tree's node with `plan`. */
  startAsBranch(origin: BranchOrigin | null, start: BranchStart | null, plan: TreePlan | null): void {
    this.branchOrigin = origin;
    this.branchStart = start;
    this.plan = plan;
  }

  /** A branch's start, taken once by its first attempt. */
  takeBranch(): BranchStart | null {
    const b = this.branchStart;
    this.branchStart = null;
    return b;
  }

  /** A branch of a fork (#26): its parent, fork turn and shared prefix; null for a rollout submitted as such. */
  get origin(): BranchOrigin | null {
    return this.branchOrigin;
  }

  /** A tree group's node (#26): the boundaries left where it forks, and the width. */
  get treePlan(): TreePlan | null {
    return this.plan;
  }

  /**
   * The tree plan, when it forks at boundary `turn`: taken, and the plan moves on to its next
   * boundary (none left: null). Null, and nothing changes, when no tree fork is due at `turn`.
   */
  takeTreeFork(turn: number): TreePlan | null {
    const plan = this.plan;
    if (plan === null || plan.branchTurns[0] !== turn) return null;
    this.plan = plan.branchTurns.length > 1 ? { branchTurns: plan.branchTurns.slice(1), width: plan.width } : null;
    return plan;
  }

  /** The rollout stopped at a fork: the rest of its tree plan is spent. */
  treePlanSpent(): void {
    this.plan = null;
  }

  get parentId(): string | null {
    return this.origin?.parentId ?? null;
  }

  get branchTurn(): number | null {
    return this.origin?.branchTurn ?? null;
  }

  /** The shared prefix this rollout's trajectory continues, when it is a branch. */
  get prefix(): TrajectoryPrefixRef | null {
    return this.origin?.prefix ?? null;
  }
}

/** The public view of a rollout: live counts from its attempt, final ones from its result. */
export function summarize(s: RolloutSession): RolloutSummary {
  const att = s.attempt;
  return {
    id: s.id,
    instanceId: s.instanceId,
    groupId: s.groupId,
    trajectoryId: s.trajectoryId,
    dataSource: s.dataSource,
    state: s.state,
    // A branch's result holds only what follows its prefix: its counts add the prefix's.
    turn: s.result ? s.result.trajectory.turns.length + (s.prefix?.turns ?? 0) : (att?.harness?.calls ?? att?.builder.turnCount ?? 0),
    tokens: s.result ? s.result.trajectory.tokens.length + (s.prefix?.tokens ?? 0) : (att?.harness?.traj.totalTokens ?? att?.builder.length ?? 0),
    attempt: s.attempts,
    submittedAt: s.submittedAt,
    result: s.result,
    ...(s.origin ? { parentId: s.origin.parentId, branchTurn: s.origin.branchTurn } : {}),
  };
}
