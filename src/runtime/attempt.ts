import type { Actor, EventFromLogic } from 'xstate';
import type { RolloutMachine, Stage } from '../../machines/rollout.machine.js';
import type { CancelledError, RolloutError } from '../errors.js';
import type { TrajectoryBuilder } from '../llm/trajectory-builder.js';
import type { Instance, SamplingParams } from '../protocol/instance.js';
import type { Message, ToolCall } from '../protocol/messages.js';
import type { FinishReason } from '../protocol/trajectory.js';
import type { AgentHandler, EvalResult, HandlerContext } from '../proxy/agent-contract.js';
import type { HarnessRun } from '../proxy/harness-run.js';
import type { Sandbox, SandboxProvider } from '../sandbox/sandbox.js';
import type { Clock } from '../clock.js';
import { AttemptSandboxes, type SandboxesOwner } from './attempt-sandboxes.js';
import type { BranchStart, PendingFork } from './fork-types.js';
import type { RolloutIntegrity } from './integrity-monitor.js';

/** The assistant message of the last turn, with its parsed tool calls. */
export type AssistantReply = Message & { tool_calls: ToolCall[] };

/** What an attempt is made of; see {@link Attempt}. */
export interface AttemptOptions {
  /** The token record it grows (fresh, or a branch's copy of its parent's). */
  builder: TrajectoryBuilder;
  maxIterations: number;
  maxOutputTokens: number;
  maxModelLen: number;
  /** The rollout it belongs to: its handler context names it. */
  rollout: { id: string; instance: Instance; sampling: SamplingParams };
  provider: SandboxProvider;
  clock: Clock;
}

/**
 * One attempt of a rollout: everything a retry starts afresh (actor, sandbox, tokens). The
 * actors of the machine capture the attempt they started in and check {@link ended} after each
 * await, so a late answer never touches a newer attempt.
 *
 * Its fields are private and change only through its transitions, named after what happened
 * (the machine started, a stage was entered, a call started or returned, the loop finished, the
 * attempt ended…); the supervisor, the stage steps, the fork coordinator and the deadline sweep
 * read them through getters. Times are the injected clock's; deadlines are data (Infinity when
 * not set), enforced by the supervisor's sweep.
 */
export class Attempt implements SandboxesOwner {
  readonly builder: TrajectoryBuilder;
  readonly maxIterations: number;
  readonly maxOutputTokens: number;
  readonly maxModelLen: number;
  /** Every sandbox of the attempt; all closed when it ends. */
  readonly sandboxes: AttemptSandboxes;
  /** The context every handler call of the attempt shares; its sandboxes go to {@link sandboxes}. */
  readonly ctx: HandlerContext;

  private actor: Actor<RolloutMachine> | null = null;
  private readonly abort = new AbortController();
  private isEnded = false;
  private agent: AgentHandler | null = null;
  private state: unknown = undefined;
  private box: Sandbox | undefined = undefined;
  private reply: AssistantReply | null = null;
  private badCalls: { raw: string; error: string }[] = [];
  private finishReason: FinishReason | null = null;
  private graded: EvalResult | null = null;
  private firstError: RolloutError | null = null;
  /** Budget time used in this attempt (closed stage intervals). */
  private counted = 0;
  private stage: Stage | null = null;
  private stageAt = 0;
  private progressAt = 0;
  private budgetDue = Infinity;
  private callDue = Infinity;
  private call: 'llm' | 'action' = 'llm';
  private backendId: string | undefined = undefined;
  /** While a generation waits for the weights: when the wait began and the budget it had left. */
  private paused: { at: number; budgetLeft: number } | null = null;
  private run: HarnessRun | null = null;
  private monitor: RolloutIntegrity | null = null;
  private pendingFork: PendingFork | null = null;
  private lost: string | null = null;

  constructor(o: AttemptOptions) {
    this.builder = o.builder;
    this.maxIterations = o.maxIterations;
    this.maxOutputTokens = o.maxOutputTokens;
    this.maxModelLen = o.maxModelLen;
    this.sandboxes = new AttemptSandboxes(o.provider, o.rollout.id, this);
    const { id, instance, sampling } = o.rollout;
    this.ctx = { rolloutId: id, instance, sampling, signal: this.abort.signal, clock: o.clock, createSandbox: (spec) => this.sandboxes.create(spec) };
  }

