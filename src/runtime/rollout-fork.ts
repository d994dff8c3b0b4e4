import { randomUUID } from 'node:crypto';
import { CancelledError, ForkError, QueueFullError, ValidationError, serializeError, toRolloutError } from '../errors.js';
import { memberSeed } from '../llm/member-seed.js';
import type { RolloutEventInput } from '../protocol/events.js';
import type { RolloutResult } from '../protocol/trajectory.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { BranchOrigin, BranchStart, ForkOptions, ForkOutcome as ForkOutcomeOf, TreePlan } from './fork-types.js';
import type { Attempt } from './attempt.js';
import { RolloutSession } from './rollout-session.js';
import { PrefixStore, stripPrefix } from './trajectory-prefix.js';

export type { BranchOrigin, BranchStart, ForkOptions, PendingFork, TreePlan } from './fork-types.js';
/** A fork that was made, with the branch sessions. */
export type ForkOutcome = ForkOutcomeOf<RolloutSession>;

/** What the coordinator sees of the supervisor. */
export interface ForkContext {
  /** A live session, or undefined. */
  live(id: string): RolloutSession | undefined;
  /** Whether `id` is a retained (ended) rollout. */
  ended(id: string): boolean;
  /** Throws QueueFullError / RuntimeClosedError when `n` more rollouts cannot be admitted. */
  checkAdmission(n: number): void;
  /** The RUN stage's limit: no fork is wider. */
  readonly runLimit: number;
  /** The rollout's machine turn (assistant turns sampled so far), or null when it has no actor. */
  machineTurn(s: RolloutSession): number | null;
  /** Admits a session made here (a branch) and starts its first attempt. */
  admit(s: RolloutSession): void;
  /** The clock's now and the wall-clock cap, for a branch's session. */
  now(): number;
  readonly wallClockMs: number;
  emit(s: RolloutSession, ev: RolloutEventInput): void;
}

/**
 * Forks of live rollouts (#26): takes a fork request, holds it until the rollout's next turn
 * boundary, and there snapshots the sandbox into branches (the sandbox's `fork`), stores the
 * token prefix once, and admits one branch rollout per branch sandbox.
 *
 * A **turn boundary** `T` is the point where `T` assistant turns have been sampled and every
 * action they asked for has run, and the next prompt is ready: the start of the loop's `llm`
 * step for turn `T` (before the call). The machine's `turn` counter equals `T` there. A fork
 * asked while an LLM call or an action is in flight takes the next boundary; the rollout goes on
 * meanwhile, and pauses at the boundary only for the fork itself.
 */
export class ForkCoordinator {
  /** The shared prefixes of forks, held while a branch referencing them is live or retained. */
  readonly prefixes = new PrefixStore();
  /** Tree groups watching for their new nodes, by group id. */
  private readonly watchers = new Map<string, (s: RolloutSession) => void>();

  constructor(private readonly ctx: ForkContext) {}

  /** Calls `onNode` for each branch admitted into group `groupId`, until the returned unwatch. */
  watchGroup(groupId: string, onNode: (s: RolloutSession) => void): () => void {
    this.watchers.set(groupId, onNode);
    return () => void this.watchers.delete(groupId);
  }

  /** The rollout entered `state`: past its loop, a pending fork has no boundary left. */
  stateEntered(att: Attempt, state: string): void {
    if (att.fork && (state === 'waitingEval' || state === 'evaluating' || state === 'done')) this.loopEnded(att, 'stopped its agent loop');
  }

  /** A session leaves the supervisor (evicted, or never retained): its prefix reference goes. */
  released(s: RolloutSession): void {
    if (s.prefix) this.prefixes.release(s.prefix.id);
  }

