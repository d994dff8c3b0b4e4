import { assign, fromPromise, setup } from 'xstate';

/** Events of the sandbox machine. */
export type SandboxMachineEvent =
  /** A tool call starts. */
  | { type: 'CALL' }
  /** A tool call ended (either way). */
  | { type: 'CALL_DONE' }
  /** The sandbox's processes died, or its host is gone. */
  | { type: 'LOST'; reason: string }
  /** The owner closes the sandbox. */
  | { type: 'CLOSE' };

export interface SandboxMachineContext {
  /** Tool calls in flight (editor and bash calls may overlap). */
  inFlight: number;
  /** Why it was lost, or why the start failed. */
  reason: string | null;
}

/**
 * The life of one sandbox, seen from the runtime:
 * `starting → ready ⇄ busy → closing → closed`, plus `lost` when its processes die under it
 * (every pending and later call then fails with SandboxError, so the rollout ends as
 * infra-error instead of hanging). Pure: `startSandbox` and `closeSandbox` are provided by
 * src/sandbox/sandbox-client.ts with `.provide()`, tests provide fakes.
 */
export const sandboxMachine = setup({
  types: {
    context: {} as SandboxMachineContext,
    events: {} as SandboxMachineEvent,
  },
  actors: {
    startSandbox: fromPromise<void>(async () => {
      throw new Error('startSandbox not provided');
    }),
    closeSandbox: fromPromise<void>(async () => {
      throw new Error('closeSandbox not provided');
    }),
  },
  guards: {
    isLastCall: ({ context }) => context.inFlight <= 1,
  },
  actions: {
    countCall: assign({ inFlight: ({ context }) => context.inFlight + 1 }),
    countDone: assign({ inFlight: ({ context }) => Math.max(0, context.inFlight - 1) }),
    recordLoss: assign({ reason: ({ event }) => (event.type === 'LOST' ? event.reason : null), inFlight: 0 }),
  },
}).createMachine({
  id: 'sandbox',
  initial: 'starting',
  context: { inFlight: 0, reason: null },
  states: {
    starting: {
      invoke: {
        src: 'startSandbox',
        onDone: 'ready',
        onError: {
          target: 'closed',
          actions: assign({ reason: ({ event }) => (event.error instanceof Error ? event.error.message : String(event.error)) }),
        },
      },
    },
    ready: {
      on: {
        CALL: { target: 'busy', actions: 'countCall' },
        LOST: { target: 'lost', actions: 'recordLoss' },
        CLOSE: 'closing',
      },
    },
    busy: {
      on: {
        CALL: { actions: 'countCall' },
        CALL_DONE: [{ guard: 'isLastCall', target: 'ready', actions: 'countDone' }, { actions: 'countDone' }],
        LOST: { target: 'lost', actions: 'recordLoss' },
        CLOSE: 'closing',
      },
    },
    lost: {
      on: { CLOSE: 'closing' },
    },
    closing: {
      invoke: { src: 'closeSandbox', onDone: 'closed', onError: 'closed' },
    },
    closed: { type: 'final' },
  },
});
