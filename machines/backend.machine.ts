import { assign, fromCallback, setup } from 'xstate';

/**
 * The lifecycle of one LLM backend in the pool, as a pure XState machine.
 *
 * ```
 * probing ─PROBE_OK→ healthy ⇄ degraded      (degraded: evicted from selection until a probe passes)
 *    └──────────┴────────┴─DRAIN→ draining ─IDLE→ removed
 *                         any ─REMOVE→ removed (final)
 * ```
 *
 * The prober's `immediate` input says whether to probe at once (probing, degraded) or after
 * one period (healthy).
 *
 * `failureThreshold` consecutive failures (failed calls or failed probes, counted together;
 * any success resets the count) move `healthy` to `degraded`. Side effects are named: the
 * `prober` actor (invoked while probing, healthy or degraded; sends `PROBE_OK` / `PROBE_FAIL`)
 * and the `stateEntered` action, which the pool provides to keep its heap in step. Context
 * holds scalars only; load counters live in the pool.
 */

/** Input of the machine. */
export interface BackendInput {
  backendId: string;
  /** Consecutive failures that evict a healthy backend; >= 1. */
  failureThreshold: number;
}

/** Machine context: scalars only. */
export interface BackendContext {
  backendId: string;
  failureThreshold: number;
  consecutiveFailures: number;
}

/** Events the pool and the prober send. */
export type BackendMachineEvent =
  | { type: 'PROBE_OK' }
  | { type: 'PROBE_FAIL' }
  | { type: 'CALL_OK' }
  | { type: 'CALL_FAIL' }
  | { type: 'DRAIN' }
  | { type: 'REMOVE' }
  | { type: 'IDLE' };

/** The state names, as `BackendInfo.state` spells them. */
export type BackendStateName = 'probing' | 'healthy' | 'degraded' | 'draining' | 'removed';

/** The machine with a prober that never reports; the pool provides the real one with `.provide()`. */
export const backendMachine = setup({
  types: {
    context: {} as BackendContext,
    input: {} as BackendInput,
    events: {} as BackendMachineEvent,
  },
  actors: {
    prober: fromCallback<BackendMachineEvent, { backendId: string; immediate: boolean }>(() => () => {}),
  },
  actions: {
    /** Every state entry; the pool moves the backend in or out of its heap here. */
    stateEntered: (_: unknown, _params: { state: BackendStateName }) => {},
    resetFailures: assign({ consecutiveFailures: 0 }),
    countFailure: assign({ consecutiveFailures: ({ context }) => context.consecutiveFailures + 1 }),
  },
  guards: {
    /** This failure reaches the threshold (the count is updated after the guard runs). */
    reachesThreshold: ({ context }) => context.consecutiveFailures + 1 >= context.failureThreshold,
  },
}).createMachine({
  id: 'backend',
  context: ({ input }) => ({ backendId: input.backendId, failureThreshold: Math.max(1, input.failureThreshold), consecutiveFailures: 0 }),
  initial: 'probing',
  on: {
    REMOVE: '.removed',
  },
  states: {
    probing: {
      entry: { type: 'stateEntered', params: { state: 'probing' } },
      invoke: { src: 'prober', input: ({ context }) => ({ backendId: context.backendId, immediate: true }) },
      on: {
        PROBE_OK: { target: 'healthy', actions: 'resetFailures' },
        // A call that succeeds before the first probe answers proves the backend up as well.
        CALL_OK: { target: 'healthy', actions: 'resetFailures' },
        // A backend dead from the start is `degraded` (down) after as many failed probes or calls
        // as a healthy one needs, not `probing` forever (#16.3).
        PROBE_FAIL: [{ guard: 'reachesThreshold', target: 'degraded', actions: 'countFailure' }, { actions: 'countFailure' }],
        CALL_FAIL: [{ guard: 'reachesThreshold', target: 'degraded', actions: 'countFailure' }, { actions: 'countFailure' }],
        DRAIN: 'draining',
      },
    },
    healthy: {
      entry: { type: 'stateEntered', params: { state: 'healthy' } },
      invoke: { src: 'prober', input: ({ context }) => ({ backendId: context.backendId, immediate: false }) },
      on: {
        PROBE_OK: { actions: 'resetFailures' },
        CALL_OK: { actions: 'resetFailures' },
        PROBE_FAIL: [{ guard: 'reachesThreshold', target: 'degraded', actions: 'countFailure' }, { actions: 'countFailure' }],
        CALL_FAIL: [{ guard: 'reachesThreshold', target: 'degraded', actions: 'countFailure' }, { actions: 'countFailure' }],
        DRAIN: 'draining',
      },
    },
    degraded: {
      entry: { type: 'stateEntered', params: { state: 'degraded' } },
      invoke: { src: 'prober', input: ({ context }) => ({ backendId: context.backendId, immediate: true }) },
      on: {
        PROBE_OK: { target: 'healthy', actions: 'resetFailures' },
        PROBE_FAIL: { actions: 'countFailure' },
        CALL_FAIL: { actions: 'countFailure' },
        DRAIN: 'draining',
      },
    },
    // In-flight calls finish; no new ones. The pool sends IDLE when the last one settles.
    draining: {
      entry: { type: 'stateEntered', params: { state: 'draining' } },
      on: { IDLE: 'removed' },
    },
    removed: {
      entry: { type: 'stateEntered', params: { state: 'removed' } },
      type: 'final',
    },
  },
});
