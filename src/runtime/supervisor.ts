import { randomUUID } from 'node:crypto';
import { createActor, fromPromise, type InspectionEvent, type Observer } from 'xstate';
import { rolloutMachine, type ActOutput, type CallLlmOutput, type FinalState, type InitOutput, type Stage } from '../../machines/rollout.machine.js';
import {
  BackendError,
  CancelledError,
  InfraError,
  QueueFullError,
  RolloutTimeoutError,
  RuntimeClosedError,
  SandboxError,
  StaleRolloutError,
  TaskError,
  ValidationError,
  serializeError,
  toRolloutError,
  type RolloutError,
} from '../errors.js';
import type { ActContext, HandlerContext, Observation } from '../handlers/agent-handler.js';
import type { HandlerRegistry } from '../handlers/registry.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { GenerateResult, LlmClient } from '../llm/llm-client.js';
import { TrajectoryBuilder } from '../llm/trajectory-builder.js';
import type { RolloutEventInput, RolloutState } from '../protocol/events.js';
import { InstanceSchema, SamplingParamsSchema, type Instance, type SamplingParams } from '../protocol/instance.js';
import type { Message, ToolCall } from '../protocol/messages.js';
import type { Outcome, RolloutResult, Trajectory } from '../protocol/trajectory.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from '../sandbox/sandbox.js';
import type { Clock } from './clock.js';
import { DeadlineIndex } from './deadline-index.js';
import { EventHub } from './event-hub.js';
import { Attempt, RolloutSession } from './rollout-session.js';
import type { RuntimeOptions } from './runtime-options.js';
import { StagePool } from './stage-pool.js';
import type { RolloutSummary, RuntimeStatus } from './runtime-api.js';

/** The parts a supervisor runs on, resolved from the options. */
export interface SupervisorParts {
  llm: LlmClient;
  sandboxes: SandboxProvider;
  codec: ChatCodec;
  registry: HandlerRegistry;
  clock: Clock;
}

const CLIP = 2_000;
const ENDED: Record<FinalState, CancelledError> = {
  done: new CancelledError('rollout done'),
  failed: new CancelledError('rollout failed'),
  timedOut: new CancelledError('rollout timed out'),
  cancelled: new CancelledError('rollout cancelled'),
};
const EMPTY_TRAJECTORY = (): Trajectory => ({ turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] } });

/**
 * Owns every rollout of a runtime: admission, the INIT / RUN / EVAL stage pools, the deadline
 * index and its sweep, retries, cancellation, events and results. A plain class whose typed
 * methods are its mailbox; each rollout attempt is its own root XState actor kept in a Map
 * (one XState system with thousands of spawned children is quadratic, see DESIGN.md).
 *
 * Invariants: every rollout resolves its result exactly once; on every path its slots are
 * released (exit actions, plus a `forget` on every pool when the attempt ends) and every
 * sandbox it made is closed before the result resolves.
 */
export class Supervisor {
  readonly sessions = new Map<string, RolloutSession>();
  private readonly finished = new Map<string, RolloutSession>();
  readonly pools: Record<Stage, StagePool>;
  private readonly deadlines = new DeadlineIndex();
  readonly hub: EventHub;
  private readonly machine;
  private sweepTimer: unknown = null;
  private backoffCount = 0;
  private completedCount = 0;
  private readonly outcomes: Record<string, number> = {};
  state: 'running' | 'closing' | 'closed' = 'running';
  private readonly clock: Clock;