  /**
   * Asks for a fork of live rollout `id` at its next turn boundary. Resolves when the branches
   * are admitted; the rollout is untouched by a refusal.
   * @throws (rejects) ValidationError naming `n` or `atTurn`; ForkError `FORK_NOT_FOUND`,
   *   `FORK_ENDED`, `FORK_UNSUPPORTED`, `FORK_BUSY`; QueueFullError when `n` is past the RUN
   *   limit or the admission room (nothing frozen); at the boundary, the sandbox's error
   *   (SandboxError `FREEZE_UNAVAILABLE`, `FORK_FAILED`: an infra error, the parent goes on).
   */
  request(id: string, opts: ForkOptions): Promise<ForkOutcome> {
    try {
      return this.enqueue(id, opts);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  private enqueue(id: string, opts: ForkOptions): Promise<ForkOutcome> {
    const n = opts?.n;
    if (!Number.isInteger(n) || n < 1) throw new ValidationError('n must be a positive integer', [{ path: 'n', message: `must be a positive integer, got ${JSON.stringify(n)}` }]);
    if (opts.atTurn !== undefined && (!Number.isInteger(opts.atTurn) || opts.atTurn < 0)) {
      throw new ValidationError('atTurn must be an integer ≥ 0', [{ path: 'atTurn', message: `must be an integer ≥ 0, got ${JSON.stringify(opts.atTurn)}` }]);
    }
    if (opts.continueParent !== undefined && typeof opts.continueParent !== 'boolean') {
      throw new ValidationError('continueParent must be a boolean', [{ path: 'continueParent', message: 'expected a boolean' }]);
    }
    const s = this.ctx.live(id);
    if (!s) {
      if (this.ctx.ended(id)) throw new ForkError(`rollout ${id} has ended: only a live rollout can fork`, { code: 'FORK_ENDED' });
      throw new ForkError(`no live rollout ${id}`, { code: 'FORK_NOT_FOUND' });
    }
    const att = s.attempt;
    if (s.settled || !att || att.ended || s.retryTimer !== null || !LOOP_STATES.has(s.state)) {
      throw new ForkError(`rollout ${id} is ${s.settled ? 'ended' : s.retryTimer !== null ? 'waiting to retry' : s.state}: its agent loop is over or not running, so it has no turn boundary ahead`, { code: 'FORK_ENDED', details: { state: s.state } });
    }
    if (att.harness || att.handler?.name === 'harness') {
      throw new ForkError(`rollout ${id} runs an external agent (a harness): its agent process cannot be forked, only a runtime-driven (tool agent) loop can`, { code: 'FORK_UNSUPPORTED' });
    }
    if (att.sandbox && !att.sandbox.fork) throw new ForkError(`the sandbox of rollout ${id} cannot fork (its provider has no fork)`, { code: 'FORK_UNSUPPORTED' });
    if (att.fork) throw new ForkError(`rollout ${id} already waits for a fork at turn ${att.fork.turn}`, { code: 'FORK_BUSY', details: { turn: att.fork.turn } });
    const limit = this.ctx.runLimit;
    if (n > limit) {
      throw new QueueFullError(`a fork of ${n} branches is wider than the RUN stage (limit ${limit}): at most ${limit}`, { n, runLimit: limit });
    }
    this.ctx.checkAdmission(n);
    const next = this.nextBoundary(s);
    if (opts.atTurn !== undefined && opts.atTurn !== next) {
      const when = opts.atTurn < next ? 'has passed' : 'is in the future';
      throw new ValidationError(`atTurn ${opts.atTurn} ${when}: the rollout's next turn boundary is ${next} (it has sampled ${next} assistant turns by then); the sandbox keeps no per-turn history, so only the next boundary can be forked`, [
        { path: 'atTurn', message: `${when}: the next turn boundary is ${next}` },
      ]);
    }
    // The host parks the branches while the rollout works its way to the boundary (its LLM call,
    // its action), so the fork there takes them warm: without this, the first fork of a rollout
    // with no tree plan launches its own (the pool learns a configuration from a fork).
    if (att.sandbox) this.prewarm(s, att.sandbox, n);
    return new Promise<ForkOutcome>((resolve, reject) => {
      // Resolved only by make() below, with this runtime's sessions.
      att.forkRequested({ n, continueParent: opts.continueParent ?? true, turn: next, resolve: resolve as (o: ForkOutcomeOf<unknown>) => void, reject });
    });
  }

  /** True when the loop must stop at boundary `turn` of `s` to fork. Cheap: checked before every LLM call. */
  due(s: RolloutSession, att: Attempt, turn: number): boolean {
    return att.fork !== null || (s.treePlan !== null && s.treePlan.branchTurns[0] === turn);
  }

  /**
   * The loop of `s` is at turn boundary `turn`: makes the fork(s) due there. Resolves true when
   * the rollout stops here (it forked with `continueParent: false`), false when it goes on. A
   * failed fork is reported to its requester (or, for a tree's, as a `rollout.forked` event
   * with no branches) and the rollout goes on untouched.
   */
  async atBoundary(s: RolloutSession, att: Attempt, turn: number): Promise<boolean> {
    const req = att.takeFork();
    const plan = s.takeTreeFork(turn);
    if (req && req.turn !== turn) {
      req.reject(new ForkError(`the fork waited for turn ${req.turn}, the rollout reached ${turn}`, { code: 'FORK_ENDED' }));
      return false;
    }
    // A request and a tree plan at one boundary: the request's (a tree's node forks once per turn).
    const n = req ? req.n : plan!.width;
    const keep = req ? req.continueParent : false;
    const childPlan = plan ? s.treePlan : null;
    // The parent's plan is spent when it stops; when it goes on it keeps the rest.
    if (!keep) s.treePlanSpent();
    try {
      const out = await this.make(s, att, turn, n, keep, childPlan, req !== null);
      req?.resolve(out);
      return !keep;
    } catch (err) {
      if (req) req.reject(err);
      else if (!att.ended) this.ctx.emit(s, { type: 'rollout.forked', rolloutId: s.id, turn, branches: [], prefixId: '', continued: true, lost: [], frozenMs: 0, error: serializeError(toRolloutError(err)) });
      if (att.ended) throw new CancelledError('rollout ended during its fork');
      return false;
    }
  }

  /**
   * Asks the host of `sb`, the sandbox of `s`, to park `n` branches (Sandbox.prewarmFork) for a
   * fork to come (#26): a tree root's first, at its first branch turn (`n` is its plan's width;
   * called once its sandbox is ready), or one asked for with {@link request} (at the request,
   * ahead of its boundary). That fork takes them warm instead of launching its own (a rollout's
   * first fork is otherwise always cold: a host's fork pool learns a configuration from a fork).
   * Nothing for a plain rollout without an `n`. Fire and forget: a failure is only warned
   * about. Neither a failure nor a discard can matter: the parked branches belong to the host's
   * pool, not to the rollout (their leases name no rollout until a fork takes them), so a fork
   * that finds none launches its own as it always did, and ones never taken (the rollout ended
   * first, or failed and retried, or its sandbox was lost) are closed by the pool after its
   * `idleMs`, at its eviction or at the host's exit. A tree's prewarm is its root's only: a branch's
   * configuration is its parent's, already pooled by the fork that made it (for a branch's
   * requested fork, a prewarm only tops the pool up to `n`: it never parks past what is there).
   */
  prewarm(s: RolloutSession, sb: Sandbox, n = s.treePlan?.width ?? 0): void {
    if (n < 1 || !sb.prewarmFork) return;
    sb.prewarmFork(Math.min(n, MAX_PREWARM)).catch((err: unknown) => {
      process.emitWarning(`rollout ${s.id}: the fork prewarm of its sandbox failed (its first fork will launch its own branches): ${toRolloutError(err).message}`, { code: 'ROLLOUT_FORK_PREWARM' });
    });
  }

  /** The rollout's attempt (or its loop) ended with a fork pending: the fork is refused. */
  loopEnded(att: Attempt, why: string): void {
    const req = att.takeFork();
    if (!req) return;
    req.reject(new ForkError(`the rollout ${why} before turn boundary ${req.turn}`, { code: 'FORK_ENDED', details: { turn: req.turn } }));
  }

  private async make(s: RolloutSession, att: Attempt, turn: number, n: number, keep: boolean, plan: TreePlan | null, requested: boolean): Promise<ForkOutcome> {
    const sb = att.sandbox;
    if (!sb?.fork) throw new ForkError(`the sandbox of rollout ${s.id} cannot fork (its provider has no fork)`, { code: 'FORK_UNSUPPORTED' });
    // Capacity again: it may have filled while the fork waited for the boundary (nothing frozen yet).
    // A tree's forks were counted whole when the group was admitted.
    if (requested) this.ctx.checkAdmission(n);
    const ids = Array.from({ length: n }, () => randomUUID());
    const f = await sb.fork({ rolloutIds: ids, keepParent: keep }, att.signal);
    if (att.ended) {
      await Promise.all(f.branches.map((b) => b.close()));
      throw new CancelledError('rollout ended during its fork');
    }
    // The prefix is the record at the boundary, stored once; each branch grows its own copy.
    const prefix = this.prefixes.put(att.builder.fork().build(), s.prefix);
    const origin: BranchOrigin = { parentId: s.id, branchTurn: turn, prefix };
    const branches = ids.map((id, i) => this.admitBranch(s, id, i, origin, { builder: att.builder.fork(), sandbox: f.branches[i]!, handlerState: att.handlerState, lost: f.lost }, plan));
    this.ctx.emit(s, { type: 'rollout.forked', rolloutId: s.id, turn, branches: ids, prefixId: prefix.id, continued: keep, lost: f.lost, frozenMs: f.frozenMs });
    return { parentId: s.id, branches, branchTurn: turn, prefixId: prefix.id, lost: f.lost, frozenMs: f.frozenMs };
  }

  /**
   * Admits branch `i` of a fork of `parent`: same instance (trajectory id
   * `<parent's>.<turn>.<i>`), group, codec and priority, its own seed (when the parent has one),
   * its first attempt starting from `start` at the fork's turn.
   */
  private admitBranch(parent: RolloutSession, id: string, i: number, origin: BranchOrigin, start: BranchStart, plan: TreePlan | null): RolloutSession {
    const sampling = parent.sampling.seed === undefined ? parent.sampling : { ...parent.sampling, seed: memberSeed(parent.sampling.seed, (origin.branchTurn + 1) * 4096 + i + 1) };
    const instance = { ...parent.instance, trajectory_id: `${parent.trajectoryId ?? '0'}.${origin.branchTurn}.${i}` };
    const s = new RolloutSession({ id, instance, sampling, groupId: parent.groupId, submittedAt: this.ctx.now(), wallClockMs: this.ctx.wallClockMs, codec: parent.codec, priority: parent.priority });
    s.startAsBranch(origin, start, plan);
    this.prefixes.retain(origin.prefix.id);
    this.ctx.admit(s);
    if (s.groupId !== null) this.watchers.get(s.groupId)?.(s);
    return s;
  }

  /** The next turn boundary of live `s` (see the class comment). */
  private nextBoundary(s: RolloutSession): number {
    const turn = this.ctx.machineTurn(s) ?? s.branchTurn ?? 0;
    // In llmCalling the boundary of `turn` has been passed (the call is in flight): the next
    // one follows this call and its actions. Elsewhere (before the loop, or acting on turn
    // `turn`'s calls) the next boundary is `turn`.
    return s.state === 'llmCalling' ? turn + 1 : turn;
  }
}

/** The most branches one prewarm asks for (the host's limit; its pool caps it lower, at its size). */
const MAX_PREWARM = 64;

/** States in which a rollout still has a turn boundary ahead. */
const LOOP_STATES: ReadonlySet<string> = new Set(['queued', 'initializing', 'waitingRun', 'llmCalling', 'acting']);

/** A branch's result: its own part of the trajectory, referencing the shared prefix, and its origin. Other results as they are. */
export function branchResult(s: RolloutSession, r: RolloutResult): RolloutResult {
  if (!s.origin) return r;
  r.trajectory = stripPrefix(r.trajectory, s.origin.prefix);
  r.parentId = s.origin.parentId;
  r.branchTurn = s.origin.branchTurn;
  return r;
}
