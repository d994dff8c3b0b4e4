import { assign, fromCallback, fromPromise, sendTo, setup } from 'xstate';

/**
 * The lifecycle of one rollout attempt, as a pure XState machine.
 *
 * ```
 * queued ─SLOT(init)→ initializing → waitingRun ─SLOT(run)→ running{ llmCalling ⇄ acting }
 *        → waitingEval ─SLOT(eval)→ evaluating → done
 * finals: done, failed, timedOut, cancelled
 * ```
 *
 * Every side effect is a named actor (`initRollout`, `runLoop`, `evaluate`) or a named action
 * (`requestSlot`, `withdrawSlot`, `releaseSlot`, `stageEntered`, `stageExited`,
 * `stateEntered`, `recordError`, `ended`); the stubs here do nothing and the runtime provides
 * the real ones once with `.provide()`. Context holds only scalars: per-rollout data lives in the
 * supervisor's session map, looked up by `rolloutId`.
 *
 * Deadlines are not timers in here: the supervisor's sweep sends `TIMEOUT` or `FAIL`.
 *
 * The loop's turns are steps of one actor: `running` invokes `runLoop` once for the whole RUN
 * stage, entering `llmCalling` / `acting` tells it `STEP` (`llm` / `act`, with the turn), and it
 * answers `LLM_DONE` / `ACT_DONE` with the step's output or `STEP_FAILED` with its error. A
 * promise actor per state would be spawned and stopped twice per turn, which costs four times
 * as much as these two event transitions (docs/core.md). A step's late
 * answer after the machine left `running` (a timeout, a cancel) is dropped with the stopped actor.
 */

/** A stage pool: INIT, RUN or EVAL. */
export type Stage = 'init' | 'run' | 'eval';

/** Machine context: scalars only. */
export interface RolloutContext {
  rolloutId: string;
  /** Assistant turns sampled so far in this attempt. */
  turn: number;
}

/** Input of the machine. */
export interface RolloutInput {
  rolloutId: string;
  /**
   * Assistant turns already sampled when the attempt starts: 0, or a branch's fork turn (#26),
   * whose trajectory starts from its parent's prefix and whose next sample is turn `turn`.
   */
  turn?: number | undefined;
}

/** Events the supervisor sends, and the loop actor's answers ({@link StepEvent}). */
export type RolloutMachineEvent =
  | { type: 'SLOT'; stage: Stage }
  | { type: 'CANCEL'; reason?: string | undefined }
  | { type: 'TIMEOUT'; error: unknown }
  | { type: 'FAIL'; error: unknown }
  | StepEvent;

/** What the machine tells `runLoop` on entering `llmCalling` (`llm`) or `acting` (`act`). */
export interface StepCommand {
  type: 'STEP';
  kind: 'llm' | 'act';
  /** `llm`: the turn to sample; `act`: the turn whose tool calls run. */
  turn: number;
}

/** What `runLoop` answers to a {@link StepCommand}: the step's output, or its error. */
export type StepEvent = { type: 'LLM_DONE'; output: CallLlmOutput } | { type: 'ACT_DONE'; output: ActOutput } | { type: 'STEP_FAILED'; error: unknown };

/**
 * Stage actors may take the next stage's slot as they finish, when it is free at once
 * (`StagePool.tryTake`): the machine then goes straight to that stage instead of passing
 * through the waiting state and a `SLOT` event round trip. The machine stays pure — it only
 * reads the flag in the actor's output.
 */
export interface InitOutput {
  /** The RUN slot is already held: go straight to `running`. */
  runSlot: boolean;
}

/** The output of an `llm` step. */
export interface CallLlmOutput {
  /** True when no room was left for another turn: the loop stops as `context_full`. */
  contextFull: boolean;
  /** With `contextFull`: the EVAL slot is already held. */
  evalSlot?: boolean | undefined;
  /**
   * True when the rollout stopped at a fork (#26, `continueParent: false`) before sampling: its
   * branches carry it on and its sandbox went to them, so it ends `done` without an evaluation.
   */
  forked?: boolean | undefined;
}

/** The output of an `act` step. */
export interface ActOutput {
  /** True when the loop stops (finish tool, no tool call, max iterations, context full). */
  stop: boolean;
  /** With `stop`: the EVAL slot is already held. */
  evalSlot?: boolean | undefined;
}

/** The final state names. */
export type FinalState = 'done' | 'failed' | 'timedOut' | 'cancelled';

/** What every stage actor gets. */
export interface StageInput {
  rolloutId: string;
  turn: number;
}

