import { fromCallback } from 'xstate';
import type { ActOutput, CallLlmOutput, InitOutput, Stage, StageInput, StepCommand, StepEvent } from '../../machines/rollout.machine.js';
import { BackendError, CancelledError, TaskError } from '../errors.js';
import type { ActContext, EvalContext, Observation } from '../proxy/agent-contract.js';
import type { HandlerRegistry } from '../handlers/registry.js';
import type { GenerateRequest, GenerateResult, LlmClient } from '../llm/llm-client.js';
import { joinPartial, segmented, type SegmentedResult } from '../llm/partial-generation.js';
import type { RolloutEventInput } from '../protocol/events.js';
import type { Message } from '../protocol/messages.js';
import type { Clock } from '../clock.js';
import { HarnessSteps } from './harness-steps.js';
import type { EventHub } from './event-hub.js';
import type { Attempt } from './attempt.js';
import type { RolloutSession } from './rollout-session.js';
import type { RuntimeOptions } from './runtime-options.js';
import type { StagePool } from './stage-pool.js';
import type { WeightControl } from './weight-control.js';
import { checkTokenAge, observeTurn } from './token-age.js';
import { contextLimitError, isEngineLengthRefusal } from './context-limit.js';
import { integrityError } from './integrity-cost.js';
import { effectivePolicy, RolloutIntegrity } from './integrity-monitor.js';
import type { ForkCoordinator } from './rollout-fork.js';

/** What the steps see of their owner (the supervisor). */
export interface StepsContext {
  readonly opts: RuntimeOptions;
  readonly llm: LlmClient;
  readonly registry: HandlerRegistry;
  readonly clock: Clock;
  readonly hub: EventHub;
  readonly pools: Record<Stage, StagePool>;
  /** The live session of `id`; throws CancelledError when it has ended. */
  live(id: string): RolloutSession;
  /** Pause / staleness gate of new LLM calls; absent: calls never wait. */
  readonly weights?: WeightControl | undefined;
  /** A call (LLM or action) of `s` started: its timeout is now `att.callAt`. */
  callStarted(s: RolloutSession): void;
  /** Forks of live rollouts (#26), made at turn boundaries. */
  readonly forks?: Pick<ForkCoordinator, 'due' | 'atBoundary' | 'loopEnded' | 'prewarm'> | undefined;
}

const CLIP = 2_000;
/** The outputs of a step after which the loop goes on: shared, as the machine only reads them. */
const LLM_GOES_ON: CallLlmOutput = Object.freeze({ contextFull: false });
const ACT_GOES_ON: ActOutput = Object.freeze({ stop: false });
/** Re-issues of one aborted generation before its partial turn is kept as it is (an engine that aborts every call must not loop). */
const MAX_RESUMES = 8;

/**
 * The work of one attempt's stages, as the rollout machine's four actors run it: `init` (the
 * handler's init, the prompt), `llm` (one generation), `act` (the handler acts on the reply) and
 * `eval` (the handler grades the trajectory), plus the tool hooks that report a handler's tool
 * calls as events and progress. Each step looks its rollout up by id and checks after every
 * await that the attempt has not ended, so a late answer never touches a newer attempt.
 */
export class AttemptSteps {
  /** The loop of an attempt whose agent runs on its own (the `harness` family). */
  private readonly harness: HarnessSteps;

  constructor(private readonly ctx: StepsContext) {
    this.harness = new HarnessSteps(ctx, { startCall: (s, att, kind, ms) => this.startCall(s, att, kind, ms), emit: (s, ev) => this.emit(s, ev), resumeAborted: (s, att, req, res) => this.resumeAborted(s, att, req, res) });
  }