  constructor(
    readonly opts: RuntimeOptions,
    private readonly parts: SupervisorParts,
  ) {
    this.clock = parts.clock;
    this.hub = new EventHub(parts.clock, opts.events.retain, opts.events.bufferSize);
    const grant = (stage: Stage) => (id: string) => this.sessions.get(id)?.attempt?.actor?.send({ type: 'SLOT', stage });
    this.pools = {
      init: new StagePool('init', opts.stages.init, grant('init')),
      run: new StagePool('run', opts.stages.run, grant('run')),
      eval: new StagePool('eval', opts.stages.eval, grant('eval')),
    };
    // Provided once per runtime: the implementations find the rollout by id in the Map.
    this.machine = rolloutMachine.provide({
      actors: {
        initRollout: fromPromise<InitOutput, { rolloutId: string; turn: number }>(({ input }) => this.runInit(input.rolloutId)),
        callLlm: fromPromise<CallLlmOutput, { rolloutId: string; turn: number }>(({ input }) => this.runLlm(input.rolloutId, input.turn)),
        actTools: fromPromise<ActOutput, { rolloutId: string; turn: number }>(({ input }) => this.runAct(input.rolloutId, input.turn)),
        evaluate: fromPromise<void, { rolloutId: string; turn: number }>(({ input }) => this.runEval(input.rolloutId)),
      },
      actions: {
        requestSlot: ({ context }, p) => this.pools[p.stage].request(context.rolloutId),
        withdrawSlot: ({ context }, p) => this.pools[p.stage].withdraw(context.rolloutId),
        releaseSlot: ({ context }, p) => this.pools[p.stage].release(context.rolloutId),
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

  /** Validates the input; throws ValidationError naming the field. */
  validate(instance: unknown, sampling: unknown): { instance: Instance; sampling: SamplingParams } {
    const i = InstanceSchema.safeParse(instance);
    if (!i.success) throw zodToValidation('instance', i.error.issues);
    const s = SamplingParamsSchema.safeParse(sampling ?? {});
    if (!s.success) throw zodToValidation('sampling', s.error.issues);
    return { instance: i.data, sampling: s.data };
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

  /** Admits one validated rollout and starts its first attempt. */
  admit(instance: Instance, sampling: SamplingParams, id: string | undefined, groupId: string | null): RolloutSession {
    const rid = id ?? randomUUID();
    if (this.sessions.has(rid)) throw new ValidationError(`a live rollout already has id '${rid}'`, [{ path: 'id', message: 'duplicate live id' }]);
    this.finished.delete(rid);
    const s = new RolloutSession(rid, instance, sampling, groupId, this.clock.now(), this.opts.wallClockMs);
    this.sessions.set(rid, s);
    this.arm(s);
    this.ensureSweep();
    this.startAttempt(s);
    return s;
  }

  private startAttempt(s: RolloutSession): void {
    const n = ++s.attempts;
    const att = new Attempt(
      n,
      new TrajectoryBuilder({ codec: this.parts.codec, detectDrift: this.opts.detectDrift, enableThinking: s.sampling.enable_thinking }),
      s.sampling.max_iterations ?? this.opts.maxIterations,
      s.sampling.max_output_tokens ?? this.opts.maxOutputTokens,
      s.sampling.max_model_len ?? this.opts.maxModelLen,
    );
    s.attempt = att;
    att.ctx = this.handlerContext(s, att);
    if (this.hub.active) {
      this.emit(s, {
        type: 'rollout.submitted',
        rolloutId: s.id,
        instanceId: s.instanceId,
        trajectoryId: s.trajectoryId,
        groupId: s.groupId,
        dataSource: s.dataSource,
        attempt: n,
      });
    }
    const actor = createActor(this.machine, {
      input: { rolloutId: s.id },
      ...(this.opts.inspect ? { inspect: this.opts.inspect as Observer<InspectionEvent> } : {}),
    });
    att.actor = actor;
    actor.start();
  }

  private handlerContext(s: RolloutSession, att: Attempt): HandlerContext {
    const createSandbox = (spec: SandboxSpec): Promise<Sandbox> => {
      if (att.ended) return Promise.reject(new CancelledError('rollout ended before its sandbox was requested'));
      const p = this.makeSandbox(s, att, spec);
      // Tracked until settled so the end of the attempt can wait for its clean-up; one
      // settle handler for both outcomes (the end maps rejections away itself).
      att.pendingCreates.add(p);
      const untrack = (): void => void att.pendingCreates.delete(p);
      p.then(untrack, untrack);
      return p;
    };
    return { rolloutId: s.id, instance: s.instance, sampling: s.sampling, signal: att.signal, createSandbox };
  }

  private async makeSandbox(s: RolloutSession, att: Attempt, spec: SandboxSpec): Promise<Sandbox> {
    const sb = await this.parts.sandboxes.create(spec, { rolloutId: s.id, signal: att.signal });
    if (att.ended) {
      // The rollout ended (cancel, timeout) while the sandbox was starting: nobody else will close it.
      await sb.close().catch(() => {});
      throw new CancelledError('rollout ended while its sandbox was starting');
    }
    att.sandboxes.add(sb);
    this.progress(att);
    return sb;
  }

  // ───────────────────────────── the stage actors ─────────────────────────────

  /** The live session of `id`; throws CancelledError when it has ended. */
  private live(id: string): RolloutSession {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att || att.ended) throw new CancelledError('rollout is no longer live');
    return s;
  }

  private async runInit(id: string): Promise<InitOutput> {
    const s = this.live(id);
    const att = s.attempt!;
    const handler = this.parts.registry.resolve(s.dataSource);
    att.handler = handler;
    const r = await handler.init(att.ctx!);
    if (att.ended) return { runSlot: false };
    if (r.sandbox && !att.sandboxes.has(r.sandbox)) att.sandboxes.add(r.sandbox);
    att.sandbox = r.sandbox;
    att.handlerState = r.state;
    const opts = s.sampling.enable_thinking === undefined ? undefined : { enableThinking: s.sampling.enable_thinking };
    const ids = this.parts.codec.encodePrompt(r.messages, r.tools, opts);
    att.builder.start(r.messages, r.tools, ids);
    return { runSlot: this.pools.run.tryTake(id) };
  }

  private async runLlm(id: string, turn: number): Promise<CallLlmOutput> {
    const s = this.live(id);
    const att = s.attempt!;
    const b = att.builder;
    const room = att.maxModelLen - b.length;
    if (room <= 0) {
      att.finish = 'context_full';
      return { contextFull: true, evalSlot: this.pools.eval.tryTake(id) };
    }
    const maxTokens = Math.min(att.maxOutputTokens, room);
    if (this.hub.active) this.emit(s, { type: 'llm.start', rolloutId: id, turn, promptTokens: b.length, maxTokens });
    this.setCall(s, att, 'llm', this.opts.llmTimeoutMs);
    const t0 = this.clock.now();
    let res: GenerateResult;
    try {
      res = await this.parts.llm.generate({
        rolloutId: id,
        instance: s.instance,
        turn,
        // A live view of the builder's tokens: it does not change while the call is in flight.
        promptIds: b.promptIds as number[],
        maxTokens,
        sampling: s.sampling,
        preferredBackendId: att.lastBackendId,
        model: this.parts.codec.name,
        signal: att.signal,
      });
    } catch (err) {
      // The server counts tokens its own way: a prompt it calls too long is a full context
      // (outcome truncated, still evaluated), not a broken task.
      if (!(err instanceof TaskError && err.code === 'CONTEXT_FULL') || att.ended) throw err;
      att.callAt = Infinity;
      att.finish = 'context_full';
      return { contextFull: true, evalSlot: this.pools.eval.tryTake(id) };
    }
    if (att.ended) throw new CancelledError('rollout ended during the LLM call');
    att.callAt = Infinity;
    // Kept so the pool can route the next turn to the same backend (prefix-cache hits).
    att.lastBackendId = res.backendId;
    const latencyMs = this.clock.now() - t0;
    if (res.logprobs.length !== res.outputIds.length) {
      throw new BackendError(`backend ${res.backendId} returned ${res.logprobs.length} logprobs for ${res.outputIds.length} ids`, { code: 'BAD_RESPONSE' });
    }
    const parsed = this.parts.codec.parseAssistant(res.outputIds);
    const assistant: Message & { tool_calls: typeof parsed.toolCalls } = { role: 'assistant', content: parsed.content, tool_calls: parsed.toolCalls };
    b.addTurn({ outputIds: res.outputIds, logprobs: res.logprobs, backendId: res.backendId, weightVersion: res.weightVersion, finishReason: res.finishReason, latencyMs }, assistant);
    att.assistant = assistant;
    att.malformed = parsed.malformed;
    this.progress(att);
    if (this.hub.active) {
      this.emit(s, {
        type: 'llm.end',
        rolloutId: id,
        turn,
        backendId: res.backendId,
        promptTokens: b.length - res.outputIds.length,
        outputTokens: res.outputIds.length,
        latencyMs,
        finishReason: res.finishReason,
        content: clip(parsed.content),
        toolCalls: parsed.toolCalls,
      });
    }
    return { contextFull: false };
  }

  private async runAct(id: string, turn: number): Promise<ActOutput> {
    const s = this.live(id);
    const att = s.attempt!;
    const handler = att.handler!;
    this.setCall(s, att, 'action', this.opts.actionTimeoutMs);
    // One ActContext per attempt, refreshed each turn: `act` is awaited, so no handler sees it change under it.
    const ctx = (att.actCtx ??= this.actContext(s, att));
    ctx.sandbox = att.sandbox;
    ctx.state = att.handlerState;
    ctx.turn = turn;
    ctx.assistant = att.assistant!;
    ctx.malformed = att.malformed;
    const res = await handler.act(ctx);
    if (att.ended) throw new CancelledError('rollout ended during the action');
    att.callAt = Infinity;
    if (res.state !== undefined) att.handlerState = res.state;
    const b = att.builder;
    if (res.stop) {
      att.finish = res.stop;
      b.addUntokenizedMessages(res.messages);
      return { stop: true, evalSlot: this.pools.eval.tryTake(id) };
    }
    if (turn + 1 >= att.maxIterations) {
      att.finish = 'max_iterations';
      b.addUntokenizedMessages(res.messages);
      return { stop: true, evalSlot: this.pools.eval.tryTake(id) };
    }
    const ids = this.parts.codec.encodeContinuation(res.messages, b.lastOutputIds, s.sampling.enable_thinking === undefined ? undefined : { enableThinking: s.sampling.enable_thinking });
    if (b.length + ids.length >= att.maxModelLen) {
      att.finish = 'context_full';
      b.addUntokenizedMessages(res.messages);
      return { stop: true, evalSlot: this.pools.eval.tryTake(id) };
    }
    b.addContinuation(res.messages, ids);
    return { stop: false };
  }

  private actContext(s: RolloutSession, att: Attempt): ActContext {
    // A plain literal with the two hooks shared by every rollout (they find their attempt through
    // symbol-keyed fields, which survive a handler's `{ ...ctx }`): the spread and two closures
    // per attempt were measurable on the orchestration benchmark.
    const ctx: HookedActContext = {
      rolloutId: s.id,
      instance: s.instance,
      sampling: s.sampling,
      signal: att.signal,
      createSandbox: att.ctx!.createSandbox,
      sandbox: undefined,
      state: undefined,
      turn: 0,
      assistant: NO_ASSISTANT,
      malformed: [],
      onToolCall: this.toolCallHook,
      onToolResult: this.toolResultHook,
      [SESSION]: s,
      [ATTEMPT]: att,
    };
    return ctx;
  }

  private readonly toolCallHook = makeToolCallHook(this);
  private readonly toolResultHook = makeToolResultHook(this);

  /** @internal For the act-context hooks. */
  toolCalled(s: RolloutSession, att: Attempt, turn: number, c: { callId: string; name: string; arguments: Record<string, unknown> }): void {
    if (att.ended) return;
    this.progress(att);
    if (this.hub.active) this.emit(s, { type: 'tool.call', rolloutId: s.id, turn, callId: c.callId, name: c.name, arguments: c.arguments });
  }

  /** @internal For the act-context hooks. */
  toolReturned(s: RolloutSession, att: Attempt, turn: number, o: Observation): void {
    if (att.ended) return;
    this.progress(att);
    if (this.hub.active) {
      this.emit(s, {
        type: 'tool.result',
        rolloutId: s.id,
        turn,
        callId: o.callId,
        name: o.name,
        output: clip(o.content),
        exitCode: o.exitCode ?? null,
        latencyMs: o.latencyMs ?? 0,
        error: o.error ?? false,
      });
    }
  }

  private async runEval(id: string): Promise<void> {
    const att = this.live(id).attempt!;
    const base = att.ctx!;
    // Spelled out rather than `{ ...att.ctx, … }`: a spread with extra keys costs ~1 µs here.
    const r = await att.handler!.eval({
      rolloutId: base.rolloutId,
      instance: base.instance,
      sampling: base.sampling,
      signal: base.signal,
      createSandbox: base.createSandbox,
      sandbox: att.sandbox,
      state: att.handlerState,
      messages: [...att.builder.messageView],
      finish: att.finish ?? 'error',
    });
    if (att.ended) return;
    if (typeof r?.reward !== 'number' || !Number.isFinite(r.reward)) {
      throw new TaskError(`handler ${att.handler!.name} returned a non-numeric reward`, { code: 'BAD_REWARD', stage: 'eval' });
    }
    att.evalResult = r;
  }

  // ───────────────────────────── machine actions ─────────────────────────────

  private onStageEntered(id: string, stage: Stage): void {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att) return;
    const now = this.clock.now();
    att.activeStage = stage;
    att.stageStart = now;
    att.lastProgress = now;
    att.budgetAt = now + Math.max(0, this.opts.budgetMs - att.countedMs);
    this.arm(s);
  }

  private onStageExited(id: string, stage: Stage): void {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att || att.activeStage !== stage) return;
    const dt = this.clock.now() - att.stageStart;
    att.countedMs += dt;
    s.timing[stage === 'init' ? 'initMs' : stage === 'run' ? 'runMs' : 'evalMs'] += dt;
    att.activeStage = null;
    att.budgetAt = Infinity;
    att.callAt = Infinity;
  }

  private onStateEntered(id: string, state: RolloutState, turn: number): void {
    const s = this.sessions.get(id);
    if (!s) return;
    const prev = s.state;
    s.state = state;
    if (s.attempt) s.attempt.lastProgress = this.clock.now();
    if (this.hub.active) this.emit(s, { type: 'rollout.state', rolloutId: id, state, prev, turn });
  }

  private onError(id: string, error: unknown, stage: Stage | null): void {
    const att = this.sessions.get(id)?.attempt;
    if (!att || att.error) return;
    att.error = toRolloutError(error, stage ?? att.activeStage ?? undefined);
  }

  private onAttemptEnded(id: string, final: FinalState): void {
    const s = this.sessions.get(id);
    const att = s?.attempt;
    if (!s || !att || att.ended) return;
    att.ended = true;
    att.actor = null;
    att.budgetAt = Infinity;
    att.callAt = Infinity;
    // Safety net behind the exit actions: no path may keep a slot.
    this.pools.init.forget(id);
    this.pools.run.forget(id);
    this.pools.eval.forget(id);
    // One shared reason per final state: an Error per rollout (stack capture) costs ~2 µs and garbage.
    att.abort.abort(ENDED[final]);
    const closing = this.closeSandboxes(s, att);

    let outcome: Outcome;
    let error: RolloutError | null = null;
    if (final === 'done') {
      outcome = att.finish === 'max_iterations' || att.finish === 'context_full' ? 'truncated' : 'completed';
    } else if (final === 'cancelled') {
      outcome = 'cancelled';
      error = new CancelledError(s.cancelReason ?? 'cancelled');
    } else if (final === 'timedOut') {
      outcome = 'timed-out';
      error = att.error ?? new RolloutTimeoutError('rollout timed out');
    } else {
      error = att.error ?? new InfraError('rollout failed without an error');
      if (error instanceof TaskError || error instanceof ValidationError) outcome = 'task-error';
      else if (error instanceof CancelledError) outcome = 'cancelled';
      else if (error instanceof RolloutTimeoutError) outcome = 'timed-out';
      else outcome = 'infra-error';
      if (outcome === 'infra-error' && error.retryable && s.attempts <= this.opts.retries.max && this.state === 'running') {
        this.scheduleRetry(s, att, error, closing);
        return;
      }
    }
    this.finalize(s, att, outcome, error, closing);
  }

  // ───────────────────────────── ends, retries, results ─────────────────────────────

  /**
   * Closes the attempt's sandboxes (and waits for creations still in flight, which close
   * themselves). Bounded by `closeTimeoutMs`, enforced by the sweep (no timer per rollout; the
   * closing set is scanned each sweep — it only holds rollouts whose close is still running,
   * which is cheaper than a heap entry per rollout): a provider whose close hangs must not hang
   * the rollout's result or its retry; such a close is counted in `stuckCloses`.
   */
  private closeSandboxes(s: RolloutSession, att: Attempt): Promise<void> {
    const sbs = [...att.sandboxes];
    att.sandboxes.clear();
    if (sbs.length === 0 && att.pendingCreates.size === 0) return Promise.resolve();
    const closes: Promise<unknown>[] = sbs.map((sb) => sb.close().catch(() => {}));
    return new Promise<void>((resolve) => {
      let done = false;
      const finish = (ok: boolean): void => {
        if (done) return;
        done = true;
        s.closeAt = Infinity;
        s.closeCut = null;
        this.closing.delete(s);
        if (!ok) this.stuckCloses++;
        resolve();
      };
      s.closeCut = () => finish(false);
      s.closeAt = this.clock.now() + this.opts.closeTimeoutMs;
      this.closing.add(s);
      for (const p of att.pendingCreates) closes.push(p.catch(() => {}));
      void Promise.all(closes).then(() => finish(true));
    });
  }

  /** Sandbox closes that did not finish within closeTimeoutMs. */
  stuckCloses = 0;
  private readonly closing = new Set<RolloutSession>();

  private scheduleRetry(s: RolloutSession, att: Attempt, error: RolloutError, closing: Promise<void>): void {
    const r = this.opts.retries;
    const delayMs = Math.min(r.backoffMaxMs, r.backoffMs * 2 ** (s.attempts - 1));
    if (this.hub.active) this.emit(s, { type: 'rollout.retry', rolloutId: s.id, attempt: s.attempts + 1, delayMs, error: serializeError(error) });
    s.state = 'queued';
    this.backoffCount++;
    s.retryTimer = this.clock.setTimeout(() => {
      s.retryTimer = null;
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
    }, delayMs);
  }

  /** Cancels a backoff wait (cancel, wall-clock cap, close). */
  private endBackoff(s: RolloutSession, outcome: Outcome, error: RolloutError): void {
    if (s.retryTimer === null) return;
    this.clock.clearTimeout(s.retryTimer);
    s.retryTimer = null;
    this.backoffCount--;
    this.finalize(s, s.attempt!, outcome, error, Promise.resolve());
  }

  private finalize(s: RolloutSession, att: Attempt, outcome: Outcome, error: RolloutError | null, closing: Promise<void>): void {
    if (s.settled) return;
    s.settled = true;
    s.armedAt = Infinity;
    const now = this.clock.now();
    const counted = s.timing.initMs + s.timing.runMs + s.timing.evalMs;
    const wallMs = now - s.submittedAt;
    const ev = outcome === 'completed' || outcome === 'truncated' ? att.evalResult : null;
    const finish = outcome === 'timed-out' ? 'timeout' : outcome === 'cancelled' ? 'cancelled' : outcome === 'infra-error' || outcome === 'task-error' ? 'error' : att.finish;
    const result: RolloutResult = {
      id: s.id,
      instanceId: s.instanceId,
      trajectoryId: s.trajectoryId,
      groupId: s.groupId,
      dataSource: s.dataSource,
      outcome,
      finish,
      reward: ev ? ev.reward : null,
      resolved: ev ? ev.resolved : false,
      evalDetails: ev?.details ?? null,
      error: error ? serializeError(error) : null,
      attempts: s.attempts,
      trajectory: att.builder ? att.builder.build() : EMPTY_TRAJECTORY(),
      timing: {
        queueMs: Math.max(0, wallMs - counted),
        initMs: s.timing.initMs,
        runMs: s.timing.runMs,
        evalMs: s.timing.evalMs,
        countedMs: counted,
        wallMs,
        timeoutTriggered: outcome === 'timed-out',
      },
    };
    s.result = result;
    this.completedCount++;
    this.outcomes[outcome] = (this.outcomes[outcome] ?? 0) + 1;
    if (this.hub.active) {
      this.emit(s, {
        type: 'rollout.result',
        rolloutId: s.id,
        outcome,
        finish,
        reward: result.reward,
        resolved: result.resolved,
        error: result.error,
        timing: result.timing,
        tokens: result.trajectory.tokens.length,
        turns: result.trajectory.turns.length,
      });
    }
    void closing.then(() => {
      this.sessions.delete(s.id);
      if (this.opts.retainResults > 0) {
        this.finished.set(s.id, s);
        if (this.finished.size > this.opts.retainResults) this.finished.delete(this.finished.keys().next().value as string);
      }
      // Drop heavy per-attempt data; the result holds what is kept.
      s.attempt = null;
      if (this.sessions.size === 0) this.stopSweep();
      s.resolve(result);
    });
  }

  // ───────────────────────────── deadlines ─────────────────────────────

  private setCall(s: RolloutSession, att: Attempt, kind: 'llm' | 'action', ms: number): void {
    att.callKind = kind;
    att.callAt = this.clock.now() + ms;
    this.arm(s);
  }

  private progress(att: Attempt): void {
    att.lastProgress = this.clock.now();
  }

  private nextDeadline(s: RolloutSession): number {
    const att = s.attempt;
    let at = s.wallAt;
    if (att && !att.ended) {
      if (att.budgetAt < at) at = att.budgetAt;
      if (att.callAt < at) at = att.callAt;
      if (att.activeStage !== null) {
        const stale = att.lastProgress + this.opts.staleAfterMs;
        if (stale < at) at = stale;
      }
    }
    return at;
  }

  /** Makes sure the index will look at `s` no later than its earliest deadline. */
  private arm(s: RolloutSession): void {
    if (s.settled) return;
    const at = this.nextDeadline(s);
    if (at < s.armedAt) {
      s.armedAt = at;
      this.deadlines.push({ at, rolloutId: s.id });
      // Superseded entries stay until they pop; compact when they dominate the heap.
      if (this.deadlines.size > 4 * this.sessions.size + 1024) {
        this.deadlines.compact((e) => this.sessions.get(e.rolloutId)?.armedAt === e.at);
      }
    }
  }

  private ensureSweep(): void {
    if (this.sweepTimer !== null) return;
    this.sweepTimer = this.clock.setTimeout(() => this.sweep(), this.opts.sweepIntervalMs);
  }

  private stopSweep(): void {
    if (this.sweepTimer === null) return;
    this.clock.clearTimeout(this.sweepTimer);
    this.sweepTimer = null;
  }

  /** One pass of the sweep: looks at every rollout whose entry fell due. */
  private sweep(): void {
    this.sweepTimer = null;
    const now = this.clock.now();
    for (const s of this.closing) if (now >= s.closeAt) s.closeCut?.();
    for (const e of this.deadlines.popDue(now)) {
      const s = this.sessions.get(e.rolloutId);
      if (!s || s.settled || s.armedAt !== e.at) continue;
      s.armedAt = Infinity;
      this.check(s, now);
      this.arm(s);
    }
    if (this.sessions.size > 0) this.ensureSweep();
  }

  private check(s: RolloutSession, now: number): void {
    const att = s.attempt;
    if (now >= s.wallAt) {
      const err = new RolloutTimeoutError(`wall-clock cap of ${this.opts.wallClockMs} ms reached`, { code: 'WALL_CLOCK' });
      if (s.retryTimer !== null) this.endBackoff(s, 'timed-out', err);
      else att?.actor?.send({ type: 'TIMEOUT', error: err });
      return;
    }
    if (!att || att.ended || !att.actor) return;
    if (now >= att.budgetAt) {
      att.actor.send({ type: 'TIMEOUT', error: new RolloutTimeoutError(`time budget of ${this.opts.budgetMs} ms used up`, { code: 'BUDGET', stage: att.activeStage ?? 'run' }) });
      return;
    }
    if (now >= att.callAt) {
      const err =
        att.callKind === 'llm'
          ? new BackendError(`LLM call exceeded llmTimeoutMs=${this.opts.llmTimeoutMs}`, { code: 'LLM_TIMEOUT', stage: 'run' })
          : new SandboxError(`action exceeded actionTimeoutMs=${this.opts.actionTimeoutMs}`, { code: 'ACTION_TIMEOUT', stage: 'run' });
      att.actor.send({ type: 'FAIL', error: err });
      return;
    }
    if (att.activeStage !== null && now >= att.lastProgress + this.opts.staleAfterMs) {
      att.actor.send({ type: 'FAIL', error: new StaleRolloutError(`no progress for ${this.opts.staleAfterMs} ms in ${s.state}`, { stage: att.activeStage }) });
    }
  }

  // ───────────────────────────── public operations ─────────────────────────────

  /** Cancels a live rollout and waits for its slots and sandboxes to be released. False when not live. */
  async cancel(id: string, reason?: string): Promise<boolean> {
    const s = this.sessions.get(id);
    if (!s) return false;
    if (!s.settled) {
      s.cancelReason = reason ?? 'cancelled';
      if (s.retryTimer !== null) this.endBackoff(s, 'cancelled', new CancelledError(s.cancelReason));
      else s.attempt?.actor?.send({ type: 'CANCEL', reason: s.cancelReason });
    }
    await s.promise;
    return true;
  }

  /** A live or retained rollout. */
  find(id: string): RolloutSession | undefined {
    return this.sessions.get(id) ?? this.finished.get(id);
  }

  summary(s: RolloutSession): RolloutSummary {
    const att = s.attempt;
    return {
      id: s.id,
      instanceId: s.instanceId,
      groupId: s.groupId,
      trajectoryId: s.trajectoryId,
      dataSource: s.dataSource,
      state: s.state,
      turn: s.result ? s.result.trajectory.turns.length : (att?.builder.turnCount ?? 0),
      tokens: s.result ? s.result.trajectory.tokens.length : (att?.builder.length ?? 0),
      attempt: s.attempts,
      submittedAt: s.submittedAt,
      result: s.result,
    };
  }

  /** Live then retained rollouts. */
  all(): RolloutSession[] {
    return [...this.sessions.values(), ...[...this.finished.values()].filter((f) => !this.sessions.has(f.id))];
  }

  status(): RuntimeStatus {
    const st = (p: StagePool) => ({ active: p.active, waiting: p.waiting, limit: p.limit });
    return {
      state: this.state,
      queued: this.queued,
      stages: { init: st(this.pools.init), run: st(this.pools.run), eval: st(this.pools.eval) },
      live: this.sessions.size,
      completed: this.completedCount,
      outcomes: { ...this.outcomes },
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
    this.stopSweep();
    this.deadlines.clear();
    this.hub.close();
    this.state = 'closed';
  }

  private emit(s: RolloutSession, ev: RolloutEventInput): void {
    this.hub.emit(s, s.groupId, ev);
  }
}

const SESSION = Symbol('session');
const ATTEMPT = Symbol('attempt');
const NO_ASSISTANT: Message & { tool_calls: ToolCall[] } = Object.freeze({ role: 'assistant', content: '', tool_calls: [] }) as never;

interface HookedActContext extends ActContext {
  [SESSION]: RolloutSession;
  [ATTEMPT]: Attempt;
}

function makeToolCallHook(sup: Supervisor): NonNullable<ActContext['onToolCall']> {
  return function (this: HookedActContext | undefined, c) {
    // Called detached (`const { onToolCall } = ctx`) there is no attempt to report to.
    if (this?.[ATTEMPT]) sup.toolCalled(this[SESSION], this[ATTEMPT], this.turn, c);
  };
}

function makeToolResultHook(sup: Supervisor): NonNullable<ActContext['onToolResult']> {
  return function (this: HookedActContext | undefined, o) {
    if (this?.[ATTEMPT]) sup.toolReturned(this[SESSION], this[ATTEMPT], this.turn, o);
  };
}

function clip(s: string): string {
  return s.length > CLIP ? s.slice(0, CLIP) + '…' : s;
}

function zodToValidation(root: string, issues: { path: PropertyKey[]; message: string }[]): ValidationError {
  const list = issues.map((i) => ({ path: [root, ...i.path.map(String)].join('.'), message: i.message }));
  return new ValidationError(`invalid ${root}: ${list.map((i) => `${i.path}: ${i.message}`).join('; ')}`, list);
}