  /** A sandbox of the attempt came up: that is progress, so the no-progress limit restarts. */
  sandboxReady(): void {
    this.progressAt = this.ctx.clock.now();
  }

  // ───────────────────────────── the machine and the end ─────────────────────────────

  /** Aborted when the attempt ends, with the reason (a CancelledError naming the final state). */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** True once the machine reached a final state: every step checks it after each await. */
  get ended(): boolean {
    return this.isEnded;
  }

  /** The attempt's machine while it runs; null before it starts and once it ended. */
  get machine(): Actor<RolloutMachine> | null {
    return this.actor;
  }

  /** The machine of the attempt is made (it starts right after). */
  machineStarted(actor: Actor<RolloutMachine>): Actor<RolloutMachine> {
    return (this.actor = actor);
  }

  /** Sends `event` to the attempt's machine; nothing once it ended. */
  send(event: EventFromLogic<RolloutMachine>): void {
    this.actor?.send(event);
  }

  /**
   * The machine reached a final state: the attempt ends. Its deadlines are cleared, later sends
   * are dropped and later sandbox creations refused. The calls in flight go on until
   * {@link abortCalls}.
   */
  end(): void {
    this.isEnded = true;
    this.actor = null;
    this.budgetDue = Infinity;
    this.callDue = Infinity;
  }

  /** Aborts the attempt's signal with `reason` (why its calls are cut short). */
  abortCalls(reason: CancelledError): void {
    this.abort.abort(reason);
  }

  // ───────────────────────────── the handler ─────────────────────────────

  /** The handler resolved for the rollout's data source (set at init). */
  get handler(): AgentHandler | null {
    return this.agent;
  }

  /** The handler's state, carried between its calls. */
  get handlerState(): unknown {
    return this.state;
  }

  /** The sandbox the agent acts in, if any. */
  get sandbox(): Sandbox | undefined {
    return this.box;
  }

  /** The handler that runs the attempt was resolved. */
  handlerResolved(handler: AgentHandler): void {
    this.agent = handler;
  }

  /** The handler's init returned its sandbox (now owned by the attempt) and its state. */
  initialized(sandbox: Sandbox | undefined, state: unknown): void {
    if (sandbox) this.sandboxes.adopt(sandbox);
    this.box = sandbox;
    this.state = state;
  }

  /**
   * A branch's attempt (#26) takes over its fork's start: the sandbox (owned from now on) and
   * the handler state, and a note of what the fork did not carry, told after its first action.
   */
  enterBranch(start: BranchStart): void {
    this.initialized(start.sandbox, start.handlerState);
    if (start.lost.length) this.lost = `Note: this conversation was forked; what did not carry over to this sandbox: ${start.lost.join('; ')}.`;
  }

  /** The handler's action returned a new state. */
  stateChanged(state: unknown): void {
    this.state = state;
  }

  /** A branch's note of what its fork did not carry, handed out once (null after, or when none). */
  takeLostNote(): string | null {
    const note = this.lost;
    this.lost = null;
    return note;
  }

  /** The agent runs on its own (the `harness` family): its loop state and token record. */
  get harness(): HarnessRun | null {
    return this.run;
  }

  /** The handler's agent was started as an external agent (the `harness` family). */
  harnessStarted(run: HarnessRun): void {
    this.run = run;
  }

  /** The reward-hack monitor of this attempt (#27), when the rollout has an integrity policy. */
  get integrity(): RolloutIntegrity | null {
    return this.monitor;
  }

  /** The attempt is observed under an integrity policy from now on. */
  monitored(monitor: RolloutIntegrity): void {
    this.monitor = monitor;
  }

  // ───────────────────────────── turns and the outcome ─────────────────────────────

  /** The last assistant reply, with its parsed tool calls. */
  get assistant(): AssistantReply | null {
    return this.reply;
  }

  /** Malformed tool-call blocks of the last reply. */
  get malformed(): { raw: string; error: string }[] {
    return this.badCalls;
  }

  /** Why the agent loop stopped; null while it runs. */
  get finish(): FinishReason | null {
    return this.finishReason;
  }

  /** The handler's grade, once its eval returned a numeric reward. */
  get evalResult(): EvalResult | null {
    return this.graded;
  }

  /** The first error recorded for the attempt (from a stage actor, or a deadline). */
  get error(): RolloutError | null {
    return this.firstError;
  }

