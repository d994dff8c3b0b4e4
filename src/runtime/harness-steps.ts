import type { ActOutput, CallLlmOutput, Stage } from '../../machines/rollout.machine.js';
import { BackendError, CancelledError } from '../errors.js';
import type { ExternalAgent } from '../proxy/agent-contract.js';
import type { GenerateRequest, GenerateResult, LlmClient } from '../llm/llm-client.js';
import type { SegmentedResult } from '../llm/partial-generation.js';
import { chatCompletion } from '../llm/openai-chat-route.js';
import type { RolloutEventInput } from '../protocol/events.js';
import type { Message } from '../protocol/messages.js';
import type { FinishReason } from '../protocol/trajectory.js';
import { HarnessRun } from '../proxy/harness-run.js';
import type { ProxyChatCall } from '../proxy/llm-proxy.js';
import { ProxyRefusal } from '../proxy/openai-error.js';
import { SegmentedTrajectory } from '../proxy/segmented-trajectory.js';
import type { Clock } from '../clock.js';
import type { EventHub } from './event-hub.js';
import type { Attempt } from './attempt.js';
import type { RolloutSession } from './rollout-session.js';
import type { RuntimeOptions } from './runtime-options.js';
import type { StagePool } from './stage-pool.js';
import { contextLimitError, isEngineLengthRefusal } from './context-limit.js';

/** What the harness steps see of the attempt steps' context (a subset of `StepsContext`). */
export interface HarnessStepsContext {
  readonly opts: Pick<RuntimeOptions, 'llmTimeoutMs' | 'actionTimeoutMs' | 'detectDrift'>;
  readonly llm: LlmClient;
  readonly clock: Clock;
  readonly hub: Pick<EventHub, 'active'>;
  readonly pools: Record<Stage, Pick<StagePool, 'tryTake'>>;
}

/** What the harness steps need of `AttemptSteps` besides its context. */
export interface HarnessStepsHooks {
  startCall(s: RolloutSession, att: Attempt, kind: 'llm' | 'action', ms: number): void;
  emit(s: RolloutSession, ev: RolloutEventInput): void;
  /** Re-issues a generation the engine aborted (finish `abort`), as for our own agent's turns. */
  resumeAborted(s: RolloutSession, att: Attempt, req: GenerateRequest, first: GenerateResult): Promise<SegmentedResult>;
}

/**
 * The `llmCalling ⇄ acting` loop of a rollout whose agent is an {@link ExternalAgent}:
 *
 * - `acting` waits for the agent's next chat request or its exit (an `action` call: the action
 *   timeout, the budget and cancel apply); a request is held as `pending`;
 * - `llmCalling` places the pending request on the token record (extend or new segment), samples
 *   it token-in/token-out through the backend pool (sticky per rollout, weight version kept) and
 *   answers the agent in OpenAI's format. The first `llmCalling` of an attempt starts by waiting
 *   for the first request, since the machine enters the loop there.
 *
 * The loop ends when the agent exits (`no_tool_call`: it stopped on its own), at `max_llm_calls`
 * (`max_iterations`, the request refused with 429), at `max_tokens_total` (`length`, 429), or
 * when a prompt no longer fits the context (`context_full`, 400 `context_length_exceeded`); the
 * agent is stopped before the eval runs.
 */
export class HarnessSteps {
  constructor(
    private readonly ctx: HarnessStepsContext,
    private readonly hooks: HarnessStepsHooks,
  ) {}

  /** Makes the attempt's run (at init). */
  start(s: RolloutSession, att: Attempt, agent: ExternalAgent): void {
    const enableThinking = s.sampling.enable_thinking;
    att.harnessStarted(new HarnessRun(agent, new SegmentedTrajectory({ codec: s.codec, detectDrift: this.ctx.opts.detectDrift, enableThinking }), att.maxIterations));
  }