  async init(id: string): Promise<InitOutput> {
    const s = this.ctx.live(id);
    const att = s.attempt!;
    const handler = this.ctx.registry.resolve(s.dataSource);
    att.handlerResolved(handler);
    // A branch (#26) starts from its fork: sandbox, handler state and tokens are its parent's at
    // the boundary (set when its attempt started); only an integrity baseline is its own.
    if (s.origin) return this.initBranch(s, att);
    const r = await handler.init(att.ctx);
    if (att.ended) return { runSlot: false };
    att.initialized(r.sandbox, r.state);
    // A tree's root will fork at its first branch turn: its host parks the branches now (#26).
    // A field read for a rollout without a tree; nothing else.
    if (s.treePlan !== null && r.sandbox) this.ctx.forks?.prewarm(s, r.sandbox);
    const policy = effectivePolicy(s.instance.integrity, handler.integrityDefaults?.(s.instance));
    if (policy) {
      // The baseline after the sandbox's setup, before the agent's first action.
      const monitor = new RolloutIntegrity(policy);
      att.monitored(monitor);
      await monitor.start(r.sandbox);
      if (att.ended) return { runSlot: false };
    }
    if (r.external) {
      this.harness.start(s, att, r.external);
      return { runSlot: this.ctx.pools.run.tryTake(id) };
    }
    const ids = s.codec.encodePrompt(r.messages, r.tools, thinking(s));
    att.builder.start(r.messages, r.tools, ids);
    return { runSlot: this.ctx.pools.run.tryTake(id) };
  }

  private async initBranch(s: RolloutSession, att: Attempt): Promise<InitOutput> {
    const policy = effectivePolicy(s.instance.integrity, att.handler!.integrityDefaults?.(s.instance));
    if (policy) {
      const monitor = new RolloutIntegrity(policy);
      att.monitored(monitor);
      await monitor.start(att.sandbox);
      if (att.ended) return { runSlot: false };
    }
    return { runSlot: this.ctx.pools.run.tryTake(s.id) };
  }

