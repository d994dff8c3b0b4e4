import { violationCounts } from '../protocol/integrity.js';
import { randomUUID } from 'node:crypto';
import { createActor, fromPromise } from 'xstate';
import { rolloutMachine, type FinalState, type InitOutput, type Stage, type StageInput } from '../../machines/rollout.machine.js';
import { CancelledError, QueueFullError, RuntimeClosedError, ValidationError, serializeError, toRolloutError, type RolloutError } from '../errors.js';
import type { HandlerRegistry } from '../handlers/registry.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { LlmClient } from '../llm/llm-client.js';
import type { RolloutEventInput, RolloutState } from '../protocol/events.js';
import type { Instance, SamplingParams } from '../protocol/instance.js';
import type { Outcome } from '../protocol/trajectory.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import { AttemptSteps, runLoopLogic } from './attempt-steps.js';
import type { Clock } from '../clock.js';
import { DeadlineSweeper } from './deadline-sweeper.js';
import { EventHub } from './event-hub.js';
import { deadlineError, dueDeadline, nextDeadline } from './rollout-deadlines.js';
import { rolloutInspectOptions } from './rollout-inspect.js';
import { buildResult, classifyEnd, doneFinish, retryDelayMs } from './rollout-outcome.js';
import type { Attempt } from './attempt.js';
import { RolloutSession } from './rollout-session.js';
import type { RuntimeOptions } from './runtime-options.js';
import { StagePool } from './stage-pool.js';
import type { RuntimeStatus } from './runtime-api.js';
import { branchResult, ForkCoordinator } from './rollout-fork.js';
import { ENDED, newAttempt } from './attempt-start.js';

/** The parts a supervisor runs on, resolved from the options. */
export interface SupervisorParts extends Partial<import('./weight-control.js').WeightParts> {
  llm: LlmClient;
  sandboxes: SandboxProvider;
  codec: ChatCodec;
  registry: HandlerRegistry;
  clock: Clock;
}

/**
 * Owns every rollout of a runtime: admission, attempts, retries, cancellation and queries. Each
 * rollout attempt is its own root XState actor kept in a Map (one XState system with thousands
 * of spawned children is quadratic). It hands out the rest behind small interfaces: the stage
 * work to {@link AttemptSteps}, the deadlines to a {@link DeadlineSweeper}, each attempt's
 * sandboxes to its own owner, and the outcome and result to pure functions.
 *
 * Invariants: every rollout resolves its result exactly once; on every path its slots are
 * released (exit actions, plus a `forget` on every pool when the attempt ends) and every
 * sandbox it made is closed (or given up on after `closeTimeoutMs`) before the result resolves.
 */
export class Supervisor {
  private readonly sessions = new Map<string, RolloutSession>();
  private readonly finished = new Map<string, RolloutSession>();
  private readonly pools: Record<Stage, StagePool>;
  private readonly sweeper: DeadlineSweeper;
  readonly hub: EventHub;
  private readonly machine;
  private readonly clock: Clock;
  private backoffCount = 0;
  private completedCount = 0;
  private readonly outcomes: Record<string, number> = {};
  private state: 'running' | 'closing' | 'closed' = 'running';
  /** Forks of live rollouts and their branches (#26). */
  readonly forks: ForkCoordinator;