/** A stub stage actor of output `T` that fails until the runtime provides the real one. */
const notProvided = <T>(name: string) => fromPromise<T, StageInput>(() => Promise.reject(new Error(`actor ${name} not provided`)));
/** The stub loop actor: every step fails until the runtime provides the real one. */
const loopNotProvided = fromCallback<StepCommand, StageInput>(({ sendBack, receive }) => {
  receive(() => sendBack({ type: 'STEP_FAILED', error: new Error('actor runLoop not provided') }));
});

/** The machine with stub implementations; provide real ones with `.provide()`. */
export const rolloutMachine = setup({
  types: {
    context: {} as RolloutContext,
    input: {} as RolloutInput,
    events: {} as RolloutMachineEvent,
  },
  actors: {
    initRollout: notProvided<InitOutput>('initRollout'),
    runLoop: loopNotProvided,
    evaluate: notProvided<void>('evaluate'),
  },
  actions: {
    /** Ask the stage pool for a slot; the supervisor answers with `SLOT`. */
    requestSlot: (_: unknown, _params: { stage: Stage }) => {},
    /** Leave the stage's wait queue (no-op when the slot was granted). */
    withdrawSlot: (_: unknown, _params: { stage: Stage }) => {},
    /** Give a held slot back. */
    releaseSlot: (_: unknown, _params: { stage: Stage }) => {},
    /** A stage whose time counts against the budget starts. */
    stageEntered: (_: unknown, _params: { stage: Stage }) => {},
    stageExited: (_: unknown, _params: { stage: Stage }) => {},
    /** Every state entry, for events and progress tracking. */
    stateEntered: (_: unknown, _params: { state: string }) => {},
    /** Keep the error that ends the attempt (from an actor's rejection or a supervisor event). */
    recordError: (_: unknown, _params: { error: unknown; stage: Stage | null }) => {},
    /** The attempt reached a final state. */
    ended: (_: unknown, _params: { state: FinalState }) => {},
  },
  guards: {
    // The actors' outputs reach these guards as params, typed by each `onDone` (`params:
    // ({ event }) => event.output`): the guards stay named and pure, with no casts.
    /** The LLM step sampled a turn and the loop goes on (the usual answer, so tested first). */
    llmGoesOn: (_, o: CallLlmOutput) => !o.contextFull && o.forked !== true,
    contextFull: (_, o: CallLlmOutput) => o.contextFull,
    stoppedAtFork: (_, o: CallLlmOutput) => o.forked === true,
    contextFullWithEvalSlot: (_, o: CallLlmOutput) => o.contextFull && o.evalSlot === true,
    /** The action ran and the loop goes on (the usual answer, so tested first). */
    actGoesOn: (_, o: ActOutput) => !o.stop,
    loopStopped: (_, o: ActOutput) => o.stop,
    loopStoppedWithEvalSlot: (_, o: ActOutput) => o.stop && o.evalSlot === true,
    runSlotTaken: (_, o: InitOutput | undefined) => o?.runSlot === true,
    slotIs: ({ event }, params: { stage: Stage }) => event.type === 'SLOT' && event.stage === params.stage,
    /** The INIT slot is already held (taken at admission when free): skip the `SLOT` round trip. */
    initSlotHeld: () => false,
  },
}).createMachine({
  id: 'rollout',
  context: ({ input }) => ({ rolloutId: input.rolloutId, turn: input.turn ?? 0 }),
  initial: 'queued',
  on: {
    CANCEL: '.cancelled',
    TIMEOUT: { target: '.timedOut', actions: { type: 'recordError', params: ({ event }) => ({ error: event.error, stage: null }) } },
    FAIL: { target: '.failed', actions: { type: 'recordError', params: ({ event }) => ({ error: event.error, stage: null }) } },
  },
  states: {
    queued: {
      entry: [{ type: 'stateEntered', params: { state: 'queued' } }, { type: 'requestSlot', params: { stage: 'init' } }],
      exit: { type: 'withdrawSlot', params: { stage: 'init' } },
      always: { guard: 'initSlotHeld', target: 'initializing' },
      on: { SLOT: { guard: { type: 'slotIs', params: { stage: 'init' } }, target: 'initializing' } },
    },
    initializing: {
      entry: [{ type: 'stateEntered', params: { state: 'initializing' } }, { type: 'stageEntered', params: { stage: 'init' } }],
      exit: [{ type: 'stageExited', params: { stage: 'init' } }, { type: 'releaseSlot', params: { stage: 'init' } }],
      invoke: {
        src: 'initRollout',
        input: ({ context }) => ({ rolloutId: context.rolloutId, turn: context.turn }),
        onDone: [{ guard: { type: 'runSlotTaken', params: ({ event }) => event.output }, target: 'running' }, { target: 'waitingRun' }],
        onError: { target: 'failed', actions: { type: 'recordError', params: ({ event }) => ({ error: event.error, stage: 'init' as const }) } },
      },
    },
    waitingRun: {
      entry: [{ type: 'stateEntered', params: { state: 'waitingRun' } }, { type: 'requestSlot', params: { stage: 'run' } }],
      exit: { type: 'withdrawSlot', params: { stage: 'run' } },
      on: { SLOT: { guard: { type: 'slotIs', params: { stage: 'run' } }, target: 'running' } },
    },
    // The RUN slot is held across the whole llmCalling ⇄ acting loop, so it is taken and given
    // back by this parent state rather than by each turn.
    running: {
      entry: { type: 'stageEntered', params: { stage: 'run' } },
      exit: [{ type: 'stageExited', params: { stage: 'run' } }, { type: 'releaseSlot', params: { stage: 'run' } }],
      invoke: { id: 'loop', src: 'runLoop', input: ({ context }) => ({ rolloutId: context.rolloutId, turn: context.turn }) },
      on: { STEP_FAILED: { target: '#rollout.failed', actions: { type: 'recordError', params: ({ event }) => ({ error: event.error, stage: 'run' as const }) } } },
      initial: 'llmCalling',
      states: {
        llmCalling: {
          entry: [{ type: 'stateEntered', params: { state: 'llmCalling' } }, sendTo('loop', ({ context }): StepCommand => ({ type: 'STEP', kind: 'llm', turn: context.turn }))],
          on: {
            // The usual answer's branch first: one guard per turn instead of three (docs/core.md).
            // The others are tested only when it fails, in the order they had before it.
            LLM_DONE: [
              { guard: { type: 'llmGoesOn', params: ({ event }) => event.output }, target: 'acting', actions: assign({ turn: ({ context }) => context.turn + 1 }) },
              { guard: { type: 'stoppedAtFork', params: ({ event }) => event.output }, target: '#rollout.done' },
              { guard: { type: 'contextFullWithEvalSlot', params: ({ event }) => event.output }, target: '#rollout.evaluating' },
              { guard: { type: 'contextFull', params: ({ event }) => event.output }, target: '#rollout.waitingEval' },
            ],
          },
        },
        acting: {
          entry: [{ type: 'stateEntered', params: { state: 'acting' } }, sendTo('loop', ({ context }): StepCommand => ({ type: 'STEP', kind: 'act', turn: context.turn - 1 }))],
          on: {
            ACT_DONE: [
              { guard: { type: 'actGoesOn', params: ({ event }) => event.output }, target: 'llmCalling' },
              { guard: { type: 'loopStoppedWithEvalSlot', params: ({ event }) => event.output }, target: '#rollout.evaluating' },
              { guard: { type: 'loopStopped', params: ({ event }) => event.output }, target: '#rollout.waitingEval' },
            ],
          },
        },
      },
    },
    waitingEval: {
      entry: [{ type: 'stateEntered', params: { state: 'waitingEval' } }, { type: 'requestSlot', params: { stage: 'eval' } }],
      exit: { type: 'withdrawSlot', params: { stage: 'eval' } },
      on: { SLOT: { guard: { type: 'slotIs', params: { stage: 'eval' } }, target: 'evaluating' } },
    },
    evaluating: {
      entry: [{ type: 'stateEntered', params: { state: 'evaluating' } }, { type: 'stageEntered', params: { stage: 'eval' } }],
      exit: [{ type: 'stageExited', params: { stage: 'eval' } }, { type: 'releaseSlot', params: { stage: 'eval' } }],
      invoke: {
        src: 'evaluate',
        input: ({ context }) => ({ rolloutId: context.rolloutId, turn: context.turn }),
        onDone: 'done',
        onError: { target: 'failed', actions: { type: 'recordError', params: ({ event }) => ({ error: event.error, stage: 'eval' as const }) } },
      },
    },
    done: { type: 'final', entry: [{ type: 'stateEntered', params: { state: 'done' } }, { type: 'ended', params: { state: 'done' } }] },
    failed: { type: 'final', entry: [{ type: 'stateEntered', params: { state: 'failed' } }, { type: 'ended', params: { state: 'failed' } }] },
    timedOut: { type: 'final', entry: [{ type: 'stateEntered', params: { state: 'timedOut' } }, { type: 'ended', params: { state: 'timedOut' } }] },
    cancelled: { type: 'final', entry: [{ type: 'stateEntered', params: { state: 'cancelled' } }, { type: 'ended', params: { state: 'cancelled' } }] },
  },
});

/** The machine's type, for `.provide()` callers. */
export type RolloutMachine = typeof rolloutMachine;