  async llm(id: string, turn: number): Promise<CallLlmOutput> {
    const { ctx } = this;
    const s = ctx.live(id);
    const att = s.attempt!;
    if (att.harness) {
      ctx.forks?.loopEnded(att, 'runs an external agent (a harness), which cannot fork,');
      return this.harness.llm(s, att, turn);
    }
    // A turn boundary (#26): a fork due here is made before the call.
    if (ctx.forks?.due(s, att, turn)) {
      if (await ctx.forks.atBoundary(s, att, turn)) {
        att.finishedWith('forked');
        return { contextFull: false, forked: true };
      }
      if (att.ended) throw new CancelledError('rollout ended during its fork');
    }
    const b = att.builder;
    const room = att.maxModelLen - b.length;
    // Nothing sampled yet and no room: a configuration mistake, not a trainable truncation.
    if (room <= 0 && turn === 0) throw contextLimitError({ promptTokens: b.length, maxTokens: att.maxOutputTokens, maxModelLen: att.maxModelLen });
    if (room <= 0) {
      att.finishedWith('context_full');
      return { contextFull: true, evalSlot: ctx.pools.eval.tryTake(id) };
    }
    const maxTokens = Math.min(att.maxOutputTokens, room);
    // Paused for a weight sync, or too far ahead of the trainer: wait before the call starts.
    if (ctx.weights && !ctx.weights.admits(turn === 0)) await this.waitForGeneration(s, att, ctx.weights, turn === 0);
    // The oldest token's age against the trainer, after the wait (an update may land during it).
    const aged = checkTokenAge(att, turn, ctx.weights?.trainerVersion ?? null, ctx.opts.staleTokens);
    if (aged.kind === 'restart') throw aged.error;
    if (aged.kind === 'finish') {
      att.finishedWith('stale_tokens');
      return { contextFull: true, evalSlot: ctx.pools.eval.tryTake(id) };
    }
    if (ctx.hub.active) this.emit(s, { type: 'llm.start', rolloutId: id, turn, promptTokens: b.length, maxTokens });
    this.startCall(s, att, 'llm', ctx.opts.llmTimeoutMs);
    const t0 = ctx.clock.now();
    let res: GenerateResult;
    const req: GenerateRequest = {
      rolloutId: id,
      instance: s.instance,
      turn,
      // The builder's prompt, made once per turn; build() hands it out as this turn's promptIds.
      promptIds: b.promptIds as number[],
      maxTokens,
      sampling: s.sampling,
      preferredBackendId: att.lastBackendId,
      signal: att.signal,
      chat: b.chat,
      // Routes the call only to backends serving this rollout's tokenizer (#17).
      model: s.codec.name,
    };
    try {
      res = await ctx.llm.generate(req);
      if (res.finishReason === 'abort' && !att.ended) res = await this.resumeAborted(s, att, req, res);
    } catch (err) {
      // Our own count left room, so the engine's context is not the one configured: an
      // infra-error naming the numbers, never a `truncated` rollout scored 0 (context-limit.ts).
      if (isEngineLengthRefusal(err) && !att.ended) throw contextLimitError({ promptTokens: b.length, maxTokens, maxModelLen: att.maxModelLen, engine: err.message });
      throw err;
    }
    if (att.ended) throw new CancelledError('rollout ended during the LLM call');
    // The backend is kept so the pool can route the next turn to it (prefix-cache hits).
    att.callReturned(res.backendId);
    const latencyMs = ctx.clock.now() - t0;
    if (res.logprobs.length !== res.outputIds.length) {
      throw new BackendError(`backend ${res.backendId} returned ${res.logprobs.length} logprobs for ${res.outputIds.length} ids`, { code: 'BAD_RESPONSE' });
    }
    const parsed = s.codec.parseAssistant(res.outputIds);
    const assistant: Message & { tool_calls: typeof parsed.toolCalls } = { role: 'assistant', content: parsed.content, tool_calls: parsed.toolCalls };
    // The client's result itself (with `weightVersions` when it was resumed), not a per-turn copy.
    b.addTurn(res as GenerateResult & Partial<SegmentedResult>, assistant, latencyMs);
    if (ctx.opts.staleTokens) observeTurn(att, res.weightVersion, (res as Partial<SegmentedResult>).weightVersions, res.outputIds.length);
    att.replied(assistant, parsed.malformed);
    this.progress(att);
    if (ctx.hub.active) {
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
    return LLM_GOES_ON;
  }

  async act(id: string, turn: number): Promise<ActOutput> {
    const { ctx } = this;
    const s = ctx.live(id);
    const att = s.attempt!;
    if (att.harness) {
      const out = await this.harness.act(s, att);
      // The harness' work between two LLM calls is one action.
      if (att.integrity) await this.observeIntegrity(att, turn);
      return out;
    }
    const handler = att.handler!;
    // The last action's observation ran during the LLM call: done before this action starts.
    if (att.integrity) await this.settleIntegrity(att);
    this.startCall(s, att, 'action', ctx.opts.actionTimeoutMs);
    // A fresh context per turn, with hooks bound to this attempt and turn: a handler may keep,
    // spread or destructure it (`const { onToolCall } = ctx`) and its events still arrive.
    // Object.assign then sets, not `{ ...base, turn, ... }`: V8 builds a spread with extra keys
    // on a slow path (~40x slower here), and it was ~3% of the CPU profile of
    // bench/orchestration.ts (`ratio_vs_bare`).
    const actx = Object.assign({}, att.ctx) as ActContext;
    actx.sandbox = att.sandbox;
    actx.state = att.handlerState;
    actx.turn = turn;
    actx.assistant = att.assistant!;
    actx.malformed = att.malformed;
    actx.onToolCall = (c) => this.toolCalled(s, att, turn, c);
    actx.onToolResult = (o) => this.toolReturned(s, att, turn, o);
    const res = await handler.act(actx);
    if (att.ended) throw new CancelledError('rollout ended during the action');
    if (att.integrity) {
      // Under `fail` (or when no LLM call follows) the observation is awaited; otherwise it runs during the next LLM call.
      if (res.stop || turn + 1 >= att.maxIterations || att.integrity.policy.action === 'fail') await this.observeIntegrity(att, turn);
      else att.integrity.observeInBackground(att.sandbox, turn);
    }
    att.callReturned();
    if (res.state !== undefined) att.stateChanged(res.state);
    const b = att.builder;
    // A branch's first observation says what its fork did not carry (#26).
    const lostNote = att.takeLostNote();
    if (lostNote !== null) res.messages.push({ role: 'user', content: lostNote });
    if (res.stop) {
      att.finishedWith(res.stop);
      b.addUntokenizedMessages(res.messages);
      return { stop: true, evalSlot: ctx.pools.eval.tryTake(id) };
    }
    if (turn + 1 >= att.maxIterations) {
      att.finishedWith('max_iterations');
      b.addUntokenizedMessages(res.messages);
      return { stop: true, evalSlot: ctx.pools.eval.tryTake(id) };
    }
    const ids = s.codec.encodeContinuation(res.messages, b.lastOutputIds, thinking(s));
    if (b.length + ids.length >= att.maxModelLen) {
      att.finishedWith('context_full');
      b.addUntokenizedMessages(res.messages);
      return { stop: true, evalSlot: ctx.pools.eval.tryTake(id) };
    }
    b.addContinuation(res.messages, ids);
    return ACT_GOES_ON;
  }

  async eval(id: string): Promise<void> {
    const att = this.ctx.live(id).attempt!;
    if (att.integrity) await this.settleIntegrity(att);
    // Built as in act() (no object spread with extra keys: a V8 slow path).
    const ectx = Object.assign({}, att.ctx) as EvalContext;
    ectx.sandbox = att.sandbox;
    ectx.state = att.handlerState;
    ectx.messages = [...(att.harness?.traj.messages ?? att.builder.messageView)];
    ectx.finish = att.finish ?? 'error';
    const r = await att.handler!.eval(ectx);
    if (att.ended) return;
    if (typeof r?.reward !== 'number' || !Number.isFinite(r.reward)) {
      throw new TaskError(`handler ${att.handler!.name} returned a non-numeric reward`, { code: 'BAD_REWARD', stage: 'eval' });
    }
    att.evaluated(r);
  }

  private async settleIntegrity(att: Attempt): Promise<void> {
    await att.integrity!.settle();
    if (att.ended) throw new CancelledError('rollout ended during the action');
  }

  /** Observes the action of `turn`; under `on_violation: fail` a violation ends the attempt as a task error. */
  private async observeIntegrity(att: Attempt, turn: number): Promise<void> {
    const found = await att.integrity!.observe(att.sandbox, turn);
    if (att.ended) throw new CancelledError('rollout ended during the action');
    if (found.length > 0 && att.integrity!.policy.action === 'fail') throw integrityError(found);
  }

  private toolCalled(s: RolloutSession, att: Attempt, turn: number, c: { callId: string; name: string; arguments: Record<string, unknown> }): void {
    if (att.ended) return;
    this.progress(att);
    if (this.ctx.hub.active) this.emit(s, { type: 'tool.call', rolloutId: s.id, turn, callId: c.callId, name: c.name, arguments: c.arguments });
  }

  private toolReturned(s: RolloutSession, att: Attempt, turn: number, o: Observation): void {
    if (att.ended) return;
    this.progress(att);
    if (this.ctx.hub.active) {
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

  /**
   * The engine aborted the generation (a weight update in `abort` mode) and returned what it had
   * sampled: re-issue it on prompt + partial ids for the tokens left — through the pause gate, so
   * a trainer's pause → abort → update → resume lands the continuation on the new weights — up to
   * {@link MAX_RESUMES} times. The turn is the prefix + the continuation, each token keeping the
   * version that sampled it. Only token-in backends: a chat backend (which renders its own prompt
   * and reports `enginePromptIds`) cannot continue a partial reply, so its aborted turn is kept.
   */
  private async resumeAborted(s: RolloutSession, att: Attempt, req: GenerateRequest, first: GenerateResult): Promise<SegmentedResult> {
    const { ctx } = this;
    let acc = segmented(first);
    if (first.enginePromptIds !== undefined || first.tokenSource === 'retokenized') return acc;
    for (let k = 0; acc.finishReason === 'abort' && k < MAX_RESUMES && acc.outputIds.length < req.maxTokens; k++) {
      if (ctx.weights && !ctx.weights.admits(false)) await this.waitForGeneration(s, att, ctx.weights, false);
      this.startCall(s, att, 'llm', ctx.opts.llmTimeoutMs);
      const cont = await ctx.llm.generate({ ...req, promptIds: req.promptIds.concat(acc.outputIds), maxTokens: req.maxTokens - acc.outputIds.length, preferredBackendId: acc.backendId });
      if (att.ended) throw new CancelledError('rollout ended during the LLM call');
      acc = joinPartial(acc, cont);
    }
    return acc;
  }

  /**
   * Waits until `weights` lets the call start. The wait is not the rollout's work: neither its
   * time budget nor its no-progress limit runs meanwhile (the stage's start moves by the wait,
   * so the run time excludes it too); the wall-clock cap still does.
   */
  private async waitForGeneration(s: RolloutSession, att: Attempt, weights: WeightControl, first: boolean): Promise<void> {
    const clock = this.ctx.clock;
    att.deadlinesPaused(clock.now());
    try {
      await weights.wait(first, att.signal);
    } finally {
      att.deadlinesResumed(clock.now());
    }
    if (att.ended) throw new CancelledError('rollout ended while waiting for generation');
  }

  private startCall(s: RolloutSession, att: Attempt, kind: 'llm' | 'action', ms: number): void {
    att.callStarted(kind, this.ctx.clock.now() + ms);
    this.ctx.callStarted(s);
  }

  private progress(att: Attempt): void {
    att.progressed(this.ctx.clock.now());
  }

  private emit(s: RolloutSession, ev: RolloutEventInput): void {
    this.ctx.hub.emit(s, s.groupId, ev);
  }
}

/**
 * The machine's `runLoop`: one actor for a rollout's RUN stage. Each `STEP` runs that half of a
 * turn ({@link AttemptSteps.llm} / {@link AttemptSteps.act}) and answers with its output or error.
 */
export function runLoopLogic(steps: Pick<AttemptSteps, 'llm' | 'act'>) {
  return fromCallback<StepCommand, StageInput>(({ input, sendBack, receive }) => {
    // Made once per actor, not per step: a rollout's steps share them.
    const llmDone = (output: CallLlmOutput): void => sendBack({ type: 'LLM_DONE', output } satisfies StepEvent);
    const actDone = (output: ActOutput): void => sendBack({ type: 'ACT_DONE', output } satisfies StepEvent);
    const failed = (error: unknown): void => sendBack({ type: 'STEP_FAILED', error } satisfies StepEvent);
    const id = input.rolloutId;
    receive((cmd) => {
      if (cmd.kind === 'llm') steps.llm(id, cmd.turn).then(llmDone, failed);
      else steps.act(id, cmd.turn).then(actDone, failed);
    });
  });
}

function thinking(s: RolloutSession): { enableThinking: boolean } | undefined {
  return s.sampling.enable_thinking === undefined ? undefined : { enableThinking: s.sampling.enable_thinking };
}

/** Clips event text (tool output, replies) to a size a dashboard can show. */
export function clip(s: string): string {
  return s.length > CLIP ? s.slice(0, CLIP) + '…' : s;
}