  constructor(
    private readonly opts: RuntimeOptions,
    private readonly parts: SupervisorParts,
  ) {
    const clock = (this.clock = parts.clock);
    this.hub = new EventHub(clock, opts.events.retain, opts.events.bufferSize);
    const grant = (stage: Stage) => (id: string) => this.sessions.get(id)?.attempt?.send({ type: 'SLOT', stage });
    const pools = (this.pools = {
      init: new StagePool('init', opts.stages.init, grant('init')),
      run: new StagePool('run', opts.stages.run, grant('run')),
      eval: new StagePool('eval', opts.stages.eval, grant('eval')),
    });
    const sessions = this.sessions;
    this.sweeper = new DeadlineSweeper({
      clock,
      sweepIntervalMs: opts.sweepIntervalMs,
      liveCount: () => sessions.size,
      session: (id) => sessions.get(id),
      nextDeadline: (s) => nextDeadline(s, opts.staleAfterMs),
      due: (s, now) => this.deadlinePassed(s, now),
    });
    const forks = (this.forks = new ForkCoordinator({
      live: (id) => this.sessions.get(id), ended: (id) => this.finished.has(id), checkAdmission: (n) => this.checkAdmission(n),
      runLimit: opts.stages.run, now: () => clock.now(), wallClockMs: opts.wallClockMs,
      machineTurn: (s) => s.attempt?.machine?.getSnapshot().context.turn ?? null, admit: (s) => this.adopt(s), emit: (s, ev) => this.emit(s, ev),
    }));
    const steps = new AttemptSteps({
      forks,
      opts,
      llm: parts.llm, weights: parts.weights,
      registry: parts.registry,
      clock,
      hub: this.hub,
      pools,
      live: (id) => this.live(id),
      callStarted: (s) => this.sweeper.track(s),
    });
    // Provided once per runtime: the implementations find the rollout by id in the Map.
    this.machine = rolloutMachine.provide({
      actors: {
        initRollout: fromPromise<InitOutput, StageInput>(({ input }) => steps.init(input.rolloutId)),
        runLoop: runLoopLogic(steps),
        evaluate: fromPromise<void, StageInput>(({ input }) => steps.eval(input.rolloutId)),
      },
      guards: { initSlotHeld: ({ context }) => pools.init.holds(context.rolloutId) },
      actions: {
        // Priority orders only the INIT queue (who starts first); started work is never overtaken.
        requestSlot: ({ context }, p) => pools[p.stage].request(context.rolloutId, p.stage === 'init' ? (this.sessions.get(context.rolloutId)?.priority ?? 0) : 0),
        withdrawSlot: ({ context }, p) => pools[p.stage].withdraw(context.rolloutId),
        releaseSlot: ({ context }, p) => pools[p.stage].release(context.rolloutId),
        stageEntered: ({ context }, p) => this.onStageEntered(context.rolloutId, p.stage),
        stageExited: ({ context }, p) => this.onStageExited(context.rolloutId, p.stage),
        stateEntered: ({ context }, p) => this.onStateEntered(context.rolloutId, p.state as RolloutState, context.turn),
        recordError: ({ context }, p) => this.onError(context.rolloutId, p.error, p.stage),
        ended: ({ context }, p) => this.onAttemptEnded(context.rolloutId, p.state),
      },
    });
  }

  // ───────────────────────────── admission ─────────────────────────────

  /** Rollouts admitted and not yet holding an INIT slot (waiting, or backing off before a retry). */
  get queued(): number {
    return this.pools.init.waiting + this.backoffCount;
  }

  /** Throws RuntimeClosedError / QueueFullError when `n` more rollouts cannot be admitted. */
  checkAdmission(n: number): void {
    if (this.state !== 'running') throw new RuntimeClosedError();
    if (this.queued + n > this.opts.maxQueued) {
      throw new QueueFullError(`admission queue is full (${this.queued} queued, limit maxQueued=${this.opts.maxQueued})`, {
        queued: this.queued,
        maxQueued: this.opts.maxQueued,
      });
    }
  }

  /** Admits one validated rollout and starts its first attempt (`priority`: its place in the INIT queue). Throws ValidationError on a duplicate live id. */
  admit(instance: Instance, sampling: SamplingParams, id: string | undefined, groupId: string | null, codec: ChatCodec = this.parts.codec, priority = 0): RolloutSession {
    const rid = id ?? flatUuid();
    if (this.sessions.has(rid)) throw new ValidationError(`a live rollout already has id '${rid}'`, [{ path: 'id', message: 'duplicate live id' }]);
    this.finished.delete(rid);
    const s = new RolloutSession({ id: rid, instance, sampling, groupId, submittedAt: this.clock.now(), wallClockMs: this.opts.wallClockMs, codec, priority });
    this.adopt(s);
    return s;
  }

  /** Takes a new session in and starts its first attempt. */
  private adopt(s: RolloutSession): void {
    this.sessions.set(s.id, s);
    this.sweeper.track(s);
    this.startAttempt(s);
  }

  // ───────────────────────────── attempts ─────────────────────────────

  private startAttempt(s: RolloutSession): void {
    const att = newAttempt(s, this.opts, this.parts.sandboxes, this.clock);
    const n = s.begin(att);
    if (this.hub.active) {
      this.emit(s, {
        type: 'rollout.submitted',
        rolloutId: s.id,
        instanceId: s.instanceId,
        trajectoryId: s.trajectoryId,
        groupId: s.groupId,
        dataSource: s.dataSource,
        attempt: n,
        ...(s.origin ? { parentId: s.origin.parentId, branchTurn: s.origin.branchTurn } : {}),
      });
    }
    const input = { rolloutId: s.id, turn: s.branchTurn ?? 0 };
    // Without an inspector the options are the input alone (no options object to build and spread).
    const options = this.opts.inspect === undefined ? { input } : { input, ...rolloutInspectOptions(this.opts.inspect, { rolloutId: s.id, groupId: s.groupId, attempt: n }) };
    // A free INIT slot, taken before createActor computes the initial state: no SLOT round trip (docs/core.md).
    this.pools.init.tryTake(s.id);
    att.machineStarted(createActor(this.machine, options)).start();
  }