  async llm(s: RolloutSession, att: Attempt, turn: number): Promise<CallLlmOutput> {
    const { ctx } = this;
    const run = att.harness!;
    let call = run.pending;
    run.pending = null;
    if (!call) {
      const next = await this.waitForAgent(s, att, run);
      if (typeof next === 'string') return { contextFull: true, evalSlot: await this.endLoop(s, att, run, next) };
      call = next;
    }
    run.traj.place(call.messages, call.tools, call.enableThinking);
    // The record's prompt as one array (later appends do not change it).
    const promptIds = run.traj.promptIds;
    const promptLen = promptIds.length;
    const room = att.maxModelLen - promptLen;
    if (room <= 0) {
      call.refuse(new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'context_length_exceeded', message: `the prompt is ${promptLen} tokens; this rollout's context is ${att.maxModelLen}`, param: 'messages' }));
      // The agent's first prompt alone does not fit: a configuration mistake, not a truncation.
      if (turn === 0) throw contextLimitError({ promptTokens: promptLen, maxTokens: att.maxOutputTokens, maxModelLen: att.maxModelLen });
      return { contextFull: true, evalSlot: await this.endLoop(s, att, run, 'context_full') };
    }
    let maxTokens = Math.min(att.maxOutputTokens, room, call.maxTokens ?? Infinity);
    const totalCap = run.agent.limits.maxTokensTotal;
    if (totalCap !== undefined) {
      const left = totalCap - run.traj.totalTokens;
      if (left <= 0) {
        call.refuse(budgetRefusal('max_tokens_total', `this rollout's max_tokens_total of ${totalCap} is used up`));
        return { contextFull: true, evalSlot: await this.endLoop(s, att, run, 'length') };
      }
      maxTokens = Math.min(maxTokens, left);
    }
    if (ctx.hub.active) this.hooks.emit(s, { type: 'llm.start', rolloutId: s.id, turn, promptTokens: promptLen, maxTokens });
    this.hooks.startCall(s, att, 'llm', ctx.opts.llmTimeoutMs);
    const t0 = ctx.clock.now();
    let res: GenerateResult;
    const req: GenerateRequest = {
      rolloutId: s.id,
      instance: s.instance,
      turn,
      promptIds: promptIds as number[],
      maxTokens,
      sampling: s.sampling,
      preferredBackendId: att.lastBackendId,
      signal: att.signal,
      chat: { messages: run.traj.messages, tools: call.tools, codec: s.codec },
      model: s.codec.name,
    };
    try {
      res = await ctx.llm.generate(req);
      // A weight update in `abort` mode ended the generation with what it had sampled: the
      // harness must see one normal answer, so it is resumed on prompt + partial ids (after the
      // update, through the pause gate), each token keeping the version that sampled it.
      if (res.finishReason === 'abort' && !att.ended) res = await this.hooks.resumeAborted(s, att, req, res);
    } catch (err) {
      // Our own count left room, so the engine's context is not the one configured (context-limit.ts).
      if (isEngineLengthRefusal(err) && !att.ended) {
        call.refuse(new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'context_length_exceeded', message: 'the engine found the prompt longer than its context', param: 'messages' }));
        throw contextLimitError({ promptTokens: promptLen, maxTokens, maxModelLen: att.maxModelLen, engine: err.message });
      }
      // The agent learns the call failed (a retried attempt starts it afresh).
      call.refuse(new ProxyRefusal({ status: 503, type: 'server_error', code: 'engine_error', message: 'the inference engine failed this call' }));
      throw err;
    }
    if (att.ended) throw new CancelledError('rollout ended during the LLM call');
    att.callReturned(res.backendId);
    if (res.logprobs.length !== res.outputIds.length) {
      throw new BackendError(`backend ${res.backendId} returned ${res.logprobs.length} logprobs for ${res.outputIds.length} ids`, { code: 'BAD_RESPONSE' });
    }
    const latencyMs = ctx.clock.now() - t0;
    const finishReason = res.finishReason;
    // Made before addTurn: the live prompt view is still the prompt alone here. An answer still
    // cut by an abort (a chat backend, which cannot continue a partial reply, or the resumes used
    // up) goes out as `length` — a reply cut short, in OpenAI's vocabulary; the record keeps `abort`.
    const parsed = s.codec.parseAssistant(res.outputIds);
    const sent = { promptIds: promptIds as number[], outputIds: res.outputIds, logprobs: res.logprobs, finishReason: finishReason === 'abort' ? ('length' as const) : finishReason };
    const completion = chatCompletion(s.codec, call.body, sent, { model: s.codec.name, n: turn, returnTokenIds: false, parsed });
    const reply = (completion.choices as { message: { content: string | null; tool_calls?: { id: string }[] } }[])[0]!.message;
    // The message as the agent received it: the echo the next request is expected to carry.
    const assistant: Message & { tool_calls: typeof parsed.toolCalls } = { role: 'assistant', content: reply.content ?? '', tool_calls: parsed.toolCalls.map((c, i) => ({ ...c, id: reply.tool_calls![i]!.id })) };
    run.traj.addTurn({ outputIds: res.outputIds, logprobs: res.logprobs, backendId: res.backendId, weightVersion: res.weightVersion, finishReason, latencyMs, tokenSource: res.tokenSource, logprobSemantics: res.logprobSemantics, enginePromptIds: res.enginePromptIds, weightVersions: (res as Partial<SegmentedResult>).weightVersions }, assistant);
    run.calls++;
    att.replied(assistant);
    att.progressed(ctx.clock.now());
    call.answer(completion);
    if (ctx.hub.active) {
      this.hooks.emit(s, {
        type: 'llm.end',
        rolloutId: s.id,
        turn,
        backendId: res.backendId,
        promptTokens: promptLen,
        outputTokens: res.outputIds.length,
        latencyMs,
        finishReason,
        content: parsed.content.slice(0, 2_000),
        toolCalls: parsed.toolCalls,
      });
    }
    return { contextFull: false };
  }

  async act(s: RolloutSession, att: Attempt): Promise<ActOutput> {
    const run = att.harness!;
    const next = await this.waitForAgent(s, att, run);
    if (typeof next === 'string') return { stop: true, evalSlot: await this.endLoop(s, att, run, next) };
    run.pending = next;
    return { stop: false };
  }

  /**
   * Waits for the agent's next request or exit, as an `action` call. Returns the request, or the
   * finish reason that ends the loop (its exit, or a budget the request would pass — refused 429).
   */
  private async waitForAgent(s: RolloutSession, att: Attempt, run: HarnessRun): Promise<ProxyChatCall | FinishReason> {
    const { ctx } = this;
    this.hooks.startCall(s, att, 'action', ctx.opts.actionTimeoutMs);
    const ev = await run.agent.next(att.signal);
    if (att.ended) {
      if (ev.type === 'chat') ev.call.refuse(new ProxyRefusal({ status: 410, type: 'invalid_request_error', code: 'rollout_ended', message: 'this rollout has ended' }));
      throw new CancelledError('rollout ended while the harness worked');
    }
    att.callReturned();
    att.progressed(ctx.clock.now());
    if (ev.type === 'exit') {
      run.exitCode = ev.exitCode;
      return 'no_tool_call';
    }
    if (run.calls >= run.maxLlmCalls) {
      ev.call.refuse(budgetRefusal('max_llm_calls', `this rollout's max_llm_calls of ${run.maxLlmCalls} is used up`));
      return 'max_iterations';
    }
    const cap = run.agent.limits.maxTokensTotal;
    if (cap !== undefined && run.traj.totalTokens >= cap) {
      ev.call.refuse(budgetRefusal('max_tokens_total', `this rollout's max_tokens_total of ${cap} is used up`));
      return 'length';
    }
    return ev.call;
  }

  /** Ends the loop with `finish`: stops the agent (refusing later calls, killing its processes) and asks for the EVAL slot. */
  private async endLoop(s: RolloutSession, att: Attempt, run: HarnessRun, finish: FinishReason): Promise<boolean> {
    att.finishedWith(finish);
    await run.agent.stop(finish);
    if (att.ended) throw new CancelledError('rollout ended while the harness stopped');
    return this.ctx.pools.eval.tryTake(s.id);
  }
}

/** A budget refusal: 429 with the limit's name as `code`, so the harness can tell it from a rate limit. */
function budgetRefusal(code: string, message: string): ProxyRefusal {
  return new ProxyRefusal({ status: 429, type: 'insufficient_quota', code, message: `${message}; the rollout's loop has ended` });
}