  /** The backend that served the last call, so the next turn can go back to it (prefix cache). */
  get lastBackendId(): string | undefined {
    return this.backendId;
  }

  /** The model replied `assistant`, with `malformed` tool-call blocks (when the runtime parsed them for an `act`). */
  replied(assistant: AssistantReply, malformed?: { raw: string; error: string }[]): void {
    this.reply = assistant;
    if (malformed) this.badCalls = malformed;
  }

  /** The agent loop stopped for `reason`. */
  finishedWith(reason: FinishReason): void {
    this.finishReason = reason;
  }

  /** The handler's eval graded the trajectory. */
  evaluated(result: EvalResult): void {
    this.graded = result;
  }

  /** Records `error` as what ended the attempt; a later error does not replace the first. */
  failedWith(error: RolloutError): void {
    this.firstError ??= error;
  }

  // ───────────────────────────── time and deadlines ─────────────────────────────

  /** The stage whose time counts against the budget now; null between stages. */
  get activeStage(): Stage | null {
    return this.stage;
  }

  /** When the active stage began (moved later by a wait for the weights, which is not its work). */
  get stageStart(): number {
    return this.stageAt;
  }

  /** The last sign of progress (a state entered, a reply, a tool call, a sandbox up). */
  get lastProgress(): number {
    return this.progressAt;
  }

  /** When the time budget runs out; Infinity outside a stage. */
  get budgetAt(): number {
    return this.budgetDue;
  }

  /** When the call in flight times out; Infinity when none. */
  get callAt(): number {
    return this.callDue;
  }

  /** What the call in flight is (its timeout error depends on it). */
  get callKind(): 'llm' | 'action' {
    return this.call;
  }

  /** Budget time used in the attempt's closed stages. */
  get countedMs(): number {
    return this.counted;
  }

  /** Stage `stage` began at `now`: the budget left after `budgetMs` is armed. */
  stageEntered(stage: Stage, now: number, budgetMs: number): void {
    this.stage = stage;
    this.stageAt = now;
    this.progressAt = now;
    this.budgetDue = now + Math.max(0, budgetMs - this.counted);
  }

  /**
   * Stage `stage` ended at `now`: its time is counted and its deadlines cleared. Returns the time
   * it took, or null when it was not the active stage (nothing changes then).
   */
  stageExited(stage: Stage, now: number): number | null {
    if (this.stage !== stage) return null;
    const dt = now - this.stageAt;
    this.counted += dt;
    this.stage = null;
    this.budgetDue = Infinity;
    this.callDue = Infinity;
    return dt;
  }

  /** Something happened at `now` that counts as progress. */
  progressed(now: number): void {
    this.progressAt = now;
  }

  /** A call of `kind` started; it times out at `deadline`. */
  callStarted(kind: 'llm' | 'action', deadline: number): void {
    this.call = kind;
    this.callDue = deadline;
  }

  /** The call in flight returned (from `backendId`, for an LLM call): its timeout is cleared. */
  callReturned(backendId?: string): void {
    this.callDue = Infinity;
    if (backendId !== undefined) this.backendId = backendId;
  }

  /**
   * A generation waits for the weights from `now`: the wait is not the rollout's work, so its
   * budget and its no-progress limit stop until {@link deadlinesResumed}.
   */
  deadlinesPaused(now: number): void {
    this.paused = { at: now, budgetLeft: this.budgetDue - now };
    this.budgetDue = Infinity;
    this.progressAt = Infinity;
  }

  /** The wait ended at `now`: the stage's start moves by the wait, the budget left is re-armed. */
  deadlinesResumed(now: number): void {
    const p = this.paused;
    this.paused = null;
    // An attempt that ended during the wait keeps its deadlines cleared.
    if (!p || this.isEnded) return;
    this.stageAt += now - p.at;
    this.budgetDue = now + p.budgetLeft;
    this.progressAt = now;
  }

  // ───────────────────────────── forks ─────────────────────────────

  /** A fork (#26) waiting for the next turn boundary of this attempt. */
  get fork(): PendingFork | null {
    return this.pendingFork;
  }

  /** A fork was asked for: it waits for the next turn boundary. */
  forkRequested(fork: PendingFork): void {
    this.pendingFork = fork;
  }

  /** Takes the pending fork (at the boundary, or to refuse it); null when none. */
  takeFork(): PendingFork | null {
    const f = this.pendingFork;
    this.pendingFork = null;
    return f;
  }
}