  /** The live session of `id`; throws CancelledError when it has ended. */
  private live(id: string): RolloutSession {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att || att.ended) throw new CancelledError('rollout is no longer live');
    return s;
  }

  // ───────────────────────────── machine actions ─────────────────────────────

  private onStageEntered(id: string, stage: Stage): void {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att) return;
    att.stageEntered(stage, this.clock.now(), this.opts.budgetMs);
    this.sweeper.track(s);
  }

  private onStageExited(id: string, stage: Stage): void {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att) return;
    const dt = att.stageExited(stage, this.clock.now());
    if (dt !== null) s.stageTimed(stage, dt);
  }

  private onStateEntered(id: string, state: RolloutState, turn: number): void {
    const s = this.sessions.get(id);
    if (!s) return;
    const prev = s.enter(state);
    s.attempt?.progressed(this.clock.now());
    if (s.attempt?.fork) this.forks.stateEntered(s.attempt, state);
    if (this.hub.active) this.emit(s, { type: 'rollout.state', rolloutId: id, state, prev, turn });
  }

  private onError(id: string, error: unknown, stage: Stage | null): void {
    const att = this.sessions.get(id)?.attempt;
    if (!att || att.error) return;
    att.failedWith(toRolloutError(error, stage ?? att.activeStage ?? undefined));
  }

  private onAttemptEnded(id: string, final: FinalState): void {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att || att.ended) return;
    // Its deadlines are cleared and its machine gets no more events.
    att.end();
    this.forks.loopEnded(att, final === 'done' ? 'ended' : `ended (${final})`);
    // Safety net behind the exit actions: no path may keep a slot.
    this.pools.init.forget(id);
    this.pools.run.forget(id);
    this.pools.eval.forget(id);
    att.abortCalls(ENDED[final]);
    // A provider whose close hangs must not hang the rollout's result or its retry.
    const closes = att.sandboxes.closeAll();
    const closing = closes ? this.sweeper.bound(closes, this.opts.closeTimeoutMs) : Promise.resolve();
    const d = classifyEnd({
      final,
      finish: final === 'done' ? doneFinish(att.finish, att.builder.lastFinishReason) : att.finish,
      error: att.error,
      cancelReason: s.cancelReason,
      attempts: s.attempts,
      // A branch is not retried: the snapshot it started from goes with its first attempt.
      maxRetries: s.origin ? 0 : this.opts.retries.max,
      running: this.state === 'running',
    });
    if (d.retry) this.scheduleRetry(s, att, d.error!, closing);
    else this.finalize(s, att, d.outcome, d.error, closing);
  }

  /** Enforces whichever deadline of `s` has passed (called by the sweeper). */
  private deadlinePassed(s: RolloutSession, now: number): void {
    const kind = dueDeadline(s, now, this.opts.staleAfterMs);
    if (kind === null) return;
    const error = deadlineError(kind, s, this.opts);
    if (kind === 'wall' && s.retryTimer !== null) this.endBackoff(s, 'timed-out', error);
    else if (kind === 'wall' || kind === 'budget') s.attempt?.send({ type: 'TIMEOUT', error });
    else s.attempt?.send({ type: 'FAIL', error });
  }

  // ───────────────────────────── retries and results ─────────────────────────────

  private scheduleRetry(s: RolloutSession, att: Attempt, error: RolloutError, closing: Promise<void>): void {
    const delayMs = retryDelayMs(this.opts.retries, s.attempts);
    if (this.hub.active) this.emit(s, { type: 'rollout.retry', rolloutId: s.id, attempt: s.attempts + 1, delayMs, error: serializeError(error) });
    this.backoffCount++;
    s.backOff(this.clock.setTimeout(() => {
      s.backoffEnded();
      this.backoffCount--;
      // The previous attempt's sandboxes are closed before the fresh one starts.
      void closing.then(() => {
        if (s.settled) return;
        // Cancelled between the end of the backoff and the close of the old sandboxes.
        if (s.cancelReason !== null) {
          this.finalize(s, att, 'cancelled', new CancelledError(s.cancelReason), Promise.resolve());
          return;
        }
        if (this.state !== 'running') {
          this.finalize(s, att, 'infra-error', error, Promise.resolve());
          return;
        }
        this.startAttempt(s);
      });
    }, delayMs));
  }

  /** Cancels a backoff wait (cancel, wall-clock cap, close). */
  private endBackoff(s: RolloutSession, outcome: Outcome, error: RolloutError): void {
    if (s.retryTimer === null) return;
    this.clock.clearTimeout(s.backoffEnded());
    this.backoffCount--;
    this.finalize(s, s.attempt!, outcome, error, Promise.resolve());
  }

  private finalize(s: RolloutSession, att: Attempt, outcome: Outcome, error: RolloutError | null, closing: Promise<void>): void {
    if (s.settled) return;
    const result = branchResult(s, buildResult(s, att, outcome, error, this.clock.now(), this.parts.weights?.trainerVersion ?? null));
    s.settle(result);
    this.sweeper.forget(s);
    this.completedCount++;
    this.outcomes[outcome] = (this.outcomes[outcome] ?? 0) + 1;
    if (this.hub.active) {
      this.emit(s, {
        type: 'rollout.result',
        rolloutId: s.id,
        outcome,
        finish: result.finish,
        reward: result.reward,
        resolved: result.resolved,
        error: result.error,
        timing: result.timing,
        tokens: result.trajectory.tokens.length,
        turns: result.trajectory.turns.length,
        ...(result.integrity?.violations.length ? { violations: violationCounts(result.integrity.violations) } : {}),
      });
    }
    // `closing` never rejects (DeadlineSweeper.bound resolves on the closes' settling or the cut).
    void closing.then(() => {
      this.sessions.delete(s.id);
      if (this.opts.retainResults > 0) {
        this.finished.set(s.id, s);
        const old = this.finished.size > this.opts.retainResults ? this.finished.values().next().value : undefined;
        if (old) {
          this.finished.delete(old.id);
          this.forks.released(old);
        }
      } else this.forks.released(s);
      if (this.sessions.size === 0) this.sweeper.idle();
      // Drops the heavy per-attempt data (the result holds what is kept) and resolves.
      s.release();
    });
  }

  // ───────────────────────────── public operations ─────────────────────────────

  /** Cancels a live rollout and waits for its slots and sandboxes to be released. False when not live. */
  async cancel(id: string, reason?: string): Promise<boolean> {
    const s = this.sessions.get(id);
    if (!s) return false;
    if (!s.settled) {
      const why = s.requestCancel(reason ?? 'cancelled');
      if (s.retryTimer !== null) this.endBackoff(s, 'cancelled', new CancelledError(why));
      else s.attempt?.send({ type: 'CANCEL', reason: why });
    }
    await s.promise;
    return true;
  }

  /** A live or retained rollout. */
  find(id: string): RolloutSession | undefined {
    return this.sessions.get(id) ?? this.finished.get(id);
  }

  /** Live then retained rollouts. */
  all(): RolloutSession[] {
    return [...this.sessions.values(), ...[...this.finished.values()].filter((f) => !this.sessions.has(f.id))];
  }

  /** Counts for `/status` and metrics. */
  status(): RuntimeStatus {
    const st = (p: StagePool) => ({ active: p.active, waiting: p.waiting, limit: p.limit });
    return {
      state: this.state,
      queued: this.queued,
      stages: { init: st(this.pools.init), run: st(this.pools.run), eval: st(this.pools.eval) },
      live: this.sessions.size,
      completed: this.completedCount,
      outcomes: { ...this.outcomes },
      stuckCloses: this.sweeper.overdue,
    };
  }

  /** Stops admitting; drains or cancels every live rollout; stops the sweep and ends event streams. */
  async shutdown(drain: boolean): Promise<void> {
    if (this.state === 'running') this.state = 'closing';
    const live = [...this.sessions.values()];
    if (drain) await Promise.all(live.map((s) => s.promise));
    else await Promise.all(live.map((s) => this.cancel(s.id, 'runtime closed')));
    // Anything admitted meanwhile by a retry resolves too.
    while (this.sessions.size > 0) await Promise.all([...this.sessions.values()].map((s) => this.cancel(s.id, 'runtime closed')));
    this.sweeper.stop();
    this.hub.close();
    this.state = 'closed';
  }

  private emit(s: RolloutSession, ev: RolloutEventInput): void { this.hub.emit(s, s.groupId, ev); }
}

/**
 * A random UUID as one flat string. Node builds `randomUUID()` by concatenating 20 pieces, and V8
 * keeps such a string as a tree of ~20 cons cells (~0.5 KB) for as long as it lives — here the
 * whole rollout, as the key of every map it is in. `| 0` (ToNumber) flattens it in place, so the
 * tree's cells die young instead of being copied and promoted with the rollout.
 */
function flatUuid(): string {
  const id = randomUUID();
  void ((id as unknown as number) | 0);
  return id;
}
